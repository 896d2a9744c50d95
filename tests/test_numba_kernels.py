"""The Numba CPU kernels and their host-replay check, run for real (slow: every test compiles kernels or reads
the assembly Numba made); the backend's host logic that compiles nothing is tests/test_numba_cpu.py."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import background
import pytest

from ert.backends import check
from ert.backends.numba_cpu import A, ALIGN_BYTES, C, NumbaCpuBackend
from ert.backends.check import fma_exact, replay_rw
from ert.kernels import numba_cpu as kernels
from ert.spec import KernelSpec

pytestmark = pytest.mark.slow

THREADS = 2


def _host_features() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_features().flatten()


X86 = platform.machine().lower() in ("x86_64", "amd64")
# Every 64-bit ARM core has FMA; an x86 core says so in its features.
HAS_FMA = not X86 or "+fma" in _host_features()
needs_fma = pytest.mark.skipif(not HAS_FMA, reason="the CPU has no fused multiply-add")
needs_x86 = pytest.mark.skipif(not X86, reason="the assembly checks read x86 mnemonics")
DTYPES = {"fp64": np.float64, "fp32": np.float32}

SPECS = [
    KernelSpec("fp64", 1, False, "rw"), KernelSpec("fp32", 1, False, "rw"),
    KernelSpec("fp64", 8, True, "rw"), KernelSpec("fp32", 8, True, "rw"),
    KernelSpec("fp64", 8, False, "rw"), KernelSpec("fp32", 8, False, "rw"),
    KernelSpec("fp64", 2, True, "rw"), KernelSpec("fp32", 32, False, "rw"),
    KernelSpec("fp64", 1, False, "ro"), KernelSpec("fp32", 1, False, "ro"),
]
RW_SPECS = [s for s in SPECS if s.access == "rw"]


@pytest.fixture(scope="module")
def backend():
    b = NumbaCpuBackend(threads=THREADS)
    yield b
    b.close()


def prepared(backend, spec, granules=4):
    n = backend.granule_elements(spec) * granules
    backend.prepare(spec, elements_per_thread=n)
    return n


# --------------------------------------------------------------------------- prepare, run, check


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_prepare_run_check_passes(backend, spec):
    n = prepared(backend, spec)
    assert backend._view.size == n * THREADS and backend._view.dtype == DTYPES[spec.precision]
    for trials in (1, 2, 5):  # several calls: the trial count and parity carry over between them
        seconds = backend.run(trials)
        assert isinstance(seconds, float) and seconds >= 0
    assert backend._trials_done == 8
    result = backend.check()
    assert result.ok, result.detail


@pytest.mark.parametrize("spec", RW_SPECS[:4], ids=lambda s: s.key)
def test_check_after_many_trials(backend, spec):
    prepared(backend, spec, granules=2)
    backend.run(1001)  # past the point where the replay settles into its period-2 cycle
    result = backend.check()
    assert result.ok, result.detail


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_zero_trials_checks_the_initial_values(backend, spec):
    prepared(backend, spec)
    assert backend.check().ok


@pytest.mark.parametrize("spec", RW_SPECS, ids=lambda s: s.key)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_corrupted_element_fails_the_check_and_is_named(backend, spec, where):
    n = prepared(backend, spec)
    backend.run(3)
    thread, index = {"first": (0, 0), "middle": (1, n // 2 + 3), "last": (THREADS - 1, n - 1)}[where]
    buf = backend._view
    relative = 1e-9 if spec.precision == "fp64" else 1e-3  # well above the tolerance, far below O(1)
    buf[thread * n + index] = buf[thread * n + index] * (1 + relative) + relative
    result = backend.check()
    assert not result.ok
    assert f"element {index} of thread {thread}" in result.detail, result.detail


@pytest.mark.parametrize("spec", RW_SPECS[:2], ids=lambda s: s.key)
def test_nan_fails_the_check(backend, spec):
    n = prepared(backend, spec)
    backend.run(2)
    backend._view[n + 5] = np.nan
    result = backend.check()
    assert not result.ok and "element 5 of thread 1" in result.detail


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_wrong_trial_bookkeeping_fails_the_check(backend, spec):
    prepared(backend, spec)
    backend.run(4)
    assert backend.check().ok
    backend._trials_done += 1  # one trial claimed that never ran
    result = backend.check()
    assert not result.ok, f"an off-by-one in the trial count went unnoticed: {result.detail}"


def test_ro_check_fails_when_a_thread_sum_is_wrong(backend):
    prepared(backend, KernelSpec("fp64", 1, False, "ro"))
    backend.run(3)
    backend._ro_out[1] *= 1 + 1e-6
    result = backend.check()
    assert not result.ok and "load-only" in result.detail


def test_prepare_refuses_a_partial_granule(backend):
    spec = KernelSpec("fp64", 1, False)
    granule = backend.granule_elements(spec)
    # Two sub-blocks of the add kernel at least (one would let LLVM keep it in registers across trials).
    assert granule * spec.itemsize == 2 * backend.add_unroll * backend.vector_bytes
    for bad in (0, granule - 1, granule + 1):
        with pytest.raises(ValueError):
            backend.prepare(spec, elements_per_thread=bad)
    with pytest.raises(ValueError):
        backend.prepare(KernelSpec("fp16", 1, False), elements_per_thread=256)


def test_threads_own_contiguous_blocks(backend):
    """Each thread's block ends up with exactly the replay values: no thread skipped or overlapped."""
    spec = KernelSpec("fp64", 1, False)
    n = prepared(backend, spec, granules=3)
    backend.run(3)
    expected = replay_rw(spec, trials=3)
    np.testing.assert_array_equal(backend._view, np.tile(expected, n * THREADS // 16))


# --------------------------------------------------------------------------- FMA or not, by value


def _exact_replay(dtype, fma_ops, trials, fused):
    """Exact rationals, rounded to ``dtype`` once per multiply-add (fused) or after each operation."""
    def rnd(x):
        return Fraction(float(dtype(float(x)))) if dtype is np.float32 else Fraction(float(x))

    a, c = Fraction(A), Fraction(C)
    xs = [Fraction(float(v)) for v in check.initial_values(dtype)]
    for tr in range(trials):
        ct = c if tr % 2 == 0 else -c
        for _ in range(fma_ops):
            xs = [rnd(x * a + ct) if fused else rnd(rnd(x * a) + ct) for x in xs]
    return np.array([float(x) for x in xs], dtype=dtype)


@needs_fma
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_fma_kernel_fuses_and_no_fma_kernel_does_not(precision):
    """Bit-level: the no-FMA kernel rounds twice per multiply-add, the FMA kernel once."""
    dtype = DTYPES[precision]
    width = 8 * 64 // np.dtype(dtype).itemsize  # 8 zmm-sized registers (LLVM splits it as the CPU allows)
    trials, ops, n = 7, 4, 2 * width
    separate = _exact_replay(dtype, ops, trials, fused=False)
    fused = _exact_replay(dtype, ops, trials, fused=True)
    assert not np.array_equal(separate, fused), "the test needs values where fusing changes the rounding"
    results = {}
    for name, fused_kernel in (("fma", True), ("nofma", False)):
        buf = np.empty(THREADS * n, dtype)
        kernels.init_blocks(buf, THREADS, n, check.initial_values(dtype))
        kernels.make_rw_madd(width, fused_kernel)(buf, THREADS, n, trials, 0, ops, dtype(A), dtype(C))
        results[name] = buf.reshape(-1, 16)
    np.testing.assert_array_equal(results["nofma"], np.tile(separate, (results["nofma"].shape[0], 1)),
                                  err_msg="the no-FMA kernel is fused (or otherwise not rounded per operation)")
    np.testing.assert_array_equal(results["fma"], np.tile(fused, (results["fma"].shape[0], 1)),
                                  err_msg="the FMA kernel does not fuse")
    # And the one host replay (ert.backends.check) is each of them, bit for bit.
    np.testing.assert_array_equal(replay_rw(KernelSpec(precision, 2 * ops, False), trials=trials), separate)
    if fma_exact(precision):
        np.testing.assert_array_equal(replay_rw(KernelSpec(precision, 2 * ops, True), trials=trials), fused)


# --------------------------------------------------------------------------- assembly

ASM_SCRIPT = textwrap.dedent("""
    import json, re, sys, warnings
    import numpy as np
    from numba import types
    from ert.backends.numba_codegen import Geometry, chain_candidates, configure_numba_env, effective_codegen, vector_isa
    configure_numba_env(2)
    from ert.kernels import numba_cpu as k
    vector_bytes, registers = vector_isa(effective_codegen()["cpu_features"])
    out = {"vector_bytes": vector_bytes, "cpu_name": effective_codegen()["cpu_name"]}
    arr = {"fp64": types.float64[::1], "fp32": types.float32[::1]}
    scalar = {"fp64": types.float64, "fp32": types.float32}
    i64 = types.int64

    def asm_of(kernel, sig):
        # Compiled, not called: the same code whether or not this CPU could run it.
        kernel.compile(sig)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            text = kernel.inspect_asm(sig)
        return text, [str(w.message) for w in caught]

    # FMA first: the order in which a shared cache entry would hand the FMA code to the no-FMA kernel.
    for prec in ("fp64", "fp32"):
        lanes = vector_bytes // np.dtype(prec.replace("fp", "float")).itemsize
        for chains in chain_candidates(registers):
            for name, fused in (("fma", True), ("nofma", False)):
                sig = (arr[prec], i64, i64, i64, i64, i64, scalar[prec], scalar[prec])
                out[f"{prec}-{name}-c{chains}"] = asm_of(k.make_rw_madd(chains * lanes, fused), sig)
        out[f"{prec}-add"] = asm_of(k.make_rw_add(8 * lanes), (arr[prec], i64, i64, i64, i64, scalar[prec]))
        acc = Geometry(vector_bytes, registers).ro_accumulators
        out[f"{prec}-ro"] = asm_of(k.make_ro_sum(acc * lanes), (arr[prec], i64, i64, i64, i64, types.float64[::1]))
    print(json.dumps(out))
""")


# Sapphire Rapids as configure_numba_env() sets it up on such a host: its own
# features (LLVM's for the CPU name) with 512-bit vectors preferred.
SAPPHIRE_RAPIDS = {"NUMBA_CPU_NAME": "sapphirerapids",
                   "NUMBA_CPU_FEATURES": "+avx512f,+avx512dq,+avx512bw,+avx512vl,+avx2,+fma,+avx,-prefer-256-bit"}


# An AVX2 core with 16 vector registers (Haswell/Broadwell; Zen 2/3 likewise): chains 8 and 12.
HASWELL = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx2,+fma,+avx,+sse4.2,+popcnt,+bmi2,+f16c"}


def _start_asm(cache_dir: str, **env_extra) -> subprocess.Popen:
    """Assembly of every kernel variant, compiled in a subprocess with an empty Numba cache (started here).

    inspect_asm() has nothing to show for a kernel loaded from the cache, so the
    kernels are compiled anew.  ``env_extra`` can name another CPU to compile
    for (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES): the code is read, never run.
    """
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, **env_extra)
    return subprocess.Popen([sys.executable, "-c", ASM_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _asm_of(proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


@background.job("numba_kernels.targets", fixture="targets")
def _compile_targets() -> dict:
    """{"host" | "haswell" | "sapphirerapids": assembly}: the three compiles side by side (one per core; each
    compiles alone in its process, with an empty Numba cache of its own, the main process only waits)."""
    caches = tempfile.mkdtemp(prefix="ert-test-numba-asm-")
    started = {"host": _start_asm(os.path.join(caches, "host"))}
    if X86:
        started["haswell"] = _start_asm(os.path.join(caches, "haswell"), **HASWELL)
        started["sapphirerapids"] = _start_asm(os.path.join(caches, "sapphirerapids"), **SAPPHIRE_RAPIDS)
    try:
        return {name: _asm_of(proc) for name, proc in started.items()}
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(caches, ignore_errors=True)


@pytest.fixture(scope="module")
def targets() -> dict:
    """The assembly of every kernel variant for this CPU and two others, compiled in the background
    (tests/background.py)."""
    return background.result("numba_kernels.targets")


@pytest.fixture(scope="module")
def asm(targets):
    return targets["host"]


@pytest.fixture(scope="module")
def avx2_asm(targets):
    if not X86:
        pytest.skip("cross-compiling for an x86 target needs an x86 LLVM host here")
    return targets["haswell"]


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_avx2_target_12_chains_stay_in_registers(avx2_asm, precision):
    """12 chains (not a power of two) on 16 ymm registers: held in power-of-two pieces, never spilled.

    Held as one <12 x lanes> vector, LLVM widened and shuffled it through the
    stack: the 12-chain kernels ran at 1/8 of the 8-chain rate (Haswell-target
    build on Zen 5: 15.6 against 125 GFLOP/s FP64 FMA; after the fix 131).
    """
    assert avx2_asm["cpu_name"] == "haswell" and avx2_asm["vector_bytes"] == 32
    for chains in (8, 12):
        _check_madd(avx2_asm[f"{precision}-fma-c{chains}"], min_chains=chains, register="y")
        text, _ = avx2_asm[f"{precision}-nofma-c{chains}"]
        suffix = "pd" if precision == "fp64" else "ps"
        facts = loop_facts(hot_loop(text, f"vmul{suffix}"), f"vmul{suffix}")
        assert facts["memory_ops"] == 0 and facts["chains"] >= chains and facts["wide"] == {"y"}, facts
    ro = loop_facts(hot_loop(avx2_asm[f"{precision}-ro"][0], f"vadd{precision == 'fp64' and 'pd' or 'ps'}",
                             from_memory=True), f"vadd{precision == 'fp64' and 'pd' or 'ps'}")
    assert ro["stores"] == 0 and ro["loads"] == ro["ops"] and ro["chains"] >= 8 and ro["wide"] == {"y"}, ro


@pytest.fixture(scope="module")
def intel_asm(targets):
    if not X86:
        pytest.skip("cross-compiling for an x86 target needs an x86 LLVM host here")
    return targets["sapphirerapids"]


def asm_blocks(asm_text: str, *, comment: str = "#", local_labels_only: bool = True) -> list[tuple[str, list[str]]]:
    """Basic blocks of an assembly listing: (label, instructions). AT&T listings (x86) start a block only at a
    local ``.L`` label (a function's own label is skipped); AArch64 listings (``comment="//"``) at every label."""
    blocks, label, body = [], "", []
    for line in asm_text.splitlines():
        line = line.split(comment)[0].strip()
        if not line:
            continue
        if line.endswith(":") and local_labels_only and not line.startswith("."):
            continue
        if line.endswith(":"):
            blocks.append((label, body))
            label, body = line[:-1], []
        elif not line.startswith("."):
            body.append(line)
    blocks.append((label, body))
    return blocks


def hot_loop(asm_text: str, mnemonic: str, *, from_memory: bool = False) -> list[str]:
    """The loop (a label, its fall-through blocks, up to a jump back to it) with the most ``mnemonic`` instructions.

    LLVM may unroll a loop and put a label between the copies (the target of
    an exit test), so a loop can span a few fall-through blocks.
    """
    loops = asm_loops(asm_blocks(asm_text),
                      branches_to=lambda ins, label: ins.split()[0].startswith("j") and ins.split()[-1] == label,
                      jump="jmp")
    # ``from_memory``: only instructions that read memory count (the streaming loop of a
    # bandwidth kernel, not a specialisation LLVM made for a block of one sub-block).
    hits = lambda b: sum(i.startswith(mnemonic) and (not from_memory or "(%" in i) for i in b)
    loops = [b for b in loops if hits(b)]
    assert loops, f"no loop with {mnemonic} found"
    # The innermost hot loop is the densest in the mnemonic (an enclosing loop adds other work).
    return max(loops, key=lambda b: (hits(b) / len(b), len(b)))


def asm_loops(blocks: list[tuple[str, list[str]]], *, branches_to, jump: str) -> list[list[str]]:
    """Every loop of ``blocks``: a label, its fall-through blocks (at most 4), up to a branch back to it
    (``branches_to(instruction, label)``); ``jump`` is the ISA's unconditional jump (no fall-through past it)."""
    loops = []
    for i, (label, _) in enumerate(blocks):
        if not label:
            continue
        body = []
        for _, more in blocks[i:i + 4]:
            back = [k for k, ins in enumerate(more) if branches_to(ins, label)]
            if back:
                loops.append(body + more[:back[0] + 1])
                break
            body += more
            if more and more[-1].split()[0] == jump:
                break
    return loops


def loop_facts(body: list[str], mnemonic: str) -> dict:
    """What one hot loop does per iteration: its ``mnemonic`` count, chains, loads, stores, register width."""
    ops = [i for i in body if i.startswith(mnemonic)]
    memory = [i for i in body if "(%" in i]
    stores = [i for i in memory if re.match(r"^v?mov\w*\s+%[xyz]mm\d+,\s*-?\w*\(", i)]
    return {
        "ops": len(ops),
        # AT&T: the destination is the last operand; distinct destinations are independent chains.
        "chains": len({i.split(",")[-1].strip() for i in ops}),
        "memory_ops": len(memory),
        "loads": len(memory) - len(stores),
        "stores": len(stores),
        "wide": {r for i in ops for r in re.findall(r"%([xyz])mm", i)},
    }


def test_loop_facts_reads_a_known_listing():
    """The assembly reader itself, on a hand-written loop: 2 chains, a load and a store."""
    listing = textwrap.dedent("""
        .LBB0_3:
            vfmadd213pd %zmm2, %zmm1, %zmm0
            vfmadd213pd %zmm2, %zmm1, %zmm3
            vmovupd (%rax), %zmm4
            vmovupd %zmm4, 64(%rax)
            addq $1, %rcx
            jne .LBB0_3
    """)
    facts = loop_facts(hot_loop(listing, "vfmadd"), "vfmadd")
    assert facts == {"ops": 2, "chains": 2, "memory_ops": 2, "loads": 1, "stores": 1, "wide": {"z"}}


def _check_madd(listing: list, *, min_chains: int, register: str):
    text, warned = listing
    assert not warned, f"no assembly to inspect: {warned}"
    facts = loop_facts(hot_loop(text, "vfmadd"), "vfmadd")
    assert facts["memory_ops"] == 0, "the FMA loop loads or stores: not register-resident"
    assert facts["chains"] >= min_chains, facts
    assert facts["wide"] == {register}, facts


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_no_fma_kernel_assembly_has_no_fused_multiply_add(asm, precision):
    for key in [k for k in asm if k.startswith(f"{precision}-nofma")]:
        text, warned = asm[key]
        assert not warned, f"no assembly to inspect: {warned}"
        fused = sorted(set(re.findall(r"\b(vf(?:n?madd|n?msub)\w*)", text)))
        assert fused == [], f"{key} contains {fused}"
        assert re.search(r"\bvmul\w*", text), f"{key} must multiply"


@needs_x86
@needs_fma
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_fma_kernel_hot_loop_is_register_resident_fma_chains(asm, precision):
    """As many independent FMA chains as the sweep asks for, with no load or store between the FMAs."""
    register = {64: "z", 32: "y", 16: "x"}[asm["vector_bytes"]]
    for key in [k for k in asm if k.startswith(f"{precision}-fma-c")]:
        _check_madd(asm[key], min_chains=int(key.rsplit("c", 1)[1]), register=register)


WIDEST = 512 if X86 and "+avx512f" in _host_features() else (256 if X86 and "+avx2" in _host_features() else None)


@pytest.mark.skipif(WIDEST != 512, reason="the CPU has no AVX-512 (avx512f)")
def test_kernels_use_512_bit_registers_on_avx512(asm):
    assert asm["vector_bytes"] == 64
    for key, value in asm.items():
        if isinstance(value, list):
            assert "%zmm" in value[0], f"{key} uses no zmm register: LLVM preferred 256-bit vectors"


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_intel_target_fma_loops_have_16_zmm_chains(intel_asm, precision):
    """Compiled for Sapphire Rapids (2 x 512-bit FMA units, latency 4: 8 chains needed): 8 and 16 chains, zmm, no memory."""
    assert intel_asm["cpu_name"] == "sapphirerapids" and intel_asm["vector_bytes"] == 64
    for chains in (8, 16):
        _check_madd(intel_asm[f"{precision}-fma-c{chains}"], min_chains=chains, register="z")
    text = intel_asm[f"{precision}-nofma-c16"][0]
    assert "vfmadd" not in text and re.search(r"vmulp[sd]\s[^\n]*%zmm", text)


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_intel_target_l1_loops(intel_asm, precision):
    """read+write: one 64-byte load and one 64-byte store per vector; load-only: 64-byte loads into >= 8 accumulators."""
    suffix = "pd" if precision == "fp64" else "ps"
    add = loop_facts(hot_loop(intel_asm[f"{precision}-add"][0], f"vadd{suffix}", from_memory=True), f"vadd{suffix}")
    assert add["wide"] == {"z"} and add["loads"] == add["ops"] == add["stores"] >= 8, add
    assert add["memory_ops"] == add["loads"] + add["stores"]
    ro = loop_facts(hot_loop(intel_asm[f"{precision}-ro"][0], f"vadd{suffix}", from_memory=True), f"vadd{suffix}")
    assert ro["wide"] == {"z"} and ro["stores"] == 0 and ro["loads"] == ro["ops"], ro
    assert ro["chains"] >= 8, ro


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_host_l1_loops(asm, precision):
    """The same L1 loop shape on this machine's own target."""
    suffix = "pd" if precision == "fp64" else "ps"
    register = {64: "z", 32: "y", 16: "x"}[asm["vector_bytes"]]
    add = loop_facts(hot_loop(asm[f"{precision}-add"][0], f"vadd{suffix}", from_memory=True), f"vadd{suffix}")
    assert add["wide"] == {register} and add["loads"] == add["ops"] == add["stores"] >= 8, add
    assert add["memory_ops"] == add["loads"] + add["stores"]
    ro = loop_facts(hot_loop(asm[f"{precision}-ro"][0], f"vadd{suffix}", from_memory=True), f"vadd{suffix}")
    assert ro["stores"] == 0 and ro["loads"] == ro["ops"] and ro["chains"] >= 8, ro


# --------------------------------------------------------------------------- the host side of the kernels


def test_initial_values_are_what_init_blocks_writes():
    buf = np.empty(2 * 64, np.float64)
    kernels.init_blocks(buf, 2, 64, check.initial_values(np.float64))
    np.testing.assert_array_equal(buf, np.tile(check.initial_values(np.float64), 8))
    assert len(set(check.initial_values(np.float64).tolist())) == 16


# --------------------------------------------------------------------------- alignment


def test_the_backends_buffer_is_aligned_for_its_widest_vector(backend):
    """A vector load or store that straddles the alignment splits in two: the buffer starts on a multiple of
    the widest register the kernels use (and of a 64-byte cache line)."""
    assert ALIGN_BYTES % backend.vector_bytes == 0 and ALIGN_BYTES % 64 == 0
    for spec in (SPECS[0], SPECS[1]):
        prepared(backend, spec)
        assert backend._view.ctypes.data % max(ALIGN_BYTES, backend.vector_bytes) == 0


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[1], SPECS[-1]], ids=lambda s: s.key)
@pytest.mark.parametrize("granules", [1, 3, 64])
def test_prepared_buffer_is_64_byte_aligned(backend, spec, granules):
    n = prepared(backend, spec, granules=granules)
    view = backend._view
    assert view.ctypes.data % 64 == 0
    # Every thread's block starts on a 64-byte boundary too.
    assert all((view.ctypes.data + t * n * spec.itemsize) % 64 == 0 for t in range(THREADS))


def test_the_vector_probe_compiles_once_per_machine_and_kernel_source(backend, tmp_path, monkeypatch):
    """The probe's answer is kept beside Numba's cache (here NUMBA_CACHE_DIR): a second reading takes it instead
    of compiling; another kernel source or a spoilt file makes it compile again."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    compiled = []
    real = NumbaCpuBackend._compile_vector_probe

    def counting(self):
        compiled.append(1)
        return real(self)

    monkeypatch.setattr(NumbaCpuBackend, "_compile_vector_probe", counting)
    first = backend.vector_bits_compiled()
    assert len(compiled) == 1 and first in (128, 256, 512)
    kept = json.loads((tmp_path / "ert-vector-probe.json").read_text())
    assert list(kept.values()) == [first]
    assert backend.vector_bits_compiled() == first and len(compiled) == 1   # read, not compiled
    (tmp_path / "ert-vector-probe.json").write_text("{not json")
    assert backend.vector_bits_compiled() == first and len(compiled) == 2
    # Another kernel source (a copy elsewhere, as an edited or reinstalled one): compiled again, its own key.
    copy = tmp_path / "numba_cpu.py"
    copy.write_text(Path(kernels.__file__).read_text())
    monkeypatch.setattr(backend, "_k", SimpleNamespace(__file__=str(copy), sub_add=kernels.sub_add))
    assert backend.vector_bits_compiled() == first and len(compiled) == 3
    assert len(json.loads((tmp_path / "ert-vector-probe.json").read_text())) == 2


def test_describe(backend):
    info = backend.describe()
    assert info["backend"] == "numba-cpu" and info["threads"] == THREADS
    assert info["alignment_bytes"] == 64 and info["chains_swept"] == list(backend.chains)
    if WIDEST:
        # What Numba really compiled with: the widest vectors this CPU offers.
        assert info["numba_effective"]["vector_bits"] == WIDEST
        assert ("+avx512f" in info["numba_effective"]["cpu_features"]) == (WIDEST == 512)
