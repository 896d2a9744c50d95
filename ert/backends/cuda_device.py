"""One GPU through CuPy for the CUDA backend: compile (once per source, options and device), allocate, launch, time.

Kept to CuPy calls: every decision is the backend's (``ert.backends.cuda``) or
host logic in ``ert.backends.cuda_host``; the link copies are ``ert.backends.cuda_copies``.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from ert.backends import cuda_host as host
from ert.backends import cuda_tensor
from ert.backends import grow_buffer
from ert.spec import KernelSpec, MmaShape

# CuPy compile options beside the -D defines; __has_include needs C++17.
COMPILE_OPTIONS = ("--std=c++17",)
# A wheel-only CuPy compiles with NVRTC but needs the CUDA headers too: the
# [ctk] extra brings them as wheels (or use a system CUDA toolkit).
INSTALL_HINT = ("pip install 'cupy-cuda13x[ctk]' (Turing sm_75 and newer) or 'cupy-cuda12x[ctk]' (Volta sm_70), "
                "or plain cupy with a system CUDA toolkit")
_MISSING_HEADER = re.compile(r'cannot open source file "([^"]+)"')
_MISSING_NVRTC = re.compile(r"libnvrtc|nvrtc[^ ]*\.(so|dll)", re.IGNORECASE)
# Threads per block of the warm-up launch (it runs on every SM).
WARMUP_THREADS = 256

# Compiled modules by (source hash, options, device index): compiling is never
# timed and never repeated within a process (CuPy also caches on disk).
_MODULES: dict[tuple, object] = {}


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


def compile_hint(exc: BaseException) -> str | None:
    """What to install when CuPy cannot compile for want of the CUDA headers or of NVRTC itself; None otherwise."""
    text = str(exc)
    missing = _MISSING_HEADER.search(text)
    if missing:
        return (f"NVRTC cannot open the CUDA header {missing.group(1)!r}: {INSTALL_HINT}, or set CUDA_PATH to a "
                f"CUDA toolkit whose include/ holds it")
    if _MISSING_NVRTC.search(text):
        return f"CuPy cannot load NVRTC (libnvrtc): {INSTALL_HINT}, or set CUDA_PATH to a CUDA toolkit"
    return None


_CUBIN_DIR: list[str] = []


def _cubin_dir() -> Path:
    """A folder for the tensor kernels' cubins (CuPy loads a module from a file), removed at exit."""
    if not _CUBIN_DIR:
        _CUBIN_DIR.append(tempfile.mkdtemp(prefix="ert-cubin-"))
        atexit.register(shutil.rmtree, _CUBIN_DIR[0], True)
    return Path(_CUBIN_DIR[0])


def nvrtc_cubin(source: str, options: tuple, arch: str) -> bytes:
    """``source`` compiled by NVRTC to a cubin for ``arch`` (``sm_90a`` included, which CuPy's RawModule cannot ask
    for: it appends ``-arch=sm_XY`` from the device).  Needs CuPy's NVRTC (the ``[ctk]`` extra); no GPU."""
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(source, "ert_tensor.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, [*options, f"--gpu-architecture={arch}"])
        except nvrtc.NVRTCError as exc:
            log = " ".join(nvrtc.getProgramLog(program).split())
            raise RuntimeError(f"NVRTC could not compile the tensor kernel for {arch}: {log[:500]}") from exc
        return nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


@functools.cache
def kernel_source(name: str = host.KERNEL_FILE) -> tuple[str, str]:
    """(the kernel file's text, its SHA-256), read once per process."""
    text = resources.files("ert.kernels").joinpath(name).read_text()
    return text, hashlib.sha256(text.encode()).hexdigest()


class CupyDevice:
    """One GPU through CuPy: compile, allocate, launch, time with events, copy back.  Needs a GPU."""

    def __init__(self, index: int):
        import cupy

        self._cp = cupy
        self.index = index
        cupy.cuda.Device(index).use()
        runtime = cupy.cuda.runtime
        props = runtime.getDeviceProperties(index)
        attributes = {}
        # CUDA 13 dropped the clocks from the properties; the attributes keep them.
        for key, attr in (("clock_rate_khz", runtime.cudaDevAttrClockRate),
                          ("memory_clock_rate_khz", runtime.cudaDevAttrMemoryClockRate),
                          ("max_blocks_per_sm", runtime.cudaDevAttrMaxBlocksPerMultiprocessor)):
            try:
                attributes[key] = runtime.deviceGetAttribute(attr, index)
            except Exception:  # left to NVML, or reported as unknown
                continue
        try:
            pci_bus_id = runtime.deviceGetPCIBusId(index)
        except Exception:
            pci_bus_id = ""
        self.nvml = host.read_nvml(pci_bus_id)
        self.info = host.device_info(props, attributes=attributes, nvml=self.nvml, pci_bus_id=pci_bus_id)
        self.versions = {"cupy": cupy.__version__,
                         "cuda_runtime": cuda_version(runtime.runtimeGetVersion()),
                         "cuda_driver": cuda_version(runtime.driverGetVersion())}
        self.sm_clock_mhz = host.open_sm_clock(pci_bus_id)  # None without NVML
        self.device_id = self.info.uuid or pci_bus_id or f"cuda:{index}"
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()
        self._buffer = None
        self._sums = None
        with self._stream:
            self._words = cupy.zeros(2, dtype=cupy.uint64)     # the check's mismatch count and first bad element
            self._expected = cupy.zeros(16, dtype=cupy.float64)
        self._stream.synchronize()

    def _module(self, kernel_file: str, options: tuple):
        """``kernel_file`` compiled with ``options`` for this GPU, once per source, options and device."""
        source, digest = kernel_source(kernel_file)
        key = (digest, options, self.index)
        module = _MODULES.get(key)
        if module is None:
            module = self._cp.RawModule(code=source, options=options)
            try:
                module.compile()
            except Exception as exc:
                hint = compile_hint(exc)
                if hint is None:
                    raise
                raise RuntimeError(f"{kernel_file}: {hint} ({one_line(exc)[:300]})") from exc
            _MODULES[key] = module
        return module

    def functions(self, spec: KernelSpec) -> dict:
        """The module's kernels by role (kernel, init, check, spin)."""
        options = host.compile_options(spec, max_threads_per_sm=self.info.max_threads_per_sm) + COMPILE_OPTIONS
        module = self._module(host.KERNEL_FILE, options)
        return {"kernel": module.get_function(host.kernel_name(spec)), "init": module.get_function("ert_init"),
                "check": module.get_function("ert_check"), "spin": module.get_function("ert_spin")}

    def tensor_function(self, shape: MmaShape) -> tuple[object, dict]:
        """(the kernel of one MMA shape, its SASS verdict): ert_mma of kernels/ert_cuda_tensor.cu or ert_wgmma of
        kernels/ert_cuda_wgmma.cu, compiled by NVRTC for this GPU (sm_90a for wgmma) to a cubin whose tensor
        instructions are counted (cuda_tensor.sass_verdict) before it is loaded."""
        file, name = cuda_tensor.kernel_file(shape), cuda_tensor.kernel_name(shape)
        source, digest = kernel_source(file)
        options = cuda_tensor.compile_defines(shape) + COMPILE_OPTIONS
        arch = cuda_tensor.target_arch(shape, self.info.compute_capability)
        key = (digest, options, arch, self.index)
        cached = _MODULES.get(key)
        if cached is None:
            cubin = cuda_tensor.complete_cubin(nvrtc_cubin(source, options, arch))
            verdict = cuda_tensor.sass_verdict(shape, cubin)
            path = _cubin_dir() / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:24]}.cubin"
            path.write_bytes(cubin)
            cached = _MODULES[key] = (self._cp.RawModule(path=str(path)), verdict)
        module, verdict = cached
        return module.get_function(name), verdict

    def zeros(self, count: int, dtype):
        """``count`` zeros of ``dtype`` on the device, written on the kernels' stream."""
        with self._stream:
            out = self._cp.zeros(count, dtype=dtype)
        self._stream.synchronize()
        return out

    def buffer(self, nbytes: int):
        """A device buffer of at least ``nbytes``, reused while large enough (the caller holds no other reference)."""
        def allocate(n: int):
            self._cp.get_default_memory_pool().free_all_blocks()  # the old one, dropped just before
            with self._stream:
                return self._cp.empty(n, dtype=self._cp.uint8)

        return grow_buffer(self, "_buffer", need_bytes=nbytes, nbytes=lambda b: b.nbytes, allocate=allocate)

    def zeroed_sums(self, count: int):
        """``count`` float64 zeros, written on the kernels' stream (a non-blocking stream is not ordered
        with the legacy default stream, so zeroing there could race with the launches)."""
        with self._stream:
            if self._sums is None or self._sums.size < count:
                self._sums = None
                self._sums = self._cp.zeros(count, dtype=self._cp.float64)
            else:
                self._sums[:count].fill(0)
        self._stream.synchronize()
        return self._sums

    def occupancy(self, function, threads: int) -> int:
        """Blocks of ``threads`` threads of ``function`` resident on one SM at once (the occupancy API)."""
        driver = self._cp.cuda.driver
        return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(function.kernel.ptr, threads, 0))

    def check_rw(self, function, data, *, n_units: int, expected16: np.ndarray, tolerance: float,
                 blocks: int, threads: int) -> tuple[int, int]:
        """(mismatching elements, the first of them) from ert_check on the device; two words come back.

        Integer values go as their 64-bit words (the integer ert_check reads the same 16 x 8 bytes as
        unsigned long long and compares exactly).
        """
        expected16 = np.asarray(expected16)
        words = (expected16.astype(np.int64).view(np.float64) if expected16.dtype.kind in "iu"
                 else np.ascontiguousarray(expected16, dtype=np.float64))
        with self._stream:
            self._expected.set(words, stream=self._stream)
            self._words.set(np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64), stream=self._stream)
            function((blocks,), (threads,), (data, np.int64(n_units), self._expected, np.float64(tolerance),
                                             self._words))
            words = self._words.get(stream=self._stream)
        self._stream.synchronize()
        return int(words[0]), int(words[1])

    def spin(self, function, *, seconds: float) -> None:
        """A busy launch on every SM for ``seconds`` (untimed): the clocks rise before timing starts."""
        blocks = self.info.sm_count * max(1, self.info.max_threads_per_sm // WARMUP_THREADS)
        self.launch(function, blocks=blocks, threads=WARMUP_THREADS,
                    args=(np.int64(int(seconds * 1e9)), self._words))

    def launch(self, function, *, blocks: int, threads: int, args: tuple) -> None:
        """An untimed launch; returns when it has finished."""
        with self._stream:  # RawKernel launches on the current stream
            function((blocks,), (threads,), args)
        self._stream.synchronize()

    def timed_launch(self, function, *, blocks: int, threads: int, args: tuple) -> float:
        """Seconds between CUDA events recorded around one launch; returns when it has finished."""
        with self._stream:
            self._start.record(self._stream)
            function((blocks,), (threads,), args)
            self._stop.record(self._stream)
        self._stop.synchronize()
        return self._cp.cuda.get_elapsed_time(self._start, self._stop) / 1e3

    def write(self, array, lo: int, values: np.ndarray) -> None:
        """array[lo:lo + len(values)] = values, from the host (tests damage a value this way)."""
        with self._stream:
            array[lo:lo + values.size].set(np.ascontiguousarray(values, dtype=array.dtype), stream=self._stream)
        self._stream.synchronize()

    def read(self, array, lo: int, hi: int) -> np.ndarray:
        """array[lo:hi] copied to the host."""
        return self._cp.asnumpy(array[lo:hi])

    def close(self) -> None:
        self._buffer = None
        self._sums = None
        self._cp.get_default_memory_pool().free_all_blocks()
        if self.sm_clock_mhz is not None:
            self.sm_clock_mhz.close()
