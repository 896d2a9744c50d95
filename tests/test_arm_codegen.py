"""The AArch64 code of the CPU kernels, read on any machine: Numba's IR of the real kernels, compiled by the LLVM
inside llvmlite for an aarch64 target (Neoverse V2, Neoverse N1) at -O3, and the hot loops read as the x86 tests
read theirs (tests/test_numba_kernels.py).  The same kernels compiled natively on aarch64 are read under the
arm64 rig (tests/test_arm_rig.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from ert.backends.numba_codegen import Geometry, chain_candidates, vector_isa
from ert.hardware import cpu
from test_numba_kernels import asm_blocks, asm_loops

pytestmark = pytest.mark.slow

TRIPLE = "aarch64-unknown-linux-gnu"

# Numba's IR of each kernel variant, unoptimised (NUMBA_OPT=0: no pass of the x86 host has run, so the IR is the
# kernels' own, target-neutral), for the AArch64 geometry (16-byte vectors, 32 registers).
IR_SCRIPT = textwrap.dedent("""
    import json
    from numba import types
    from ert.backends.numba_codegen import Geometry, configure_numba_env, vector_isa
    from ert.spec import KernelSpec
    configure_numba_env(2)
    from ert.kernels import numba_cpu as k
    geo = Geometry(*vector_isa("", machine="aarch64"))
    arr, i64, f64 = types.float64[::1], types.int64, types.float64
    out = {}

    def ir_of(kernel, sig):
        kernel.compile(sig)
        return kernel.inspect_llvm(sig)

    for fused in (True, False):
        for chains, width in geo.widths(KernelSpec("fp64", 8, fused, "rw")).items():
            out[f"{'fma' if fused else 'nofma'}-c{chains}"] = ir_of(k.make_rw_madd(width, fused),
                                                                  (arr, i64, i64, i64, i64, i64, f64, f64))
    (width,) = geo.widths(KernelSpec("fp64", 1, False, "rw")).values()
    out["add"] = ir_of(k.make_rw_add(width), (arr, i64, i64, i64, i64, f64))
    (width,) = geo.widths(KernelSpec("fp64", 1, False, "ro")).values()
    out["ro"] = ir_of(k.make_ro_sum(width), (arr, i64, i64, i64, i64, types.float64[::1]))
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def kernel_ir(tmp_path_factory):
    env = dict(os.environ, NUMBA_OPT="0", NUMBA_CACHE_DIR=str(tmp_path_factory.mktemp("numba-cache")))
    proc = subprocess.run([sys.executable, "-c", IR_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def aarch64_asm(ir_text: str, cpu_name: str) -> str:
    """``ir_text`` compiled for ``cpu_name`` on aarch64 Linux: -O3 (llvmlite's pass builder), then assembly."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # The host's target attributes and layout go; the aarch64 target machine's come in.
    text = re.sub(r'"target-(cpu|features)"="[^"]*"', "", ir_text)
    text = re.sub(r"^target (triple|datalayout) = .*$", "", text, flags=re.M)
    tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=cpu_name, features="", opt=3)
    module = llvm.parse_assembly(text)
    module.triple, module.data_layout = TRIPLE, str(tm.target_data)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    return tm.emit_assembly(module)


# --------------------------------------------------------------------------- reading an AArch64 listing
_BRANCHES = ("b", "cbz", "cbnz", "tbz", "tbnz")
_MEMORY = re.compile(r"\[(x\d+|sp)\b")  # an address operand, not a lane index (v26.d[0])


def _is_branch_to(ins: str, label: str) -> bool:
    op = ins.split()[0]
    return (op in _BRANCHES or op.startswith("b.")) and ins.replace(",", " ").split()[-1] == label


def a64_hot_loop(asm_text: str, mnemonic: str, *, from_memory: bool = False) -> list[str]:
    """The loop (a label, its fall-through blocks, up to a branch back to it) densest in ``mnemonic``."""
    loops = asm_loops(asm_blocks(asm_text, comment="//", local_labels_only=False), branches_to=_is_branch_to,
                      jump="b")
    hits = lambda b: sum(i.split()[0] == mnemonic and (not from_memory or _MEMORY.search(i) is not None) for i in b)
    loops = [b for b in loops if hits(b)]
    assert loops, f"no loop with {mnemonic} found"
    return max(loops, key=lambda b: (hits(b) / len(b), len(b)))


def _registers(ins: str) -> int:
    """Vector registers one load or store moves (ldp/stp: two; ld1 {v0.2d, v1.2d}: as many as listed)."""
    op = ins.split()[0]
    if op in ("ldp", "stp"):
        return 2
    listed = re.search(r"\{([^}]*)\}", ins)
    return len(listed.group(1).split(",")) if listed else 1


def a64_loop_facts(body: list[str], mnemonic: str) -> dict:
    """Per iteration: ``mnemonic`` count, independent chains (distinct destinations), vector loads and stores
    (registers moved), the arrangements used, and the register copies (``mov vN.16b``) beside them."""
    ops = [i for i in body if i.split()[0] == mnemonic]
    memory = [i for i in body if _MEMORY.search(i)]
    vector = lambda i: re.match(r"^\w+\s+\{?[qv]\d", i) is not None
    return {
        "ops": len(ops),
        "chains": len({i.split()[1].rstrip(",") for i in ops}),
        "memory_ops": len(memory),
        "loads": sum(_registers(i) for i in memory if i.startswith("ld") and vector(i)),
        "stores": sum(_registers(i) for i in memory if i.startswith("st") and vector(i)),
        "arrangements": {a for i in ops for a in re.findall(r"v\d+\.(\d+[bhsd])\b", i)},
        "copies": sum(1 for i in body if re.match(r"^mov\s+v\d+\.16b", i)),
    }


def test_a64_loop_reader_on_a_known_listing():
    listing = textwrap.dedent("""
        .LBB4_13:
            mov     v25.16b, v0.16b
            subs    x12, x12, #8
            fmla    v25.2d, v24.2d, v26.d[0]
            fmla    v24.2d, v23.2d, v26.d[0]   // a comment
            ldp     q1, q2, [x11]
            str     q3, [x11, #32]
            b.ne    .LBB4_13
    """)
    assert a64_loop_facts(a64_hot_loop(listing, "fmla"), "fmla") == {
        "ops": 2, "chains": 2, "memory_ops": 2, "loads": 2, "stores": 1, "arrangements": {"2d"}, "copies": 1}


# --------------------------------------------------------------------------- the kernels' code
@pytest.mark.parametrize("cpu_name", ["neoverse-v2", "neoverse-n1"])
def test_fp64_fma_loop_is_vector_fmla_with_the_chains_the_table_asks_for(kernel_ir, cpu_name):
    """Units x latency chains (V2: 4 x 4 = 16, N1: 2 x 4 = 8) are swept, and that kernel's inner loop is that many
    independent 2 x fp64 ``fmla`` chains held in registers, with no load or store between the FMAs."""
    needed = cpu.TABLE[cpu_name].chains_needed()
    _, registers = vector_isa("", machine="aarch64")
    assert needed in chain_candidates(registers) == tuple(Geometry(16, registers).chains)
    for chains in chain_candidates(registers):
        facts = a64_loop_facts(a64_hot_loop(aarch64_asm(kernel_ir[f"fma-c{chains}"], cpu_name), "fmla"), "fmla")
        assert facts["arrangements"] == {"2d"}, facts            # NEON, two fp64 lanes (128 bits)
        assert facts["chains"] >= chains and facts["ops"] >= chains, facts
        assert facts["memory_ops"] == 0, facts
        # fmla accumulates into its destination: b = b * a + c needs a copy of c per FMA (NEON has no
        # multiplicand-destructive FMA; SVE's fmad would); the copies are counted so a change shows here.
        assert facts["copies"] <= facts["ops"], facts


@pytest.mark.parametrize("cpu_name", ["neoverse-v2", "neoverse-n1"])
def test_no_fma_kernel_multiplies_and_adds_separately(kernel_ir, cpu_name):
    for key in [k for k in kernel_ir if k.startswith("nofma")]:
        text = aarch64_asm(kernel_ir[key], cpu_name)
        fused = sorted(set(re.findall(r"^\s*(fml[as]|fn?m(?:add|sub)|fmad|fmsb)\b", text, flags=re.M)))
        assert fused == [], f"{key} contains {fused}"
        facts = a64_loop_facts(a64_hot_loop(text, "fmul"), "fmul")
        assert facts["memory_ops"] == 0 and facts["arrangements"] == {"2d"}, facts
        assert facts["chains"] >= int(key.rsplit("c", 1)[1]), facts


def test_l1_loops_stream_q_registers(kernel_ir):
    """read+write: one 16-byte load and one store per fadd; load-only: 16-byte loads into 16 accumulators."""
    add = a64_loop_facts(a64_hot_loop(aarch64_asm(kernel_ir["add"], "neoverse-v2"), "fadd"), "fadd")
    assert add["arrangements"] == {"2d"} and add["loads"] == add["ops"] == add["stores"] >= 8, add
    ro = a64_loop_facts(a64_hot_loop(aarch64_asm(kernel_ir["ro"], "neoverse-v2"), "fadd"), "fadd")
    assert ro["stores"] == 0 and ro["loads"] == ro["ops"] and ro["chains"] >= 16, ro
