"""Rated CPU ceilings: what the cores can physically do, from a microarchitecture table and a measured clock.

A rated ceiling is the hardware's limit, not ours: FLOPs per cycle per core
(SIMD lanes x FMA units x 2, or what a separate multiply and add can issue)
L1 bytes per cycle per core (load ports x width, plus the store port for
read+write), and the L2 and L3 fill and write-back bytes per cycle per core, times the clock the cores sustain under vector load, times the
cores in use.  Every value carries how it was derived, and a CPU that is not
in the table gets no value and says why.

The table is keyed by the CPU name LLVM reports for the host (the same name
Numba compiles for), refined by the marketing name where one microarchitecture
ships with one or two FMA units (Skylake-SP and Cascade Lake Bronze, Silver and
most Gold 5xxx parts have one 512-bit FMA unit).  The per-cycle figures are the
vendors' published port widths (Intel's optimisation manual, AMD's software
optimisation guides, Arm's Neoverse software optimisation guides).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ert.hardware import no_rated_text


@dataclass(frozen=True)
class Microarch:
    """Per-core, per-cycle limits of one microarchitecture (the hardware's, not the kernels')."""

    name: str
    simd_bits: int          # width of one FP execution unit's datapath
    fma_units: int          # FMA-capable pipes of that width
    fma_latency: int        # cycles from an FMA's inputs to its result
    separate_add_pipes: int  # FP add pipes beside the FMA pipes (AMD Zen), 0 where adds use the FMA pipes
    l1_load_bytes: int | None    # bytes the L1 delivers to loads per cycle
    l1_store_bytes: int | None   # bytes the L1 accepts from stores per cycle
    source: str             # where the figures come from
    # Integer multiply-add: vector multiply + add instruction pairs (full simd_bits width) per cycle per core,
    # per precision, with where that comes from; empty where no published figure is sure enough (no rated value).
    int_madd_pairs_per_cycle: tuple[tuple[str, float], ...] = ()
    int_source: str = ""
    # Integer add: full-width vector integer adds (vpaddd/vpaddq) per cycle per core; None: unknown.
    int_add_per_cycle: float | None = None
    int_add_source: str = ""
    # int+float mix: (int multiply-add + FMA) instruction pairs per cycle per core, per int precision.
    int_fp_pairs_per_cycle: tuple[tuple[str, float], ...] = ()
    pipes: str = ""  # the FMA pipes in the vendor's words, where they say more than lanes x units

    def flops_per_cycle(self, precision: str, fma: bool) -> float:
        lanes = self.simd_bits // (64 if precision == "fp64" else 32)
        if fma:
            return lanes * self.fma_units * 2
        # A separate multiply and add: multiplies on the FMA pipes; adds on
        # their own pipes where the core has them (then the pair issues as fast
        # as an FMA), otherwise both share the FMA pipes (half the FMA rate).
        if self.separate_add_pipes:
            pairs = min(self.fma_units, self.separate_add_pipes)
            return lanes * pairs * 2
        return lanes * self.fma_units

    def iops_per_cycle(self, precision: str) -> float | None:
        """Integer operations per cycle per core of the multiply-add kernel (a multiply and an add are 2), or None."""
        pairs = dict(self.int_madd_pairs_per_cycle).get(precision)
        if pairs is None:
            return None
        return self.simd_bits // (32 if precision == "int32" else 64) * pairs * 2

    def fma_add_flops_per_cycle(self, precision: str) -> float:
        """FLOPs per cycle of the fma+add mix (1 FMA : 1 add, independent): the adds on their own pipes where the
        core has them (AMD Zen: both pipe groups full), else sharing the FMA pipes."""
        lanes = self.simd_bits // (64 if precision == "fp64" else 32)
        if self.separate_add_pipes:
            return lanes * min(self.fma_units, self.separate_add_pipes) * 3
        return lanes * self.fma_units / 2 * 3

    def l1_bytes_per_cycle(self, access: str) -> int | None:
        if self.l1_load_bytes is None:
            return None
        if access == "ro":
            return self.l1_load_bytes
        if self.l1_store_bytes is None:
            return None
        # Each element is loaded once and stored once: the slower of the two streams sets the pace.
        return 2 * min(self.l1_load_bytes, self.l1_store_bytes)

    def chains_needed(self) -> int:
        """Independent FMA chains that keep every FMA pipe busy (units x latency)."""
        return self.fma_units * self.fma_latency


_INTEL = "Intel 64 and IA-32 Architectures Optimization Reference Manual (port widths and latencies)"
_AMD = "AMD Software Optimization Guide for the family (FP pipes, load/store widths)"
_ARM = "Arm Neoverse Software Optimization Guide (SIMD pipes, load/store widths)"

_SKX = dict(simd_bits=512, fma_latency=4, separate_add_pipes=0, l1_load_bytes=128, l1_store_bytes=64, source=_INTEL)
# Skylake-SP cores with two 512-bit units (ports 0 and 5): vpmulld zmm is 2 uops and vpmullq zmm 3 uops
# on p0/p5, vpaddd/vpaddq zmm 1 uop on p0/p5, so a multiply and an add take (2 + 1) / 2 = 1.5 cycles
# (int32) or (3 + 1) / 2 = 2 cycles (int64).  Only the Skylake-SP core (Skylake-SP, Cascade Lake, Cooper
# Lake): Ice Lake-SP onward changed the ports, and AMD's guides give no zmm integer-multiply pipe count
# ert is sure of (Zen 4, Zen 5), so those get no rated integer value.
_SKX_INT = dict(int_madd_pairs_per_cycle=(("int32", 1 / 1.5), ("int64", 1 / 2.0)),
                int_source="Agner Fog's instruction tables and uops.info, Skylake-X: vpmulld zmm 2 uops, "
                           "vpmullq zmm 3 uops, vpaddd/q zmm 1 uop, on ports 0 and 5",
                int_add_per_cycle=2.0,
                int_add_source="Agner Fog's instruction tables, Skylake-X: vpaddd/vpaddq zmm 1 uop on port 0 or 5",
                # int32: vpmulld (2) + vpaddd (1) + vfmadd (1) = 4 uops on ports 0/5: 2 cycles per pair;
                # int64: vpmullq (3) + vpaddq (1) + vfmadd (1) = 5 uops: 2.5 cycles per pair.
                int_fp_pairs_per_cycle=(("int32", 1 / 2.0), ("int64", 1 / 2.5)))
# AMD Zen 4 / Zen 5: four FP/vector pipes, each with a vector integer ALU (AMD Software Optimization Guide
# for Family 19h (Zen 4) and 1Ah (Zen 5): "FP0-FP3"); Zen 4's are 256 bits wide (a zmm vpaddd takes two),
# Zen 5's 512.  The pipes of vector integer multiply are not stated there in a form ert is sure of: the
# integer multiply-add and int+float mix get no rated value on Zen.
_ZEN_IADD = dict(int_add_per_cycle=4.0, int_add_source="AMD Software Optimization Guide (Zen 4: family 19h; "
                                                       "Zen 5: family 1Ah): vector integer add on all four FP pipes")

# Keyed by LLVM's host CPU name (llvm.get_host_cpu_name()).
TABLE: dict[str, Microarch] = {
    "skylake-avx512": Microarch("Skylake-SP", fma_units=2, **_SKX, **_SKX_INT),
    "cascadelake": Microarch("Cascade Lake", fma_units=2, **_SKX, **_SKX_INT),
    "cooperlake": Microarch("Cooper Lake", fma_units=2, **_SKX, **_SKX_INT),
    "icelake-server": Microarch("Ice Lake-SP", fma_units=2, **_SKX),
    "sapphirerapids": Microarch("Sapphire Rapids", fma_units=2, **_SKX),
    "emeraldrapids": Microarch("Emerald Rapids", fma_units=2, **_SKX),
    "graniterapids": Microarch("Granite Rapids", fma_units=2, **_SKX),
    "graniterapids-d": Microarch("Granite Rapids-D", fma_units=2, **_SKX),
    # Client/AVX2 Intel cores: two 256-bit FMA units, 2 x 32 B loads and 1 x 32 B store.
    "haswell": Microarch("Haswell", 256, 2, 5, 0, 64, 32, _INTEL),
    "broadwell": Microarch("Broadwell", 256, 2, 5, 0, 64, 32, _INTEL),
    "skylake": Microarch("Skylake", 256, 2, 4, 0, 64, 32, _INTEL),
    # AMD Zen: two FMA/multiply pipes and two separate add pipes.
    "znver2": Microarch("Zen 2", 256, 2, 5, 2, 64, 32, _AMD),
    "znver3": Microarch("Zen 3", 256, 2, 4, 2, 64, 32, _AMD),
    # Zen 4 runs AVX-512 on 256-bit pipes (double-pumped): 512-bit code, 256-bit rates.
    "znver4": Microarch("Zen 4", 256, 2, 4, 2, 64, 32, _AMD, **_ZEN_IADD),
    # Zen 5 (EPYC 9005): full 512-bit pipes, 2 x 64 B loads and 1 x 64 B store per cycle.
    "znver5": Microarch("Zen 5", 512, 2, 4, 2, 128, 64, _AMD, **_ZEN_IADD),
    # Arm Neoverse: 128-bit NEON pipes (the width Numba's code uses; V1's 2 x 256-bit SVE pipes are the same FLOPs
    # per cycle as its 4 x 128-bit NEON ones, V2's SVE is 128 bits wide).  N1: 2 x 16 B loads, one 16 B store a
    # cycle.  N2, V1, V2: two load/store pipes and one load pipe, 3 x 16 B loads, 2 x 16 B stores a cycle (a
    # read+write stream's stp of two q registers takes one store pipe, so loads and stores both reach their rate).
    "neoverse-n1": Microarch("Neoverse N1", 128, 2, 4, 0, 32, 16, _ARM, pipes="2 x 128-bit NEON FP pipes"),
    "neoverse-n2": Microarch("Neoverse N2", 128, 2, 4, 0, 48, 32, _ARM,
                             pipes="2 x 128-bit NEON/SVE2 FP pipes"),
    "neoverse-v1": Microarch("Neoverse V1", 128, 4, 4, 0, 48, 32, _ARM,
                             pipes="4 x 128-bit NEON FP pipes, as 2 x 256-bit SVE"),
    "neoverse-v2": Microarch("Neoverse V2", 128, 4, 4, 0, 48, 32, _ARM,
                             pipes="4 x 128-bit NEON/SVE2 FP pipes"),
    # A64FX: two 512-bit SVE FMA pipes, latency 9; 2 x 64 B loads or 1 x 64 B store.
    "a64fx": Microarch("A64FX", 512, 2, 9, 0, 128, 64, "Fujitsu A64FX Microarchitecture Manual",
                       pipes="2 x 512-bit SVE FMA pipes (NEON code runs 128 bits of them)"),
    # Apple M1..M3 performance cores: four 128-bit FMA pipes; L1 widths not published.
    "apple-m1": Microarch("Apple M1 (P-core)", 128, 4, 4, 0, None, None, "Apple M1 measurements (Dougall Johnson)"),
    "apple-m2": Microarch("Apple M2 (P-core)", 128, 4, 4, 0, None, None, "Apple M1 measurements (Dougall Johnson)"),
    "apple-m3": Microarch("Apple M3 (P-core)", 128, 4, 4, 0, None, None, "Apple M1 measurements (Dougall Johnson)"),
}


@dataclass(frozen=True)
class CacheRates:
    """Bytes per cycle per core between one cache and the level above it (the hardware's), with the source.

    ``fill`` moves lines up (L2 -> L1, or L3 -> L2): it bounds a read-only
    sweep.  ``write_back`` moves dirty lines down; where it is a separate path
    a read+write sweep is bounded by fill + write-back (each element's line
    comes up once and goes down once), where it shares the fill path by the
    fill alone.  None: not published in a form ert is sure of (no rated value,
    with ``why_none``).
    """

    fill: float | None
    write_back: float | None
    separate_paths: bool | None  # None: not known whether fills and write-backs share one path
    source: str
    why_none: str = ""

    def bytes_per_cycle(self, access: str) -> float | None:
        if self.fill is None:
            return None
        if access == "ro":
            return self.fill
        if self.separate_paths is None or (self.separate_paths and self.write_back is None):
            return None
        return self.fill + self.write_back if self.separate_paths else self.fill


_ZEN_L2 = ("AMD Software Optimization Guide for family 17h (55723) and 19h (56665, 57647): the L2 fills the L1 at "
           "32 B/cycle and takes write-backs at 32 B/cycle; corroborated by Chips and Cheese (Zen 2 L2, one thread: "
           "31.6 B/cycle) and this project's Zen 4 (L2 read-only 31.8, read+write 61.8 B/cycle/core: write-backs "
           "have their own path)")
_ZEN_L3 = ("AMD Software Optimization Guide for family 17h (55723) and 19h (56665, 57647): the L3 moves 32 B/cycle "
           "per core to the L2 and 32 B/cycle back; corroborated by this project's Zen 4 (read+write L3 "
           "50 B/cycle/core, above one 32-byte path)")
_ZEN5_L3 = ("AMD Software Optimization Guide for family 1Ah (58455): the L3 moves 32 B/cycle per core to the L2 "
            "and 32 B/cycle back, as on Zen 4 (only the L1 <-> L2 paths were widened); corroborated by this "
            "project's Zen 5 guest (read+write L3 380-415 GB/s on 2 cores at 3.97 GHz, 48-52 B/cycle/core, above "
            "one 32-byte path; read-only 210-233 GB/s, 26-29 B/cycle/core)")
_INTEL_L2 = ("Intel 64 and IA-32 Architectures Optimization Reference Manual, cache table of the core: L2 peak "
             "64 B/cycle (to the L1)")
_INTEL_L2_RW = (no_rated_text("Intel's manual gives one L2 figure (64 B/cycle), not whether L1 write-backs "
                "share it with the fills"))
_INTEL_L3 = (no_rated_text("Intel publishes no peak L3 (mesh) bytes per cycle per core for this core, only "
             "sustained figures"))
_ARM_L2 = (no_rated_text("the Arm Neoverse Software Optimization Guide gives no L2 -> L1 bytes per cycle ert is "
           "sure of (Chips and Cheese measured 19.3 B/cycle from Neoverse N1's L2; the interface width is inferred)"))
_ARM_L3 = no_rated_text("the system-level cache's bandwidth per core depends on the mesh (CMN) the SoC uses")


def _unrated(why: str) -> CacheRates:
    return CacheRates(None, None, None, "", why)


# Lower cache levels per microarchitecture (keyed by Microarch.name): (L2, L3).
LOWER_LEVELS: dict[str, tuple[CacheRates, CacheRates]] = {
    **{name: (CacheRates(32, 32, True, _ZEN_L2), CacheRates(32, 32, True, _ZEN_L3))
       for name in ("Zen 2", "Zen 3", "Zen 4")},
    "Zen 5": (CacheRates(64, 64, True,
                         "AMD Software Optimization Guide for family 1Ah (58455) and AMD's Zen 5 disclosure: L2 -> L1 "
                         "64 B/cycle, twice Zen 4's; AIDA64 on a Ryzen 5 9600X (6 cores, up to 5.4 GHz) read "
                         "1875 GB/s and wrote 1795 GB/s from L2 (about 58 and 55 B/cycle/core), so write-backs "
                         "have their own 64-byte path"),
              CacheRates(32, 32, True, _ZEN5_L3)),
    **{name: (CacheRates(64, None, None, _INTEL_L2, _INTEL_L2_RW), _unrated(_INTEL_L3))
       for name in ("Skylake-SP", "Cascade Lake", "Cooper Lake", "Ice Lake-SP", "Sapphire Rapids",
                    "Emerald Rapids", "Granite Rapids", "Granite Rapids-D")},
    **{name: (_unrated(_ARM_L2), _unrated(_ARM_L3))
       for name in ("Neoverse N1", "Neoverse N2", "Neoverse V1", "Neoverse V2")},
}


def lower_level_rates(arch_name: str | None) -> dict[str, CacheRates]:
    """{"L2": ..., "L3": ...} for a microarchitecture's name (its one-FMA variant included), each maybe unrated."""
    base = (arch_name or "").split(" (")[0]
    l2, l3 = LOWER_LEVELS.get(base, (None, None))
    why = no_rated_text(f"{arch_name or 'this CPU'}'s L2 and L3 widths are not in ert's table")
    return {"L2": l2 or _unrated(why), "L3": l3 or _unrated(why)}


def lower_level_entries(*, arch_name: str | None, base: str, cores: int, clock_ghz: float | None) -> list[dict]:
    """``rated.memory`` entries of L2 and L3 per access: cores x clock x bytes per cycle, each derived."""
    out = []
    for level, rates in lower_level_rates(arch_name).items():
        above = "L1" if level == "L2" else "L2"
        for access in ("rw", "ro"):
            entry = {"level": level, "access": access}
            per_cycle = rates.bytes_per_cycle(access)
            if per_cycle is None or not clock_ghz:
                why = (rates.why_none or "no rated value") if per_cycle is None else \
                    no_rated_text("the sustained clock was not measured")
                out.append({**entry, "gbytes_per_s": None, "derivation": why})
                continue
            if access == "ro":
                how = f"{level} -> {above} fill {rates.fill:g} B/cycle"
            else:
                how = (f"{level} -> {above} fill {rates.fill:g} + write-back {rates.write_back:g} B/cycle, two paths"
                       if rates.separate_paths else
                       f"fill and write-back share one {rates.fill:g} B/cycle path")
            out.append({**entry, "gbytes_per_s": round(cores * clock_ghz * per_cycle, 1),
                        "bytes_per_cycle_per_core": per_cycle,
                        "derivation": f"{base} x {per_cycle:g} B/cycle ({arch_name}: {how}; {rates.source})"})
    return out


def complete_rated(rated: dict) -> dict:
    """A CPU's ``backend_info.rated`` with the L2 and L3 entries added where it has none (a run made before ert
    rated them), and an L2 or L3 entry recorded without a value given the table's value where it has one now (Zen
    5's L3): same table, same measured clock, same cores.  Anything else is returned unchanged."""
    if not isinstance(rated, dict) or not rated.get("per_core"):
        return rated
    memory = list(rated.get("memory", []))
    clock, cores = rated.get("clock_ghz"), int(rated.get("cores_per_rank") or 1)
    base = f"{cores} core(s) x {clock:.2f} GHz ({rated.get('clock_source', '')})" if clock else ""
    table = lower_level_entries(arch_name=rated.get("microarchitecture"), base=base, cores=cores, clock_ghz=clock)
    if not any(m.get("level") in ("L2", "L3") for m in memory):
        return {**rated, "memory": memory + table}
    now = {(m["level"], m["access"]): m for m in table if m.get("gbytes_per_s") is not None}
    filled = [now.get((m.get("level"), m.get("access")), m) if m.get("level") in ("L2", "L3")
              and m.get("gbytes_per_s") is None else m for m in memory]
    return rated if filled == memory else {**rated, "memory": filled}


# Skylake-SP and Cascade Lake parts with one 512-bit FMA unit per core (Intel ARK's
# "# of AVX-512 FMA Units: 1"): Bronze, Silver, and Gold 5xxx except 5122 and 5222.
_ONE_FMA = re.compile(r"(bronze|silver)|gold\s+5(?!122|222)\d{3}", re.IGNORECASE)


def lookup(cpu_name: str, model_name: str = "") -> tuple[Microarch | None, str]:
    """The table entry for a CPU, or None and why there is none."""
    arch = TABLE.get(cpu_name)
    if arch is None:
        return None, no_rated_text(f"CPU '{cpu_name or 'unknown'}' ({model_name or 'no model name'}) is not in ert's microarchitecture table")
    if cpu_name in ("skylake-avx512", "cascadelake") and _ONE_FMA.search(model_name or ""):
        arch = Microarch(arch.name + " (one FMA unit)", arch.simd_bits, 1, arch.fma_latency, 0,
                         arch.l1_load_bytes, arch.l1_store_bytes, arch.source + "; Intel ARK: 1 AVX-512 FMA unit")
    return arch, ""


def rated_ceilings(*, arch: Microarch | None, why_none: str, clock_ghz: float | None, clock_how: str,
                   cores: int, precisions: tuple[str, ...] = ("fp64", "fp32"),
                   integer: tuple[str, ...] = ("int32", "int64")) -> dict:
    """``backend_info.rated`` for a CPU: compute per (precision, FMA) and L1 per access, each derived."""
    compute, memory = [], []
    if arch is None or not clock_ghz:
        why = why_none or no_rated_text("the sustained clock could not be measured")
        for p in precisions:
            for fma in (True, False):
                compute.append({"precision": p, "fma": fma, "gflops_per_s": None, "derivation": why})
        for p in integer:
            compute.append({"precision": p, "fma": False, "gflops_per_s": None, "unit": "GIOP/s", "derivation": why})
            compute.append({"precision": p, "fma": False, "op": "add", "gflops_per_s": None, "unit": "GIOP/s",
                            "derivation": why})
        for p in precisions:
            for mix in ("fma+add", "int64+fp64" if p == "fp64" else "int32+fp32"):
                compute.append({"precision": p, "fma": True, "mix": mix, "gflops_per_s": None, "derivation": why})
        for access in ("rw", "ro"):
            memory.append({"level": "L1", "access": access, "gbytes_per_s": None, "derivation": why})
        for level in ("L2", "L3"):
            for access in ("rw", "ro"):
                memory.append({"level": level, "access": access, "gbytes_per_s": None, "derivation": why})
        return {"compute": compute, "memory": memory, "clock_ghz": clock_ghz, "clock_source": clock_how,
                "microarchitecture": arch.name if arch else None}
    base = f"{cores} core(s) x {clock_ghz:.2f} GHz ({clock_how})"
    for p in precisions:
        lanes = arch.simd_bits // (64 if p == "fp64" else 32)
        for fma in (True, False):
            per_cycle = arch.flops_per_cycle(p, fma)
            if fma:
                how = f"{lanes} lanes x {arch.fma_units} FMA unit(s) x 2" + (f"; {arch.pipes}" if arch.pipes else "")
            elif arch.separate_add_pipes:
                how = (f"{lanes} lanes x ({arch.fma_units} FMA pipe(s) multiplying, "
                       f"{arch.separate_add_pipes} add pipe(s) adding)")
            else:
                how = f"{lanes} lanes x {arch.fma_units} FMA unit(s), a multiply and an add issue separately"
            compute.append({"precision": p, "fma": fma,
                            "gflops_per_s": round(cores * clock_ghz * per_cycle, 1),
                            "flops_per_cycle_per_core": per_cycle,
                            "derivation": f"{base} x {per_cycle:g} {p.upper()} FLOP/cycle ({arch.name}: {how})"})
    for p in integer:
        per_cycle = arch.iops_per_cycle(p)
        if per_cycle is None:
            compute.append({"precision": p, "fma": False, "gflops_per_s": None, "unit": "GIOP/s",
                            "derivation": no_rated_text(f"{arch.name}'s vector integer multiply and add throughput "
                                          f"is not in ert's table (no published figure ert is sure of)")})
            continue
        pairs = dict(arch.int_madd_pairs_per_cycle)[p]
        lanes = arch.simd_bits // (32 if p == "int32" else 64)
        compute.append({"precision": p, "fma": False, "unit": "GIOP/s",
                        "gflops_per_s": round(cores * clock_ghz * per_cycle, 1),
                        "flops_per_cycle_per_core": per_cycle,
                        "derivation": f"{base} x {per_cycle:g} {p} ops/cycle ({arch.name}: {lanes} lanes x "
                                      f"{pairs:.3g} multiply+add pairs/cycle x 2; {arch.int_source})"})
    compute += _rated_14(arch, base, cores, clock_ghz, precisions, integer)
    for access in ("rw", "ro"):
        per_cycle = arch.l1_bytes_per_cycle(access)
        if per_cycle is None:
            memory.append({"level": "L1", "access": access, "gbytes_per_s": None,
                           "derivation": no_rated_text(f"{arch.name}'s L1 load/store widths are not in the table")})
            continue
        how = (f"{arch.l1_load_bytes} B loads" if access == "ro"
               else f"one load and one store of min({arch.l1_load_bytes}, {arch.l1_store_bytes}) B each")
        memory.append({"level": "L1", "access": access, "gbytes_per_s": round(cores * clock_ghz * per_cycle, 1),
                       "bytes_per_cycle_per_core": per_cycle,
                       "derivation": f"{base} x {per_cycle} B/cycle ({arch.name}: {how} per cycle)"})
    memory += lower_level_entries(arch_name=arch.name, base=base, cores=cores, clock_ghz=clock_ghz)
    return {"compute": compute, "memory": memory, "clock_ghz": round(clock_ghz, 3), "clock_source": clock_how,
            "microarchitecture": arch.name, "table_source": arch.source}


def _rated_14(arch: Microarch, base: str, cores: int, clock_ghz: float, precisions, integer) -> list[dict]:
    """The rated entries of the integer add roofs and the measured mixes, each derived or None with why."""
    out = []
    for p in integer:
        lanes = arch.simd_bits // (32 if p == "int32" else 64)
        entry = {"precision": p, "fma": False, "op": "add", "unit": "GIOP/s"}
        if arch.int_add_per_cycle is None:
            out.append({**entry, "gflops_per_s": None,
                        "derivation": no_rated_text(f"{arch.name}'s vector integer add throughput is not in "
                                      f"ert's table")})
            continue
        per_cycle = lanes * arch.int_add_per_cycle
        out.append({**entry, "gflops_per_s": round(cores * clock_ghz * per_cycle, 1),
                    "flops_per_cycle_per_core": per_cycle,
                    "derivation": f"{base} x {per_cycle:g} {p} adds/cycle ({arch.name}: {lanes} lanes x "
                                  f"{arch.int_add_per_cycle:g} {arch.simd_bits}-bit vector adds/cycle; "
                                  f"{arch.int_add_source})"})
    for p in precisions:
        lanes = arch.simd_bits // (64 if p == "fp64" else 32)
        per_cycle = arch.fma_add_flops_per_cycle(p)
        how = (f"{lanes} lanes x {min(arch.fma_units, arch.separate_add_pipes)} (FMA + add) pairs x 3, the adds on "
               f"their own pipes" if arch.separate_add_pipes else
               f"{lanes} lanes x {arch.fma_units} FMA unit(s) / 2 x 3: FMAs and adds share the FMA pipes")
        out.append({"precision": p, "fma": True, "mix": "fma+add", "gflops_per_s": round(cores * clock_ghz * per_cycle, 1),
                    "flops_per_cycle_per_core": per_cycle,
                    "derivation": f"{base} x {per_cycle:g} {p.upper()} FLOP/cycle ({arch.name}: {how})"})
        ip = "int64" if p == "fp64" else "int32"
        mix = f"{ip}+{p}"
        pairs = dict(arch.int_fp_pairs_per_cycle).get(ip)
        if pairs is None:
            out.append({"precision": p, "fma": True, "mix": mix, "gflops_per_s": None, "unit": "GOP/s",
                        "derivation": no_rated_text(f"the pipes of {arch.name}'s vector integer multiply are "
                                      f"not in ert's table")})
            continue
        per_cycle = lanes * pairs * 4  # an integer multiply-add (2 ops) and an FMA (2 FLOPs) per pair and lane
        out.append({"precision": p, "fma": True, "mix": mix, "unit": "GOP/s",
                    "gflops_per_s": round(cores * clock_ghz * per_cycle, 1), "flops_per_cycle_per_core": per_cycle,
                    "derivation": f"{base} x {per_cycle:g} ops/cycle ({arch.name}: {lanes} lanes x {pairs:.3g} "
                                  f"({ip} multiply-add + {p} FMA) pairs/cycle x 4; {arch.int_source})"})
    return out


def clock_from_chains(*, fma_seconds: float, fma_count: int, fma_latency: int,
                      imul_seconds: float, imul_count: int, imul_latency: int = 3,
                      vector_bits: int = 512) -> tuple[float, float, str]:
    """(vector GHz, integer GHz, how) from two dependent chains of known latency, timed on every core.

    The vector FMA chain is the clock under vector load; the integer multiply
    chain (3 cycles on every x86 core listed, and never folded the way some
    cores fold dependent add-immediate chains) cross-checks it.
    """
    vec = fma_count * fma_latency / fma_seconds / 1e9
    scalar = imul_count * imul_latency / imul_seconds / 1e9
    how = (f"measured: a dependent {vector_bits}-bit FMA chain on every thread x {fma_latency}-cycle latency = {vec:.2f} GHz, "
           f"cross-checked by a dependent integer-multiply chain x {imul_latency} cycles = {scalar:.2f} GHz")
    return vec, scalar, how
