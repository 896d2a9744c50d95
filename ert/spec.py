"""KernelSpec and the measured numbers' vocabulary: bytes and FLOPs per element, rates, and the three spreads.

One word, one meaning.  A **rate** is GB/s or GFLOP/s of a point at its
median seconds (``rates``).  A **spread** is a relative scatter, 0.02 meaning
2 %; three are used, each under its own name and each defined only here:

* ``timing_spread``  (max - min) / min of one point's repeated timings: how
  noisy a point is (raw.jsonl ``spread``; a point above the config's
  ``noise_threshold`` is re-measured, then marked noisy);
* ``peak_spread``    (max - min) / median of the peak point's timings: the
  ``spread`` of a compute ceiling in ceilings.json;
* ``plateau_spread`` (p90 - p10) / median of the rates of a memory level's
  points ((max - min) / median under 3 points): the ``spread`` of a memory
  ceiling in ceilings.json.

**Threads** are always host threads per rank that run the kernel (the
config's ``threads``; 1 on a device backend).  Threads over all ranks are
``workers``; threads of a CUDA block are ``threads_per_block``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# Bytes per scalar of each precision the backends know.
ITEMSIZE = {"fp64": 8, "fp32": 4, "fp16": 2, "int32": 4, "int64": 8}
# Bytes per scalar of a tensor precision's inputs (tf32 is held in 32 bits).
TENSOR_ITEMSIZE = {"fp16": 2, "bf16": 2, "tf32": 4, "fp64": 8, "fp8": 1, "int8": 1}
# Integer precisions (numba-cpu only): their "FLOPs" are integer operations,
# counted the same way (a multiply and an add are 2), and their rates are
# GIOP/s.  They have no fused multiply-add and no load-only kernel.
INTEGER = ("int32", "int64")


# Tensor-core (matrix) precisions (cuda only): the input type of a
# warp-level mma.sync (SHAPES below) or, on Hopper (sm_90a), a warpgroup-level
# wgmma (WGMMA_SHAPES).  fp16/bf16/tf32/fp8 accumulate in FP32, fp64 (DMMA)
# in FP64; FP8 products count as FLOPs.  int8 (IMMA, IGMMA) accumulates in
# s32: its multiply-adds count 2 integer operations each, and its rate is
# GIOP/s (TENSOR_INTEGER), like the integer roofs of the vector units.
TENSOR_PRECISIONS = ("fp16", "bf16", "tf32", "fp64", "fp8", "int8")
TENSOR_INTEGER = ("int8",)
# The tensor instructions a KernelSpec names: "" is warp-level mma.sync (every
# record before issue 23), "wgmma" Hopper's warpgroup-level wgmma.mma_async.
TENSOR_INSTRUCTIONS = ("", "wgmma")
# Execution pipes of a compute kernel: the vector units (every backend), or the
# tensor cores (a KernelSpec whose "element" is one warp-level MMA).
PIPES = ("vector", "tensor")


# The MMA shapes ert's tensor kernels run, by input type: mma.sync
# (kernels/ert_cuda_tensor.cu) and wgmma (kernels/ert_cuda_wgmma.cu).
@dataclass(frozen=True)
class MmaShape:
    """One MMA shape: C/D (M x N, acc) += A (M x K, input) * B (K x N, input), per warp (mma.sync) or warpgroup."""

    name: str            # the precision's name in ert: fp16, bf16, tf32, fp64, fp8
    type_code: int       # ERT_MMA_TYPE (mma.sync) or ERT_WGMMA_TYPE (wgmma)
    m: int
    n: int
    k: int
    input_type: str      # PTX type of A and B
    acc_type: str        # PTX type of C and D
    min_cc: tuple[int, int]
    acc_per_thread: int  # accumulator registers per thread (M*N / threads per MMA)
    sass: str            # the SASS opcode ptxas makes of one MMA (HMMA, DMMA, QMMA, IMMA, HGMMA, QGMMA, IGMMA)
    instruction: str = "mma.sync"   # "mma.sync" (a warp, 32 threads) or "wgmma" (a warpgroup, 128 threads)
    # Compute capability majors whose ptxas has no native instruction for this
    # mma.sync and emulates it (FP8 on sm_90, sm_100, sm_103, sm_110: F2FP
    # conversions and HMMA, checked with cuobjdump): not offered there.
    emulated_majors: tuple[int, ...] = ()
    only_cc: tuple[int, int] | None = None  # wgmma: sm_90a only

    @property
    def flops_per_mma(self) -> int:
        """2*M*N*K: a multiply-add counted as 2 FLOPs."""
        return 2 * self.m * self.n * self.k

    @property
    def threads_per_mma(self) -> int:
        """Threads that issue one MMA together: a warp (mma.sync) or a warpgroup of 4 warps (wgmma)."""
        return 128 if self.instruction == "wgmma" else 32

    @property
    def spec_instruction(self) -> str:
        """KernelSpec.instruction of a kernel running this shape ("" for mma.sync)."""
        return "wgmma" if self.instruction == "wgmma" else ""

    @property
    def ptx(self) -> str:
        """The instruction as it appears in the PTX."""
        if self.instruction == "wgmma":
            return (f"wgmma.mma_async.sync.aligned.m{self.m}n{self.n}k{self.k}."
                    f"{self.acc_type}.{self.input_type}.{self.input_type}")
        return (f"mma.sync.aligned.m{self.m}n{self.n}k{self.k}.row.col."
                f"{self.acc_type}.{self.input_type}.{self.input_type}.{self.acc_type}")

    @property
    def integer(self) -> bool:
        """An integer MMA (s8 inputs, s32 accumulators): its rate is integer operations (GIOP/s)."""
        return self.acc_type == "s32"

    @property
    def acc_dtype(self):
        import numpy as np

        return {"f64": np.float64, "s32": np.int32}.get(self.acc_type, np.float32)

    def supported(self, compute_capability: tuple[int, int]) -> bool:
        """Whether a GPU of this compute capability runs this MMA natively (not emulated by ptxas)."""
        cc = tuple(compute_capability)
        if self.only_cc is not None:
            return cc == self.only_cc
        return cc >= self.min_cc and cc[0] not in self.emulated_majors

    def unsupported_why(self, compute_capability: tuple[int, int]) -> str:
        """Why this GPU does not run it (one phrase), or "" where it does."""
        cc = tuple(compute_capability)
        arch = f"sm_{cc[0]}{cc[1]}"
        if self.supported(cc):
            return ""
        if self.only_cc is not None:
            target = f"sm_{self.only_cc[0]}{self.only_cc[1]}" + ("a" if self.instruction == "wgmma" else "")
            what = self.instruction if self.instruction == "wgmma" else \
                f"{self.name} {self.instruction} m{self.m}n{self.n}k{self.k}"
            return f"{what} needs {target}; this GPU is {arch}"
        if cc < self.min_cc:
            return f"{self.name} {self.instruction} needs sm_{self.min_cc[0]}{self.min_cc[1]}; this GPU is {arch}"
        return (f"{self.name} {self.instruction} has no native instruction on {arch}: ptxas emulates it "
                f"(F2FP conversions and HMMA), so its rate would not be the tensor cores' {self.name.upper()} rate")


SHAPES = {s.name: s for s in (
    MmaShape("fp16", 1, 16, 8, 16, "f16", "f32", (8, 0), 4, "HMMA"),
    MmaShape("bf16", 2, 16, 8, 16, "bf16", "f32", (8, 0), 4, "HMMA"),
    MmaShape("tf32", 3, 16, 8, 8, "tf32", "f32", (8, 0), 4, "HMMA"),
    MmaShape("fp64", 4, 8, 8, 4, "f64", "f64", (8, 0), 2, "DMMA"),
    # Native QMMA on sm_89 (Ada) and sm_12x; emulated on sm_90, sm_100, sm_103, sm_110.
    MmaShape("fp8", 5, 16, 8, 32, "e4m3", "f32", (8, 9), 4, "QMMA", emulated_majors=(9, 10, 11)),
    # Native IMMA.16832.S8.S8 on every architecture from sm_80 to sm_121 (nvcc 13.0, checked with cuobjdump).
    MmaShape("int8", 6, 16, 8, 32, "s8", "s32", (8, 0), 4, "IMMA"),
)}

# Hopper's warpgroup MMAs, N = 256 (the largest, the full rate): 128 f32 accumulators per thread.
WGMMA_SHAPES = {s.name: s for s in (
    MmaShape("fp16", 1, 64, 256, 16, "f16", "f32", (9, 0), 128, "HGMMA", "wgmma", only_cc=(9, 0)),
    MmaShape("bf16", 2, 64, 256, 16, "bf16", "f32", (9, 0), 128, "HGMMA", "wgmma", only_cc=(9, 0)),
    MmaShape("tf32", 3, 64, 256, 8, "tf32", "f32", (9, 0), 128, "HGMMA", "wgmma", only_cc=(9, 0)),
    MmaShape("fp8", 4, 64, 256, 32, "e4m3", "f32", (9, 0), 128, "QGMMA", "wgmma", only_cc=(9, 0)),
    MmaShape("int8", 5, 64, 256, 32, "s8", "s32", (9, 0), 128, "IGMMA", "wgmma", only_cc=(9, 0)),
)}


# Hopper's wider FP64 mma.sync, m16n8k16 (PTX ISA 7.8): one native DMMA.16x8x16 on sm_90 only (ptxas for
# sm_100 and sm_12x splits it into 8 DMMA.8x8x4; sm_80 refuses it), 8x the FLOPs of m8n8k4 per
# instruction.  Measured beside m8n8k4 on sm_90 (whose FP64 tensor roof may read about half of rated
# through the small shape alone); the faster of the two is the FP64 tensor roof.  4 f64 accumulators per
# thread; told apart from m8n8k4 by its FLOPs per MMA (a KernelSpec's flops_per_element, 4096 against 512).
SM90_SHAPES = {s.name: s for s in (
    MmaShape("fp64", 7, 16, 8, 16, "f64", "f64", (9, 0), 4, "DMMA", only_cc=(9, 0)),
)}


def tensor_shape(precision: str, instruction: str = "", flops_per_mma: int | None = None) -> MmaShape:
    """The shape a tensor KernelSpec runs: wgmma's where ``instruction`` is "wgmma", mma.sync's otherwise (of
    the two FP64 mma.sync shapes, the one with ``flops_per_mma``; m8n8k4 where it is not given)."""
    if instruction == "wgmma":
        return WGMMA_SHAPES[precision]
    wide = SM90_SHAPES.get(precision)
    if wide is not None and flops_per_mma == wide.flops_per_mma:
        return wide
    return SHAPES[precision]


def is_integer(precision: str) -> bool:
    return precision in INTEGER


def ops_unit(precision: str, mix: str | None = None, pipe: str = "vector") -> str:
    """The unit of a compute rate: GIOP/s for integers (int8 tensor MMAs too), GOP/s for an integer+float mix,
    GFLOP/s otherwise."""
    if mix and mix.startswith("int"):
        return "GOP/s"
    if pipe == "tensor":
        return "GIOP/s" if precision in TENSOR_INTEGER else "GFLOP/s"
    return "GIOP/s" if is_integer(precision) else "GFLOP/s"


# The compute kernel's operation.  "madd": multiply-adds (FMA, or
# a separate multiply and add); "add": flops_per_element dependent adds per
# element per trial, in registers (the integer add-only roof).
OPS = ("madd", "add")
# Measured mixes: each sub-block of a compute kernel is split in
# two halves of independent register chains that run interleaved.
#   fma+add      first half: F/2 FMAs per element; second half: F/2 plain adds
#                (the FP add pipes beside the FMA pipes, AMD Zen): 3F/4 FLOPs
#                per element on average, instructions 1 FMA : 1 add.
#   int32+fp32,  first half: F/2 FMAs (the float precision); second half: F/2
#   int64+fp64   integer multiply-adds on the same bits read as integers:
#                F operations per element (F/2 x 2 each), 1 madd : 1 FMA.
MIXES = ("fma+add", "int32+fp32", "int64+fp64")
MIX_FLOAT = {"int32+fp32": "fp32", "int64+fp64": "fp64"}
MIX_INT = {"int32+fp32": "int32", "int64+fp64": "int64"}


def mix_key(mix: str) -> str:
    """The mix's name inside a kernel key (no '+')."""
    return mix.replace("+", "_")

# Access patterns.  "rw": every element is loaded once and stored once per trial
# (the ERT kernel).  "ro": every element is loaded once per trial and summed
# into a per-thread accumulator, so read bandwidth can be told apart.
ACCESS = ("rw", "ro")
# Their names in words, as every report, warning and export spells them.
ACCESS_NAMES = {"rw": "read+write", "ro": "read-only"}


def access_name(access: str) -> str:
    """'read+write' for "rw", 'read-only' for "ro"; an unknown pattern as it is."""
    return ACCESS_NAMES.get(access, access)


def curve_name(precision: str, access: str) -> str:
    """'fp64 read+write': a memory curve (one precision, one access pattern) in words."""
    return f"{precision} {access_name(access)}"


@dataclass(frozen=True, order=True)
class KernelSpec:
    """What one kernel variant does per element per trial.

    ``flops_per_element`` counts an FMA as 2 FLOPs.  For the ``rw`` pattern the
    value 1 means one add (no multiply, so ``fma`` is always False), and any
    even value 2k means k multiply-adds, fused when ``fma`` is True and issued
    as a separate multiply and add otherwise.  The ``ro`` pattern always does
    one add per element (its accumulation), so its ``flops_per_element`` is 1.
    """

    precision: str
    flops_per_element: int
    fma: bool
    access: str = "rw"
    op: str = "madd"
    mix: str = ""  # "" for none (a str, so specs stay orderable)
    # "tensor": one element is one warp-level MMA (flops_per_element = 2MNK of its
    # shape), done in registers: it moves no bytes and has no working set to sweep.
    pipe: str = "vector"
    # A tensor kernel's instruction: "" warp-level mma.sync, "wgmma" Hopper's warpgroup MMA (TENSOR_INSTRUCTIONS).
    instruction: str = ""

    def __post_init__(self) -> None:
        if self.pipe not in PIPES:
            raise ValueError(f"unknown pipe {self.pipe!r}")
        if self.pipe == "tensor":
            if self.precision not in TENSOR_PRECISIONS:
                raise ValueError(f"unknown tensor precision {self.precision!r}")
            if not self.fma or self.access != "rw" or self.flops_per_element < 2 or self.op != "madd" or self.mix \
                    or self.flops_per_element & (self.flops_per_element - 1):
                raise ValueError("a tensor kernel is a fused multiply-accumulate of a power-of-two FLOPs per MMA")
            if self.instruction not in TENSOR_INSTRUCTIONS:
                raise ValueError(f"unknown tensor instruction {self.instruction!r}")
            return
        if self.instruction:
            raise ValueError("only a tensor kernel names an instruction")
        if self.precision not in ITEMSIZE:
            raise ValueError(f"unknown precision {self.precision!r}")
        if self.access not in ACCESS:
            raise ValueError(f"unknown access pattern {self.access!r}")
        f = self.flops_per_element
        if f < 1 or (f & (f - 1)):
            raise ValueError(f"flops_per_element must be a power of two, not {f}")
        if self.flops_per_element == 1 and self.fma:
            raise ValueError("flops_per_element 1 is a single add: it has no FMA form")
        if self.access == "ro" and (self.flops_per_element != 1 or self.fma):
            raise ValueError("the load-only pattern does exactly one add per element")
        if is_integer(self.precision) and self.fma:
            raise ValueError(f"{self.precision} has no fused multiply-add: its multiply-add is a multiply and an add")
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}")
        if self.op == "add" and (self.flops_per_element < 2 or self.fma or self.access != "rw"
                                 or not is_integer(self.precision) or self.mix):
            raise ValueError("op 'add' is the integer add-only compute kernel: an integer precision, "
                             "rw, no FMA, at least 2 adds per element")
        if self.mix:
            if self.mix not in MIXES:
                raise ValueError(f"unknown mix {self.mix!r}")
            float_part = MIX_FLOAT.get(self.mix)
            if (self.flops_per_element < 2 or not self.fma or self.access != "rw"
                    or self.precision not in (float_part and (float_part,) or ("fp64", "fp32"))):
                raise ValueError(f"mix {self.mix!r} runs on {float_part or 'fp64 or fp32'} with FMA, rw, "
                                 f"at least 2 FLOPs per element")

    @property
    def tensor(self) -> bool:
        return self.pipe == "tensor"

    @property
    def itemsize(self) -> int:
        return TENSOR_ITEMSIZE[self.precision] if self.tensor else ITEMSIZE[self.precision]

    @property
    def bytes_per_element(self) -> int:
        """Bytes moved per element per trial (write-allocate traffic not counted, as in ERT); 0 for a tensor MMA."""
        if self.tensor:
            return 0
        return (2 if self.access == "rw" else 1) * self.itemsize

    @property
    def fma_ops_per_element(self) -> int:
        """Multiply-add pairs per element per trial (0 for a single add, and for the add-only kernel).

        For a mix: the multiply-adds (or adds) of each chain per element per trial, F/2.
        """
        return 0 if self.flops_per_element == 1 or self.op == "add" else self.flops_per_element // 2

    @property
    def add_ops_per_element(self) -> int:
        """Dependent adds per element per trial of the add-only compute kernel (op 'add'), else 0."""
        return self.flops_per_element if self.op == "add" else 0

    @property
    def ops_per_element(self) -> float:
        """Operations counted per element per trial (FLOPs, integer ops, or both for a mix).

        ``flops_per_element`` except for the fma+add mix, whose add half does
        F/2 adds of one FLOP: 3F/4 on average.
        """
        if self.mix == "fma+add":
            return self.flops_per_element * 3 / 4
        return float(self.flops_per_element)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of this kernel (infinite for a tensor MMA, which works in registers)."""
        if not self.bytes_per_element:
            return float("inf")
        return self.ops_per_element / self.bytes_per_element

    @property
    def key(self) -> str:
        """A short stable name, e.g. ``fp64-fma-rw-f8``, ``int32-add-rw-f32``, ``fp32-mix_int32_fp32-rw-f64``,
        ``fp16-tensor-mma-f4096`` (mma.sync), ``fp16-tensor-wgmma-f524288``."""
        if self.tensor:
            return f"{self.precision}-tensor-{self.instruction or 'mma'}-f{self.flops_per_element}"
        if self.mix:
            return f"{self.precision}-mix_{mix_key(self.mix)}-{self.access}-f{self.flops_per_element}"
        kind = "fma" if self.fma else ("add" if self.flops_per_element == 1 or self.op == "add" else
                                       ("madd" if is_integer(self.precision) else "nofma"))
        return f"{self.precision}-{kind}-{self.access}-f{self.flops_per_element}"

    def bytes_moved(self, *, elements: int, trials: int) -> int:
        return elements * trials * self.bytes_per_element

    def flops_done(self, *, elements: int, trials: int) -> float:
        return elements * trials * self.ops_per_element

    def gbytes_per_s(self, *, elements: int, trials: int, seconds: float) -> float:
        return self.bytes_moved(elements=elements, trials=trials) / seconds / 1e9

    def gflops_per_s(self, *, elements: int, trials: int, seconds: float) -> float:
        return self.flops_done(elements=elements, trials=trials) / seconds / 1e9

    def to_dict(self) -> dict:
        out = {
            "precision": self.precision,
            "flops_per_element": self.flops_per_element,
            "fma": self.fma,
            "access": self.access,
            # Written only where they are not the defaults: raw files of plain kernels are unchanged.
            **({"op": self.op} if self.op != "madd" else {}),
            **({"mix": self.mix} if self.mix else {}),
        }
        if self.tensor:  # vector records stay as they were
            out["pipe"] = self.pipe
            if self.instruction:  # mma.sync records stay as they were
                out["instruction"] = self.instruction
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "KernelSpec":
        return cls(
            precision=data["precision"],
            flops_per_element=int(data["flops_per_element"]),
            fma=bool(data["fma"]),
            access=data.get("access", "rw"),
            op=data.get("op", "madd"),
            mix=data.get("mix") or "",
            pipe=data.get("pipe", "vector"),
            instruction=data.get("instruction", ""),
        )


class Rates(NamedTuple):
    """A point's rates at its median seconds."""

    gbytes_per_s: float
    gflops_per_s: float


def rates(record: dict) -> Rates:
    """GB/s and GFLOP/s of a raw point record at its median seconds: the one place rates are computed."""
    spec = KernelSpec.from_dict(record["spec"])
    kw = {"elements": record["elements"], "trials": record["trials"], "seconds": record["seconds"]["median"]}
    return Rates(spec.gbytes_per_s(**kw), spec.gflops_per_s(**kw))


def timing_spread(seconds) -> float:
    """(max - min) / min of one point's repeated timings (infinite if one took no time)."""
    return (max(seconds) - min(seconds)) / min(seconds) if min(seconds) > 0 else float("inf")


def peak_spread(seconds: dict) -> float:
    """(max - min) / median of a point's timings, from its record's ``seconds`` summary."""
    return (seconds["max"] - seconds["min"]) / seconds["median"]


def plateau_spread(values) -> float:
    """(p90 - p10) / median of a level's rates; (max - min) / median below 3 values."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    med = float(np.median(values))
    if values.size >= 3:
        p10, p90 = np.percentile(values, [10.0, 90.0])
        return float((p90 - p10) / med)
    return float((values.max() - values.min()) / med)


# ---------------------------------------------------------------------------- rules of the method
# Each is defined once here and imported by the config's defaults, the measuring side and the readers.
# A point whose timing_spread is above this (the config's timing.noise_threshold, also the share by which
# two measurements may differ and still reproduce each other) is noisy; a file that records none gets it.
NOISE_THRESHOLD = 0.10
# Runs on 2+ hosts: a host more than this share below the hosts' median is slow (slow_host_threshold).
SLOW_HOST_THRESHOLD = 0.10
# A cache level's window of working sets (where its roof is searched and judged) starts at this multiple
# of the cache before it: below, that cache's transition still holds data (ert.measure.window_search plans
# the windows, ert.analysis.regimes judges them).
WINDOW_START_FACTOR = 2.0
