"""Host logic of the tensor-core kernel (kernels/ert_cuda_tensor.cu), testable without a GPU.

Shapes, FLOP accounting, the replay of what the kernel leaves in every
accumulator, the output check, launch geometries and rated dense tensor
peaks.  ert-run measures it through the cuda backend (config key ``tensor``,
ceilings with ``pipe: "tensor"``); never run on a GPU yet.
"""

from __future__ import annotations

import struct

import numpy as np

from ert.backends.check import CheckResult
from ert.backends.cuda_host import DeviceInfo

KERNEL_FILE = "ert_cuda_tensor.cu"
KERNEL_NAME = "ert_mma"
DEFAULT_ITERS = 64
DEFAULT_SETS = 8
# The operand values every A and B element holds (B's sign flips every trial):
# each MMA adds +-K * A_VALUE * B_VALUE = +-K/2 to every accumulator element,
# exact in FP32 and FP64 for any trial count.
A_VALUE = 1.0
B_VALUE = 0.5


# The shapes and their FLOPs are hardware facts the plan needs too: they live in ert.spec.
from ert.spec import SHAPES, MmaShape  # noqa: E402,F401 - re-exported for the backend and its tests


def shapes_for(compute_capability: tuple[int, int]) -> list[MmaShape]:
    """The shapes a GPU of this compute capability runs."""
    return [s for s in SHAPES.values() if s.supported(compute_capability)]


def _check_iters(iters: int, sets: int) -> None:
    if sets < 1 or iters < sets or iters % sets:
        raise ValueError(f"ERT_MMA_ITERS ({iters}) must be a positive multiple of ERT_MMA_SETS ({sets})")


def compile_defines(shape: MmaShape, *, iters: int = DEFAULT_ITERS, sets: int = DEFAULT_SETS) -> tuple[str, ...]:
    """The -D options that specialise kernels/ert_cuda_tensor.cu for one shape."""
    _check_iters(iters, sets)
    return (f"-DERT_MMA_TYPE={shape.type_code}", f"-DERT_MMA_ITERS={iters}", f"-DERT_MMA_SETS={sets}")


# ----------------------------------------------------------------------------- FLOP accounting
def warps_of(blocks: int, threads_per_block: int) -> int:
    if threads_per_block % 32:
        raise ValueError(f"threads per block must be a multiple of 32 (whole warps), not {threads_per_block}")
    return blocks * threads_per_block // 32


def flops_per_launch(shape: MmaShape, *, blocks: int, threads_per_block: int, trials: int,
                     iters: int = DEFAULT_ITERS) -> int:
    """warps x iterations x trials x 2MNK: what one launch of ert_mma computes."""
    return warps_of(blocks, threads_per_block) * iters * trials * shape.flops_per_mma


# ----------------------------------------------------------------------------- operands and replay
def _e4m3(value: float) -> int:
    """The FP8 e4m3 bits of a power of two in its normal range (bias 7, 3 mantissa bits)."""
    mantissa, exponent = np.frexp(abs(value))  # value = mantissa * 2**exponent, mantissa in [0.5, 1)
    if mantissa != 0.5 or not -6 <= exponent - 1 <= 8:
        raise ValueError(f"{value} is not a power of two e4m3 holds exactly as a normal number")
    return (0x80 if value < 0 else 0) | ((exponent - 1 + 7) << 3)


def element_bits(shape: MmaShape, value: float) -> int:
    """The bit pattern of one element of the input type."""
    if shape.input_type == "f16":
        return int(np.array(value, np.float16).view(np.uint16))
    f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    if shape.input_type == "bf16":
        if f32 & 0xFFFF:
            raise ValueError(f"{value} is not exact in BF16")
        return f32 >> 16
    if shape.input_type == "tf32":
        if f32 & 0x1FFF:
            raise ValueError(f"{value} is not exact in TF32")
        return f32
    if shape.input_type == "f64":
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if shape.input_type == "e4m3":
        return _e4m3(value)
    raise ValueError(shape.input_type)


def operand_word(shape: MmaShape, value: float) -> int:
    """The kernel argument (a_bits or b_bits): every element of a 32-bit register (or the f64) = value."""
    bits = element_bits(shape, value)
    width = {"f16": 16, "bf16": 16, "tf32": 32, "f64": 64, "e4m3": 8}[shape.input_type]
    if width == 64:
        return bits
    word = 0
    for i in range(32 // width):
        word |= bits << (i * width)
    return word


def replay(shape: MmaShape, *, threads: int, trials: int, iters: int = DEFAULT_ITERS, sets: int = DEFAULT_SETS,
           a: float = A_VALUE, b: float = B_VALUE) -> np.ndarray:
    """What ert_mma leaves in out[]: threads x sets x accumulators, in the accumulator type.

    Each accumulator starts at set * ACC + register + lane; trial t adds
    iters/sets MMAs of +-K*a*b (B negated on odd trials) to every element of
    every set, so even trials and odd ones cancel and only an odd total
    leaves iters/sets * K * a * b.  Computed in float64 and exact (checked) in
    the accumulator type for the small integers and powers of two used.
    """
    _check_iters(iters, sets)
    if threads % 32:
        raise ValueError(f"threads must be whole warps, not {threads}")
    acc = shape.acc_per_thread
    lane = np.arange(threads) % 32
    start = (np.arange(sets)[:, None] * acc + np.arange(acc)[None, :])[None, :, :] + lane[:, None, None]
    per_trial = iters // sets * shape.k * a * b
    values = start + (trials % 2) * per_trial
    out = values.astype(shape.acc_dtype)
    if not np.array_equal(out.astype(np.float64), values):
        raise ValueError("the replayed values are not exact in the accumulator type")
    return out


# Rated dense tensor peaks live in ert.hardware.nvidia; named here for the backend.
from ert.hardware.nvidia import (  # noqa: E402,F401
    TENSOR_FLOPS_PER_CYCLE_PER_SM,
    UNRATED_WHY,
    MMA_SYNC_FULL_RATE,
    rated_tensor_peaks,
)


def default_launch(info: DeviceInfo, *, threads_per_block: int = 256, blocks_per_sm: int = 4) -> tuple[int, int]:
    """(blocks, threads per block): 4 blocks of 8 warps per SM, 8 accumulator chains per warp."""
    return info.sm_count * blocks_per_sm, threads_per_block


# Threads per SM of every tensor launch: 32 warps (8 per SM sub-partition's
# tensor core at 4 sub-partitions), each with ERT_MMA_SETS independent chains.
TENSOR_THREADS_PER_SM = 1024
TENSOR_THREADS_PER_BLOCK = (256, 128, 512)


def tensor_launches(info: DeviceInfo) -> list[dict]:
    """The launch geometries a tensor point is measured at: the same warps in blocks of 256, 128, 512 threads.

    Every geometry runs SMs x 1024 threads, so the MMAs per trial are one
    number for the point; the analysis keeps the fastest geometry.
    """
    total = info.sm_count * TENSOR_THREADS_PER_SM
    return [{"blocks": total // t, "threads": t} for t in TENSOR_THREADS_PER_BLOCK if total % t == 0]


def mmas_per_trial(*, blocks: int, threads_per_block: int, iters: int = DEFAULT_ITERS) -> int:
    """Warp-level MMAs one trial of a launch does (a tensor point's ``elements``)."""
    return warps_of(blocks, threads_per_block) * iters


def out_bytes(shape: MmaShape, *, threads: int, sets: int = DEFAULT_SETS) -> int:
    """Bytes of the accumulators every launch stores (a tensor point's ``wss_bytes``)."""
    return threads * sets * shape.acc_per_thread * np.dtype(shape.acc_dtype).itemsize


def check_output(shape: MmaShape, got: np.ndarray, *, threads: int, trials: int, iters: int = DEFAULT_ITERS,
                 sets: int = DEFAULT_SETS) -> CheckResult:
    """The last launch's out[] against the replay, element for element (the values are exact: no tolerance)."""
    want = replay(shape, threads=threads, trials=trials, iters=iters, sets=sets).reshape(-1)
    got = np.asarray(got).reshape(-1)
    if got.size != want.size:
        return CheckResult(False, f"{got.size} accumulators came back, {want.size} expected")
    bad = np.flatnonzero(got != want)
    if bad.size == 0:
        return CheckResult(True, f"every accumulator ({want.size}) equals the replay of {trials} trial(s) exactly")
    first = int(bad[0])
    thread, rest = divmod(first, sets * shape.acc_per_thread)
    return CheckResult(False, f"{bad.size} of {want.size} accumulators differ from the replay of {trials} "
                              f"trial(s), first thread {thread} register {rest}: {got[first]!r} != {want[first]!r}")
