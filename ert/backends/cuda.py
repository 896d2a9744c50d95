"""CUDA backend: runs kernels/ert_cuda.cu through CuPy on the GPU that this rank's index on its node selects.

Everything that needs a GPU is in ``CupyDevice`` and is kept to CuPy calls;
every decision (device choice, launch geometry, trial bookkeeping, checks,
rated peaks) is host logic in ``ert.backends.cuda_host`` or ``CudaBackend``,
which the tests exercise without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

import numpy as np

from ert.backends import CheckResult
from ert.backends import cuda_host as host
from ert.replay import A, C
from ert.spec import KernelSpec

NAME = "cuda"
# CuPy compile options beside the -D defines; __has_include needs C++17.
COMPILE_OPTIONS = ("--std=c++17",)
# Device-to-host copies of the checked array go in pieces of this size, so a
# 1 GiB working set never needs 1 GiB of host memory at once.
CHECK_CHUNK_BYTES = 64 << 20
INIT_THREADS = 256
INSTALL_HINT = "pip install cupy-cuda13x (Turing sm_75 and newer) or cupy-cuda12x (Volta sm_70)"

# Compiled modules by (source hash, options, device index): compiling is never
# timed and never repeated within a process (CuPy also caches on disk).
_MODULES: dict[tuple, object] = {}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


def probe():
    """(available, reason, detail); never raises, and needs no GPU to answer."""
    try:
        import cupy
    except Exception as exc:  # not installed, or a broken install
        return False, f"cupy cannot be imported ({_one_line(exc)}); {INSTALL_HINT}", {}
    detail: dict = {"cupy": cupy.__version__}
    try:
        runtime = cupy.cuda.runtime
        detail["cuda_runtime"] = _cuda_version(runtime.runtimeGetVersion())
        driver = runtime.driverGetVersion()
    except Exception as exc:
        return False, f"the CUDA runtime cannot be loaded ({_one_line(exc)})", detail
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:
        why = "no NVIDIA driver is loaded" if driver == 0 else f"driver CUDA {_cuda_version(driver)}"
        return False, f"no usable GPU ({why}; {_one_line(exc)})", detail
    if count < 1:
        return False, "the CUDA driver reports no GPU", detail
    detail.update(devices=count, accelerators=count, driver=_cuda_version(driver))
    return True, "", detail


def create(*, config=None, local_rank: int = 0, local_size: int = 1, **_ignored) -> "CudaBackend":
    """The backend on the GPU this rank selects; ``threads`` is ignored (one host thread per rank)."""
    return CudaBackend(config=config, local_rank=local_rank, local_size=local_size)


@functools.cache
def kernel_source() -> tuple[str, str]:
    """(the kernel file's text, its SHA-256), read once per process."""
    text = resources.files("ert.kernels").joinpath(host.KERNEL_FILE).read_text()
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
                          ("memory_clock_rate_khz", runtime.cudaDevAttrMemoryClockRate)):
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
                         "cuda_runtime": _cuda_version(runtime.runtimeGetVersion()),
                         "cuda_driver": _cuda_version(runtime.driverGetVersion())}
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()
        self._buffer = None
        self._sums = None

    def functions(self, spec: KernelSpec) -> tuple[object, object]:
        """(the spec's kernel, its ert_init), compiled once per source, options and device."""
        source, digest = kernel_source()
        options = host.compile_defines(spec) + COMPILE_OPTIONS
        key = (digest, options, self.index)
        module = _MODULES.get(key)
        if module is None:
            module = self._cp.RawModule(code=source, options=options)
            module.compile()
            _MODULES[key] = module
        return module.get_function(host.kernel_name(spec)), module.get_function("ert_init")

    def buffer(self, nbytes: int):
        """A device buffer of at least ``nbytes``, reused while large enough."""
        if self._buffer is None or self._buffer.nbytes < nbytes:
            self._buffer = None  # free the old one first: the largest sets fill most of the memory
            self._buffer = self._cp.empty(nbytes, dtype=self._cp.uint8)
        return self._buffer

    def zeroed_sums(self, count: int):
        if self._sums is None or self._sums.size < count:
            self._sums = self._cp.zeros(count, dtype=self._cp.float64)
        else:
            self._sums[:count].fill(0)
        return self._sums

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

    def read(self, array, lo: int, hi: int) -> np.ndarray:
        """array[lo:hi] copied to the host."""
        return self._cp.asnumpy(array[lo:hi])

    def close(self) -> None:
        self._buffer = None
        self._sums = None
        self._cp.get_default_memory_pool().free_all_blocks()


class CudaBackend:
    """The Backend protocol on one GPU: one host thread per rank, ``elements_per_thread`` = this rank's elements."""

    name = NAME
    threads = 1

    def __init__(self, *, config=None, local_rank: int = 0, local_size: int = 1, device=None):
        from ert.config import CudaOptions

        options = config.cuda if config is not None else CudaOptions()
        self.local_rank, self.local_size = local_rank, local_size
        self.caveats: list[str] = []
        if device is None:
            import cupy

            index, self.caveats = host.device_for_rank(
                local_rank=local_rank, local_size=local_size,
                visible=cupy.cuda.runtime.getDeviceCount(), configured=options.device)
            device = CupyDevice(index)
        self._dev = device
        info = device.info
        blocks, threads, allowed = host.default_geometry(info)
        # ERT's rule: the blocks x threads constraint applies to the defaults;
        # a user who lists blocks or threads gets every pair unless they also
        # give blocks_threads.
        if options.blocks is not None or options.threads_per_block is not None:
            allowed = None
        self.blocks = options.blocks or blocks
        self.threads_per_block = options.threads_per_block or threads
        self.blocks_threads = options.blocks_threads if options.blocks_threads is not None else allowed
        self._spec: KernelSpec | None = None
        self._trials_done = 0

    # -- metadata -------------------------------------------------------------
    def describe(self) -> dict:
        info = self._dev.info
        caveats = list(self.caveats)
        caveats.append("NVIDIA L1 caches are write-through: read+write points never run at L1 speed "
                       "(stores go to L2); the read-only curve shows the L1 plateau")
        return {
            "backend": NAME,
            "device": f"{info.name} ({info.arch}, GPU {self._dev.index})",
            "device_index": self._dev.index,
            "local_rank": self.local_rank,
            "local_size": self.local_size,
            "threads": 1,
            "gpu": info.to_dict(),
            "caches": host.caches(info),
            "memory_name": info.memory_name,
            "rated": host.rated_peaks(info),
            "launch_geometry": {"blocks": self.blocks, "threads_per_block": self.threads_per_block,
                                "blocks_threads": self.blocks_threads},
            "timing": "CUDA events around one launch that runs all its trials; compile, initialisation "
                      "and a 1-trial warm-up launch are untimed",
            "nvml": self._dev.nvml,
            **self._dev.versions,
            "caveats": caveats,
        }

    # -- the protocol ----------------------------------------------------------
    def granule_elements(self, spec: KernelSpec) -> int:
        return host.granule_elements(spec)

    def supports(self, spec: KernelSpec) -> bool:
        return spec.precision in host.NUMPY_DTYPE  # fp64, fp32 and fp16 (half2) on every GPU it runs on

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        return host.launches(n_units=host.units_of(spec, elements_per_thread), blocks=self.blocks,
                             threads_per_block=self.threads_per_block, blocks_threads=self.blocks_threads)

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        n_units = host.units_of(spec, elements_per_thread)
        if launch is None:
            launch = self.launches(spec, elements_per_thread)[0]
        blocks, threads = int(launch["blocks"]), int(launch["threads"])
        if blocks < 1 or threads < 1:
            raise ValueError(f"bad launch geometry {launch}")
        kernel, init = self._dev.functions(spec)  # compiled here, never inside a timed region
        itemsize = spec.itemsize * host.UNIT_ELEMENTS[spec.precision]
        data = self._dev.buffer(n_units * itemsize)
        init_blocks = min(max(1, -(-n_units // INIT_THREADS)), 1 << 20)
        self._dev.launch(init, blocks=init_blocks, threads=INIT_THREADS, args=(data, np.int64(n_units)))
        self._spec, self._data, self._n_units = spec, data, n_units
        self._blocks, self._threads = blocks, threads
        self._kernel, self._trials_done = kernel, 0
        self._sums = self._dev.zeroed_sums(blocks * threads) if spec.access == "ro" else None
        # Warm-up: the first launch of a module loads it and faults its pages in.
        self._dev.launch(kernel, blocks=blocks, threads=threads, args=self._args(1))
        self._trials_done = 1

    def _args(self, trials: int) -> tuple:
        n, t = np.int64(self._n_units), np.int64(trials)
        if self._spec.access == "ro":
            return (self._data, n, t, self._sums)
        return (self._data, n, t, np.int64(self._trials_done), np.float64(A), np.float64(C))

    def run(self, trials: int) -> float:
        seconds = self._dev.timed_launch(self._kernel, blocks=self._blocks, threads=self._threads,
                                         args=self._args(trials))
        self._trials_done += trials
        return seconds

    def check(self) -> CheckResult:
        spec = self._spec
        if spec.access == "ro":
            stride = self._blocks * self._threads
            sums = self._dev.read(self._sums, 0, stride)
            expected = host.ro_expected_sums(precision=spec.precision, n_units=self._n_units, stride=stride,
                                             trials=self._trials_done)
            err, worst = host.ro_errors(sums, expected)
            if not err <= host.ro_tolerance(spec):
                return CheckResult(False, f"thread {worst}: sum {sums[worst]!r} != replay {expected[worst]!r} "
                                          f"after {self._trials_done} trials")
            return CheckResult(True, f"max rel err {err:.2g}")
        dtype = host.NUMPY_DTYPE[spec.precision]
        expected16 = host.replay_rw(precision=spec.precision, flops_per_element=spec.flops_per_element,
                                    fma=spec.fma, trials=self._trials_done)
        n_bytes = self._n_units * host.UNIT_ELEMENTS[spec.precision] * spec.itemsize
        chunk = CHECK_CHUNK_BYTES - CHECK_CHUNK_BYTES % 64
        worst_err, worst_at = 0.0, 0
        for lo in range(0, n_bytes, chunk):
            values = self._dev.read(self._data, lo, min(n_bytes, lo + chunk)).view(dtype)
            err, i = host.rw_errors(values, first_element=lo // spec.itemsize, expected16=expected16)
            if not err <= worst_err:
                worst_err, worst_at = err, lo // spec.itemsize + i
                worst_value = values[i]
        if not worst_err <= host.rw_tolerance(spec):
            return CheckResult(False, f"element {worst_at}: {worst_value!r} != replay {expected16[worst_at % 16]!r} "
                                      f"after {self._trials_done} trials")
        return CheckResult(True, f"max rel err {worst_err:.2g}")

    def close(self) -> None:
        self._data = None
        self._sums = None
        self._dev.close()
