"""NVIDIA GPUs: SM, cache and memory facts by compute capability, and the rated peaks derived from them.

Every rated value says how it was derived (SMs x clock x a per-SM rate from NVIDIA's guides and
whitepapers); where a rate is not recorded, why. ``info`` is the backend's DeviceInfo
(ert.backends.cuda_host): SM count, clocks, compute capability, memory bus. Nothing here has run
against a real GPU's numbers yet (no GPU in this project's sessions).
"""

from __future__ import annotations

from ert.hardware import no_rated_text
from ert.spec import SHAPES, SM90_SHAPES, WGMMA_SHAPES

# Resident blocks per SM by compute capability (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"), where the device does not
# say (cudaDevAttrMaxBlocksPerMultiprocessor); 16 for an unknown architecture.
MAX_BLOCKS_PER_SM = {(7, 0): 32, (7, 2): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24,
                     (9, 0): 32, (10, 0): 32, (12, 0): 24}
# 32-bit registers per SM, every architecture since Maxwell.
REGISTERS_PER_SM = 65536

# Unified L1 data cache / shared memory per SM, bytes, by compute capability
# (CUDA C++ Programming Guide, "Compute Capabilities": 128 KB on 7.0, 96 KB on
# 7.5, 192 KB on 8.0 and 8.7, 128 KB on 8.6 and 8.9, 256 KB on 9.0 and 10.0).
# The kernels use no shared memory, so the driver may give all of it to L1.
L1_PER_SM_BYTES = {
    (7, 0): 128 << 10, (7, 5): 96 << 10, (8, 0): 192 << 10, (8, 6): 128 << 10, (8, 7): 192 << 10,
    (8, 9): 128 << 10, (9, 0): 256 << 10, (10, 0): 256 << 10,
}

# FLOPs per cycle per SM of the CUDA cores (not tensor cores), an FMA counted
# as 2, by compute capability.  They reproduce NVIDIA's published non-tensor
# peaks: V100 SXM2 (80 SMs, 1530 MHz) 7.8 / 15.7 / 31.4 TFLOP/s FP64/FP32/FP16;
# A100 (108 SMs, 1410 MHz) 9.7 / 19.5 / 78; H100 SXM5 (132 SMs, 1980 MHz)
# 33.5 / 66.9 / 133.8 (the A100 and H100 whitepapers); T4 and GA10x/AD10x run
# FP64 at 1/32 and 1/64 of FP32.
FLOPS_PER_CYCLE_PER_SM = {
    (7, 0): {"fp64": 64, "fp32": 128, "fp16": 256},
    (7, 5): {"fp64": 4, "fp32": 128, "fp16": 256},
    (8, 0): {"fp64": 64, "fp32": 128, "fp16": 512},
    (8, 6): {"fp64": 4, "fp32": 256, "fp16": 256},
    (8, 9): {"fp64": 4, "fp32": 256, "fp16": 256},
    (9, 0): {"fp64": 128, "fp32": 256, "fp16": 512},
}

# 32-bit integer instructions per clock cycle per SM (CUDA C++ Programming
# Guide, "Arithmetic Instructions", table "Throughput of Native Arithmetic
# Instructions (Number of Results per Clock Cycle per Multiprocessor)"):
# "32-bit integer add, extended-precision add, subtract" (IADD3, IADD3.X) and
# "32-bit integer multiply, multiply-add" (IMAD) are 64 on compute capability
# 7.x, 8.x and 9.0.  Architectures not listed get no rated integer value.
INT32_PER_CYCLE_PER_SM = {cc: {"add": 64, "madd": 64} for cc in
                          ((7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0))}
# What ptxas makes of the kernels' integer arithmetic (sm_75 to sm_100, the
# SASS checked by tests/test_cuda_int.py with cuobjdump), per operation counted:
# * int32 madd: one IMAD per multiply-add (2 operations);
# * int32 add: two dependent adds of c_t become one three-input IADD3 (x + c + c):
#   2 adds per add instruction;
# * int64 add: two dependent adds become IADD3 + IADD3.X (carries between the
#   halves): 1 add per add instruction;
# * int64 madd: emulated, IMAD.WIDE.U32 + 2 IMAD + an add per multiply-add, on
#   pipes whose rates the guide does not give (no rated value).
INT_OPS_PER_INSTRUCTION = {("int32", "madd"): 2, ("int32", "add"): 2, ("int64", "add"): 1}
INT_INSTRUCTION = {("int32", "madd"): ("IMAD", "one IMAD per multiply-add"),
                   ("int32", "add"): ("IADD3", "ptxas packs two dependent adds into one three-input IADD3"),
                   ("int64", "add"): ("IADD3/IADD3.X", "two dependent 64-bit adds are IADD3 + IADD3.X")}
INT_SOURCE = "CUDA C++ Programming Guide, Arithmetic Instructions throughput table"

# A memory bus this wide is stacked memory (HBM: 3072 to 8192 bits); GDDR
# boards stop at 512 bits.
HBM_MIN_BUS_BITS = 1024


def memory_name(bus_bits: int | None, *, host_unified: bool = False) -> str:
    """The name of a GPU's own memory level, the same on the cuda and opencl backends.

    HBM where the bus is known to be 1024 bits or wider; DRAM otherwise
    (GDDR boards, an integrated GPU sharing the host's memory, or a bus width
    the driver does not report).
    """
    if host_unified or not bus_bits:
        return "DRAM"
    return "HBM" if bus_bits >= HBM_MIN_BUS_BITS else "DRAM"


# ----------------------------------------------------------------------------- kernel variants

def rated_peaks(info) -> dict:
    """Rated (datasheet-style) peaks from the device's own facts, each with how it was derived."""
    mhz = info.sm_clock_khz / 1000
    rates = FLOPS_PER_CYCLE_PER_SM.get(info.compute_capability)
    compute = []
    for precision in ("fp64", "fp32", "fp16"):
        if rates is None or not mhz:
            why = no_rated_text(f"no per-SM FLOP rate recorded for {info.arch}" if rates is None else "SM clock unknown")
            compute.append({"precision": precision, "fma": True, "gflops_per_s": None, "derivation": why})
            continue
        per_sm = rates[precision]
        gflops = info.sm_count * mhz * 1e6 * per_sm / 1e9
        base = f"{info.sm_count} SMs x {mhz:.0f} MHz x {per_sm} {precision.upper()} FLOP/cycle/SM ({info.arch}"
        compute.append({"precision": precision, "fma": True, "gflops_per_s": round(gflops, 1),
                        "derivation": base + ", an FMA counted as 2 FLOPs)"})
        # A separate multiply and add take two issue slots for 2 FLOPs.
        compute.append({"precision": precision, "fma": False, "gflops_per_s": round(gflops / 2, 1),
                        "derivation": base + " / 2: a multiply and an add issue separately)"})
    compute += rated_integer(info)
    memory = {"level": info.memory_name, "gbytes_per_s": None, "derivation": no_rated_text("memory clock or bus width unknown")}
    if info.memory_clock_khz and info.memory_bus_bits:
        gbytes = info.memory_clock_khz * 1e3 * 2 * info.memory_bus_bits / 8 / 1e9
        memory.update(gbytes_per_s=round(gbytes, 1),
                      derivation=f"{info.memory_clock_khz / 1000:.0f} MHz x 2 (double data rate) x "
                                 f"{info.memory_bus_bits}-bit bus / 8")
    return {"compute": compute, "memory": [memory],
            "clock_source": info.sources.get("clockRate", "unknown")}


def rated_integer(info) -> list[dict]:
    """Rated integer roofs (GIOP/s): int32/int64 multiply-add and add, each derived or None with why.

    SMs x clock (the same clock as the FP rated values) x instructions per
    cycle per SM (INT32_PER_CYCLE_PER_SM) x operations per instruction
    (INT_OPS_PER_INSTRUCTION, from the SASS ptxas makes of the kernels).
    """
    mhz = info.sm_clock_khz / 1000
    rates = INT32_PER_CYCLE_PER_SM.get(info.compute_capability)
    out = []
    for precision in ("int32", "int64"):
        for op in ("madd", "add"):
            entry = {"precision": precision, "fma": False, **({"op": op} if op != "madd" else {}),
                     "unit": "GIOP/s", "gflops_per_s": None}
            per_instruction = INT_OPS_PER_INSTRUCTION.get((precision, op))
            if per_instruction is None:
                entry["derivation"] = (no_rated_text("64-bit integer multiply is emulated (IMAD.WIDE.U32 + "
                                       "2 x IMAD + an add per multiply-add, on pipes whose rates the CUDA guide "
                                       "does not give)"))
            elif rates is None:
                entry["derivation"] = (no_rated_text(f"no per-SM integer instruction rate recorded for "
                                       f"{info.arch}"))
            elif not mhz:
                entry["derivation"] = no_rated_text("SM clock unknown")
            else:
                per_sm = rates[op]
                giops = info.sm_count * mhz * 1e6 * per_sm * per_instruction / 1e9
                name, why = INT_INSTRUCTION[precision, op]
                entry.update(gflops_per_s=round(giops, 1),
                             derivation=f"{info.sm_count} SMs x {mhz:.0f} MHz x {per_sm} {name}/cycle/SM x "
                                        f"{per_instruction} {precision} op(s) per instruction ({info.arch}: {why}; "
                                        f"{per_sm} from the {INT_SOURCE})")
            out.append(entry)
    return out



# ----------------------------------------------------------------------------- rated dense tensor peaks
# Dense (not sparse) tensor-core FLOPs per cycle per SM, a multiply-add
# counted as 2, from NVIDIA's published figures:
#   A100 SXM4 (108 SMs, 1410 MHz; A100 whitepaper, datasheet): FP16 and BF16
#     312 TFLOP/s = 108 x 1.41 GHz x 2048; TF32 156 = x 1024; FP64 19.5 = x 128.
#   H100 SXM5 (132 SMs; H100 whitepaper, datasheet): FP16 and BF16 989.4 TFLOP/s
#     = 132 x 1.83 GHz x 4096; TF32 494.7 = x 2048; FP8 1978.9 = x 8192; FP64
#     66.9 = 132 x 1.98 GHz x 256.  NVIDIA quotes the FP16/BF16/TF32/FP8 figures
#     at 1830 MHz and FP64 at the 1980 MHz boost clock; at the device's maximum
#     clock (1980 MHz) the same per-SM rates give 8 % more than the datasheet's
#     FP16/TF32/FP8 figures.
# sm_80 is A100 only here (GA10x at sm_86 has a quarter of its FP16 rate per SM).
# INT8 (s8 x s8 -> s32, dense), integer operations per cycle per SM, a multiply-add counted as 2
# like a FLOP (the rate is GIOP/s):
#   A100 (sm_80): 624 TOPS = 108 SMs x 1.41 GHz x 4096 (A100 whitepaper, datasheet).
#   H100 SXM5 (sm_90): 1978.9 TOPS = 132 SMs x 1.83 GHz x 8192 (H100 whitepaper, datasheet), through
#     wgmma; Hopper's mma.sync (IMMA) is labelled below that rate, like the FP types.
#   GA10x (sm_86): A40 datasheet 299.3 TOPS dense = 84 SMs x 1.74 GHz x 2048.  Only INT8 is recorded for
#     sm_86: its FP16/BF16/TF32 figures depend on the product (FP32 accumulate at half rate on some).
#   Not sm_89 (Ada): NVIDIA's datasheets give L40 362 dense INT8 TOPS (142 SMs, 2490 MHz: 1024 per SM per
#     cycle) and L40S 733 (142 SMs, 2520 MHz: 2048), so no one per-SM figure fits the architecture.
TENSOR_FLOPS_PER_CYCLE_PER_SM = {
    (8, 0): {"fp16": 2048, "bf16": 2048, "tf32": 1024, "fp64": 128, "int8": 4096},
    (8, 6): {"int8": 2048},
    (9, 0): {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp64": 256, "fp8": 8192, "int8": 8192},
}
# Where each rated INT8 figure comes from (said in the rated entry's derivation).
TENSOR_SOURCE = {
    ((8, 0), "int8"): "A100 datasheet: 624 dense INT8 TOPS = 108 SMs x 1410 MHz x 4096",
    ((8, 6), "int8"): "A40 datasheet: 299.3 dense INT8 TOPS = 84 SMs x 1740 MHz x 2048",
    ((9, 0), "int8"): "H100 SXM5 datasheet: 1978.9 dense INT8 TOPS = 132 SMs x 1830 MHz x 8192",
}
# Why an architecture has no rated tensor figure.
UNRATED_WHY = {
    (8, 9): "Ada (L4, L40, L40S) tensor rates differ by product and by accumulator type (FP32 accumulate runs at "
            "half the FP16-accumulate rate on some; dense INT8 is 1024 per SM per cycle on L40, 2048 on L40S): "
            "not recorded",
    (10, 0): "B200's dense figures differ between NVIDIA's datasheets (board power) and the clock they assume is "
             "not published: not recorded",
}
# Architectures whose full tensor rate is reached with mma.sync (sm_12x, consumer
# Blackwell, has no wgmma or tcgen05).  On sm_90 the full rate needs wgmma
# (kernels/ert_cuda_wgmma.cu runs it); on sm_100 / sm_103 / sm_110 it needs
# tcgen05, which ert does not run yet.
MMA_SYNC_FULL_RATE = {(8, 0), (8, 6), (8, 7), (8, 9), (12, 0), (12, 1)}
# Why ert has no tcgen05 kernel (sm_100 B200, sm_103, sm_110): one line, said wherever a roof is missing for it.
TCGEN05_WHY = ("Blackwell's full tensor rate needs tcgen05.mma (tensor memory, single-thread issue), and ert's "
               "tcgen05 kernel is not written yet")


def mma_sync_note(compute_capability: tuple[int, int], precision: str) -> str:
    """The label of an mma.sync roof that is not the architecture's full tensor rate, or "" where it is.

    On sm_90 every type with a wgmma form (fp16, bf16, tf32, fp8, int8) is measured
    with wgmma too, and that is the roof; FP64 has no wgmma form (DMMA through
    mma.sync is Hopper's FP64 tensor path), so it gets no label.
    """
    cc = tuple(compute_capability)
    if cc in MMA_SYNC_FULL_RATE or cc < (8, 0):
        return ""
    if cc == (9, 0):
        return "mma.sync, below Hopper's wgmma rate" if precision in WGMMA_SHAPES else ""
    if cc[0] in (10, 11):
        return "mma.sync, below Blackwell's tcgen05 rate (no tcgen05 kernel in ert yet)"
    return ""


def tensor_variants(compute_capability: tuple[int, int], precision: str) -> list:
    """The MMA shapes a GPU of this compute capability measures for one tensor type, the roof first:
    wgmma (sm_90a) where it exists, then mma.sync where the instruction is native (FP64 on sm_90: m16n8k16,
    likely the roof, then m8n8k4; the analysis keeps the faster)."""
    return [table[precision] for table in (WGMMA_SHAPES, SM90_SHAPES, SHAPES)
            if precision in table and table[precision].supported(compute_capability)]


def no_tensor_why(compute_capability: tuple[int, int], precision: str) -> str:
    """Why a GPU of this compute capability has no roof for one tensor type ("" where it has one)."""
    cc = tuple(compute_capability)
    if tensor_variants(cc, precision):
        return ""
    shape = SHAPES[precision]
    why = shape.unsupported_why(cc)
    if cc[0] in (10, 11) and cc[0] in shape.emulated_majors:
        why += f"; {TCGEN05_WHY}"
    return f"no {precision.upper()} tensor roof: {why}"


def rated_tensor_peaks(info) -> list[dict]:
    """Rated dense tensor peaks for every type the GPU measures, each with its derivation (None and why where unknown).

    One entry per type: the rate is the tensor cores' (NVIDIA's dense figure),
    whichever instruction reaches it; ``shape`` and ``instruction`` name the
    roof's kernel (wgmma on sm_90 where the type has one).  INT8's rate is
    integer operations: its entry says ``unit: "GIOP/s"`` and holds the value
    in ``giops_per_s`` too (``gflops_per_s`` keeps it, as for the integer roofs).
    """
    mhz = info.sm_clock_khz / 1000
    cc = info.compute_capability
    rates = TENSOR_FLOPS_PER_CYCLE_PER_SM.get(cc)
    out = []
    for name in SHAPES:
        variants = tensor_variants(cc, name)
        if not variants:
            continue
        shape = variants[0]
        entry = {"precision": shape.name, "shape": f"m{shape.m}n{shape.n}k{shape.k}", "instruction": shape.instruction,
                 "accumulate": shape.acc_type, "gflops_per_s": None}
        if shape.integer:
            entry.update(unit="GIOP/s", giops_per_s=None)
        if rates is None or shape.name not in rates:
            entry["derivation"] = no_rated_text(UNRATED_WHY.get(
                cc, f"no per-SM tensor rate recorded for {info.arch} {shape.name}"))
        elif not mhz:
            entry["derivation"] = no_rated_text("SM clock unknown")
        else:
            per_sm = rates[shape.name]
            entry["gflops_per_s"] = round(info.sm_count * mhz * 1e6 * per_sm / 1e9, 1)
            # What the analysis needs to rate the ceiling at the clock measured during its point.
            entry.update(sm_count=info.sm_count, clock_mhz=round(mhz), flops_per_cycle_per_sm=per_sm,
                         arch=info.arch)
            what = "integer op" if shape.integer else "FLOP"
            source = TENSOR_SOURCE.get((tuple(cc), shape.name))
            entry["derivation"] = (f"{info.sm_count} SMs x {mhz:.0f} MHz x {per_sm} dense {shape.name.upper()} "
                                   f"tensor {what}/cycle/SM ({info.arch}, a multiply-add counted as 2"
                                   + (f"; {source}" if source else "") + ")")
            if shape.integer:
                entry["giops_per_s"] = entry["gflops_per_s"]
        out.append(entry)
    return out
