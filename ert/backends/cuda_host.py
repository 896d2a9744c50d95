"""Host logic of the CUDA backend, testable without a GPU: device facts, compile options, launch geometry, load-only expectations.

The GPU's tables (SMs, memory, rated peaks) are hardware facts and live in ``ert.hardware.nvidia``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ert.errors import ErtError
from ert.backends.check import INT_DTYPE, NUMPY_DTYPE, initial_values
from ert.hardware.nvidia import L1_PER_SM_BYTES, MAX_BLOCKS_PER_SM, REGISTERS_PER_SM, memory_name
from ert.spec import KernelSpec, is_integer

KERNEL_FILE = "ert_cuda.cu"
PRECISION_BITS = {"fp64": 64, "fp32": 32, "fp16": 16, "int32": 32, "int64": 64}
# Elements per kernel unit: FP16 runs on half2 pairs (see kernels/ert_cuda.cu).
UNIT_ELEMENTS = {"fp64": 1, "fp32": 1, "fp16": 2, "int32": 1, "int64": 1}
# The numpy type of one element of every precision the kernels run.
HOST_DTYPE = {**NUMPY_DTYPE, **INT_DTYPE}


# ERT's shipped CUDA config (V100): blocks 80..2560 = SMs x 1..32, threads
# 64..1024, blocks x threads = 163840 = SMs x 2048 (one full wave).  That rule
# finds no pair on GPUs of 1536 threads per SM (sm_86/87/89/120: A10, A40, L4,
# L40, RTX 30/40/50), so the defaults are built per block size instead: as many
# blocks per SM as fit at once (threads per SM / block size, at most the
# architecture's resident-block limit), i.e. one full wave on every GPU.
DEFAULT_THREADS_PER_BLOCK = (64, 128, 256, 512, 1024)
MAX_THREADS_PER_BLOCK = 1024


def compile_defines(spec: KernelSpec) -> tuple[str, ...]:
    """The -D options that specialise kernels/ert_cuda.cu for one KernelSpec."""
    defines = (f"-DERT_PRECISION={PRECISION_BITS[spec.precision]}", f"-DERT_FLOPS={spec.flops_per_element}",
               f"-DERT_FMA={int(spec.fma)}", f"-DERT_RO={int(spec.access == 'ro')}")
    if is_integer(spec.precision):
        defines += ("-DERT_INT=1", f"-DERT_ADD_OPS={spec.add_ops_per_element}")
    return defines


def max_registers(max_threads_per_sm: int) -> int:
    """Registers per thread that let a full SM of threads be resident: 32 at 2048, 40 at 1536, 64 at 1024.

    Registers are allocated per warp in units of 256, so per thread in multiples of 8.
    """
    return max(16, min(255, REGISTERS_PER_SM // max(max_threads_per_sm, 1) // 8 * 8))


def compile_options(spec: KernelSpec, *, max_threads_per_sm: int) -> tuple[str, ...]:
    """Everything kernels/ert_cuda.cu is compiled with for one KernelSpec on one GPU (NVRTC or nvcc)."""
    return compile_defines(spec) + (f"--maxrregcount={max_registers(max_threads_per_sm)}",)


def kernel_name(spec: KernelSpec) -> str:
    return "ert_ro" if spec.access == "ro" else "ert_rw"


def granule_elements(spec: KernelSpec) -> int:
    """Elements per kernel unit: a rank's element count must be a multiple (FP16: even)."""
    return UNIT_ELEMENTS[spec.precision]


def units_of(spec: KernelSpec, elements: int) -> int:
    if elements % UNIT_ELEMENTS[spec.precision]:
        raise ValueError(f"{spec.precision} needs an even element count (half2 units), not {elements}")
    return elements // UNIT_ELEMENTS[spec.precision]


# ----------------------------------------------------------------------------- device facts
@dataclass(frozen=True)
class DeviceInfo:
    """What the runtime (and NVML, where present) says about one GPU; clocks in kHz, sizes in bytes."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    sm_clock_khz: int
    memory_clock_khz: int
    memory_bus_bits: int
    l2_bytes: int
    total_memory_bytes: int
    max_threads_per_sm: int
    shared_memory_per_sm_bytes: int = 0
    pci_bus_id: str = ""
    max_blocks_per_sm: int = 0  # resident blocks per SM; 0: unknown (MAX_BLOCKS_PER_SM by architecture)
    uuid: str = ""
    sources: dict = field(default_factory=dict)  # where each clock came from

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def l1_per_sm_bytes(self) -> int:
        """The unified L1/shared size of this architecture, or the shared memory size where unknown."""
        return L1_PER_SM_BYTES.get(self.compute_capability, self.shared_memory_per_sm_bytes)

    @property
    def resident_blocks_per_sm(self) -> int:
        return self.max_blocks_per_sm or MAX_BLOCKS_PER_SM.get(self.compute_capability, 16)

    @property
    def memory_name(self) -> str:
        return memory_name(self.memory_bus_bits)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["compute_capability"] = f"{self.compute_capability[0]}.{self.compute_capability[1]}"
        out["arch"] = self.arch
        out["l1_per_sm_bytes"] = self.l1_per_sm_bytes
        out["memory_name"] = self.memory_name
        return out


def text_of(value) -> str:
    """A C string from CUDA or NVML (bytes up to the first NUL) as text; anything else as str()."""
    if isinstance(value, (bytes, bytearray)):
        return value.split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def device_info(props: dict, *, attributes: dict | None = None, nvml: dict | None = None,
                pci_bus_id: str = "") -> DeviceInfo:
    """A DeviceInfo from cupy.cuda.runtime.getDeviceProperties() and, where needed, other sources.

    CUDA 13 removed ``clockRate`` and ``memoryClockRate`` from the device
    properties; ``attributes`` carries them from cudaDeviceGetAttribute
    (``clock_rate_khz``, ``memory_clock_rate_khz``).  NVML's maximum clocks
    (``max_sm_clock_mhz``, ``max_memory_clock_mhz``) fill what is still missing.
    """
    attributes = attributes or {}
    nvml = nvml or {}
    sources = {}

    def clock(prop_key: str, attr_key: str, nvml_key: str) -> int:
        for where, value, scale in (("device properties", props.get(prop_key), 1),
                                    ("device attribute", attributes.get(attr_key), 1),
                                    ("NVML maximum clock", nvml.get(nvml_key), 1000)):
            if value:
                sources[prop_key] = where
                return int(value) * scale
        sources[prop_key] = "unknown"
        return 0

    return DeviceInfo(
        name=text_of(props.get("name", "unknown GPU")),
        compute_capability=(int(props["major"]), int(props["minor"])),
        sm_count=int(props["multiProcessorCount"]),
        sm_clock_khz=clock("clockRate", "clock_rate_khz", "max_sm_clock_mhz"),
        memory_clock_khz=clock("memoryClockRate", "memory_clock_rate_khz", "max_memory_clock_mhz"),
        memory_bus_bits=int(props.get("memoryBusWidth", 0)),
        l2_bytes=int(props.get("l2CacheSize", 0)),
        total_memory_bytes=int(props.get("totalGlobalMem", 0)),
        max_threads_per_sm=int(props.get("maxThreadsPerMultiProcessor", 2048)),
        shared_memory_per_sm_bytes=int(props.get("sharedMemPerMultiprocessor", 0)),
        pci_bus_id=pci_bus_id,
        max_blocks_per_sm=int(attributes.get("max_blocks_per_sm") or props.get("maxBlocksPerMultiProcessor", 0)),
        uuid=_uuid(props.get("uuid")),
        sources=sources,
    )


def _uuid(value) -> str:
    """The GPU's UUID as text (CuPy gives the 16 raw bytes), or ""."""
    if isinstance(value, (bytes, bytearray)) and value:
        return "GPU-" + bytes(value[:16]).hex()
    return str(value) if value else ""


def caches(info: DeviceInfo) -> list[dict]:
    """Level hints for the analysis: every SM's L1 together as level 1, the L2 as level 2.

    One rank drives one GPU, so ``shared_cpu_count`` 1 makes the analysis
    count one GPU's caches per rank.  NVIDIA's L1 is write-through: stores go
    to the L2, so read+write curves never show an L1 plateau, and the summed
    L1 (V100 10 MiB, A100 20 MiB, H100 33 MiB) is close to or above the L2;
    the L1 hint therefore applies to read-only curves alone (``access``).
    """
    out = []
    if info.l1_per_sm_bytes:
        out.append({"level": 1, "kind": "Data", "size_bytes": info.l1_per_sm_bytes * info.sm_count,
                    "shared_cpu_count": 1, "access": ["ro"]})
    if info.l2_bytes:
        out.append({"level": 2, "kind": "Unified", "size_bytes": info.l2_bytes, "shared_cpu_count": 1})
    return out


# ----------------------------------------------------------------------------- launches and ranks
def default_geometry(info: DeviceInfo) -> list[tuple[int, int]]:
    """One full wave per block size on this GPU: [(blocks, threads per block), ...].

    Blocks per SM = threads per SM / block size, at most the resident-block
    limit: on a V100 (80 SMs x 2048) that is ERT's set (2560 x 64 ... 160 x
    1024, all 163840 threads); on an A10 (72 x 1536, 16 blocks) 1152 x 64,
    864 x 128, 432 x 256, 216 x 512 and 72 x 1024.  The kernels' launch bounds
    keep the registers low enough for a full SM at every block size.
    """
    out = []
    for t in DEFAULT_THREADS_PER_BLOCK:
        per_sm = min(info.max_threads_per_sm // t, info.resident_blocks_per_sm)
        if per_sm >= 1:
            out.append((info.sm_count * per_sm, t))
    return out or [(info.sm_count, min(DEFAULT_THREADS_PER_BLOCK))]


def balanced(n_units: int, blocks: int, threads: int) -> dict:
    """The geometry that runs ``n_units`` on at most ``blocks`` x ``threads`` threads with equal work per thread.

    A grid-stride loop over a fixed grid of S threads gives the first
    n mod S threads one unit more than the rest: between S and 2S units half
    the threads idle through the second round, a saw-tooth down to 50 %.
    Instead, m = ceil(n / S) units per thread and the fewest blocks that cover
    n / m threads: every thread does m units, bar the last fewer-than-m x
    ``threads`` threads, which do m - 1 (so the launch runs at least
    1 - m x threads / n of the balanced speed).  Below S units it is one unit
    per thread.
    """
    per_thread = -(-n_units // (blocks * threads))
    needed_threads = -(-n_units // per_thread)
    return {"blocks": -(-needed_threads // threads), "threads": threads}


def launches(*, n_units: int, blocks: list[int] | None = None, threads_per_block: list[int] | None = None,
             blocks_threads: list[int] | None = None, pairs: list[tuple[int, int]] | None = None,
             max_threads_per_block: int = MAX_THREADS_PER_BLOCK) -> list[dict]:
    """Launch geometries for one working set of ``n_units`` kernel units (elements; half2 pairs for FP16).

    The configured geometries are ``pairs`` (the defaults), or every
    (blocks, threads) pair of the two lists whose product is in
    ``blocks_threads`` (all pairs when it is None), as ERT_BLOCKS_THREADS
    does.  Each is then balanced to the working set (``balanced``): never
    more threads than needed, equal work per thread.  Block sizes larger
    than the working set are skipped unless nothing else is left.
    """
    if n_units < 1:
        raise ValueError("a launch needs at least one unit")
    if pairs is None:
        sizes = sorted({t for t in threads_per_block if 1 <= t <= max_threads_per_block})
        allowed = None if blocks_threads is None else set(blocks_threads)
        pairs = [(b, t) for b in sorted(set(blocks)) for t in sizes
                 if b >= 1 and (allowed is None or b * t in allowed)]
    pairs = [(b, t) for b, t in pairs if b >= 1 and 1 <= t <= max_threads_per_block]
    out: list[dict] = []
    for b, t in sorted(pairs):
        if t > n_units:
            continue
        geometry = balanced(n_units, b, t)
        if geometry not in out:
            out.append(geometry)
    return out or [{"blocks": 1, "threads": n_units if n_units <= max_threads_per_block else max_threads_per_block}]


def occupancy(*, blocks: int, threads: int, resident_blocks_per_sm: int, sm_count: int) -> dict:
    """What one launch occupies: resident threads per SM and the waves the grid needs (1 = all resident at once)."""
    per_sm = max(0, int(resident_blocks_per_sm))
    waves = -(-blocks // (per_sm * sm_count)) if per_sm else None
    return {"resident_blocks_per_sm": per_sm, "resident_threads_per_sm": per_sm * threads, "waves": waves}


def device_for_rank(*, local_rank: int, visible: int, configured: int | None) -> int:
    """The GPU index this rank uses.

    Without ``configured``, the rank's index within its node picks the GPU
    (modulo the visible count: under ``srun --gpus-per-task=1`` each rank sees
    one GPU, index 0, a different one for each rank).  Whether ranks really
    share a GPU is decided afterwards from the device ids every rank of the
    node reports (``ert.measure.comm.shared_device_warnings``): counts cannot tell.
    """
    if visible < 1:
        raise ErtError("no CUDA device is visible", key="backend")
    if configured is not None:
        if configured >= visible:
            raise ErtError(f"device {configured} does not exist: {visible} GPU(s) are visible", key="cuda.device")
        return configured
    return local_rank % visible


# ----------------------------------------------------------------------------- load-only expectations
def unit_values(precision: str) -> np.ndarray:
    """The 16-periodic starting value of each unit, summed over its elements, in float64."""
    start = initial_values(np.float64)
    if UNIT_ELEMENTS[precision] == 1:
        return start
    # Unit u holds elements 2u, 2u+1: period 8 in units, written out to 16.
    pairs = start[0::2] + start[1::2]
    return np.concatenate([pairs, pairs])


def ro_expected_sums(*, precision: str, n_units: int, stride: int, trials: int) -> np.ndarray:
    """Each launched thread's total in ert_ro after ``trials`` trials (float64, one per thread).

    Thread g sums units g, g + stride, ... below n_units.  When the stride is
    a multiple of 16 every unit of a thread has the same value, so the sum is
    value x count; otherwise the units are counted in chunks.
    """
    values = unit_values(precision)
    g = np.arange(stride, dtype=np.int64)
    counts = np.where(g < n_units, (n_units - g + stride - 1) // stride, 0)
    if stride % 16 == 0:
        return values[g % 16] * counts * trials
    sums = np.zeros(stride, dtype=np.float64)
    chunk = max(stride, 1 << 22)
    for lo in range(0, n_units, chunk):
        u = np.arange(lo, min(n_units, lo + chunk), dtype=np.int64)
        sums += np.bincount(u % stride, weights=values[u % 16], minlength=stride)
    return sums * trials


# ----------------------------------------------------------------------------- NVML (optional)
class SmClock:
    """The current SM clock of one GPU through NVML: call it for MHz; close() when done."""

    def __init__(self, pynvml, handle):
        self._nvml, self._handle = pynvml, handle

    def __call__(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:  # a transient NVML error loses one sample, never the point
            return None

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def open_sm_clock(pci_bus_id: str) -> SmClock | None:
    """An SmClock for the GPU at ``pci_bus_id``, or None where pynvml is absent or cannot see it."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # optional: without NVML the points carry no clock
        return None
    try:
        return SmClock(pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if pci_bus_id else b""))
    except Exception:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
        return None



def nvml_read(pci_bus_id: str, read) -> dict:
    """``read(pynvml, handle, out)`` for the GPU at ``pci_bus_id`` inside one NVML session; ``out`` returned.

    {} where pynvml is absent (NVML is optional: it only refines what the
    runtime says); {"error": ...} where NVML cannot start or find the GPU.
    ``read`` fills ``out``; a field one GPU or driver lacks is its own to skip.
    """
    try:
        import pynvml
    except Exception:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    out: dict = {}
    try:
        read(pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if pci_bus_id else b""), out)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def read_nvml(pci_bus_id: str) -> dict:
    """Driver version, maximum clocks and power limit from NVML; {} where pynvml is absent."""
    def read(pynvml, handle, out: dict) -> None:
        probes = {
            "driver_version": lambda: pynvml.nvmlSystemGetDriverVersion(),
            "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "max_memory_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "power_limit_watts": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
        }
        for key, get in probes.items():
            try:
                value = get()
                out[key] = text_of(value) if isinstance(value, (bytes, bytearray)) else value
            except Exception:  # a field this GPU or driver does not report
                continue

    return nvml_read(pci_bus_id, read)

