"""The tensor-core kernel (kernels/ert_cuda_tensor.cu) and its host logic (ert/backends/cuda_tensor.py).

Host logic runs here, including the whole ert-run path (config, plan,
driver, raw records, ceilings, schema) over an emulated GPU that does the
kernel's arithmetic in numpy; the `nvcc` tests compile every variant to PTX
(never executed); the `gpu` tests are written to run unchanged on a GPU and
are skipped here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import background
import pytest
from conftest import sass_by_function

from ert.backends import cuda as cuda_mod
from ert.backends import cuda_device
from ert.backends import cuda_tensor as tc
from ert.backends.cuda_host import DeviceInfo
from ert.hardware import nvidia
from ert.spec import SHAPES, SM90_SHAPES, WGMMA_SHAPES, MmaShape

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / tc.KERNEL_FILE
NVCC = shutil.which("nvcc")


def needs_nvcc(f):
    """Marked `nvcc`: compiled with the machine's nvcc, never executed; skipped where nvcc is not on PATH."""
    f = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA 13) is not on PATH: cannot compile the CUDA kernels")(f)
    return pytest.mark.nvcc(f)

_GPU_OK, _GPU_REASON, _ = cuda_mod.probe()


def needs_gpu(f):
    """Marked `gpu`: needs an NVIDIA GPU (never run on one yet); skipped with the reason where none is present."""
    f = pytest.mark.skipif(not _GPU_OK, reason=f"needs an NVIDIA GPU; the cuda backend says: {_GPU_REASON}")(f)
    return pytest.mark.gpu(f)



def _info(cc, sms, mhz) -> DeviceInfo:
    return DeviceInfo(name="test", compute_capability=cc, sm_count=sms, sm_clock_khz=mhz * 1000,
                      memory_clock_khz=0, memory_bus_bits=0, l2_bytes=0, total_memory_bytes=0, max_threads_per_sm=2048)


A100 = _info((8, 0), 108, 1410)
H100 = _info((9, 0), 132, 1980)
H100_TENSOR_CLOCK = _info((9, 0), 132, 1830)  # the clock NVIDIA's FP16/BF16/TF32/FP8 H100 figures assume


# ----------------------------------------------------------------------------- host logic
WIDE_DMMA = SM90_SHAPES["fp64"]  # sm_90's FP64 m16n8k16 (DMMA.16x8x16)
ALL_SHAPES = [*SHAPES.values(), *WGMMA_SHAPES.values(), WIDE_DMMA]


def _id(shape) -> str:
    return f"{shape.name}-{shape.instruction}" + ("-m16n8k16" if shape is WIDE_DMMA else "")


def test_shapes_table():
    assert {s: (v.m, v.n, v.k) for s, v in SHAPES.items()} == {
        "fp16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8), "fp64": (8, 8, 4), "fp8": (16, 8, 32),
        "int8": (16, 8, 32)}
    assert {s: v.flops_per_mma for s, v in SHAPES.items()} == {
        "fp16": 4096, "bf16": 4096, "tf32": 2048, "fp64": 512, "fp8": 8192, "int8": 8192}
    for shape in SHAPES.values():
        assert shape.acc_per_thread == shape.m * shape.n // 32 and shape.threads_per_mma == 32
    assert SHAPES["fp16"].ptx == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert SHAPES["fp64"].ptx == "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"
    assert SHAPES["int8"].ptx == "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
    assert [s.name for s in tc.shapes_for((8, 0))] == ["fp16", "bf16", "tf32", "fp64", "int8"]
    # INT8 (IMMA) is native on every architecture from sm_80 (the SASS test counts it on each).
    assert all("int8" in [s.name for s in tc.shapes_for(cc)] for cc in ((8, 0), (8, 6), (9, 0), (10, 0), (12, 1)))
    assert [s.name for s in SHAPES.values() if s.integer] == ["int8"]
    assert SHAPES["int8"].acc_dtype == np.int32 and SHAPES["fp16"].acc_dtype == np.float32
    # FP8 mma.sync only where it is native (QMMA): Ada and sm_12x; ptxas emulates it on sm_90 to sm_11x.
    for cc, fp8 in (((8, 6), False), ((8, 9), True), ((9, 0), False), ((10, 0), False), ((10, 3), False),
                    ((11, 0), False), ((12, 0), True), ((12, 1), True)):
        assert ("fp8" in [s.name for s in tc.shapes_for(cc)]) == fp8, cc
    assert tc.shapes_for((7, 5)) == []
    # Hopper's wgmma, N = 256: 128 f32 accumulators per thread of a 128-thread warpgroup.
    assert {s: (v.m, v.n, v.k, v.flops_per_mma) for s, v in WGMMA_SHAPES.items()} == {
        "fp16": (64, 256, 16, 524288), "bf16": (64, 256, 16, 524288), "tf32": (64, 256, 8, 262144),
        "fp8": (64, 256, 32, 1048576), "int8": (64, 256, 32, 1048576)}
    for shape in WGMMA_SHAPES.values():
        assert shape.acc_per_thread == shape.m * shape.n // 128 == 128 and shape.threads_per_mma == 128
        assert shape.supported((9, 0)) and not any(shape.supported(cc) for cc in ((8, 9), (10, 0), (12, 0)))
    assert WGMMA_SHAPES["fp8"].ptx == "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"
    assert WGMMA_SHAPES["int8"].ptx == "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"
    assert (WGMMA_SHAPES["int8"].sass, SHAPES["int8"].sass) == ("IGMMA", "IMMA")
    # sm_90's FP64 m16n8k16: 8x m8n8k4's FLOPs per MMA, 4 f64 accumulators a thread, sm_90 only; a KernelSpec
    # tells it apart by its FLOPs per MMA.
    assert (WIDE_DMMA.m, WIDE_DMMA.n, WIDE_DMMA.k, WIDE_DMMA.flops_per_mma, WIDE_DMMA.acc_per_thread) == \
        (16, 8, 16, 4096, 4)
    assert WIDE_DMMA.ptx == "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64" and WIDE_DMMA.sass == "DMMA"
    assert [cc for cc in ((8, 0), (8, 9), (9, 0), (10, 0), (12, 0)) if WIDE_DMMA.supported(cc)] == [(9, 0)]
    assert "fp64 mma.sync m16n8k16 needs sm_90; this GPU is sm_100" == WIDE_DMMA.unsupported_why((10, 0))
    assert tc.shape_of(tc.spec_of(WIDE_DMMA)) is WIDE_DMMA and tc.shape_of(tc.spec_of(SHAPES["fp64"])) is \
        SHAPES["fp64"]
    assert tc.spec_of(WIDE_DMMA).key == "fp64-tensor-mma-f4096"
    assert tc.compile_defines(WIDE_DMMA) == ("-DERT_MMA_TYPE=7", "-DERT_MMA_ITERS=64", "-DERT_MMA_SETS=4")
    assert WIDE_DMMA in tc.shapes_for((9, 0)) and WIDE_DMMA not in tc.shapes_for((10, 0))


@pytest.mark.parametrize("cc, want", [
    ((8, 0), {"fp16": ["mma.sync"], "fp64": ["mma.sync"], "fp8": [], "int8": ["mma.sync"]}),
    ((8, 6), {"fp16": ["mma.sync"], "fp8": [], "int8": ["mma.sync"]}),
    ((8, 9), {"fp16": ["mma.sync"], "fp8": ["mma.sync"], "int8": ["mma.sync"]}),
    ((9, 0), {"fp16": ["wgmma", "mma.sync"], "bf16": ["wgmma", "mma.sync"], "tf32": ["wgmma", "mma.sync"],
              "fp64": ["mma.sync", "mma.sync"], "fp8": ["wgmma"], "int8": ["wgmma", "mma.sync"]}),
    ((10, 0), {"fp16": ["mma.sync"], "fp64": ["mma.sync"], "fp8": [], "int8": ["mma.sync"]}),
    ((12, 0), {"fp16": ["mma.sync"], "fp8": ["mma.sync"], "int8": ["mma.sync"]}),
    ((7, 5), {"fp16": [], "int8": []}),
])
def test_variants_per_architecture(cc, want):
    """FP8 only where native (mma.sync on sm_89/sm_12x, wgmma on sm_90); on sm_90 wgmma first: it is the roof."""
    for name, instructions in want.items():
        assert [s.instruction for s in nvidia.tensor_variants(cc, name)] == instructions, (cc, name)
        why = nvidia.no_tensor_why(cc, name)
        assert (why == "") == bool(instructions), why
    # FP64 on sm_90 by both DMMA shapes, the wide one first; elsewhere m8n8k4 alone.
    assert [(s.m, s.n, s.k) for s in nvidia.tensor_variants(cc, "fp64")] == \
        ([(16, 8, 16), (8, 8, 4)] if cc == (9, 0) else [(8, 8, 4)] if cc >= (8, 0) else [])
    if cc == (10, 0):
        why = nvidia.no_tensor_why(cc, "fp8")
        assert why.startswith("no FP8 tensor roof:") and "emulates it" in why and "tcgen05" in why
    if cc == (8, 6):
        assert "fp8 mma.sync needs sm_89; this GPU is sm_86" in nvidia.no_tensor_why(cc, "fp8")
    if cc == (7, 5):
        assert nvidia.no_tensor_why(cc, "int8") == "no INT8 tensor roof: int8 mma.sync needs sm_80; this GPU is sm_75"


def test_mma_sync_labels():
    assert nvidia.mma_sync_note((9, 0), "fp16") == "mma.sync, below Hopper's wgmma rate"
    assert nvidia.mma_sync_note((9, 0), "int8") == "mma.sync, below Hopper's wgmma rate"  # IGMMA is the roof
    assert nvidia.mma_sync_note((9, 0), "fp64") == ""  # no wgmma form: DMMA is Hopper's FP64 tensor path
    assert nvidia.mma_sync_note((8, 0), "fp16") == nvidia.mma_sync_note((12, 0), "fp16") == ""
    assert "tcgen05" in nvidia.mma_sync_note((10, 0), "bf16") and "tcgen05" in nvidia.mma_sync_note((10, 0), "int8")
    assert nvidia.mma_sync_note((8, 0), "int8") == nvidia.mma_sync_note((8, 6), "int8") == ""


def test_flop_accounting():
    fp16 = SHAPES["fp16"]
    # 2 blocks x 256 threads = 16 warps, 64 MMAs x 10 trials each, 4096 FLOPs per MMA.
    assert tc.flops_per_launch(fp16, blocks=2, threads_per_block=256, trials=10) == 16 * 64 * 10 * 4096
    assert tc.flops_per_launch(SHAPES["fp64"], blocks=1, threads_per_block=32, trials=1, iters=8) == 8 * 512
    # wgmma: 2 blocks x 256 threads = 4 warpgroups, 64 wgmmas x 10 trials, 2 x 64 x 256 x 16 FLOPs each.
    wg = WGMMA_SHAPES["fp16"]
    assert tc.flops_per_launch(wg, blocks=2, threads_per_block=256, trials=10) == 4 * 64 * 10 * 524288
    assert tc.mmas_per_trial(blocks=2, threads_per_block=256, shape=wg) == 4 * 64
    with pytest.raises(ValueError):
        tc.warps_of(1, 48)
    with pytest.raises(ValueError, match="multiple of 128"):
        tc.flops_per_launch(wg, blocks=1, threads_per_block=64, trials=1)
    assert tc.compile_defines(fp16) == ("-DERT_MMA_TYPE=1", "-DERT_MMA_ITERS=64", "-DERT_MMA_SETS=8")
    assert tc.compile_defines(WGMMA_SHAPES["fp8"]) == ("-DERT_WGMMA_TYPE=4", "-DERT_WGMMA_ITERS=64")
    assert tc.compile_defines(WGMMA_SHAPES["int8"]) == ("-DERT_WGMMA_TYPE=5", "-DERT_WGMMA_ITERS=64")
    assert tc.compile_defines(SHAPES["int8"]) == ("-DERT_MMA_TYPE=6", "-DERT_MMA_ITERS=64", "-DERT_MMA_SETS=8")
    # INT8 counts integer operations the same way: 2 x 16 x 8 x 32 per IMMA, 2 x 64 x 256 x 32 per IGMMA.
    assert tc.flops_per_launch(SHAPES["int8"], blocks=1, threads_per_block=64, trials=3) == 2 * 64 * 3 * 8192
    assert tc.flops_per_launch(WGMMA_SHAPES["int8"], blocks=1, threads_per_block=128, trials=3) == \
        64 * 3 * 1048576
    assert tc.target_arch(wg, (9, 0)) == "sm_90a" and tc.target_arch(fp16, (9, 0)) == "sm_90"
    with pytest.raises(ValueError):
        tc.compile_defines(fp16, iters=12, sets=8)
    with pytest.raises(ValueError, match="one accumulator set"):
        tc.compile_defines(wg, sets=8)


def test_operand_bits():
    words = {name: tuple(tc.operand_word(s, v) for v in tc.operand_values(s)) for name, s in SHAPES.items()}
    assert words == {"fp16": (0x3C003C00, 0x38003800), "bf16": (0x3F803F80, 0x3F003F00),
                     "tf32": (0x3F800000, 0x3F000000), "fp64": (0x3FF0000000000000, 0x3FE0000000000000),
                     "fp8": (0x38383838, 0x30303030), "int8": (0x01010101, 0x01010101)}
    assert tc.operand_values(SHAPES["fp16"]) == (tc.A_VALUE, tc.B_VALUE) == (1.0, 0.5)
    int8 = SHAPES["int8"]
    # The kernel negates B byte by byte (__vneg4) on odd trials: -1 is 0xFF in every byte.
    assert tc.element_bits(int8, -1) == 0xFF and tc.operand_word(int8, -1) == 0xFFFFFFFF
    assert tc.operand_word(int8, -128) == 0x80808080 and tc.operand_word(WGMMA_SHAPES["int8"], 3) == 0x03030303
    for bad in (0.5, 128, -129):
        with pytest.raises(ValueError, match="s8"):
            tc.element_bits(int8, bad)
    assert tc.element_bits(SHAPES["fp8"], -0.5) == 0xB0  # the sign the kernel flips on odd trials
    with pytest.raises(ValueError):
        tc.element_bits(SHAPES["fp8"], 0.3)
    with pytest.raises(ValueError):
        tc.element_bits(SHAPES["bf16"], 1.0 + 2 ** -10)


def _emulate(shape: MmaShape, *, trials: int, iters: int, sets: int) -> np.ndarray:
    """One warp's accumulators by doing every MMA as a matrix product in the accumulator type (one lane's view:
    every element of D is alike, so lane l's register r of set s holds the element its start value says).
    For wgmma the warp is one of its warpgroup's four; each holds the same (register + lane) values."""
    acc_t = shape.acc_dtype
    a_value, b_value = tc.operand_values(shape)
    a = np.full((shape.m, shape.k), a_value, acc_t)
    b = np.full((shape.k, shape.n), b_value, acc_t)
    lanes = np.arange(32)
    d = np.zeros((32, sets, shape.acc_per_thread), acc_t)
    d[:] = (np.arange(sets)[:, None] * shape.acc_per_thread + np.arange(shape.acc_per_thread)[None, :])[None] \
        + lanes[:, None, None]
    for t in range(trials):
        sign = acc_t(-1 if t % 2 else 1)
        product = (a @ (sign * b)).astype(acc_t)[0, 0]  # every element of A*B is K*a*b
        for i in range(iters):
            d[:, i % sets, :] = (d[:, i % sets, :] + product).astype(acc_t)
    return d


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=_id)
def test_replay_matches_an_emulation_bit_exactly(shape):
    wgmma = shape.instruction == "wgmma"
    threads = 256 if wgmma else 64
    for trials in (0, 1, 2, 3, 6, 7):
        for iters, sets in (((8, 1), (16, 1), (64, 1)) if wgmma else ((8, 4), (16, 8), (64, 8))):
            got = tc.replay(shape, threads=threads, trials=trials, iters=iters, sets=sets)
            assert got.dtype == shape.acc_dtype and got.shape == (threads, sets, shape.acc_per_thread)
            want = _emulate(shape, trials=trials, iters=iters, sets=sets)
            for warp in range(threads // 32):
                assert np.array_equal(got[32 * warp:32 * warp + 32], want), (trials, iters, sets, warp)
    # Exact for any trial count: even and odd trials cancel.
    assert np.array_equal(tc.replay(shape, threads=threads, trials=10 ** 9),
                          tc.replay(shape, threads=threads, trials=0))
    odd = tc.replay(shape, threads=threads, trials=10 ** 9 + 1)
    a, b = tc.operand_values(shape)
    assert odd[0, 0, 0] == 64 // tc.sets_of(shape) * shape.k * a * b
    with pytest.raises(ValueError):
        tc.replay(shape, threads=threads + 32 if wgmma else 48, trials=1)


def test_int8_replay_is_exact_and_guarded_against_s32_overflow():
    """INT8: s32 accumulators, +-32 per IMMA / IGMMA; a skipped MMA shows after an odd trial count, and operand
    values that would overflow s32 within a trial are refused rather than replayed wrongly."""
    for shape in (SHAPES["int8"], WGMMA_SHAPES["int8"]):
        threads = shape.threads_per_mma
        odd = tc.replay(shape, threads=threads, trials=3)
        assert odd.dtype == np.int32
        per_trial = 64 // tc.sets_of(shape) * 32  # 256 (8 IMMAs of a chain) or 2048 (64 IGMMAs)
        assert np.array_equal(odd - tc.replay(shape, threads=threads, trials=2), np.full(odd.shape, per_trial))
        short = tc.replay(shape, threads=threads, trials=3, iters=64 - tc.sets_of(shape))  # one MMA fewer a chain
        assert (odd - short).max() == 32
        with pytest.raises(ValueError, match="overflow"):
            tc.replay(shape, threads=threads, trials=1, a=127, b=127, iters=64 * 1024)
    # Emulated: each IMMA's s32 product K x 127 x 127 stays exact, and a large chain too, where it fits.
    big = tc.replay(SHAPES["int8"], threads=32, trials=1, a=127, b=127)
    assert big[0, 0, 0] == 8 * 32 * 127 * 127


def test_rated_a100_h100_match_nvidia_dense_figures():
    """NVIDIA's dense tensor TFLOP/s (A100 and H100 whitepapers/datasheets), within 1 %."""
    def rated(info):
        return {r["precision"]: r["gflops_per_s"] / 1000 for r in nvidia.rated_tensor_peaks(info)}
    a100 = rated(A100)
    for precision, tflops in {"fp16": 312, "bf16": 312, "tf32": 156, "fp64": 19.5, "int8": 624}.items():
        assert a100[precision] == pytest.approx(tflops, rel=0.01), precision
    assert "fp8" not in a100
    h100 = rated(H100)
    assert h100["fp64"] == pytest.approx(66.9, rel=0.01)
    # NVIDIA quotes H100's FP16/BF16/TF32/FP8 figures at 1830 MHz, not the 1980 MHz maximum clock.
    h100_tensor = rated(H100_TENSOR_CLOCK)
    for precision, tflops in {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9}.items():
        assert h100_tensor[precision] == pytest.approx(tflops, rel=0.01), precision
    assert h100["fp16"] == pytest.approx(989.4 * 1980 / 1830, rel=0.001)
    rows = {r["precision"]: r for r in nvidia.rated_tensor_peaks(H100)}
    assert all("SMs x" in r["derivation"] for r in rows.values())
    # The roof's instruction: wgmma wherever Hopper has one, DMMA's mma.sync for FP64 (m16n8k16 named first;
    # the faster of the two shapes measured is the roof).
    assert {p: (r["instruction"], r["shape"]) for p, r in rows.items()} == {
        "fp16": ("wgmma", "m64n256k16"), "bf16": ("wgmma", "m64n256k16"), "tf32": ("wgmma", "m64n256k8"),
        "fp64": ("mma.sync", "m16n8k16"), "fp8": ("wgmma", "m64n256k32"), "int8": ("wgmma", "m64n256k32")}
    # INT8 is integer operations: GIOP/s, the value in giops_per_s too, its source named; the FP types stay GFLOP/s.
    int8 = rows["int8"]
    assert int8["unit"] == "GIOP/s" and int8["giops_per_s"] == int8["gflops_per_s"] and int8["accumulate"] == "s32"
    assert "tensor integer op/cycle/SM" in int8["derivation"] and "H100 SXM5 datasheet: 1978.9" in int8["derivation"]
    assert all("unit" not in r and "giops_per_s" not in r and "tensor FLOP/cycle/SM" in r["derivation"]
               for p, r in rows.items() if p != "int8")


def test_rated_int8_on_ga10x_from_the_a40_datasheet():
    """sm_86 records INT8 only (A40: 299.3 dense TOPS, 84 SMs at 1740 MHz); its FP types stay unrated."""
    rows = {r["precision"]: r for r in nvidia.rated_tensor_peaks(_info((8, 6), 84, 1740))}
    assert rows["int8"]["gflops_per_s"] / 1000 == pytest.approx(299.3, rel=0.001)
    assert "A40 datasheet" in rows["int8"]["derivation"] and rows["int8"]["instruction"] == "mma.sync"
    assert all(r["gflops_per_s"] is None and "no per-SM tensor rate recorded for sm_86" in r["derivation"]
               for p, r in rows.items() if p != "int8")
    ada = {r["precision"]: r for r in nvidia.rated_tensor_peaks(_info((8, 9), 142, 2520))}
    assert ada["int8"]["gflops_per_s"] is None and "L40S" in ada["int8"]["derivation"]
    assert ada["int8"]["unit"] == "GIOP/s" and ada["int8"]["giops_per_s"] is None


def test_unrated_architectures_say_why():
    for cc, words in (((8, 9), "Ada"), ((10, 0), "B200"), ((8, 6), "no per-SM tensor rate")):
        rows = [r for r in nvidia.rated_tensor_peaks(_info(cc, 100, 1500)) if cc != (8, 6) or r["precision"] != "int8"]
        assert rows and all(r["gflops_per_s"] is None and words in r["derivation"] for r in rows), rows
    assert "fp8" not in [r["precision"] for r in nvidia.rated_tensor_peaks(_info((10, 0), 148, 1965))]
    no_clock = nvidia.rated_tensor_peaks(_info((8, 0), 108, 0))
    assert all(r["gflops_per_s"] is None and r["derivation"] == "no rated value: SM clock unknown" for r in no_clock)


def test_cubin_one_byte_short_is_completed():
    """CuPy's nvrtc.getCUBIN drops the image's last byte; complete_cubin restores it from the ELF headers."""
    import struct

    header = bytearray(0x40)
    header[:4] = b"\x7fELF"
    struct.pack_into("<QQ", header, 0x20, 0x100, 0x40)      # program headers at 0x100, sections at 0x40
    struct.pack_into("<HHHH", header, 0x36, 56, 2, 64, 3)   # 2 x 56-byte program headers, 3 x 64-byte sections
    image = bytes(header) + bytes(0x100 + 112 - 0x40)
    assert len(tc.complete_cubin(image[:-1])) == len(image) and tc.complete_cubin(image[:-1]) == image
    assert tc.complete_cubin(image) == image
    assert tc.complete_cubin(image[:-20]) == image[:-20]  # more than a terminator missing: left as it is
    assert tc.complete_cubin(b"not an elf") == b"not an elf"


def test_sass_verdict_without_the_tools_says_so(monkeypatch):
    monkeypatch.setattr(tc, "sass_tools", lambda: (None, None))
    verdict = tc.sass_verdict(SHAPES["fp16"], b"\x7fELF")
    assert verdict["ok"] is None and verdict["detail"].startswith("SASS not checked: cuobjdump and nvdisasm not found")


# ----------------------------------------------------------------------------- nvcc: PTX and SASS of every variant
ARCHS = ("sm_80", "sm_89", "sm_90", "sm_100", "sm_120")
ITER_SETS = ((64, 8), (16, 4), (8, 8))
# Every architecture the code offers a tensor roof on (nvcc 13 targets from sm_80): the SASS test compiles each.
SASS_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121")
CUOBJDUMP, NVDISASM_DIR = tc.sass_tools()


def needs_sass(f):
    f = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None or NVDISASM_DIR is None,
                           reason="needs nvcc and cuobjdump + nvdisasm (pip install nvidia-cuda-cuobjdump "
                                  "nvidia-cuda-nvdisasm) to read the SASS")(f)
    return pytest.mark.nvcc(f)


def _cc(arch: str) -> tuple[int, int]:
    digits = arch[3:].rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def _variants(arch: str, iter_sets=ITER_SETS) -> list[tuple[MmaShape, int, int]]:
    cc = _cc(arch)
    if arch.endswith("a"):
        return [(shape, iters, 1) for shape in WGMMA_SHAPES.values() for iters in {i for i, _ in iter_sets}]
    shapes = tc.shapes_for(cc) if arch != "sm_89" else [SHAPES["fp8"], SHAPES["int8"]]
    # sm_90's FP64 m16n8k16 first at the sets the backend builds it with (4), then the others asked for.
    own = {WIDE_DMMA: ((tc.DEFAULT_ITERS, tc.WIDE_DMMA_SETS), *iter_sets[1:])}
    return [(shape, iters, sets) for shape in shapes for iters, sets in own.get(shape, iter_sets)]


UNDEF = ("ERT_MMA_TYPE", "ERT_MMA_ITERS", "ERT_MMA_SETS", "ERT_NAME_SUFFIX", "ERT_MMA_OP", "ERT_SIGN", "ERT_ACC",
         "ERT_ACC_CONSTRAINT", "ERT_A_REGS", "ERT_B_REGS", "ERT_WGMMA_TYPE", "ERT_WGMMA_ITERS", "ERT_WGMMA_OP",
         "ERT_WGMMA_TAIL", "ERT_WG_SIGN", "ERT_WG_INT", "ERT_WG_C", "ERT_WG_ACC", "ERT_WG_A_BYTES", "ERT_WG_B_BYTES")


def _batch(variants, extra_defines=()) -> str:
    lines = []
    for i, (shape, iters, sets) in enumerate(variants):
        lines.append("\n".join(f"#undef {m}" for m in UNDEF))
        lines += [f"#define {d[2:].replace('=', ' ')}" for d in tc.compile_defines(shape, iters=iters, sets=sets)]
        lines += [f"#define {d[2:].replace('=', ' ')}" for d in extra_defines]
        lines.append(f"#define ERT_NAME_SUFFIX _v{i}")
        kernel = KERNEL.parent / tc.kernel_file(shape)
        lines.append(f"namespace v{i} {{\n#include \"{kernel}\"\n}}")
    return "\n".join(lines) + "\n"


def _nvcc(args, source: Path, out: Path):
    proc = subprocess.run([NVCC, "-std=c++17", *args, str(source), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, (out.read_text() if proc.returncode == 0 and out.suffix == ".ptx" else ""), proc.stderr


PTX_ARCHS = ARCHS + ("sm_90a",)


@background.job("cuda_tensor.ptx", fixture="ptx")
def _compile_ptx():
    """{arch: (rc, ptx, stderr)}: every variant for an arch in one batch, the batches in parallel."""
    if NVCC is None:
        return None
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {}
        for arch in PTX_ARCHS:
            source = Path(tmp) / f"{arch}.cu"
            source.write_text(_batch(_variants(arch)))
            futures[arch] = pool.submit(_nvcc, ("-ptx", f"-arch={arch}"), source, Path(tmp) / f"{arch}.ptx")
        return {arch: f.result() for arch, f in futures.items()}


@pytest.fixture(scope="module")
def ptx():
    """{arch: (rc, ptx, stderr)}, compiled in the background (tests/background.py)."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    return background.result("cuda_tensor.ptx")


def _entry(text: str, name: str) -> str:
    start = text.index(f".entry {name}(")
    following = text.find(".entry ", start + 1)
    return text[start:following if following > 0 else len(text)]


@needs_nvcc
@pytest.mark.parametrize("arch", PTX_ARCHS)
def test_every_variant_holds_its_mmas(ptx, arch):
    rc, text, err = ptx[arch]
    assert rc == 0, err[-2000:]
    assert f".target {arch}" in text
    for i, (shape, iters, sets) in enumerate(_variants(arch)):
        body = _entry(text, f"{tc.kernel_name(shape)}_v{i}")
        pattern = r"\bwgmma\.mma_async\.\S+" if shape.instruction == "wgmma" else r"\bmma\.sync\.aligned\.\S+"
        mmas = re.findall(pattern, body)
        # ERT_MMA_ITERS MMAs of the shape per trial: the trial loop is one loop, the MMAs unrolled in it.
        assert mmas == [shape.ptx] * iters, (shape.name, iters, sets, sorted(set(mmas)), len(mmas))
        assert len(re.findall(r"^\$L__BB\d+_\d+:", body, re.M)) <= 8  # no unrolled copies of the trial loop
        stores = re.findall(r"\bst\.global\.(?:v\d\.)?(f32|f64|u32|s32|b32)\b", body)
        stored = sum(int(m) if m else 1
                     for m in re.findall(r"\bst\.global\.(?:v(\d)\.)?(?:f32|f64|u32|s32|b32)\b", body))
        assert stored == sets * shape.acc_per_thread  # every accumulator stored: nothing dead
        # FP: st.global.f32 / .f64; INT8's s32 accumulators are stored as 32-bit integers (st.global.u32).
        assert set(stores) == ({"u32"} if shape.integer else {shape.acc_type})
        if shape.instruction == "wgmma":
            assert body.count("wgmma.commit_group.sync.aligned") == 1 and "fence.proxy.async" in body


# Built with every iteration set and ptxas -v: test_no_spills reads the registers and spills of the same cubins.
SPILL_ARCHS = ("sm_90", "sm_90a")


@background.job("cuda_tensor.cubins", fixture="compiled")
def _compile_cubins() -> tuple[dict[str, tuple[Path, str, list]], dict | None] | None:
    """{arch: (cubin, ptxas's stderr, its variants)}: every arch's variants in one cubin, the archs in parallel; at
    64 iterations per trial, but every iteration set on SPILL_ARCHS."""
    if NVCC is None:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="ert-test-cubins-"))
    variants = {arch: _variants(arch) if arch in SPILL_ARCHS else _variants(arch, ((64, 8),))
                for arch in SASS_ARCHS + ("sm_90a",)}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        jobs = {}
        for arch, batch in variants.items():
            source = tmp / f"{arch}.cu"
            source.write_text(_batch(batch))
            verbose = ("-Xptxas", "-v") if arch in SPILL_ARCHS else ()
            jobs[arch] = pool.submit(_nvcc, ("-cubin", f"-arch={arch}", *verbose), source, tmp / f"{arch}.cubin")
        out = {}
        for arch, job in jobs.items():
            rc, _, err = job.result()
            assert rc == 0, f"{arch}: {err[-2000:]}"
            out[arch] = (tmp / f"{arch}.cubin", err, variants[arch])
    return out, _sass_of(out)


def _sass_of(cubins: dict) -> dict | None:
    """{arch: {(shape, iters, sets): SASS text}} of every variant the code offers there (at 64 iterations); None
    without cuobjdump and nvdisasm."""
    if CUOBJDUMP is None or NVDISASM_DIR is None:
        return None
    env = {**os.environ, "PATH": NVDISASM_DIR + os.pathsep + os.environ.get("PATH", "")}
    out = {}
    for arch, (cubin, _, built) in cubins.items():
        listings = sass_by_function(CUOBJDUMP, cubin, env)
        out[arch] = {variant: listings[f"{tc.kernel_name(variant[0])}_v{built.index(variant)}"]
                     for variant in _variants(arch, ((64, 8),))}
    return out


@pytest.fixture(scope="module")
def compiled():
    """(cubins, their SASS), compiled and read in the background (tests/background.py); the cubins' folder removed
    after the module."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    out, listings = background.result("cuda_tensor.cubins")
    yield out, listings
    for cubin, _, _ in out.values():
        shutil.rmtree(cubin.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def cubins(compiled):
    return compiled[0]


@pytest.fixture(scope="module")
def sass(compiled):
    """{arch: {(shape, iters, sets): SASS text}} of every variant the code offers there (at 64 iterations)."""
    if compiled[1] is None:
        pytest.skip("needs cuobjdump and nvdisasm")
    return compiled[1]


@needs_sass
@pytest.mark.parametrize("arch", SASS_ARCHS + ("sm_90a",))
def test_sass_holds_one_native_tensor_instruction_per_counted_mma(sass, arch):
    """The FLOP count assumes one HMMA / DMMA / QMMA (HGMMA / QGMMA for wgmma) per MMA of the PTX: the SASS of
    every variant offered on every architecture holds exactly that many, and no other tensor instruction."""
    offered = {v[0].name for v in sass[arch]}
    if arch == "sm_90a":
        assert offered == {"fp16", "bf16", "tf32", "fp8", "int8"}
    else:
        assert ("fp8" in offered) == (arch in ("sm_89", "sm_120", "sm_121")), (arch, offered)
        assert "int8" in offered, (arch, offered)  # IMMA: every sm_80+ architecture (sm_89's batch: FP8, INT8)
    for (shape, iters, sets), text in sass[arch].items():
        verdict = tc.check_sass(shape, text, iters=iters)
        assert verdict.ok, (arch, shape.name, verdict.detail)
        counts = tc.tensor_instructions(text)
        assert sum(counts.values()) == iters and all(op.startswith(shape.sass + ".") for op in counts), counts
        expected = {"f16": "F32", "bf16": "BF16", "tf32": "TF32", "e4m3": "E4M3", "f64": "",
                    "s8": ".S8.S8"}[shape.input_type]
        assert all(expected in op for op in counts), (arch, counts)
        if shape.integer:  # nvcc 13.0: IMMA.16832.S8.S8 on every sm_80+ target, IGMMA.64x256x32.S8.S8 on sm_90a
            assert counts == {("IGMMA.64x256x32.S8.S8" if shape.instruction == "wgmma" else "IMMA.16832.S8.S8"):
                              iters}, (arch, counts)
        if shape.instruction == "wgmma":
            assert all(f".{shape.m}x{shape.n}x{shape.k}." in op for op in counts), counts
        if shape is WIDE_DMMA:  # sm_90 only: one native DMMA.16x8x16 per m16n8k16, none split into 8x8x4
            assert counts == {"DMMA.16x8x16": iters}, (arch, counts)
    assert (arch == "sm_90") == any(shape is WIDE_DMMA for shape, _, _ in sass[arch]), arch
    if arch == "sm_90":  # the small shape's 64 DMMA.8x8x4 are not the wide one's count, nor the reverse
        small = next(text for (shape, _, _), text in sass[arch].items() if shape is SHAPES["fp64"])
        assert not tc.check_sass(WIDE_DMMA, small).ok


@needs_sass
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_emulated_fp8_is_refused_by_the_sass_check(tmp_path, arch):
    """The issue's case: FP8 mma.sync on sm_90/sm_100 is 2 HMMA + 256 FADD for a trial's 64 MMAs (the emulated
    product folded); the kernel refuses to compile it, and forced through, the SASS check refuses it."""
    rc, _, err = _nvcc(("-ptx", f"-arch={arch}", "-DERT_MMA_TYPE=5"), KERNEL, tmp_path / "x.ptx")
    assert rc != 0 and "emulated by ptxas" in err
    shape = SHAPES["fp8"]
    rc, _, err = _nvcc(("-cubin", f"-arch={arch}", "-DERT_MMA_TYPE=5", "-DERT_TEST_EMULATED_FP8"), KERNEL,
                       tmp_path / "x.cubin")
    assert rc == 0, err
    verdict = tc.sass_verdict(shape, (tmp_path / "x.cubin").read_bytes())
    assert verdict["ok"] is False and "QMMA" in verdict["detail"] and "emulated or folded" in verdict["detail"]
    assert "QMMA" not in "".join(verdict["instructions"]) and 0 < sum(verdict["instructions"].values()) < 64


@needs_sass
def test_sass_verdict_reads_a_cubin_one_byte_short(tmp_path):
    """What the backend does on the GPU: the NVRTC image (one byte short through CuPy) completed, then counted."""
    shape = WGMMA_SHAPES["bf16"]
    source = tmp_path / "k.cu"
    source.write_text(_batch([(shape, 64, 1)]).replace("#define ERT_NAME_SUFFIX _v0", "#define ERT_NAME_SUFFIX"))
    rc, _, err = _nvcc(("-cubin", "-arch=sm_90a"), source, tmp_path / "k.cubin")
    assert rc == 0, err
    short = (tmp_path / "k.cubin").read_bytes()[:-1]
    assert tc.sass_verdict(shape, short)["ok"] is None  # cuobjdump refuses the short image
    verdict = tc.sass_verdict(shape, tc.complete_cubin(short))
    assert verdict["ok"] is True and verdict["instructions"] == {"HGMMA.64x256x16.F32.BF16": 64}, verdict


@needs_nvcc
@pytest.mark.parametrize("arch", SPILL_ARCHS)
def test_no_spills(cubins, arch):
    """mma.sync: no spills; wgmma: no spills and few enough registers for 2 warpgroups per SM (at most 3 fit)."""
    _, stderr, variants = cubins[arch]
    seen, registers, name = {}, {}, None
    for line in stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
        elif (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)) and name:
            seen[name] = int(m.group(1)) + int(m.group(2))
        elif (m := re.search(r"Used (\d+) registers", line)) and name:
            registers[name] = int(m.group(1))
    assert len(seen) == len(variants)
    assert all(spill == 0 for spill in seen.values()), seen
    # The first launch geometry is one block per SM of all its threads: with the sets the backend builds, one
    # such block fits an SM's 64K registers and two never do, so every SM runs exactly one.
    for i, (shape, _, sets) in enumerate(variants):
        if sets == tc.sets_of(shape):
            block = tc.tensor_launches(H100, shape)[0]["threads"]
            assert block == tc.threads_per_sm(shape)[0]
            used = registers[f"{tc.kernel_name(shape)}_v{i}"]
            assert used * block <= 65536 < 2 * used * block, (shape.name, shape.instruction, used, block)
    if arch == "sm_90a":
        per_sm = tc.WGMMA_THREADS_PER_SM
        assert all(r * per_sm <= 65536 and r * 384 <= 65536 for r in registers.values()), registers


@needs_nvcc
@pytest.mark.parametrize("arch, defines", [("sm_75", ()), ("sm_80", ("-DERT_MMA_TYPE=5",)),
                                           ("sm_86", ("-DERT_MMA_TYPE=5",)), ("sm_90", ("-DERT_MMA_TYPE=5",)),
                                           ("sm_100", ("-DERT_MMA_TYPE=5",)), ("sm_90", ("-DERT_MMA_TYPE=8",)),
                                           ("sm_80", ("-DERT_MMA_TYPE=7",)), ("sm_100", ("-DERT_MMA_TYPE=7",)),
                                           ("sm_75", ("-DERT_MMA_TYPE=6",)),
                                           ("sm_90", ("-DERT_MMA_ITERS=12", "-DERT_MMA_SETS=8"))])
def test_bad_arch_or_defines_are_refused(tmp_path, arch, defines):
    rc, _, err = _nvcc(("-ptx", f"-arch={arch}", *defines), KERNEL, tmp_path / "x.ptx")
    assert rc != 0 and "error" in err


@needs_nvcc
@pytest.mark.parametrize("arch, defines", [("sm_90", ()), ("sm_100a", ()), ("sm_89", ()),
                                           ("sm_90a", ("-DERT_WGMMA_TYPE=6",)), ("sm_90a", ("-DERT_WGMMA_ITERS=0",)),
                                           ("sm_90", ("-DERT_WGMMA_TYPE=5",))])
def test_wgmma_kernel_refuses_other_targets_and_bad_defines(tmp_path, arch, defines):
    rc, _, err = _nvcc(("-ptx", f"-arch={arch}", *defines), KERNEL.parent / tc.WGMMA_KERNEL_FILE, tmp_path / "x.ptx")
    assert rc != 0 and "error" in err
    if not defines:
        assert "sm_90a" in err


@needs_nvcc
def test_compiles_with_no_defines(tmp_path):
    rc, text, err = _nvcc(("-ptx", "-arch=sm_80"), KERNEL, tmp_path / "x.ptx")
    assert rc == 0, err
    assert len(re.findall(r"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32\b", text)) == tc.DEFAULT_ITERS
    rc, text, err = _nvcc(("-ptx", "-arch=sm_90a"), KERNEL.parent / tc.WGMMA_KERNEL_FILE, tmp_path / "w.ptx")
    assert rc == 0, err
    assert text.count(WGMMA_SHAPES["fp16"].ptx + " ") == tc.DEFAULT_ITERS


def _nvrtc_reason() -> str:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # no CuPy, or CuPy without its NVRTC library (the [ctk] extra brings it)
        return f"NVRTC is not loadable here ({type(exc).__name__}); the backend compiles with it on a GPU host"
    return ""


@pytest.mark.nvcc
@pytest.mark.skipif(bool(_nvrtc_reason()) or CUOBJDUMP is None, reason=_nvrtc_reason() or "needs cuobjdump")
@pytest.mark.parametrize("shape, cc", [*((s, (9, 0)) for s in WGMMA_SHAPES.values()),
                                       (SHAPES["fp16"], (8, 0)), (SHAPES["fp64"], (9, 0)),
                                       (SHAPES["fp8"], (8, 9)), (SHAPES["fp8"], (12, 0)),
                                       (SHAPES["int8"], (8, 0)), (SHAPES["int8"], (10, 0)),
                                       (WIDE_DMMA, (9, 0))],
                         ids=lambda x: _id(x) if isinstance(x, MmaShape) else f"sm_{x[0]}{x[1]}")
def test_nvrtc_builds_what_the_backend_loads(shape, cc):
    """CupyDevice.tensor_function's build without its GPU: NVRTC with the backend's options for the target
    (sm_90a for wgmma), the image completed, its SASS counted."""
    source = (KERNEL.parent / tc.kernel_file(shape)).read_text()  # the worktree's (ert.kernels may be installed)
    cubin = cuda_device.nvrtc_cubin(source, tc.compile_defines(shape) + cuda_device.COMPILE_OPTIONS,
                                 tc.target_arch(shape, cc))
    verdict = tc.sass_verdict(shape, tc.complete_cubin(cubin))
    assert verdict["ok"] is True, verdict
    assert sum(verdict["instructions"].values()) == tc.DEFAULT_ITERS
    if shape.instruction == "wgmma":
        with pytest.raises(RuntimeError, match="needs the architecture-specific target sm_90a"):
            cuda_device.nvrtc_cubin(source, tc.compile_defines(shape), "sm_90")


# ----------------------------------------------------------------------------- on a GPU (never run yet)
def _gpu_shape(name: str, instruction: str):
    """(cupy, the device, shape), skipping where this GPU does not measure that kernel."""
    import cupy

    device = cuda_device.CupyDevice(0)
    cc = device.info.compute_capability
    # "m16n8k16" names sm_90's FP64 mma.sync beside m8n8k4 ("mma.sync").
    offered = {("m16n8k16" if s is WIDE_DMMA else s.instruction): s for s in nvidia.tensor_variants(cc, name)}
    if instruction not in offered:
        pytest.skip(f"{name} {instruction} is not measured on {device.info.arch}: "
                    f"{nvidia.no_tensor_why(cc, name) or 'another instruction is'}")
    return cupy, device, offered[instruction]


def _run(cupy, device, shape, *, blocks, threads, trials):
    """One timed launch of the backend's own build (NVRTC cubin, SASS counted); (accumulators, seconds)."""
    kernel, sass = device.tensor_function(shape)
    assert sass["ok"] is not False, sass["detail"]
    sets = tc.sets_of(shape)
    out = cupy.zeros(blocks * threads * sets * shape.acc_per_thread, dtype=shape.acc_dtype)
    a, b = tc.operand_values(shape)
    args = (out, np.int64(trials), np.uint64(tc.operand_word(shape, a)), np.uint64(tc.operand_word(shape, b)))
    kernel((blocks,), (threads,), args)  # warm-up
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    kernel((blocks,), (threads,), args)
    stop.record()
    stop.synchronize()
    seconds = cupy.cuda.get_elapsed_time(start, stop) / 1e3
    return out.get().reshape(blocks * threads, sets, shape.acc_per_thread), seconds


GPU_VARIANTS = [(s.name, s.instruction) for s in ALL_SHAPES if s is not WIDE_DMMA] + [("fp64", "m16n8k16")]


@needs_gpu
@pytest.mark.parametrize("name, instruction", GPU_VARIANTS)
def test_gpu_kernel_leaves_the_replayed_values(name, instruction):
    cupy, device, shape = _gpu_shape(name, instruction)
    for trials in (1, 2, 5):
        got, _ = _run(cupy, device, shape, blocks=2, threads=128, trials=trials)
        assert np.array_equal(got, tc.replay(shape, threads=256, trials=trials)), (name, instruction, trials)


def _run_warm(cupy, device, shape, *, blocks, threads, seconds=0.05, warm_seconds=0.25):
    """The peak timing: the kernel itself run for ``warm_seconds`` first (a cold GPU sits at a low clock and
    a 2 ms launch never raises it), then one launch sized to about ``seconds``, with the SM clock read from
    NVML while it runs.  (accumulators, seconds, trials, median SM clock in MHz or None without NVML)."""
    import statistics
    import time

    trials = 20
    _, took = _run(cupy, device, shape, blocks=blocks, threads=threads, trials=trials)
    per_trial = max(took / trials, 1e-7)
    _run(cupy, device, shape, blocks=blocks, threads=threads, trials=max(1, int(warm_seconds / per_trial)))
    kernel, _ = device.tensor_function(shape)
    trials = max(2, int(seconds / per_trial)) // 2 * 2 + 1  # odd: the replay then differs from the start
    sets = tc.sets_of(shape)
    out = cupy.zeros(blocks * threads * sets * shape.acc_per_thread, dtype=shape.acc_dtype)
    a, b = tc.operand_values(shape)
    args = (out, np.int64(trials), np.uint64(tc.operand_word(shape, a)), np.uint64(tc.operand_word(shape, b)))
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    kernel((blocks,), (threads,), args)
    stop.record()
    clocks = []
    while not stop.done:
        if device.sm_clock_mhz is not None:
            clocks.append(device.sm_clock_mhz())
        time.sleep(0.005)
    stop.synchronize()
    seconds = cupy.cuda.get_elapsed_time(start, stop) / 1e3
    clock = statistics.median(clocks) if clocks else None
    return out.get().reshape(blocks * threads, sets, shape.acc_per_thread), seconds, trials, clock


@needs_gpu
@pytest.mark.parametrize("name, instruction", GPU_VARIANTS)
def test_gpu_reaches_the_rated_tensor_peak(name, instruction):
    """Each roof kernel at >= 0.8 of rated at the SM clock NVML read during the timed launch (the clock warmed
    first), in its first geometry (one block per SM: every SM alike); never above rated at the maximum clock."""
    cupy, device, shape = _gpu_shape(name, instruction)
    info = device.info
    rated = {r["precision"]: r for r in nvidia.rated_tensor_peaks(info)}[shape.name]
    if rated["gflops_per_s"] is None:
        pytest.skip(f"no rated figure: {rated['derivation']}")
    note = nvidia.mma_sync_note(info.compute_capability, shape.name) if shape.instruction == "mma.sync" else ""
    launch = tc.tensor_launches(info, shape)[0]
    blocks, threads = launch["blocks"], launch["threads"]
    assert blocks == info.sm_count  # one block per SM
    got, seconds, trials, clock = _run_warm(cupy, device, shape, blocks=blocks, threads=threads)
    assert np.array_equal(got, tc.replay(shape, threads=blocks * threads, trials=trials))
    gflops = tc.flops_per_launch(shape, blocks=blocks, threads_per_block=threads, trials=trials) / seconds / 1e9
    at_clock = rated["gflops_per_s"] * (clock or rated["clock_mhz"]) / rated["clock_mhz"]
    unit = "GIOP/s" if shape.integer else "GFLOP/s"
    said = (f"{shape.name} {shape.instruction} m{shape.m}n{shape.n}k{shape.k}: {gflops:.0f} {unit} = "
            f"{gflops / at_clock:.3f} x rated at {clock or rated['clock_mhz']} MHz "
            f"({'measured' if clock else 'NVML absent: the maximum clock'}), {seconds * 1e3:.1f} ms")
    print(said)
    assert gflops <= 1.02 * rated["gflops_per_s"], said  # a roof above rated counts FLOPs not done
    if note:  # mma.sync on sm_90 (or sm_100): not the roof; the guard applies to wgmma (tcgen05 not written)
        pytest.skip(f"{note}: {said}")
    if shape is SHAPES["fp64"] and WIDE_DMMA.supported(info.compute_capability):
        pytest.skip(f"FP64 m8n8k4 beside m16n8k16 on sm_90 (the faster is the roof): {said}")
    # The issue's threshold: wgmma on sm_90, mma.sync where it is the full-rate instruction.
    assert gflops >= 0.8 * at_clock, said


# ----------------------------------------------------------------------------- wired into ert-run (host logic)
from ert.config.schema import from_dict  # noqa: E402
from ert.errors import ErtError  # noqa: E402
from ert.spec import KernelSpec  # noqa: E402

# A small Hopper (4 SMs, 1980 MHz) as CuPy reports it, so the emulated outputs stay small.
SMALL_H100 = {"name": "NVIDIA H100 (4 SMs, emulated)", "major": 9, "minor": 0, "multiProcessorCount": 4,
              "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 5120, "l2CacheSize": 50 << 20,
              "totalGlobalMem": 85045870592, "maxThreadsPerMultiProcessor": 2048, "sharedMemPerMultiprocessor": 233472}
SMALL_A100 = {**SMALL_H100, "name": "NVIDIA A100 (4 SMs, emulated)", "major": 8, "clockRate": 1410000}
SMALL_B200 = {**SMALL_H100, "name": "NVIDIA B200 (4 SMs, emulated)", "major": 10, "clockRate": 1965000}


class EmulatedTensorGpu:
    """CupyDevice's tensor interface over numpy: the kernels' arithmetic done MMA by MMA, a formula for time.

    Each emulated launch does the kernel's MMAs on one warp's accumulators as
    matrix products in the accumulator type (as _emulate; a wgmma warpgroup's
    four warps hold the same values), for the trials of the launch; two
    consecutive trials cancel exactly (B's sign flips), so trials beyond the
    first two of the same parity are skipped: the values are those the loop
    would give (test_replay_matches_an_emulation_bit_exactly runs the whole
    loop).  Time: ``fraction`` of the rated rate at ``clock_mhz`` for wgmma and
    full-rate mma.sync, ``mma_sync_fraction`` for mma.sync where it is below
    the architecture's rate (sm_90: reported near half).  ``drop_mmas`` makes
    the emulated kernel skip one MMA per trial (a broken kernel); ``sass_ok``
    is the SASS verdict its build gets (False: ptxas emulated or folded).
    """

    def __init__(self, props, *, fraction=0.9, mma_sync_fraction=0.5, clock_mhz=1755, drop_mmas=False,
                 sass_ok=True, small_dmma_fraction=None):
        from ert.backends import cuda_host as host

        self.info = host.device_info(props)
        self.index, self.nvml, self.versions = 0, {}, {"cupy": "emulated"}
        self.device_id = "GPU-emulated-tensor"
        self.fraction, self.mma_sync_fraction = fraction, mma_sync_fraction
        self.clock, self.drop_mmas, self.sass_ok = clock_mhz, drop_mmas, sass_ok
        self.small_dmma_fraction = small_dmma_fraction  # FP64 m8n8k4's own rate (the issue: maybe half on sm_90)
        self.sm_clock_mhz = lambda: clock_mhz
        self.launched: list[dict] = []
        self.compiled: list[tuple] = []

    def tensor_function(self, shape):
        self.compiled.append((tc.kernel_file(shape), tc.target_arch(shape, self.info.compute_capability)))
        found = f"64 {shape.sass}.emulated" if self.sass_ok else "2 HMMA.16816.F32"
        detail = (f"SASS holds {found}: one {shape.sass} per {shape.instruction} as counted" if self.sass_ok else
                  f"SASS holds {found} where 64 {shape.sass} ({shape.instruction} {shape.input_type}) were counted: "
                  f"ptxas emulated or folded the MMAs")
        return ("mma", shape), {"ok": self.sass_ok, "detail": detail, "instructions": {}}

    def functions(self, spec):
        return {"spin": ("spin", spec)}

    def zeros(self, count, dtype):
        return np.zeros(count, dtype=dtype)

    def occupancy(self, function, threads):
        return 2048 // threads

    def spin(self, function, *, seconds):
        self.launched.append({"kind": "spin"})

    def launch(self, function, *, blocks, threads, args):
        kind, shape = function
        out, trials = args[0], int(args[1])
        a, b = tc.operand_values(shape)
        assert int(args[2]) == tc.operand_word(shape, a) and int(args[3]) == tc.operand_word(shape, b)
        assert threads % shape.threads_per_mma == 0
        iters = tc.DEFAULT_ITERS - (1 if self.drop_mmas else 0)
        sets = tc.sets_of(shape)
        warp = _emulate(shape, trials=min(trials, 2 + trials % 2), iters=iters, sets=sets)
        out[:] = np.tile(warp, (blocks * threads // 32, 1, 1)).reshape(-1)
        self.launched.append({"kind": kind, "blocks": blocks, "threads": threads, "trials": trials,
                              "instruction": shape.instruction})

    def timed_launch(self, function, *, blocks, threads, args):
        self.launch(function, blocks=blocks, threads=threads, args=args)
        shape = function[1]
        # An unrated architecture (Ada) times at Hopper's per-SM rates: only the values are checked there.
        rates = nvidia.TENSOR_FLOPS_PER_CYCLE_PER_SM
        per_sm = rates.get(self.info.compute_capability, rates[(9, 0)])[shape.name]
        below = shape.instruction == "mma.sync" and nvidia.mma_sync_note(self.info.compute_capability, shape.name)
        fraction = self.mma_sync_fraction if below else self.fraction
        if shape is SHAPES["fp64"] and self.small_dmma_fraction is not None:
            fraction = self.small_dmma_fraction
        rate = fraction * self.info.sm_count * self.clock * 1e6 * per_sm
        return 2e-6 + tc.flops_per_launch(shape, blocks=blocks, threads_per_block=threads, trials=int(args[1])) / rate

    def read(self, array, lo, hi):
        return np.array(array[lo:hi])

    def write(self, array, lo, values):
        array[lo:lo + values.size] = values.astype(array.dtype)

    def close(self):
        pass


def _tensor_backend(props=SMALL_H100, config=None, **kw):
    return cuda_mod.CudaBackend(options=(config or from_dict({"backend": "cuda"})).cuda,
                                device=EmulatedTensorGpu(props, **kw))


def _plan(cfg, backend):
    from ert.measure.plan import plan

    return plan(cfg, workers=1, granule_elements_of=backend.granule_elements, launches_of=backend.launches,
                tensor_of=backend.tensor_plan, tensor_variants_of=backend.tensor_variants)


TENSOR_TIMING = {"min_seconds": 2e-4, "repeats": 3, "max_remeasure": 0}


def test_config_tensor_key_is_validated():
    assert from_dict({"backend": "cuda", "tensor": ["fp16", "fp8"]}).tensor == ["fp16", "fp8"]
    assert from_dict({}).tensor == []  # never in the default run
    for bad, words in (({"tensor": ["fp4"]}, "tensor[0]"), ({"tensor": ["fp16", "fp16"]}, "values repeat"),
                       ({"tensor": "fp16"}, "tensor"),
                       ({"backend": "numba-cpu", "tensor": ["fp16"]}, "cuda backend only")):
        with pytest.raises(ErtError) as err:
            from_dict(bad, source="x.yaml")
        assert words in str(err.value) and "x.yaml" in str(err.value) and "\n" not in str(err.value)


def test_tensor_spec_and_record_shape():
    spec = KernelSpec("fp16", 4096, True, "rw", pipe="tensor")
    assert spec.key == "fp16-tensor-mma-f4096" and spec.bytes_per_element == 0
    assert spec.to_dict()["pipe"] == "tensor" and KernelSpec.from_dict(spec.to_dict()) == spec
    assert "instruction" not in spec.to_dict()  # mma.sync records as before issue 23
    wg = tc.spec_of(WGMMA_SHAPES["fp8"])
    assert wg.key == "fp8-tensor-wgmma-f1048576" and wg.to_dict()["instruction"] == "wgmma"
    assert KernelSpec.from_dict(wg.to_dict()) == wg and tc.shape_of(wg) is WGMMA_SHAPES["fp8"]
    assert "pipe" not in KernelSpec("fp16", 2, True).to_dict()  # vector records unchanged
    for bad in (dict(precision="int32"), dict(fma=False), dict(flops_per_element=3000), dict(instruction="tcgen05")):
        with pytest.raises(ValueError):
            KernelSpec(**{"precision": "fp16", "flops_per_element": 4096, "fma": True, "pipe": "tensor", **bad})
    with pytest.raises(ValueError, match="only a tensor kernel"):
        KernelSpec("fp32", 2, True, instruction="wgmma")


def test_plan_puts_tensor_points_last_with_every_geometry():
    cfg = from_dict({"backend": "cuda", "precisions": ["fp32"], "flops_per_element": [1],
                     "working_set": {"min_bytes": 1 << 16, "max_bytes": 1 << 17, "growth": 2.0},
                     "tensor": ["fp16", "fp64"]})
    backend = _tensor_backend(config=cfg)
    points = _plan(cfg, backend)
    tensor = [p for p in points if p.spec.tensor]
    # On sm_90: fp16 by wgmma (2 geometries) then by mma.sync (3); fp64 by mma.sync only (no wgmma form), in
    # both DMMA shapes, m16n8k16 (3) then m8n8k4 (3).
    assert points[-len(tensor):] == tensor and len(tensor) == 2 + 3 + 3 + 3
    assert [p.spec.key for p in tensor[::1]][:3] == ["fp16-tensor-wgmma-f524288"] * 2 + ["fp16-tensor-mma-f4096"]
    wg = tensor[:2]
    # 4 SMs x 256 threads = 8 warpgroups, 64 wgmmas each per trial; one block of 256 per SM first, then 128.
    assert {p.elements_per_thread for p in wg} == {8 * 64}
    assert [p.launch_dict() for p in wg] == [{"blocks": 4, "threads": 256}, {"blocks": 8, "threads": 128}]
    assert wg[0].wss_bytes == 1024 * 128 * 4  # 1024 threads x 128 f32 accumulators
    mma = [p for p in tensor if p.spec.instruction == ""]
    # 4 SMs x 1024 threads = 128 warps, 64 MMAs each per trial; one block of 1024 per SM first, then 256, 128.
    assert {p.elements_per_thread for p in mma if p.spec.precision == "fp16"} == {128 * 64}
    assert [p.launch_dict() for p in mma[:3]] == [{"blocks": 4, "threads": 1024}, {"blocks": 16, "threads": 256},
                                                  {"blocks": 32, "threads": 128}]
    fp64 = [p for p in tensor if p.spec.precision == "fp64"]
    # m16n8k16: 4 SMs x 512 threads = 64 warps x 64 MMAs; 2048 threads x 4 sets x 4 f64 accumulators x 8 bytes.
    assert [p.spec.flops_per_element for p in fp64] == [4096] * 3 + [512] * 3
    assert [p.launch_dict() for p in fp64[:3]] == [{"blocks": 4, "threads": 512}, {"blocks": 8, "threads": 256},
                                                   {"blocks": 16, "threads": 128}]
    assert fp64[0].elements_per_thread == 64 * 64 and fp64[0].wss_bytes == 2048 * 4 * 4 * 8
    assert fp64[0].id == "fp64-tensor-mma-f4096-w262144-b4-t512"
    # m8n8k4: 4096 threads x 8 sets x 2 FP64 accumulators x 8 bytes.
    assert fp64[3].wss_bytes == 4096 * 8 * 2 * 8 == 524288 and fp64[3].id == "fp64-tensor-mma-f512-w524288-b4-t1024"
    # An A100 measures mma.sync only.
    a100 = [p for p in _plan(cfg, _tensor_backend(SMALL_A100, config=cfg)) if p.spec.tensor]
    assert len(a100) == 6 and all(p.spec.instruction == "" for p in a100)
    from ert.measure.plan import plan
    with pytest.raises(ErtError, match="cuda backend only"):
        plan(cfg, workers=1, granule_elements_of=backend.granule_elements)


def test_precision_policy_keeps_fp8_only_where_native_and_refuses_a_backend_without_tensor_cores():
    from ert.measure.precisions import supported_precisions

    cfg = from_dict({"backend": "cuda", "tensor": ["fp16", "fp8"]})
    kept, warning = supported_precisions(cfg, _tensor_backend(SMALL_A100, config=cfg))
    assert kept.tensor == ["fp16"] and "fp8 mma.sync needs sm_89" in warning and "sm_80" in warning
    kept, warning = supported_precisions(cfg, _tensor_backend(SMALL_H100, config=cfg))
    assert kept.tensor == ["fp16", "fp8"] and warning is None  # FP8 through wgmma
    kept, warning = supported_precisions(cfg, _tensor_backend(SMALL_B200, config=cfg))
    assert kept.tensor == ["fp16"] and "no FP8 tensor roof" in warning and "emulates it" in warning \
        and "tcgen05" in warning and "\n" not in warning
    backend = _tensor_backend(SMALL_H100, config=cfg)
    assert not backend.supports(KernelSpec("fp8", 8192, True, pipe="tensor"))  # emulated mma.sync: never measured
    assert backend.supports(tc.spec_of(WGMMA_SHAPES["fp8"]))
    assert not _tensor_backend(SMALL_A100).supports(tc.spec_of(WGMMA_SHAPES["fp16"]))

    class NoTensor:
        name = "numba-cpu"

        def supports(self, spec):
            return True

    with pytest.raises(ErtError, match="numba-cpu backend has no tensor cores"):
        supported_precisions(from_dict({"tensor": ["fp16"]}), NoTensor())


@pytest.mark.parametrize("shape", [*WGMMA_SHAPES.values(), *SHAPES.values(), WIDE_DMMA], ids=_id)
def test_backend_checks_every_accumulator(shape):
    props = SMALL_H100 if shape.supported((9, 0)) else {**SMALL_H100, "major": 8, "minor": 9}
    backend = _tensor_backend(props)
    spec = tc.spec_of(shape)
    mmas, _, launches = backend.tensor_plan(spec)
    backend.prepare(spec, elements_per_thread=mmas, launch=launches[1])
    assert backend._dev.compiled[-1] == (tc.kernel_file(shape), "sm_90a" if shape.instruction == "wgmma" else
                                         f"sm_{props['major']}{props['minor']}")
    info = backend.point_info()
    assert info["instruction"] == shape.instruction and info["mma"] == shape.ptx and info["sass"]["ok"] is True
    assert ("note" in info) == (shape.instruction == "mma.sync" and props is SMALL_H100 and shape.name != "fp64")
    for trials in (1, 4, 7):
        backend.run(trials)
        result = backend.check()
        assert result.ok and f"replay of {trials} trial(s)" in result.detail, result.detail
    backend.corrupt_for_test()
    assert not backend.check().ok
    broken = _tensor_backend(props, drop_mmas=True)
    broken.prepare(spec, elements_per_thread=mmas, launch=launches[0])
    broken.run(3)
    result = broken.check()
    assert not result.ok and "differ from the replay of 3 trial(s)" in result.detail
    # Right values, wrong SASS (an emulated or folded MMA): the point fails its check all the same.
    emulated = _tensor_backend(props, sass_ok=False)
    emulated.prepare(spec, elements_per_thread=mmas, launch=launches[0])
    emulated.run(3)
    result = emulated.check()
    assert not result.ok and "emulated or folded" in result.detail


def test_a_tensor_run_becomes_tensor_ceilings_rated_at_the_measured_clock(tmp_path):
    """The driver, raw.jsonl, build and the schema over an emulated H100: wgmma at 90 % of the rate at 1755 MHz,
    mma.sync at 50 % (below Hopper's wgmma rate, labelled so), FP64 mma.sync (DMMA) m16n8k16 at 90 % and m8n8k4
    at 45 %: the faster shape is the FP64 roof."""
    from ert.records import ceilings_io
    from ert.analysis.ceilings import build
    from ert.measure.comm import SerialComm
    from ert.measure.driver import run_sweep
    from ert.measure.metadata import run_header
    from ert.records.rawio import read_raw
    from ert.records.rawlog import RawLog

    cfg = from_dict({"backend": "cuda", "precisions": ["fp32"], "flops_per_element": [1], "threads": 1,
                     "working_set": {"min_bytes": 1 << 16, "max_bytes": 1 << 16},
                     "tensor": ["fp16", "bf16", "tf32", "fp64", "fp8", "int8"], "timing": TENSOR_TIMING})
    backend = _tensor_backend(config=cfg, small_dmma_fraction=0.45)
    points = [p for p in _plan(cfg, backend) if p.spec.tensor]
    header = run_header(cfg, backend=backend, comm=SerialComm(), placement=None, rank_warnings=[],
                        planned_points=len(points))
    log = RawLog.open(tmp_path, header=header, writes=True)
    result = run_sweep(config=cfg, points=points, log=log, backend=backend, comm=SerialComm())
    log.close()
    # wgmma: fp16, bf16, tf32, fp8, int8 x 2 geometries; mma.sync: fp16, bf16, tf32, fp64 (two shapes), int8 x 3
    # (no fp8: emulated).
    assert result.measured_now == 5 * 2 + 6 * 3
    raw = read_raw(tmp_path / "raw.jsonl")
    assert all(r["valid"] and r["spec"]["pipe"] == "tensor" and r["device"]["sm_clock_mhz"]["max"] == 1755
               for r in raw.points)
    doc = build(raw)
    ceilings_io.write_ceilings(doc, tmp_path / "ceilings.json")  # validated against the schema on write
    doc = ceilings_io.load_ceilings(tmp_path / "ceilings.json")
    assert doc["schema_version"] == ceilings_io.SCHEMA_VERSION and doc["ceilings"]["memory"] == []
    tensor = {(c["precision"], c["instruction"]): c for c in doc["ceilings"]["compute"]}
    assert set(tensor) == {("fp64", "mma.sync"), ("fp16", "wgmma"), ("fp16", "mma.sync"), ("bf16", "wgmma"),
                           ("bf16", "mma.sync"), ("tf32", "wgmma"), ("tf32", "mma.sync"), ("fp8", "wgmma"),
                           ("int8", "wgmma"), ("int8", "mma.sync")}
    order = list(tensor)
    assert order[:3] == [("fp64", "mma.sync"), ("fp16", "wgmma"), ("fp16", "mma.sync")]  # PRECISION_ORDER first
    assert all(order.index((p, "wgmma")) < order.index((p, "mma.sync")) for p in ("bf16", "tf32"))
    fp16 = tensor["fp16", "wgmma"]
    assert (fp16["pipe"], fp16["input_type"], fp16["accumulate"], fp16["mma_shape"], fp16["flops_per_mma"],
            fp16["fma"], fp16["unit"]) == ("tensor", "f16", "f32", "m64n256k16", 524288, True, "GFLOP/s")
    assert tensor["fp16", "mma.sync"]["mma_shape"] == "m16n8k16"
    assert tensor["fp64", "mma.sync"]["accumulate"] == "f64" and tensor["fp8", "wgmma"]["input_type"] == "e4m3"
    # The FP64 roof is the faster DMMA shape, named (the slower m8n8k4 points stay in raw.jsonl).
    assert (tensor["fp64", "mma.sync"]["mma_shape"], tensor["fp64", "mma.sync"]["flops_per_mma"]) == ("m16n8k16", 4096)
    assert {r["device"]["mma"] for r in raw.points if r["spec"]["precision"] == "fp64"} == \
        {WIDE_DMMA.ptx, SHAPES["fp64"].ptx}
    # INT8: integer operations, GIOP/s (the integer roofs' rule: the value in giops_per_s and gflops_per_s).
    for instruction, shape, per_mma in (("wgmma", "m64n256k32", 1048576), ("mma.sync", "m16n8k32", 8192)):
        c = tensor["int8", instruction]
        assert (c["unit"], c["input_type"], c["accumulate"], c["mma_shape"], c["flops_per_mma"]) == \
            ("GIOP/s", "s8", "s32", shape, per_mma)
        assert c["giops_per_s"] == c["gflops_per_s"] and "tensor integer op/cycle/SM" in c["rated"]["derivation"]
    assert all(c["unit"] == "GFLOP/s" and "giops_per_s" not in c for (p, _), c in tensor.items() if p != "int8")
    for (name, instruction), c in tensor.items():
        # 4 SMs x 1755 MHz x the per-SM rate; the emulated GPU runs at 90 % (50 % for sm_90's mma.sync).
        per_sm = nvidia.TENSOR_FLOPS_PER_CYCLE_PER_SM[(9, 0)][name]
        assert c["rated"]["gflops_per_s"] == pytest.approx(4 * 1755e6 * per_sm / 1e9, abs=0.1)
        below = instruction == "mma.sync" and name != "fp64"
        assert (0.45 < c["rated"]["ratio"] <= 0.5) if below else (0.85 < c["rated"]["ratio"] <= 0.9), (name, c)
        assert c.get("note") == ("mma.sync, below Hopper's wgmma rate" if below else None)
        assert "1755 MHz (SM clock measured by NVML" in c["rated"]["derivation"]
        assert c["evidence"]["point_id"].startswith(f"{name}-tensor-{'wgmma' if instruction == 'wgmma' else 'mma'}-")
        assert c["sass"].startswith("SASS holds 64 ")
    assert not any("still rose" in w for w in doc["warnings"])
    # The labelled mma.sync roofs are below rated, and said so; the consumers name the instruction.
    below = [w for w in doc["warnings"] if "below Hopper's wgmma rate" in w]
    assert sorted(w.split(":")[0] for w in below) == [f"{p} tensor (mma.sync) peak"
                                                      for p in ("bf16", "fp16", "int8", "tf32")]
    int8_below = next(w for w in below if w.startswith("int8"))
    assert int8_below.count("GIOP/s") == 2 and "GFLOP/s" not in int8_below
    assert not any("wgmma) peak" in w for w in doc["warnings"]), doc["warnings"]
    from ert.consumers import roofs as roofs_mod
    from ert.consumers.report_model import Report
    from ert.consumers.terminal.report import _compute_section

    shown = _compute_section(Report(doc))
    assert ("Tensor-core compute (warp-level MMA, warpgroup wgmma on Hopper; a multiply-add is 2 FLOPs; int8: 2 "
            "integer ops, GIOP/s)") in shown
    assert sum("m64n256k16 wgmma" in line for line in shown) == 2  # fp16 and bf16
    assert "  fp16 m16n8k16: mma.sync, below Hopper's wgmma rate" in shown
    # A unit column: GIOP/s on the int8 rows, GFLOP/s on the others; int8 is not listed as a vector integer roof.
    header = next(line for line in shown if line.lstrip().startswith("precision") and "unit" in line)
    rows = [line.split() for line in shown[shown.index(header) + 1:]
            if line.lstrip().startswith(("int8 ", "fp", "bf", "tf")) and "/s" in line]
    assert {r[0]: r[r.index("GIOP/s") if "GIOP/s" in r else r.index("GFLOP/s")] for r in rows} == {
        "fp64": "GFLOP/s", "fp16": "GFLOP/s", "bf16": "GFLOP/s", "tf32": "GFLOP/s", "fp8": "GFLOP/s",
        "int8": "GIOP/s"}
    assert not any(line.startswith("Integer compute") for line in shown)
    from ert.consumers.terminal.notes import Notes
    from ert.consumers.terminal.report import _rated_section

    rated_rows = [line for line in _rated_section(Report(doc), Notes(doc, verbose=True, width=100))
                  if "tensor peak" in line]
    assert sum("int8 tensor peak GIOP/s" in line for line in rated_rows) == 2  # wgmma and mma.sync
    assert not any("int8" in line and "GFLOP/s" in line for line in rated_rows)
    int8_roof = roofs_mod.tensor_roof(doc, "int8")
    assert int8_roof.unit == "GIOP/s" and int8_roof.value == tensor["int8", "wgmma"]["giops_per_s"]
    assert roofs_mod.tensor_roof(doc, "fp8").unit == "GFLOP/s" and roofs_mod.integer_roof(doc, "int8") is None

    roof = roofs_mod.tensor_roof(doc, "fp16")
    assert roof.entry["instruction"] == "wgmma" and roof.name == "FP16 tensor (wgmma m64n256k16, f32 accumulate)"
    from ert.consumers.compare.compare import comparison_rows as compare_rows

    labels = [r.label for r in compare_rows([doc, doc]) if "fp16 tensor" in r.label]
    assert labels == ["fp16 tensor m16n8k16, f32 accumulate peak", "fp16 tensor wgmma m64n256k16, f32 accumulate peak"]
    units = {r.label: r.unit for r in compare_rows([doc, doc]) if "tensor" in r.label}
    assert units["int8 tensor wgmma m64n256k32, s32 accumulate peak"] == "GIOP/s"
    assert units["fp8 tensor wgmma m64n256k32, f32 accumulate peak"] == "GFLOP/s"
    # ERT's JSON export: an integer roof is no FLOP row; INT8 Tensor under INTEGER_GIOPS, its shape in TENSOR.
    from ert.consumers.export.export import to_csv, to_ert

    hbm = {"level": "HBM", "precision": "fp32", "access": "rw", "gbytes_per_s": 3000.0, "spread": 0.01,
           "wss_bytes": [1 << 30, 1 << 31], "n_points": 3, "flops_per_element": 1}
    exported = to_ert({**doc, "ceilings": {**doc["ceilings"], "memory": [hbm]}})["empirical"]["gflops"]
    assert not any(row[0].startswith("INT8") for row in exported["data"])
    assert exported["metadata"]["INTEGER_GIOPS"]["INT8 Tensor"] == round(int8_roof.value, 2)
    assert exported["metadata"]["TENSOR"]["INT8 Tensor"]["unit"] == "GIOP/s"
    assert any(row[0] == "FP8 Tensor GFLOPs" for row in exported["data"])
    import csv

    csv_units = {(row[3], row[7]) for row in list(csv.reader(to_csv(doc).splitlines()))[1:]}
    assert ("int8", "GIOP/s") in csv_units and ("int8", "GFLOP/s") not in csv_units and ("fp8", "GFLOP/s") in csv_units


def test_tensor_points_above_the_rated_peak_are_invalid(tmp_path):
    from ert.analysis.rated import invalidate_above_rated, scaled_rated

    backend = _tensor_backend()
    meta = {"backend_info": backend.describe(), "ranks": 1}
    rated = scaled_rated(meta, threads_per_rank=1)
    peak = rated["tensor"]["fp16"]["gflops_per_s"]  # 4 x 1980 MHz x 4096 = 32440 GFLOP/s
    assert peak == pytest.approx(32440.3, abs=0.1)
    for spec, what in ((KernelSpec("fp16", 4096, True, pipe="tensor"), "fp16 tensor GFLOP/s"),
                       (tc.spec_of(WGMMA_SHAPES["fp16"]), "fp16 tensor (wgmma) GFLOP/s"),
                       (tc.spec_of(WGMMA_SHAPES["int8"]), "int8 tensor (wgmma) GIOP/s")):
        peak = rated["tensor"][spec.precision]["gflops_per_s"]
        mmas = 8192
        seconds = mmas * spec.flops_per_element * 10 / (1.2 * peak * 1e9)
        rec = {"id": "x", "spec": spec.to_dict(), "elements": mmas, "trials": 10, "valid": True,
               "seconds": {"min": seconds, "median": seconds, "max": seconds}}
        out, warnings = invalidate_above_rated([rec], rated)
        assert not out[0]["valid"] and what in warnings[0], warnings


def test_ert_run_refuses_tensor_on_a_cpu_backend(tmp_path):
    from conftest import run_cmd

    config = tmp_path / "t.yaml"
    config.write_text("backend: numba-cpu\ntensor: [fp16]\n")
    proc = run_cmd("ert-run", str(config), "--out", str(tmp_path / "out"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "t.yaml" in line and "cuda backend only" in line


@needs_gpu
def test_gpu_ert_run_gives_checked_tensor_roofs_at_0_8_of_rated(tmp_path):
    """ert-run configs/gpu-tensor.yaml, tensor part only: every tensor roof checked (values and SASS) and
    >= 0.8 x rated, except the mma.sync roofs labelled below the architecture's rate (sm_90: wgmma's)."""
    import json

    from conftest import run_cmd

    config = tmp_path / "tensor.yaml"
    config.write_text((Path(__file__).resolve().parents[1] / "configs" / "gpu-tensor.yaml").read_text()
                      .replace("flops_per_element: [1, 1024]", "flops_per_element: [1]")
                      .replace("max_bytes: 1073741824", "max_bytes: 4194304"))
    out = tmp_path / "run"
    proc = run_cmd("ert-run", config, "--out", out, "-q", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "ceilings.json").read_text())
    assert doc["metadata"]["points"]["invalid"] == 0, doc["warnings"]
    tensor = [c for c in doc["ceilings"]["compute"] if c.get("pipe") == "tensor"]
    assert tensor, doc["warnings"]
    for c in tensor:
        assert c["instruction"] in ("mma.sync", "wgmma") and not c["sass"].startswith("SASS holds 0")
        if c["rated"]["gflops_per_s"] is None or c.get("note"):
            continue  # no recorded figure (derivation says why), or mma.sync below wgmma / tcgen05
        assert c["rated"]["ratio"] >= 0.8, (c["precision"], c["instruction"], c["gflops_per_s"], c["rated"])


def test_ert_validate_counts_the_tensor_config(capsys):
    """`ert validate configs/gpu-tensor.yaml` (refused before issue 23: the plan had no GPU to ask)."""
    import argparse

    from ert.cli import cmd_validate

    config = Path(__file__).resolve().parents[1] / "configs" / "gpu-tensor.yaml"
    assert cmd_validate(argparse.Namespace(config=str(config))) == 0
    out = capsys.readouterr().out
    assert "valid: 6 kernel variant(s)" in out and "plus tensor kernels fp16, bf16, tf32, fp64, fp8, int8" in out


def test_the_tensor_first_config_plans_only_tensor_points_on_an_emulated_h100(capsys):
    """configs/gpu-tensor-first.yaml (the acceptance run's first sweep): a tensor-only run, 28 points on an H100
    (132 SMs), every one a tensor kernel; `ert validate` takes it; an empty precisions without tensor is refused."""
    import argparse

    from ert.cli import cmd_validate
    from ert.config.schema import load

    path = Path(__file__).resolve().parents[1] / "configs" / "gpu-tensor-first.yaml"
    cfg = load(path)
    assert cfg.precisions == [] and cfg.levels == ["memory"] and cfg.backend == "cuda"
    points = _plan(cfg, _tensor_backend({**SMALL_H100, "multiProcessorCount": 132}, config=cfg))
    assert len(points) == 28 and all(p.spec.tensor for p in points)
    # wgmma fp16, bf16, tf32, fp8, int8 x 2; mma.sync fp16, bf16, tf32, int8 and FP64 in both DMMA shapes x 3.
    by_kind = {}
    for p in points:
        by_kind[(p.spec.precision, p.spec.instruction, p.spec.flops_per_element)] = \
            by_kind.get((p.spec.precision, p.spec.instruction, p.spec.flops_per_element), 0) + 1
    assert by_kind[("fp64", "", 4096)] == by_kind[("fp64", "", 512)] == 3 and by_kind[("fp8", "wgmma", 1048576)] == 2
    # Each kernel's first geometry is one block per SM.
    firsts = [p for i, p in enumerate(points) if i == 0 or p.spec != points[i - 1].spec]
    assert len(firsts) == 11 and all(p.launch_dict()["blocks"] == 132 for p in firsts)
    assert cmd_validate(argparse.Namespace(config=str(path))) == 0
    assert "valid: a tensor-only run (no vector kernels): tensor kernels fp16, bf16" in capsys.readouterr().out
    with pytest.raises(ErtError) as err:
        from_dict({"backend": "cuda", "precisions": []}, source="x.yaml")
    assert str(err.value).startswith("x.yaml: precisions: List should have at least 1 item")


def test_the_tensor_first_config_runs_through_ert_run_on_an_emulated_h100(tmp_path, monkeypatch, capsys):
    """ert-run configs/gpu-tensor-first.yaml end to end (in process, the GPU emulated): 28 tensor points, no
    vector point, ceilings.json written and shown; FP64's roof is the faster DMMA shape (m16n8k16 here, with
    m8n8k4 emulated at 45 %). A GPU with none of the tensor types is refused in one line."""
    import json

    import ert.cli.run as run_mod
    from ert.backends import REGISTRY, BackendStatus
    from ert.cli import run_main

    props = {"now": SMALL_H100}
    monkeypatch.setattr(run_mod, "_make_backend", lambda cfg, threads, comm: cuda_mod.CudaBackend(
        options=cfg.cuda, device=EmulatedTensorGpu(props["now"], small_dmma_fraction=0.45)))
    status = REGISTRY.status
    monkeypatch.setattr(REGISTRY, "status", lambda name: BackendStatus(name, True) if name == "cuda" else status(name))
    config = Path(__file__).resolve().parents[1] / "configs" / "gpu-tensor-first.yaml"
    assert run_main([str(config), "--out", str(tmp_path / "run"), "-q"]) == 0
    doc = json.loads((tmp_path / "run" / "ceilings.json").read_text())
    assert doc["metadata"]["points"]["measured"] == 28 and doc["ceilings"]["memory"] == []
    compute = doc["ceilings"]["compute"]
    assert all(c["pipe"] == "tensor" for c in compute) and len(compute) == 10
    fp64 = next(c for c in compute if c["precision"] == "fp64")
    assert fp64["mma_shape"] == "m16n8k16" and 0.85 < fp64["rated"]["ratio"] <= 0.9
    capsys.readouterr()
    props["now"] = {**SMALL_H100, "major": 7, "minor": 5}  # Turing: no tensor type of the config
    assert run_main([str(config), "--out", str(tmp_path / "none"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "tensor: " in err and "nothing else was asked for (a tensor-only run" in err and "\n" not in err, err
