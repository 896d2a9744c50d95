"""CUDA backend: runs kernels/ert_cuda.cu through CuPy on the GPU that this rank's index on its node selects.

Everything that needs a GPU is in ``ert.backends.cuda_device.CupyDevice`` and is kept to CuPy calls;
every decision (device choice, launch geometry, trial bookkeeping, checks)
is host logic in ``ert.backends.cuda_host`` or ``CudaBackend``, which the tests
exercise without a GPU; the rated peaks are ``ert.hardware.nvidia``'s.
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

from ert.backends import cuda_host as host
from ert.backends import cuda_tensor
from ert.backends import close_attr
from ert.backends.check import (A, A_INT, C, C_INT, CheckResult, relative_errors, replay_rw, ro_errors, ro_tolerance,
                                rw_tolerance, verdict)
from ert.backends.cuda_device import COMPILE_OPTIONS, INSTALL_HINT, CupyDevice, compile_hint, cuda_version, one_line
from ert.hardware import nvidia
from ert.spec import SHAPES, KernelSpec, is_integer

NAME = "cuda"
INIT_THREADS = 256
# What probe() compiles once per process (CuPy caches it on disk): the FP16 header exactly as
# kernels/ert_cuda.cu includes it.  CuPy's own cuda_fp16.h includes vector_types.h and
# cuda_runtime_api.h, which only the CUDA headers (the [ctk] wheels or a toolkit) hold.
PROBE_SOURCE = """#if defined(__has_include)
#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#endif
#endif
extern "C" __global__ void ert_probe(float *x) { x[0] = 1.0f; }
"""
# Before each point is timed, a busy launch of this length brings the clocks
# up from where an idle GPU left them (the host checks and compiles between points).
WARMUP_SECONDS = 0.02


@functools.cache
def _compile_check(cupy) -> Exception | None:
    """None where CuPy compiles PROBE_SOURCE for the current GPU, else the error (once per process and module)."""
    try:
        cupy.RawModule(code=PROBE_SOURCE, options=COMPILE_OPTIONS).compile()
    except Exception as exc:  # noqa: BLE001 - reported, with a hint where one fits
        return exc
    return None


def _driver_present() -> bool:
    """Whether this host has an NVIDIA driver a CUDA runtime could load (its device node or its library)."""
    import ctypes.util

    if any(os.path.exists(node) for node in ("/dev/nvidiactl", "/dev/dxg")):
        return True
    try:
        return ctypes.util.find_library("cuda") is not None
    except Exception:  # noqa: BLE001 - no way to tell: let CuPy answer
        return True


def probe():
    """(available, reason, detail); never raises, and needs no GPU to answer.

    With a GPU it also compiles a kernel that includes the FP16 header as
    ert's kernels do: missing CUDA headers or NVRTC make it unavailable, with
    what to install.  Any other compile error is kept in ``detail`` (the
    kernels' own compilation will say more).  Without an NVIDIA driver on the
    host (no /dev/nvidiactl or /dev/dxg, no libcuda) it says so before
    importing CuPy, which takes a second of every `ert-run` with ``backend:
    auto`` otherwise (the run's first line waits for it).
    """
    if "cupy" not in sys.modules and not _driver_present():
        return False, "no NVIDIA driver on this host (no /dev/nvidiactl, no libcuda)", {}
    try:
        import cupy
    except Exception as exc:  # not installed, or a broken install
        return False, f"cupy cannot be imported ({one_line(exc)}); {INSTALL_HINT}", {}
    detail: dict = {"cupy": cupy.__version__}
    try:
        runtime = cupy.cuda.runtime
        detail["cuda_runtime"] = cuda_version(runtime.runtimeGetVersion())
        driver = runtime.driverGetVersion()
    except Exception as exc:
        return False, f"the CUDA runtime cannot be loaded ({one_line(exc)})", detail
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:
        why = "no NVIDIA driver is loaded" if driver == 0 else f"driver CUDA {cuda_version(driver)}"
        return False, f"no usable GPU ({why}; {one_line(exc)})", detail
    if count < 1:
        return False, "the CUDA driver reports no GPU", detail
    detail.update(devices=count, accelerators=count, driver=cuda_version(driver))
    error = _compile_check(cupy)
    if error is not None:
        hint = compile_hint(error)
        if hint:
            return False, f"{hint} ({one_line(error)[:300]})", detail
        detail["compile_check"] = one_line(error)[:500]
    return True, "", detail


def create(*, threads: int = 1, options=None, local_rank: int = 0, local_size: int = 1) -> "CudaBackend":
    """The backend on the GPU this rank selects; ``threads`` is ignored (one host thread per rank)."""
    return CudaBackend(options=options, local_rank=local_rank, local_size=local_size)


WRITE_THROUGH_L1 = ("NVIDIA L1 caches are write-through: read+write points never run at L1 speed "
                    "(stores go to L2); the read-only curve shows the L1 plateau, and only read-only "
                    "curves are named against the L1 size")


class CudaBackend:
    """The Backend protocol on one GPU: one host thread per rank, ``elements_per_thread`` = this rank's elements."""

    name = NAME
    threads = 1

    def __init__(self, *, options=None, local_rank: int = 0, local_size: int = 1, device=None):
        """``options``: the config's ``cuda`` block (ert.config.schema.CudaOptions; defaults when None)."""
        from ert.config.schema import CudaOptions

        options = options if options is not None else CudaOptions()
        self.local_rank, self.local_size = local_rank, local_size
        # Whether ranks share this GPU is decided from the device ids every rank
        # of the node reports (ert.measure.comm.shared_device_warnings), not from counts here.
        if device is None:
            import cupy

            index = host.device_for_rank(local_rank=local_rank, visible=cupy.cuda.runtime.getDeviceCount(),
                                         configured=options.device)
            device = CupyDevice(index)
        self._dev = device
        self.device_id = getattr(device, "device_id", "") or f"cuda:{device.index}"
        info = device.info
        # ERT's rule: the blocks x threads constraint applies to the defaults;
        # a user who lists blocks or threads gets every pair unless they also
        # give blocks_threads.
        custom = options.blocks is not None or options.threads_per_block is not None
        self.pairs = None if custom or options.blocks_threads is not None else host.default_geometry(info)
        self.blocks = options.blocks or sorted({b for b, _ in host.default_geometry(info)})
        self.threads_per_block = options.threads_per_block or list(host.DEFAULT_THREADS_PER_BLOCK)
        self.blocks_threads = options.blocks_threads
        self._spec: KernelSpec | None = None
        self._data = self._sums = None
        self._trials_done = 0
        self._point: dict = {}

    # -- metadata -------------------------------------------------------------
    def describe(self) -> dict:
        info = self._dev.info
        geometry = ({"pairs": [list(p) for p in self.pairs]} if self.pairs is not None else
                    {"blocks": self.blocks, "threads_per_block": self.threads_per_block,
                     "blocks_threads": self.blocks_threads})
        geometry["balanced"] = ("each configured geometry is reduced to the fewest blocks that give every "
                                "thread the same number of units (ceil(units / threads))")
        return {
            "backend": NAME,
            "device": f"{info.name} ({info.arch}, GPU {self._dev.index})",
            "device_index": self._dev.index,
            "device_id": self.device_id,
            "local_rank": self.local_rank,
            "local_size": self.local_size,
            "threads": 1,
            "gpu": info.to_dict(),
            "caches": host.caches(info),
            "memory_name": info.memory_name,
            "rated": {**nvidia.rated_peaks(info), "tensor": nvidia.rated_tensor_peaks(info)},
            "launch_geometry": geometry,
            "timing": f"CUDA events around one launch that runs all its trials; compile, initialisation, a "
                      f"{WARMUP_SECONDS * 1e3:.0f} ms busy launch (clocks up) and a 1-trial warm-up launch "
                      f"are untimed",
            "check": "read+write: every element compared on the GPU with the 16 replay values (copied back "
                     "only on a mismatch; integers exactly); read-only: every thread's sum copied back",
            "nvml": self._dev.nvml,
            **self._dev.versions,
        }

    @property
    def warnings(self) -> list[str]:
        return [WRITE_THROUGH_L1]

    # -- the protocol ----------------------------------------------------------
    def granule_elements(self, spec: KernelSpec) -> int:
        return host.granule_elements(spec)

    def supports(self, spec: KernelSpec) -> bool:
        """fp64, fp32 and fp16 (half2) on every GPU it runs on; int32 and int64 (IMAD, IADD3) read+write
        multiply-add and add-only kernels; the tensor shapes of this compute capability; no measured mixes."""
        if spec.tensor:  # native mma.sync of this compute capability (sm_80+; FP8 sm_89, sm_12x); wgmma on sm_90
            try:
                shape = cuda_tensor.shape_of(spec)
            except KeyError:
                return False
            return shape.flops_per_mma == spec.flops_per_element and \
                shape.supported(self._dev.info.compute_capability)
        if spec.mix or spec.precision not in host.HOST_DTYPE:
            return False
        return spec.access == "rw" if is_integer(spec.precision) else spec.op == "madd"

    def unsupported_reason(self, precision: str) -> str:
        if precision.endswith(" tensor"):
            name = precision.split()[0]
            if name not in SHAPES:
                return f"{NAME}: {precision}: no known MMA shape"
            return f"{NAME}: {nvidia.no_tensor_why(self._dev.info.compute_capability, name)}"
        return f"{NAME} runs {', '.join(host.HOST_DTYPE)} only, not {precision}"

    # -- tensor cores ---------------------------------------------------------
    def tensor_variants(self, spec: KernelSpec) -> list[KernelSpec]:
        """The tensor kernels this GPU measures for the config's type ``spec.precision``, the roof first:
        wgmma on sm_90 (fp16, bf16, tf32, fp8, int8), then native mma.sync (none where only emulated)."""
        cc = self._dev.info.compute_capability
        return [cuda_tensor.spec_of(shape) for shape in nvidia.tensor_variants(cc, spec.precision)]

    def tensor_plan(self, spec: KernelSpec) -> tuple[int, int, list[dict]]:
        """(MMAs per trial, bytes of the accumulators stored, launch geometries) of one tensor kernel.

        Every geometry runs the same warps or warpgroups (cuda_tensor.tensor_launches),
        so the MMAs per trial, the points' ``elements``, are one number.
        """
        shape = cuda_tensor.shape_of(spec)
        launches = cuda_tensor.tensor_launches(self._dev.info, shape)
        blocks, threads = launches[0]["blocks"], launches[0]["threads"]
        return (cuda_tensor.mmas_per_trial(blocks=blocks, threads_per_block=threads, shape=shape),
                cuda_tensor.out_bytes(shape, threads=blocks * threads), launches)

    def _prepare_tensor(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None) -> None:
        shape = cuda_tensor.shape_of(spec)
        if launch is None:
            launch = self.tensor_plan(spec)[2][0]
        blocks, threads = int(launch["blocks"]), int(launch["threads"])
        if cuda_tensor.mmas_per_trial(blocks=blocks, threads_per_block=threads, shape=shape) != elements_per_thread:
            raise ValueError(f"launch {launch} does not run the {elements_per_thread} MMAs per trial planned")
        kernel, sass = self._dev.tensor_function(shape)  # compiled (and its SASS read) here, never while timed
        self._data = self._sums = None
        self._data = self._dev.zeros(blocks * threads * cuda_tensor.sets_of(shape) * shape.acc_per_thread,
                                     shape.acc_dtype)
        self._spec, self._shape, self._kernel, self._sass = spec, shape, kernel, sass
        self._blocks, self._threads = blocks, threads
        resident = self._dev.occupancy(kernel, threads)
        note = nvidia.mma_sync_note(self._dev.info.compute_capability, shape.name) \
            if shape.instruction == "mma.sync" else ""
        self._point = {"occupancy": host.occupancy(blocks=blocks, threads=threads, resident_blocks_per_sm=resident,
                                                   sm_count=self._dev.info.sm_count),
                       "mma": shape.ptx, "instruction": shape.instruction, "mmas_per_trial": elements_per_thread,
                       "sass": sass, **({"note": note} if note else {})}
        # Warm-up (loads the module), then the busy launch that raises the clocks.
        self._dev.launch(kernel, blocks=blocks, threads=threads, args=self._tensor_args(1))
        self._last_trials = 1
        self._dev.spin(self._dev.functions(KernelSpec("fp32", 1, False))["spin"], seconds=WARMUP_SECONDS)
        self._clocks_mhz = []

    def _tensor_args(self, trials: int) -> tuple:
        shape = self._shape
        a, b = cuda_tensor.operand_values(shape)  # 1 and 1/2; INT8 1 and 1
        return (self._data, np.int64(trials), np.uint64(cuda_tensor.operand_word(shape, a)),
                np.uint64(cuda_tensor.operand_word(shape, b)))

    def _check_tensor(self) -> CheckResult:
        """Every accumulator of every thread against the replay of the last launch (each launch starts afresh);
        a kernel whose SASS does not hold the tensor instructions its FLOPs count fails whatever its values."""
        if self._sass.get("ok") is False:
            return CheckResult(False, self._sass["detail"])
        shape, trials = self._shape, self._last_trials
        got = self._dev.read(self._data, 0, self._data.size)
        return cuda_tensor.check_output(shape, got, threads=self._blocks * self._threads, trials=trials)

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        return host.launches(n_units=host.units_of(spec, elements_per_thread), blocks=self.blocks,
                             threads_per_block=self.threads_per_block, blocks_threads=self.blocks_threads,
                             pairs=self.pairs)

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        if spec.tensor:
            return self._prepare_tensor(spec, elements_per_thread=elements_per_thread, launch=launch)
        n_units = host.units_of(spec, elements_per_thread)
        if launch is None:
            launch = self.launches(spec, elements_per_thread)[0]
        blocks, threads = int(launch["blocks"]), int(launch["threads"])
        if blocks < 1 or threads < 1:
            raise ValueError(f"bad launch geometry {launch}")
        functions = self._dev.functions(spec)  # compiled here, never inside a timed region
        itemsize = spec.itemsize * host.UNIT_ELEMENTS[spec.precision]
        # Drop this backend's hold on the previous point's buffers, so that the
        # device can free them before it allocates a larger one.
        self._data = self._sums = None
        data = self._dev.buffer(n_units * itemsize)
        init_blocks = min(max(1, -(-n_units // INIT_THREADS)), 1 << 20)
        self._dev.launch(functions["init"], blocks=init_blocks, threads=INIT_THREADS,
                         args=(data, np.int64(n_units)))
        self._spec, self._data, self._n_units = spec, data, n_units
        self._blocks, self._threads = blocks, threads
        self._functions, self._kernel, self._trials_done = functions, functions["kernel"], 0
        self._sums = self._dev.zeroed_sums(blocks * threads) if spec.access == "ro" else None
        resident = self._dev.occupancy(self._kernel, threads)
        self._point = {"occupancy": host.occupancy(blocks=blocks, threads=threads, resident_blocks_per_sm=resident,
                                                   sm_count=self._dev.info.sm_count),
                       "units_per_thread": -(-n_units // (blocks * threads))}
        # Warm-up: the first launch of a module loads it and faults its pages
        # in; the busy launch then raises the clocks from where idling left them.
        self._dev.launch(self._kernel, blocks=blocks, threads=threads, args=self._args(1))
        self._trials_done = 1
        self._dev.spin(functions["spin"], seconds=WARMUP_SECONDS)
        self._clocks_mhz: list[float] = []

    def _args(self, trials: int) -> tuple:
        n, t = np.int64(self._n_units), np.int64(trials)
        if self._spec.access == "ro":
            return (self._data, n, t, self._sums)
        if is_integer(self._spec.precision):  # a and c as 64-bit integers, converted (wrapping) on the device
            return (self._data, n, t, np.int64(self._trials_done), np.int64(A_INT), np.int64(C_INT))
        return (self._data, n, t, np.int64(self._trials_done), np.float64(A), np.float64(C))

    def run(self, trials: int) -> float:
        if self._spec.tensor:
            seconds = self._dev.timed_launch(self._kernel, blocks=self._blocks, threads=self._threads,
                                             args=self._tensor_args(trials))
            self._last_trials = trials
        else:
            seconds = self._dev.timed_launch(self._kernel, blocks=self._blocks, threads=self._threads,
                                             args=self._args(trials))
            self._trials_done += trials
        if self._dev.sm_clock_mhz is not None:  # NVML: the clock right after the region, while still loaded
            clock = self._dev.sm_clock_mhz()
            if clock:
                self._clocks_mhz.append(float(clock))
        return seconds

    def point_info(self) -> dict:
        """What the device did during the point just measured (occupancy, SM clocks seen), for its raw record."""
        out = dict(self._point)
        if self._clocks_mhz:
            out["sm_clock_mhz"] = {"min": min(self._clocks_mhz), "max": max(self._clocks_mhz),
                                   "samples": len(self._clocks_mhz)}
        return out

    def check(self) -> CheckResult:
        if self._spec.tensor:
            return self._check_tensor()
        spec, trials = self._spec, self._trials_done
        if spec.access == "ro":
            stride = self._blocks * self._threads
            sums = self._dev.read(self._sums, 0, stride)
            expected = host.ro_expected_sums(precision=spec.precision, n_units=self._n_units, stride=stride,
                                             trials=trials)
            err, t = ro_errors(sums, expected)
            return verdict(error=err, tolerance=ro_tolerance(spec), what=f"load-only sum of thread {t}",
                           got=sums[t], expected=expected[t], trials=trials)
        expected16 = replay_rw(spec, trials=trials)
        tolerance = rw_tolerance(spec)
        # ert_check computes ert.backends.check.relative_errors on the device and counts those above tolerance.
        integer = is_integer(spec.precision)
        bad, first = self._dev.check_rw(self._functions["check"], self._data, n_units=self._n_units,
                                        expected16=expected16 if integer else expected16.astype(np.float64),
                                        tolerance=tolerance, blocks=self._blocks, threads=self._threads)
        if bad == 0:
            if integer:
                return CheckResult(True, "every element equals the replay (exact integers)")
            return CheckResult(True, f"every element within {tolerance:.2g} of the replay")
        # Only now is anything copied back: the first bad element, to say what it holds.
        lo = first * spec.itemsize
        raw = self._dev.read(self._data, lo, lo + spec.itemsize).view(host.HOST_DTYPE[spec.precision])[0]
        if integer:  # exact: any difference fails (int64 values do not fit a float64's error metric)
            return verdict(error=float("inf"), tolerance=0.0, count=bad, what=f"element {first}", got=int(raw),
                           expected=int(expected16[first % 16]), trials=trials)
        value, want = float(raw), float(expected16[first % 16])
        return verdict(error=float(relative_errors([value], [want])[0]), tolerance=tolerance, count=bad,
                       what=f"element {first}", got=value, expected=want, trials=trials)

    def corrupt_for_test(self) -> None:
        """Test-only: damage one value that check() examines (an element, or a load-only sum)."""
        spec = self._spec
        if spec.tensor:
            self._dev.write(self._data, self._data.size // 2, np.array([12345.0]))
            return
        if spec.access == "ro":
            self._dev.write(self._sums, (self._blocks * self._threads) // 2, np.array([12345.0]))
        else:
            element = self._n_units * host.UNIT_ELEMENTS[spec.precision] // 2 + 5
            bad = np.array([3], dtype=host.HOST_DTYPE[spec.precision]).view(np.uint8)
            self._dev.write(self._data, element * spec.itemsize, bad)

    def close(self) -> None:
        close_attr(self, "_links")
        self._data = None
        self._sums = None
        self._dev.close()

    # -- link and peer levels (issue 15; ert.backends.cuda_links) ---------------------------
    def link_transfers(self, max_bytes: int) -> list:
        """link-h2d, link-d2h and link-bidir from pinned host memory, link-h2d and link-d2h from pageable
        (cuda_links.HOST_TRANSFERS) and, on the node's first rank where it sees two or more GPUs, peer-d2d between every ordered pair (peer access on and off); buffers for
        up to ``max_bytes``, released by ``close``. ert.measure.transfers times them. Never run on a GPU yet.
        """
        from ert.backends import cuda_copies

        close_attr(self, "_links")
        self._links = cuda_copies.CupyLinks(index=self._dev.index, max_bytes=max_bytes, peers=self.local_rank == 0)
        self._topology = self._links.topology
        return self._links.transfers()

    def link_rated(self, reference=None) -> dict[str, dict]:
        """level -> {"gbytes_per_s", "derivation"}: NVLink-C2C or PCIe (NVML, else sysfs) for the links; the
        best pair's NVLinks (or PCIe) for peer-d2d where peers were measured."""
        from ert.backends import cuda_links

        info = self._dev.info
        rated = cuda_links.link_rated_of(name=info.name, nvml_link=cuda_links.read_nvml_link(info.pci_bus_id),
                                         pci_bus_id=info.pci_bus_id)
        topology = getattr(self, "_topology", None)
        if topology is None and self.local_rank == 0:  # asked before the measurement: read it now
            topology = cuda_links.visible_topology()
        if topology is not None:
            rated["peer-d2d"] = cuda_links.peer_rated(topology, host_rated=rated["link-h2d"])
        return rated
