"""Schema 1.4 (issue 16): the integer add-only roof, measured mixes, integer kernels on OpenCL."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ert.records.ceilings_io import SCHEMA_VERSION
from ert.hardware import cpu
from ert.backends.check import mix_expected_bits, replay_mix, replay_rw_int, replay_rw_int_stepwise
from ert.records.ceilings_io import load_ceilings
from ert.config.schema import from_dict
from ert.consumers.roofs import compute_roofs, fma_roof
from ert.errors import ErtError
from ert.measure.plan import kernel_specs
from ert.spec import KernelSpec

from conftest import run_cmd

ADD_SPECS = [KernelSpec(p, f, False, op="add") for p in ("int32", "int64") for f in (2, 8, 32)]
MIX_SPECS = [KernelSpec("fp64", 8, True, mix="fma+add"), KernelSpec("fp32", 8, True, mix="fma+add"),
             KernelSpec("fp32", 8, True, mix="int32+fp32"), KernelSpec("fp64", 8, True, mix="int64+fp64")]


@pytest.mark.parametrize("spec", ADD_SPECS, ids=lambda s: s.key)
@pytest.mark.parametrize("trials", [0, 1, 2, 5])
def test_add_replay_is_the_stepwise_replay(spec, trials):
    np.testing.assert_array_equal(replay_rw_int(spec, trials=trials), replay_rw_int_stepwise(spec, trials=trials))


def test_spec_fields_keys_and_counts():
    add = KernelSpec("int32", 32, False, op="add")
    assert add.key == "int32-add-rw-f32" and add.add_ops_per_element == 32 and add.fma_ops_per_element == 0
    mix = KernelSpec("fp64", 32, True, mix="fma+add")
    assert mix.ops_per_element == 24 and mix.flops_done(elements=10, trials=2) == 480
    assert KernelSpec.from_dict(mix.to_dict()) == mix and KernelSpec.from_dict(add.to_dict()) == add
    assert "op" not in KernelSpec("fp64", 8, True).to_dict()  # plain raw records unchanged
    for bad in (dict(precision="fp64", flops_per_element=8, fma=True, op="add"),
                dict(precision="int32", flops_per_element=1, fma=False, op="add"),
                dict(precision="int32", flops_per_element=8, fma=False, mix="fma+add"),
                dict(precision="fp64", flops_per_element=8, fma=True, mix="int32+fp32"),
                dict(precision="fp64", flops_per_element=8, fma=False, mix="fma+add")):
        with pytest.raises(ValueError):
            KernelSpec(**bad)


def test_mix_replay_halves():
    first, second = replay_mix(KernelSpec("fp32", 8, True, mix="fma+add"), trials=3)
    np.testing.assert_array_equal(second, (0.5 + np.arange(16) * 0.0625 + 4 * 0.0625).astype(np.float32))
    bits = mix_expected_bits(KernelSpec("fp32", 8, True, mix="fma+add"), trials=3, width=32, n=64)
    assert (bits[16:32] == second.view(np.uint32)).all() and (bits[:16] == first.view(np.uint32)).all()


def test_config_int_ops_and_mixes_plan():
    cfg = from_dict({"precisions": ["fp64", "fp32", "int32"], "flops_per_element": [1, 8], "fma": "both",
                     "access": ["rw"], "int_ops": ["madd", "add"], "mixes": ["fma+add", "int+float"]})
    keys = {s.key for s in kernel_specs(cfg)}
    assert {"int32-add-rw-f8", "int32-madd-rw-f8", "fp64-mix_fma_add-rw-f8", "fp64-mix_int64_fp64-rw-f8",
            "fp32-mix_int32_fp32-rw-f8", "fp32-mix_fma_add-rw-f8"} <= keys
    assert not any(s.mix for s in kernel_specs(from_dict({})))  # never in the default
    for bad, key in (({"mixes": ["fma+mul"]}, "mixes"), ({"precisions": ["int32"], "mixes": ["fma+add"]}, None),
                     ({"mixes": ["fma+add"], "fma": "off"}, None), ({"int_ops": ["sub"]}, "int_ops")):
        with pytest.raises(ErtError) as err:
            from_dict(bad, source="x.yaml")
        assert "x.yaml" in str(err.value) and (key is None or key in str(err.value))


def test_rated_zen5_add_and_mixes_derived():
    rated = cpu.rated_ceilings(arch=cpu.TABLE["znver5"], why_none="", clock_ghz=4.0, clock_how="t",
                                     cores=2)
    by = {(e["precision"], e.get("op"), e.get("mix")): e for e in rated["compute"]}
    assert by[("int32", "add", None)]["gflops_per_s"] == 2 * 4.0 * 16 * 4
    assert by[("fp64", None, "fma+add")]["gflops_per_s"] == 2 * 4.0 * 8 * 2 * 3  # 1.5 x the FMA peak
    assert by[("fp32", None, "int32+fp32")]["gflops_per_s"] is None
    assert by[("fp32", None, "int32+fp32")]["derivation"].startswith("no rated value:")
    skx = cpu.rated_ceilings(arch=cpu.TABLE["skylake-avx512"], why_none="", clock_ghz=2.0,
                                   clock_how="t", cores=1)
    by = {(e["precision"], e.get("op"), e.get("mix")): e for e in skx["compute"]}
    assert by[("fp64", None, "fma+add")]["gflops_per_s"] == 2.0 * 8 * 2 / 2 * 3  # adds share the FMA ports
    assert by[("fp32", None, "int32+fp32")]["gflops_per_s"] == 2.0 * 16 * 0.5 * 4


@pytest.mark.slow
def test_numba_add_kernel_assembly_is_vector_adds_only():
    from ert.backends.numba_codegen import configure_numba_env

    configure_numba_env(1)
    from numba import njit

    from ert.kernels import numba_cpu as k

    @njit
    def one(buf, kk, c):
        k.sub_iadd(buf, 0, kk, c, 128, 16)

    buf = np.zeros(128, dtype=np.int32)
    one(buf, 5, np.int32(3))
    assert (buf == 15).all()
    asm = one.inspect_asm(one.signatures[0])
    if "avx512f" not in (one.inspect_llvm(one.signatures[0]) + asm) and "zmm" not in asm:
        pytest.skip("no AVX-512 here")
    loop_adds = re.findall(r"vpaddd\s[^\n]*zmm", asm)
    assert len(loop_adds) >= 8 and "vpmulld" not in asm  # 8 chains, no fold into a multiply


@pytest.mark.slow
@pytest.mark.parametrize("spec", ADD_SPECS[1:2] + MIX_SPECS, ids=lambda s: s.key)
def test_numba_kernels_check_exactly_and_catch_damage(spec):
    from ert.backends.numba_cpu import NumbaCpuBackend

    b = NumbaCpuBackend(threads=2)
    g = b.granule_elements(spec)
    for chains in b.geometry.widths(spec):
        b.prepare(spec, elements_per_thread=g * 2, launch={"chains": chains})
        b.run(3)
        b.run(4)
        assert b.check().ok, b.check().detail
    b.corrupt_for_test()
    assert not b.check().ok
    b.close()


@pytest.mark.slow
def test_mix_and_add_run_end_to_end(tmp_path):
    cfg = tmp_path / "mix.yaml"
    cfg.write_text("backend: numba-cpu\nprecisions: [fp32, int32]\nflops_per_element: [1, 32]\nfma: both\n"
                   "access: [rw]\nint_ops: [madd, add]\nmixes: [fma+add, int+float]\nthreads: 1\n"
                   "working_set: {min_bytes: 16384, max_bytes: 65536, compute_max_bytes: 65536}\n"
                   "timing: {min_seconds: 0.002, repeats: 2, min_repeats: 2}\n")
    proc = run_cmd("ert-run", cfg, "--out", tmp_path / "run", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = load_ceilings(tmp_path / "run" / "ceilings.json")
    assert doc["schema_version"] == SCHEMA_VERSION
    compute = doc["ceilings"]["compute"]
    mixes = {e["mix"]: e for e in compute if e.get("mix")}
    assert set(mixes) == {"fma+add", "int32+fp32"} and mixes["int32+fp32"]["unit"] == "GOP/s"
    add = [e for e in compute if e.get("op") == "add"]
    assert add and add[0]["unit"] == "GIOP/s" and add[0]["rated"]["derivation"]
    # The vector FP roofs leave the mix and integer roofs out (they are extra roofs, drawn apart).
    assert {(r.precision, r.fma) for r in compute_roofs(doc)} == {("fp32", True), ("fp32", False)}
    assert fma_roof(doc, "fp32").gflops_per_s == next(e["gflops_per_s"] for e in compute
                                                      if e["precision"] == "fp32" and e["fma"] and not e.get("mix"))
    shown = run_cmd("ert", "show", tmp_path / "run")
    assert shown.returncode == 0 and "fp32 fma+add" in shown.stdout and "int32 add" in shown.stdout
    cmp = run_cmd("ert", "compare", tmp_path / "run", tmp_path / "run")
    assert cmp.returncode == 0 and "fma+add mix" in cmp.stdout, cmp.stderr
