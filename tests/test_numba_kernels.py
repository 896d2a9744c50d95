"""The Numba CPU kernels and their host-replay check, run for real."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

from ert.backends import numba_cpu as backend_mod
from ert.backends.numba_cpu import A, ALIGN_BYTES, C, NumbaCpuBackend, _aligned_empty
from ert.kernels import numba_cpu as kernels
from ert.spec import KernelSpec

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
    assert granule * spec.itemsize == kernels.GRANULE_BYTES
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
    expected = kernels.replay_rw(dtype=np.dtype(np.float64), fma_ops=0, trials=3, a=A, c=C)
    np.testing.assert_array_equal(backend._view, np.tile(expected, n * THREADS // 16))


# --------------------------------------------------------------------------- FMA or not, by value


def _exact_replay(dtype, fma_ops, trials, fused):
    """Exact rationals, rounded to ``dtype`` once per multiply-add (fused) or after each operation."""
    def rnd(x):
        return Fraction(float(dtype(float(x)))) if dtype is np.float32 else Fraction(float(x))

    a, c = Fraction(A), Fraction(C)
    xs = [Fraction(float(v)) for v in kernels.initial_values(dtype)]
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
    trials, ops, n = 7, 4, 2 * kernels.GRANULE_BYTES // np.dtype(dtype).itemsize
    separate = _exact_replay(dtype, ops, trials, fused=False)
    fused = _exact_replay(dtype, ops, trials, fused=True)
    assert not np.array_equal(separate, fused), "the test needs values where fusing changes the rounding"
    results = {}
    for name, table in (("fma", kernels.RW_FMA), ("nofma", kernels.RW_NOFMA)):
        buf = np.empty(THREADS * n, dtype)
        kernels.init_blocks(buf, THREADS, n)
        table[precision](buf, THREADS, n, trials, 0, ops, dtype(A), dtype(C))
        results[name] = buf.reshape(-1, 16)
    np.testing.assert_array_equal(results["nofma"], np.tile(separate, (results["nofma"].shape[0], 1)),
                                  err_msg="the no-FMA kernel is fused (or otherwise not rounded per operation)")
    np.testing.assert_array_equal(results["fma"], np.tile(fused, (results["fma"].shape[0], 1)),
                                  err_msg="the FMA kernel does not fuse")
    # And the host replay is the separately rounded recurrence.
    np.testing.assert_array_equal(
        kernels.replay_rw(dtype=np.dtype(dtype), fma_ops=ops, trials=trials, a=A, c=C), separate)


# --------------------------------------------------------------------------- assembly

ASM_SCRIPT = textwrap.dedent('''
    import json, re, warnings
    import numpy as np
    from ert.backends.numba_cpu import configure_numba_env
    configure_numba_env(2)
    from ert.kernels import numba_cpu as k
    out = {}
    # FMA first: the order in which a shared cache entry would hand the FMA code to the no-FMA kernel.
    for prec, dt in (("fp64", np.float64), ("fp32", np.float32)):
        for name, table in (("fma", k.RW_FMA), ("nofma", k.RW_NOFMA)):
            buf = np.ones(2 * 512, dt)
            table[prec](buf, 2, 512, 1, 0, 4, dt(0.9375), dt(0.0625))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                asm = "\\n".join(table[prec].inspect_asm().values())
            out[prec + "-" + name] = {
                "asm_chars": len(asm),
                "warnings": [str(w.message) for w in caught],
                "fused": sorted(set(re.findall(r"\\b(vf(?:n?madd|n?msub)\\w*)", asm))),
                "vmul": len(re.findall(r"\\bvmul\\w*", asm)),
                "zmm": asm.count("%zmm"),
            }
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def asm(tmp_path_factory):
    """Assembly of the four rw kernels, compiled fresh in a subprocess with an empty Numba cache.

    inspect_asm() has nothing to show for a kernel loaded from the cache, so the
    kernels are compiled anew; the FMA kernels are compiled first.
    """
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path_factory.mktemp("numba-cache")))
    proc = subprocess.run([sys.executable, "-c", ASM_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_x86
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_no_fma_kernel_assembly_has_no_fused_multiply_add(asm, precision):
    info = asm[f"{precision}-nofma"]
    assert not info["warnings"], f"no assembly to inspect: {info['warnings']}"
    assert info["fused"] == [], f"no-FMA kernel contains {info['fused']}"
    assert info["vmul"] > 0, "the no-FMA kernel must multiply"


@needs_x86
@needs_fma
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_fma_kernel_assembly_has_vfmadd(asm, precision):
    info = asm[f"{precision}-fma"]
    assert not info["warnings"], f"no assembly to inspect: {info['warnings']}"
    assert any(name.startswith("vfmadd") for name in info["fused"]), info


@pytest.mark.skipif(not X86 or "+avx512f" not in _host_features(), reason="the CPU has no AVX-512 (avx512f)")
@pytest.mark.parametrize("kernel", ["fp64-fma", "fp64-nofma", "fp32-fma", "fp32-nofma"])
def test_kernels_use_512_bit_registers_on_avx512(asm, kernel):
    assert asm[kernel]["zmm"] > 0, f"{kernel} uses no zmm register: LLVM preferred 256-bit vectors"


def test_configure_numba_env_keeps_a_user_setting(monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2")
    assert backend_mod.configure_numba_env() == {}
    assert os.environ["NUMBA_CPU_FEATURES"] == "+avx2"


# --------------------------------------------------------------------------- the host replay


def _straight_replay(dtype, fma_ops, trials):
    """The recurrence as written in the kernel docstring, one scalar at a time, no shortcuts."""
    a, c = dtype(A), dtype(C)
    out = []
    for x in kernels.initial_values(dtype):
        x = dtype(x)
        for tr in range(trials):
            ct = c if tr % 2 == 0 else dtype(-c)
            if fma_ops == 0:
                x = dtype(x + ct)
            else:
                for _ in range(fma_ops):
                    x = dtype(dtype(x * a) + ct)
        out.append(x)
    return np.array(out, dtype=dtype)


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("fma_ops", [0, 1, 4])
@pytest.mark.parametrize("trials", [0, 1, 2, 3, 10, 41])
def test_replay_matches_a_plain_loop(precision, fma_ops, trials):
    dtype = DTYPES[precision]
    got = kernels.replay_rw(dtype=np.dtype(dtype), fma_ops=fma_ops, trials=trials, a=A, c=C)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, _straight_replay(dtype, fma_ops, trials))


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("trials", [400, 401])
def test_replay_shortcut_matches_the_long_way(precision, trials):
    """The replay stops at the period-2 cycle; the parity of what is left must pick the right state."""
    dtype = DTYPES[precision]
    got = kernels.replay_rw(dtype=np.dtype(dtype), fma_ops=2, trials=trials, a=A, c=C)
    np.testing.assert_array_equal(got, _straight_replay(dtype, 2, trials))


def test_initial_values_are_what_init_blocks_writes():
    buf = np.empty(2 * 64, np.float64)
    kernels.init_blocks(buf, 2, 64)
    np.testing.assert_array_equal(buf, np.tile(kernels.initial_values(np.float64), 8))
    assert len(set(kernels.initial_values(np.float64).tolist())) == 16


# --------------------------------------------------------------------------- alignment


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 4099])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_aligned_empty(n, dtype):
    arrays = [_aligned_empty(n, dtype) for _ in range(8)]
    for arr in arrays:
        assert arr.ctypes.data % ALIGN_BYTES == 0
        assert arr.size == n and arr.dtype == dtype
    assert ALIGN_BYTES == 64


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[1], SPECS[-1]], ids=lambda s: s.key)
@pytest.mark.parametrize("granules", [1, 3, 64])
def test_prepared_buffer_is_64_byte_aligned(backend, spec, granules):
    n = prepared(backend, spec, granules=granules)
    view = backend._view
    assert view.ctypes.data % 64 == 0
    # Every thread's block starts on a 64-byte boundary too.
    assert all((view.ctypes.data + t * n * spec.itemsize) % 64 == 0 for t in range(THREADS))


def test_describe(backend):
    info = backend.describe()
    assert info["backend"] == "numba-cpu" and info["threads"] == THREADS
    assert info["alignment_bytes"] == 64 and info["granule_bytes"] == kernels.GRANULE_BYTES
