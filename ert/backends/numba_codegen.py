"""What Numba compiles the CPU kernels for: the host's features and Numba's settings (set before numba is
imported), the vector ISA, the FMA chains swept and the geometry of a thread's block (``Geometry``, pure
arithmetic, so ``ert validate`` plans without numba), and the vector width an assembly listing shows."""

from __future__ import annotations

import math
import os
import platform
import re
import sys

from ert.spec import KernelSpec


def _host_features() -> str:
    """LLVM's feature string for this host ("" for a host it cannot read)."""
    try:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_features().flatten()
    except Exception:  # an unknown host: let Numba choose
        return ""


def _with_512_bit_vectors(features: str) -> str | None:
    """The host features with 512-bit vectors preferred, where the CPU has AVX-512; None elsewhere."""
    return features + ",-prefer-256-bit" if "+avx512f" in features else None


def configure_numba_env(threads: int | None = None) -> dict:
    """Set Numba's environment before it compiles anything; return what was decided.

    * NUMBA_CPU_FEATURES: the host's features plus ``-prefer-256-bit`` where the
      CPU has AVX-512, or LLVM emits 256-bit vectors on Intel and loses half the
      peak.  A value the user set is left alone.
    * NUMBA_NUM_THREADS: at least the requested thread count (Numba caps
      set_num_threads at its pool size, which defaults to the core count).

    Numba reads these when it is imported.  Nothing in ert imports numba before
    this runs (``probe()`` only looks the package up); should something else
    have imported it already, its configuration is reloaded here, which is
    enough while nothing has been compiled yet.  ``effective_codegen()`` says
    what was really used, and the backend records that.
    """
    decided = {}
    _check_num_threads()
    if "NUMBA_CPU_FEATURES" not in os.environ:
        features = _with_512_bit_vectors(_host_features())
        if features:
            os.environ["NUMBA_CPU_FEATURES"] = features
            decided["cpu_features"] = "host,-prefer-256-bit"
    # Pin each thread to its own core (Numba's OpenMP layer honours these), so a
    # thread's block stays in its core's private caches between calls.  Values
    # the user or a job script set are left alone.
    if "OMP_PROC_BIND" not in os.environ and "OMP_PLACES" not in os.environ:
        os.environ["OMP_PROC_BIND"] = "close"
        os.environ["OMP_PLACES"] = "cores"
        decided["pinning"] = "OMP_PROC_BIND=close OMP_PLACES=cores"
    if threads is not None:
        pool = int(os.environ.get("NUMBA_NUM_THREADS", "0") or 0)
        if pool < threads:
            os.environ["NUMBA_NUM_THREADS"] = str(max(threads, os.cpu_count() or 1))
    if "numba" in sys.modules:
        from numba.core import config

        if config.CPU_FEATURES != os.environ.get("NUMBA_CPU_FEATURES"):
            config.reload_config()
    return decided


def _check_num_threads() -> None:
    # Numba parses NUMBA_NUM_THREADS when imported and raises deep inside; say it in one line first.
    value = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if value and not (value.isdigit() and int(value) > 0):
        from ert.errors import ErtError

        raise ErtError(f"NUMBA_NUM_THREADS={value[:40]!r} is not a positive integer: unset it or give a count",
                       key="environment")


def effective_codegen() -> dict:
    """The CPU name and features Numba's code generator really uses (after it exists)."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    return {"cpu_name": codegen._get_host_cpu_name(), "cpu_features": codegen._tm_features}


def vector_isa(features: str, machine: str | None = None) -> tuple[int, int]:
    """(vector bytes, vector registers) the code generator targets, from its feature string."""
    machine = machine or platform.machine()
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return (32 if "+prefer-256-bit" in flags else 64), 32
    if "+avx" in flags or "+avx2" in flags:
        return 32, 16
    if machine in ("aarch64", "arm64"):
        return 16, 32
    return 16, 16


def chain_candidates(vector_registers: int) -> tuple[int, ...]:
    """Independent FMA chains per thread to sweep: enough for units x latency, with headroom, spill-free.

    Two registers hold the multiplier and the addend.  8 chains cover two FMA
    units of latency 4 (Skylake-SP to Granite Rapids, Zen 3 to Zen 5); 16 (12
    with 16 registers) give the headroom a no-FMA pair (multiply then add,
    latency 5 to 7) and cores with four FMA pipes (Neoverse V1/V2) need.
    """
    return (8, 16) if vector_registers >= 32 else (8, 12)


class Geometry:
    """How the kernels cut a thread's block for one ISA: sub-block widths, the granule, the chains swept.

    Pure arithmetic on (vector bytes, vector registers), so the plan can be
    made (``ert validate``) without importing numba.
    """

    ADD_UNROLL = 8  # the add kernel has no dependence: 8 registers per iteration hide the loop

    def __init__(self, vector_bytes: int, vector_registers: int):
        self.vector_bytes, self.vector_registers = vector_bytes, vector_registers
        self.chains = chain_candidates(vector_registers)
        # Load-only accumulators: the largest power of two up to the compute
        # chains' largest candidate (two loads per cycle x add latency 4 needs 8;
        # 16 leave headroom), so the accumulator is one power-of-two vector (see
        # kernels.numba_cpu._pieces): 16 with 32 vector registers, 8 with 16.
        self.ro_accumulators = 1 << (max(self.chains).bit_length() - 1)

    @classmethod
    def of_host(cls) -> "Geometry":
        """The geometry configure_numba_env() gives this host (llvmlite only, no numba import)."""
        host = _host_features()
        features = os.environ.get("NUMBA_CPU_FEATURES") or _with_512_bit_vectors(host) or host
        return cls(*vector_isa(features))

    def widths(self, spec: KernelSpec) -> dict[int, int]:
        """Chains (vector registers per sub-block) to the sub-block's elements, for this kernel."""
        lanes = self.vector_bytes // spec.itemsize
        if spec.access == "ro":
            chains = (self.ro_accumulators,)
        elif spec.flops_per_element == 1:
            chains = (self.ADD_UNROLL,)
        else:
            chains = self.chains
        return {c: c * lanes for c in chains}

    def granule_elements(self, spec: KernelSpec) -> int:
        """Every chain count's sub-block divides a thread's block; bandwidth kernels get two at least.

        With a single sub-block per thread, LLVM may keep it in registers
        across trials (its loads and stores become loop-invariant), which
        would remove the very traffic a bandwidth kernel measures.
        """
        granule = math.lcm(*self.widths(spec).values())
        return granule * 2 if spec.flops_per_element == 1 else granule

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        """The chain counts this kernel is measured with at one working set (recorded per point)."""
        return [{"chains": c} for c in self.widths(spec)]


_REGISTER_BITS = (("zmm", 512), ("ymm", 256), ("xmm", 128))


def asm_vector_bits(asm: str) -> int | None:
    """Widest vector register an assembly listing computes with (x86 zmm/ymm/xmm, Arm q/v), None if none."""
    for reg, bits in _REGISTER_BITS:
        if re.search(rf"\bv(add|fmadd|mul)\w*\s[^\n]*%{reg}\d", asm):
            return bits
    if re.search(r"\bfadd\s+v\d+\.(2d|4s)", asm):
        return 128
    return None
