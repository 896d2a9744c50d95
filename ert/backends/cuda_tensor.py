"""Host logic of the tensor-core kernels, testable without a GPU.

kernels/ert_cuda_tensor.cu (warp-level mma.sync, sm_80+) and
kernels/ert_cuda_wgmma.cu (warpgroup-level wgmma, sm_90a): FLOP accounting,
the replay of what a kernel leaves in every accumulator, the output check,
launch geometries and the SASS check (the tensor instructions ptxas really
emitted, counted against what the FLOPs assume).  The shapes are in
``ert.spec``; which variants an architecture measures and its rated dense
tensor peaks are in ``ert.hardware.nvidia``.  ert-run measures them through the cuda
backend (config key ``tensor``, ceilings with ``pipe: "tensor"``); never run
on a GPU yet.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from ert.backends.check import CheckResult
from ert.backends.cuda_host import DeviceInfo
from ert.spec import SHAPES, SM90_SHAPES, KernelSpec, MmaShape, tensor_shape

KERNEL_FILE = "ert_cuda_tensor.cu"
KERNEL_NAME = "ert_mma"
WGMMA_KERNEL_FILE = "ert_cuda_wgmma.cu"
WGMMA_KERNEL_NAME = "ert_wgmma"
DEFAULT_ITERS = 64
DEFAULT_SETS = 8
# sm_90's FP64 m16n8k16 (ert.spec.SM90_SHAPES): 4 chains of 4 f64 accumulators (32 registers) beside its
# 8 A and 4+4 B doubles, about 80 registers a thread; 8 sets would need about 150.
WIDE_DMMA_SETS = 4
# The operand values every A and B element holds (B's sign flips every trial):
# each MMA adds +-K * A_VALUE * B_VALUE = +-K/2 to every accumulator element,
# exact in FP32 and FP64 for any trial count.
A_VALUE = 1.0
B_VALUE = 0.5
# INT8 (s8 inputs, s32 accumulators): a = 1, b = +-1, each MMA adds +-K = +-32 to
# every accumulator, a trial +-32 x the MMAs of a chain (256 for mma.sync's 8
# per set, 2048 for wgmma's 64), the next trial the opposite: the accumulators
# stay within start + [0, 2048] (no s32 overflow for any trial count), and one
# MMA skipped or folded leaves 32 less after an odd count.
INT_A_VALUE = 1
INT_B_VALUE = 1


def operand_values(shape: MmaShape) -> tuple[float, float]:
    """(a, b) every element of A and of B holds (B negated on odd trials): 1 and 1/2, integers 1 and 1."""
    return (INT_A_VALUE, INT_B_VALUE) if shape.integer else (A_VALUE, B_VALUE)


def shapes_for(compute_capability: tuple[int, int]) -> list[MmaShape]:
    """The mma.sync shapes a GPU of this compute capability runs natively (sm_90: FP64 m16n8k16 too)."""
    return [s for s in (*SHAPES.values(), *SM90_SHAPES.values()) if s.supported(compute_capability)]


def spec_of(shape: MmaShape) -> KernelSpec:
    """The KernelSpec of the tensor kernel that runs ``shape`` (one element = one MMA)."""
    return KernelSpec(shape.name, shape.flops_per_mma, True, "rw", pipe="tensor", instruction=shape.spec_instruction)


def shape_of(spec: KernelSpec) -> MmaShape:
    return tensor_shape(spec.precision, spec.instruction, spec.flops_per_element)


def is_wide_dmma(shape: MmaShape) -> bool:
    return SM90_SHAPES.get(shape.name) is shape


def sets_of(shape: MmaShape) -> int:
    """Independent accumulator sets per thread: 8 for mma.sync (4 for sm_90's FP64 m16n8k16), 1 for wgmma
    (128 registers, one chain)."""
    if shape.instruction == "wgmma":
        return 1
    return WIDE_DMMA_SETS if is_wide_dmma(shape) else DEFAULT_SETS


def kernel_file(shape: MmaShape) -> str:
    return WGMMA_KERNEL_FILE if shape.instruction == "wgmma" else KERNEL_FILE


def kernel_name(shape: MmaShape) -> str:
    return WGMMA_KERNEL_NAME if shape.instruction == "wgmma" else KERNEL_NAME


def target_arch(shape: MmaShape, compute_capability: tuple[int, int]) -> str:
    """The NVRTC/nvcc target: sm_90a (architecture-specific) for wgmma, sm_XY otherwise."""
    major, minor = compute_capability
    return f"sm_{major}{minor}" + ("a" if shape.instruction == "wgmma" else "")


def _check_iters(iters: int, sets: int) -> None:
    if sets < 1 or iters < sets or iters % sets:
        raise ValueError(f"ERT_MMA_ITERS ({iters}) must be a positive multiple of ERT_MMA_SETS ({sets})")


def compile_defines(shape: MmaShape, *, iters: int = DEFAULT_ITERS, sets: int | None = None) -> tuple[str, ...]:
    """The -D options that specialise the shape's kernel file (ert_cuda_tensor.cu or ert_cuda_wgmma.cu)."""
    sets = sets_of(shape) if sets is None else sets
    _check_iters(iters, sets)
    if shape.instruction == "wgmma":
        if sets != 1:
            raise ValueError("the wgmma kernel keeps one accumulator set (128 registers) per thread")
        return (f"-DERT_WGMMA_TYPE={shape.type_code}", f"-DERT_WGMMA_ITERS={iters}")
    return (f"-DERT_MMA_TYPE={shape.type_code}", f"-DERT_MMA_ITERS={iters}", f"-DERT_MMA_SETS={sets}")


# ----------------------------------------------------------------------------- FLOP accounting
def warps_of(blocks: int, threads_per_block: int) -> int:
    if threads_per_block % 32:
        raise ValueError(f"threads per block must be a multiple of 32 (whole warps), not {threads_per_block}")
    return blocks * threads_per_block // 32


def issuers_of(shape: MmaShape, *, blocks: int, threads_per_block: int) -> int:
    """Warps (mma.sync) or warpgroups (wgmma: blocks of whole 128-thread warpgroups) of a launch."""
    if threads_per_block % shape.threads_per_mma:
        raise ValueError(f"threads per block must be a multiple of {shape.threads_per_mma} for {shape.instruction}, "
                         f"not {threads_per_block}")
    return blocks * threads_per_block // shape.threads_per_mma


def flops_per_launch(shape: MmaShape, *, blocks: int, threads_per_block: int, trials: int,
                     iters: int = DEFAULT_ITERS) -> int:
    """warps (warpgroups for wgmma) x iterations x trials x 2MNK: what one launch computes."""
    return issuers_of(shape, blocks=blocks, threads_per_block=threads_per_block) * iters * trials * \
        shape.flops_per_mma


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
    if shape.input_type == "s8":
        if value != int(value) or not -128 <= value <= 127:
            raise ValueError(f"{value} is not an s8 integer")
        return int(value) & 0xFF
    raise ValueError(shape.input_type)


def operand_word(shape: MmaShape, value: float) -> int:
    """The kernel argument (a_bits or b_bits): every element of a 32-bit register (or the f64) = value."""
    bits = element_bits(shape, value)
    width = {"f16": 16, "bf16": 16, "tf32": 32, "f64": 64, "e4m3": 8, "s8": 8}[shape.input_type]
    if width == 64:
        return bits
    word = 0
    for i in range(32 // width):
        word |= bits << (i * width)
    return word


def replay(shape: MmaShape, *, threads: int, trials: int, iters: int = DEFAULT_ITERS, sets: int | None = None,
           a: float | None = None, b: float | None = None) -> np.ndarray:
    """What ert_mma (or ert_wgmma: one set of 128) leaves in out[]: threads x sets x accumulators, in the accumulator type.

    Each accumulator starts at set * ACC + register + lane; trial t adds
    iters/sets MMAs of +-K*a*b (B negated on odd trials) to every element of
    every set, so even trials and odd ones cancel and only an odd total
    leaves iters/sets * K * a * b.  Computed in float64 and exact (checked) in
    the accumulator type for the small integers and powers of two used.  ``a``
    and ``b`` default to ``operand_values(shape)`` (1 and 1/2; INT8 1 and 1,
    s32 accumulators).  INT8: no value of a trial may leave the s32 range
    (the MMAs of one chain add up within a trial before the next undoes them).
    """
    sets = sets_of(shape) if sets is None else sets
    default_a, default_b = operand_values(shape)
    a = default_a if a is None else a
    b = default_b if b is None else b
    _check_iters(iters, sets)
    if threads % shape.threads_per_mma:
        raise ValueError(f"threads must be whole {'warpgroups' if shape.instruction == 'wgmma' else 'warps'}, "
                         f"not {threads}")
    acc = shape.acc_per_thread
    lane = np.arange(threads) % 32
    start = (np.arange(sets)[:, None] * acc + np.arange(acc)[None, :])[None, :, :] + lane[:, None, None]
    per_trial = iters // sets * shape.k * a * b
    values = start + (trials % 2) * per_trial
    if shape.integer:
        # Within a trial a chain runs from its start to start + per_trial (or back): each step must fit s32.
        info = np.iinfo(np.int32)
        if values.size and (min(start.min(), (start + per_trial).min()) < info.min or
                            max(start.max(), (start + per_trial).max()) > info.max):
            raise ValueError(f"the s32 accumulators would overflow within a trial ({per_trial:+g} per trial)")
    out = values.astype(shape.acc_dtype)
    if not np.array_equal(out.astype(np.float64), values):
        raise ValueError("the replayed values are not exact in the accumulator type")
    return out


# Threads per SM of every mma.sync launch: 32 warps (8 per SM sub-partition's
# tensor core at 4 sub-partitions), each with ERT_MMA_SETS independent chains.
# The first geometry is one block per SM holding all of them: the registers of
# two such blocks never fit one SM (64K registers), so every SM gets exactly one
# and the work is even whatever the block scheduler does; the smaller blocks
# after it are the alternatives the analysis may find faster.
TENSOR_THREADS_PER_SM = 1024
TENSOR_THREADS_PER_BLOCK = (1024, 256, 128)
# sm_90's FP64 m16n8k16: 16 warps per SM (4 per sub-partition, 4 chains each: 16
# DMMA.16x8x16 of 4096 FLOPs in flight where the tensor core retires one every
# 64 cycles), in one block of 512 first (about 80 registers: two never fit).
WIDE_DMMA_THREADS_PER_SM = 512
WIDE_DMMA_THREADS_PER_BLOCK = (512, 256, 128)
# wgmma: 2 warpgroups per SM (the kernel takes 154 registers per thread, so at
# most 3 fit), each with one chain of asynchronous wgmmas the tensor cores run
# back to back; one block of both first (2 x 154 x 256 registers never fit twice),
# then blocks of one warpgroup.
WGMMA_THREADS_PER_SM = 256
WGMMA_THREADS_PER_BLOCK = (256, 128)


def threads_per_sm(shape: MmaShape | None) -> tuple[int, tuple[int, ...]]:
    """(threads per SM, block sizes, the one-block-per-SM first) of a shape's launches."""
    if shape is not None and shape.instruction == "wgmma":
        return WGMMA_THREADS_PER_SM, WGMMA_THREADS_PER_BLOCK
    if shape is not None and is_wide_dmma(shape):
        return WIDE_DMMA_THREADS_PER_SM, WIDE_DMMA_THREADS_PER_BLOCK
    return TENSOR_THREADS_PER_SM, TENSOR_THREADS_PER_BLOCK


def tensor_launches(info: DeviceInfo, shape: MmaShape | None = None) -> list[dict]:
    """The launch geometries a tensor point is measured at: the same threads in blocks of several sizes.

    mma.sync: SMs x 1024 threads in blocks of 1024, 256, 128 (sm_90's FP64
    m16n8k16: SMs x 512 in blocks of 512, 256, 128); wgmma: SMs x 256 threads
    in blocks of 256 and 128.  The first is one block per SM, which fills
    every SM evenly.  Every geometry of a shape runs the same threads, so the
    MMAs per trial are one number for the point; the analysis keeps the
    fastest geometry.
    """
    per_sm, sizes = threads_per_sm(shape)
    total = info.sm_count * per_sm
    return [{"blocks": total // t, "threads": t} for t in sizes if total % t == 0]


def mmas_per_trial(*, blocks: int, threads_per_block: int, iters: int = DEFAULT_ITERS,
                   shape: MmaShape | None = None) -> int:
    """MMAs one trial of a launch does (a tensor point's ``elements``): warps (wgmma: warpgroups) x iterations."""
    if shape is None:
        return warps_of(blocks, threads_per_block) * iters
    return issuers_of(shape, blocks=blocks, threads_per_block=threads_per_block) * iters


def out_bytes(shape: MmaShape, *, threads: int, sets: int | None = None) -> int:
    """Bytes of the accumulators every launch stores (a tensor point's ``wss_bytes``)."""
    sets = sets_of(shape) if sets is None else sets
    return threads * sets * shape.acc_per_thread * np.dtype(shape.acc_dtype).itemsize


def check_output(shape: MmaShape, got: np.ndarray, *, threads: int, trials: int, iters: int = DEFAULT_ITERS,
                 sets: int | None = None) -> CheckResult:
    """The last launch's out[] against the replay, element for element (the values are exact: no tolerance)."""
    sets = sets_of(shape) if sets is None else sets
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


# ----------------------------------------------------------------------------- SASS: what ptxas really emitted
# Tensor-core SASS opcodes: warp-level HMMA (FP16/BF16/TF32), QMMA (FP8), DMMA
# (FP64), IMMA (INT8), BMMA (binary); Hopper's warpgroup HGMMA, QGMMA, IGMMA.
TENSOR_SASS = ("HMMA", "QMMA", "DMMA", "IMMA", "BMMA", "HGMMA", "QGMMA", "IGMMA")
_SASS_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?((?:" + "|".join(TENSOR_SASS) +
                      r")(?:\.[0-9A-Za-z_]+)*)\b", re.M)


def tensor_instructions(sass: str) -> Counter:
    """Full tensor opcodes (``HMMA.16816.F32``, ``QGMMA.64x256x32.F32.E4M3.E4M3``, ``IMMA.16832.S8.S8``,
    ``IGMMA.64x256x32.S8.S8``) in cuobjdump/nvdisasm text, counted."""
    return Counter(_SASS_RE.findall(sass))


def _is_mine(shape: MmaShape, op: str) -> bool:
    """Whether SASS opcode ``op`` is one MMA of ``shape``: its opcode, and for DMMA its size too (DMMA.884 or
    DMMA.8x8x4 for m8n8k4, DMMA.16x8x16 for m16n8k16: ptxas for sm_100 makes 8 DMMA.8x8x4 of one m16n8k16)."""
    if op.split(".")[0] != shape.sass:
        return False
    if shape.sass != "DMMA":
        return True
    size = op.split(".")[1] if "." in op else ""
    return size in (f"{shape.m}x{shape.n}x{shape.k}", f"{shape.m}{shape.n}{shape.k}")


def check_sass(shape: MmaShape, sass: str, *, iters: int = DEFAULT_ITERS) -> CheckResult:
    """Whether the kernel's SASS holds exactly ``iters`` tensor instructions of the shape's opcode and no other.

    The FLOP count assumes one native instruction per MMA of the PTX.  Where
    ptxas emulates an MMA (FP8 mma.sync on sm_90/sm_100: F2FP conversions and
    HMMA) or folds identical ones (the emulated FP8 product, computed once and
    added with FADD: 2 HMMA + 256 FADD for 64 MMAs), the count differs and the
    rate would measure something else, however close to rated it comes.
    """
    counts = tensor_instructions(sass)
    mine = sum(n for op, n in counts.items() if _is_mine(shape, op))
    other = {op: n for op, n in counts.items() if not _is_mine(shape, op)}
    found = ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) or "no tensor instruction"
    if mine == iters and not other:
        return CheckResult(True, f"SASS holds {found}: one {shape.sass} per {shape.instruction} as counted")
    return CheckResult(False, f"SASS holds {found} where {iters} {shape.sass} ({shape.instruction} "
                              f"{shape.input_type}) were counted: ptxas emulated or folded the MMAs, so this rate is "
                              f"not the tensor cores' {shape.name.upper()} rate")


def sass_tools() -> tuple[str | None, str | None]:
    """(cuobjdump, the folder holding nvdisasm): on PATH, or from the nvidia-cuda-cuobjdump / -nvdisasm wheels."""
    wheel = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages" / "nvidia" / "cu13" / "bin"
    try:  # wherever the nvidia namespace package is installed (a venv, --user, a --target folder)
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if (Path(folder) / "cu13" / "bin" / "cuobjdump").exists():
                wheel = Path(folder) / "cu13" / "bin"
                break
    except (ImportError, ValueError):
        pass
    cuobjdump = shutil.which("cuobjdump") or (str(wheel / "cuobjdump") if (wheel / "cuobjdump").exists() else None)
    nvdisasm = shutil.which("nvdisasm")
    folder = os.path.dirname(nvdisasm) if nvdisasm else (str(wheel) if (wheel / "nvdisasm").exists() else None)
    return cuobjdump, folder


def read_sass(cubin: bytes, function: str) -> tuple[str | None, str]:
    """(SASS text of ``function`` in ``cubin``, "") or (None, why it could not be read)."""
    cuobjdump, folder = sass_tools()
    if cuobjdump is None or folder is None:
        return None, ("SASS not checked: cuobjdump and nvdisasm not found (pip install nvidia-cuda-cuobjdump "
                      "nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        env = {**os.environ, "PATH": folder + os.pathsep + os.environ.get("PATH", "")}
        try:
            proc = subprocess.run([cuobjdump, "-sass", "-fun", function, str(path)], capture_output=True, text=True,
                                  env=env, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"SASS not checked: cuobjdump failed ({type(exc).__name__}: {exc})"
    if proc.returncode != 0 or function not in proc.stdout:
        return None, f"SASS not checked: cuobjdump said {' '.join(proc.stderr.split())[:200] or 'nothing'}"
    return proc.stdout, ""


def complete_cubin(cubin: bytes) -> bytes:
    """``cubin`` padded with zeros to the end its ELF headers name.

    CuPy's ``nvrtc.getCUBIN`` (14.x) returns the image one byte short (its
    size drops a terminator, as for PTX); the byte lost is the last of the
    last program header's 8-byte alignment field, a zero.  The driver loads
    the short image, but cuobjdump refuses it as an invalid ELF.
    """
    if len(cubin) < 0x40 or cubin[:4] != b"\x7fELF":
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    missing = end - len(cubin)
    return cubin + b"\0" * missing if 0 < missing <= 8 else cubin


def sass_verdict(shape: MmaShape, cubin: bytes, *, iters: int = DEFAULT_ITERS) -> dict:
    """What a tensor point records of its kernel's SASS: {"ok": True/False, or None where it could not be read,
    "detail": one line, "instructions": {opcode: count}}.  A point whose ``ok`` is False fails its check."""
    sass, why = read_sass(cubin, kernel_name(shape))
    if sass is None:
        return {"ok": None, "detail": why, "instructions": {}}
    result = check_sass(shape, sass, iters=iters)
    return {"ok": result.ok, "detail": result.detail, "instructions": dict(tensor_instructions(sass))}
