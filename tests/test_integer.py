"""Integer roofs (issue 16): int32/int64 add and multiply-add kernels on numba-cpu, their exact replay, GIOP/s ceilings."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ert.records.ceilings_io import SCHEMA_VERSION
from ert.hardware import cpu
from ert.backends.check import replay_rw, replay_rw_int, replay_rw_int_stepwise
from ert.records.ceilings_io import load_ceilings
from ert.config.schema import load
from ert.errors import ErtError
from ert.spec import KernelSpec, ops_unit

from conftest import run_cmd

INT_SPECS = [KernelSpec(p, f, False) for p in ("int32", "int64") for f in (1, 2, 8, 32)]


@pytest.mark.parametrize("spec", INT_SPECS, ids=lambda s: s.key)
@pytest.mark.parametrize("trials", [0, 1, 2, 3, 10, 37])
def test_affine_replay_is_the_stepwise_unsigned_replay(spec, trials):
    fast, slow = replay_rw_int(spec, trials=trials), replay_rw_int_stepwise(spec, trials=trials)
    assert fast.dtype == slow.dtype == np.dtype(spec.precision)
    np.testing.assert_array_equal(fast, slow)


def test_replay_is_fast_for_huge_trial_counts():
    out = replay_rw(KernelSpec("int64", 256, False), trials=10**15)  # O(log trials)
    assert out.dtype == np.int64 and len(set(out.tolist())) == 16  # odd multiplier: still 16 distinct values


def test_integer_specs():
    assert KernelSpec("int32", 8, False).key == "int32-madd-rw-f8"
    assert ops_unit("int64") == "GIOP/s" and ops_unit("fp64") == "GFLOP/s"
    with pytest.raises(ValueError, match="no fused multiply-add"):
        KernelSpec("int32", 8, True)


# --------------------------------------------------------------------------- the kernels, run


@pytest.fixture(scope="module")
def backend():
    from ert.backends.numba_cpu import NumbaCpuBackend

    b = NumbaCpuBackend(threads=2)
    yield b
    b.close()


@pytest.mark.slow
@pytest.mark.parametrize("spec", [s for s in INT_SPECS if s.flops_per_element in (1, 8)], ids=lambda s: s.key)
def test_kernels_match_the_exact_replay(backend, spec):
    assert backend.supports(spec) and not backend.supports(KernelSpec(spec.precision, 1, False, "ro"))
    granule = backend.granule_elements(spec)
    for launch in backend.launches(spec, granule):
        backend.prepare(spec, elements_per_thread=2 * granule, launch=launch)
        assert backend.check().ok  # 0 trials: the initial values
        for trials in (1, 2, 5, 8):
            backend.run(trials)
            result = backend.check()
            assert result.ok, (launch, result.detail)
    backend.corrupt_for_test()
    result = backend.check()
    assert not result.ok and "1 element(s) differ" in result.detail


@pytest.mark.slow
def test_kernels_wrap_modulo_two_to_the_bits(backend):
    # 16 multiply-adds by 1103515245 overflow any int32 at once: the values must be the wrapped ones.
    spec = KernelSpec("int32", 32, False)
    backend.prepare(spec, elements_per_thread=backend.granule_elements(spec))
    backend.run(3)
    expected = replay_rw_int_stepwise(spec, trials=3)
    np.testing.assert_array_equal(backend._view[:16], expected)
    assert backend.check().ok


# --------------------------------------------------------------------------- assembly

ASM = textwrap.dedent("""
    import json, warnings
    from numba import types
    from ert.backends.numba_codegen import configure_numba_env
    configure_numba_env(2)
    from ert.kernels import numba_cpu as k
    i64 = types.int64
    out = {}
    for prec, nb, lanes in (("int32", types.int32, 16), ("int64", types.int64, 8)):
        for name, kern, sig in (
                ("madd", k.make_rw_madd(8 * lanes, False), (nb[::1], i64, i64, i64, i64, i64, nb, nb)),
                ("add", k.make_rw_add(8 * lanes), (nb[::1], i64, i64, i64, i64, nb))):
            kern.compile(sig)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[prec + "-" + name] = kern.inspect_asm(sig)
    print(json.dumps(out))
""")


def _features() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_features().flatten()


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or "+avx512dq" not in _features(),
                    reason="reads AVX-512 (DQ: vpmullq) mnemonics")
def test_assembly_is_vector_integer_multiply_and_add_on_zmm(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", ASM], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    asm = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "vpmulld\t%zmm" in asm["int32-madd"].replace(" ", "\t") or "vpmulld %zmm" in asm["int32-madd"]
    for prec, mul, add in (("int32", "vpmulld", "vpaddd"), ("int64", "vpmullq", "vpaddq")):
        madd = asm[f"{prec}-madd"]
        assert any(mul in line and "zmm" in line for line in madd.splitlines()), f"{prec}: no {mul} on zmm"
        assert any(add in line and "zmm" in line for line in madd.splitlines()), f"{prec}: no {add} on zmm"
        assert "vfmadd" not in madd
        assert any(add in line and "zmm" in line for line in asm[f"{prec}-add"].splitlines())


# --------------------------------------------------------------------------- rated values


def test_rated_integer_values_only_where_the_table_knows_them():
    skx, _ = cpu.lookup("skylake-avx512", "Intel(R) Xeon(R) Platinum 8180")
    assert skx.iops_per_cycle("int32") == pytest.approx(16 * 2 / 1.5)
    assert skx.iops_per_cycle("int64") == pytest.approx(8.0)
    silver, _ = cpu.lookup("skylake-avx512", "Intel(R) Xeon(R) Silver 4114")
    assert silver.iops_per_cycle("int32") is None  # one 512-bit unit: left out, not guessed
    zen5, _ = cpu.lookup("znver5")
    rated = cpu.rated_ceilings(arch=zen5, why_none="", clock_ghz=4.0, clock_how="test", cores=2)
    # The multiply-add roofs (schema 1.4 added add-only roofs, op "add", which Zen 5 does rate).
    ints = [c for c in rated["compute"] if c["precision"].startswith("int") and c.get("op", "madd") == "madd"]
    assert [c["precision"] for c in ints] == ["int32", "int64"]
    assert all(c["gflops_per_s"] is None and c["derivation"].startswith("no rated value:") for c in ints)
    rated = cpu.rated_ceilings(arch=skx, why_none="", clock_ghz=2.0, clock_how="test", cores=4)
    int32 = next(c for c in rated["compute"] if c["precision"] == "int32")
    assert int32["gflops_per_s"] == pytest.approx(4 * 2.0 * 16 * 2 / 1.5, abs=0.1)
    assert int32["unit"] == "GIOP/s" and "vpmulld" in int32["derivation"]


# --------------------------------------------------------------------------- config


def _cfg(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text("backend: numba-cpu\n" + text)
    return path


@pytest.mark.parametrize("text,key,words", [
    ("precisions: [int16]\n", "precisions[0]", ["int32", "int64"]),
    ("precisions: [int32]\nfma: on\n", None, ["fma: on", "int32"]),
    ("precisions: [int64]\naccess: [ro]\n", None, ["no load-only kernel"]),
])
def test_bad_integer_configs_fail_in_one_line(tmp_path, text, key, words):
    path = _cfg(tmp_path, text)
    with pytest.raises(ErtError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, message
    if key:
        assert info.value.key == key


@pytest.mark.slow
def test_integer_config_validates():
    from importlib import resources

    text = resources.files("ert.configs").joinpath("integer-cpu.yaml").read_text()
    assert "int32" in text
    proc = run_cmd("ert", "validate", str(resources.files("ert.configs").joinpath("integer-cpu.yaml")))
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


# --------------------------------------------------------------------------- a real run


@pytest.mark.slow
def test_tiny_integer_run_writes_giops_ceilings(tmp_path):
    cfg = tmp_path / "int.yaml"
    cfg.write_text(textwrap.dedent("""\
        backend: numba-cpu
        precisions: [int32, int64]
        flops_per_element: [1, 8]
        fma: both
        access: [rw, ro]
        working_set: {min_bytes: 16384, max_bytes: 262144, growth: 2.0}
        timing: {min_seconds: 0.002, repeats: 3, noise_threshold: 0.25, max_remeasure: 1}
        threads: 2
        """))
    out = tmp_path / "run"
    proc = run_cmd("ert-run", cfg, "--out", out, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = load_ceilings(out / "ceilings.json")
    assert doc["schema_version"] == SCHEMA_VERSION
    compute = {c["precision"]: c for c in doc["ceilings"]["compute"]}
    assert set(compute) == {"int32", "int64"}
    for c in compute.values():
        assert c["unit"] == "GIOP/s" and c["giops_per_s"] == c["gflops_per_s"] > 0 and c["fma"] is False
        assert "rated" in c
    assert doc["metadata"]["points"]["invalid"] == 0
    shown = run_cmd("ert", "show", out)
    assert shown.returncode == 0 and "GIOP/s" in shown.stdout and "int32 multiply-add" in shown.stdout
    compared = run_cmd("ert", "compare", out, out)
    assert compared.returncode == 0, compared.stderr
    assert "GIOP/s" in compared.stdout
