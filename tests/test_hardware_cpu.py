"""Rated CPU ceilings (ert/hardware/cpu.py): the microarchitecture table and its L2/L3 rates, the measured clock,
and the regression that let a bare ert-run compile 256-bit code (numba imported before its settings).

Measured against rated is tests/test_analysis_rated.py; the rated DRAM (ert/hardware/dram.py) is
tests/test_hardware_dram.py.  `slow` marks the tests that compile and run Numba kernels or start ert-run."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
import sys

import pytest

from ert.hardware import cpu
from ert.backends.numba_cpu import NumbaCpuBackend

from conftest import run_cmd, write_config

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _host_flags() -> set[str]:
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# The widest vectors this CPU offers, read from the kernel's view of it (not from Numba).
WIDEST = (512 if "avx512f" in _host_flags() else 256 if "avx2" in _host_flags() else 128) if X86 else None


# --------------------------------------------------------------------------- the table, by hand
@pytest.mark.parametrize("llvm_cpu, fp64_fma, fp64_nofma, fp32_fma, l1_rw, l1_ro", [
    # 8 fp64 lanes x 2 FMA units x 2; no-FMA: multiply and add share the 2 FMA ports.
    ("sapphirerapids", 32, 16, 64, 128, 128),
    ("skylake-avx512", 32, 16, 64, 128, 128),
    # Zen 4: 256-bit pipes; separate add pipes make a multiply+add pair as fast as an FMA.
    ("znver4", 16, 16, 32, 64, 64),
    # Zen 5: 512-bit pipes, 2 x 64 B loads and one 64 B store per cycle.
    ("znver5", 32, 32, 64, 128, 128),
    ("znver2", 16, 16, 32, 64, 64),
    # Neoverse V1: four 128-bit pipes; 3 x 16 B loads, 2 x 16 B stores.
    ("neoverse-v1", 16, 8, 32, 64, 48),
    ("a64fx", 32, 16, 64, 128, 128),
])
def test_table_figures_per_core_per_cycle(llvm_cpu, fp64_fma, fp64_nofma, fp32_fma, l1_rw, l1_ro):
    arch, why = cpu.lookup(llvm_cpu, "")
    assert why == ""
    assert arch.flops_per_cycle("fp64", True) == fp64_fma
    assert arch.flops_per_cycle("fp64", False) == fp64_nofma
    assert arch.flops_per_cycle("fp32", True) == fp32_fma
    assert arch.l1_bytes_per_cycle("rw") == l1_rw
    assert arch.l1_bytes_per_cycle("ro") == l1_ro


def test_intel_chains_needed_is_two_units_times_latency_four():
    arch, _ = cpu.lookup("sapphirerapids", "Intel(R) Xeon(R) Platinum 8480+")
    assert arch.chains_needed() == 8


@pytest.mark.parametrize("model, units", [
    ("Intel(R) Xeon(R) Silver 4216 CPU @ 2.10GHz", 1),
    ("Intel(R) Xeon(R) Bronze 3106 CPU @ 1.70GHz", 1),
    ("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz", 1),
    ("Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz", 2),
    ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 2),
    ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", 2),
])
def test_one_fma_unit_cascade_lake_parts(model, units):
    arch, _ = cpu.lookup("cascadelake", model)
    assert arch.fma_units == units
    assert arch.flops_per_cycle("fp64", True) == 8 * units * 2


def test_unknown_cpu_has_no_rated_value_and_says_why():
    arch, why = cpu.lookup("mystery-core", "Acme 9000")
    assert arch is None and why.startswith("no rated value: CPU 'mystery-core' (Acme 9000)")
    rated = cpu.rated_ceilings(arch=None, why_none=why, clock_ghz=4.0, clock_how="x", cores=2)
    assert all(e["gflops_per_s"] is None and e["derivation"] == why for e in rated["compute"])
    assert all(e["gbytes_per_s"] is None for e in rated["memory"])


def test_rated_ceilings_arithmetic_and_derivation():
    arch, _ = cpu.lookup("sapphirerapids", "")
    rated = cpu.rated_ceilings(arch=arch, why_none="", clock_ghz=3.56, clock_how="measured", cores=2)
    fma = next(e for e in rated["compute"] if e["precision"] == "fp64" and e["fma"])
    assert fma["gflops_per_s"] == pytest.approx(2 * 3.56 * 32, abs=0.1)  # 227.8: the 228
    assert "2 core(s) x 3.56 GHz" in fma["derivation"] and "8 lanes x 2 FMA unit(s) x 2" in fma["derivation"]
    l1 = {e["access"]: e["gbytes_per_s"] for e in rated["memory"] if e["level"] == "L1"}
    assert l1["rw"] == pytest.approx(911.4, abs=0.1) and l1["ro"] == pytest.approx(911.4, abs=0.1)


def test_clock_from_chains():
    vec, scalar, how = cpu.clock_from_chains(fma_seconds=1e-3, fma_count=1_000_000, fma_latency=4,
                                                  imul_seconds=1e-3, imul_count=1_300_000, vector_bits=512)
    assert vec == pytest.approx(4.0) and scalar == pytest.approx(3.9)
    assert "512-bit FMA chain" in how and "4-cycle latency" in how


# --------------------------------------------------------------------------- measured on this machine
@pytest.fixture(scope="module")
def described():
    backend = NumbaCpuBackend(threads=2)
    yield backend.describe()
    backend.close()


@pytest.mark.slow
def test_clock_chains_agree_here(described):
    clock = described["rated"]["clock"]
    assert clock["agree"], clock
    assert 0.8 < clock["vector_ghz"] < 7.0


@pytest.mark.slow
def test_rated_in_metadata_names_this_cpu(described):
    rated = described["rated"]
    assert rated["per_core"] and rated["cores_per_rank"] >= 1
    arch, why = cpu.lookup(described["llvm_cpu"], "")
    if arch is None:
        assert all(e["gflops_per_s"] is None for e in rated["compute"])
    else:
        assert rated["microarchitecture"] == arch.name
        assert all(e["gflops_per_s"] > 0 for e in rated["compute"] if not e["precision"].startswith("int") and not e.get("mix"))
        for e in rated["compute"]:  # integer roofs: a value only where the table has the CPU's integer rates
            if e["precision"].startswith("int"):
                known = arch.int_add_per_cycle if e.get("op") == "add" else arch.iops_per_cycle(e["precision"])
                assert (e["gflops_per_s"] is None) == (known is None), e


# --------------------------------------------------------------------------- Numba sees its settings
PROBE_SCRIPT = """
import sys
from ert.backends import REGISTRY
REGISTRY.status("numba-cpu")
REGISTRY.best_available()
print("numba" in sys.modules)
"""


@pytest.mark.slow
def test_probe_and_auto_selection_do_not_import_numba():
    """Numba reads NUMBA_CPU_FEATURES when imported: the probe must not import it first."""
    proc = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


MICRO = {"backend": "auto", "precisions": ["fp64"], "flops_per_element": [1, 8], "fma": "on", "access": ["rw"],
         "working_set": {"min_bytes": 65536, "max_bytes": 131072, "growth": 2.0},
         "timing": {"min_seconds": 0.001, "repeats": 1, "noise_threshold": 100.0, "max_remeasure": 0},
         "threads": 1}


@pytest.mark.slow
@pytest.mark.skipif(WIDEST is None, reason="the vector-width check reads x86 flags")
def test_a_run_compiles_the_widest_vectors_the_cpu_offers(tmp_path, tiny_run):
    """Through the installed ert-run, with the backend chosen automatically (a run of its own) and named
    explicitly (the shared tiny run: configs/tiny.yaml says numba-cpu)."""
    cfg = write_config(tmp_path / "micro.yaml", MICRO, backend="auto")
    proc = run_cmd("ert-run", cfg, "--out", tmp_path / "run", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    for run in (tmp_path / "run", tiny_run):
        info = json.loads((run / "ceilings.json").read_text())["metadata"]["backend_info"]
        assert info["backend"] == "numba-cpu"
        # A run of one thread count measures its own clock alone (a scaling run's: tests/test_scaling.py).
        assert list(info["rated"]["clock_ghz_by_threads"]) == [str(info["threads"])]
        assert info["numba_effective"]["vector_bits"] == WIDEST, (run, info["numba_effective"])


UNKNOWN_CPU = {"NUMBA_CPU_NAME": "x86-64-v3", "NUMBA_CPU_FEATURES": "+avx2,+avx,+fma,+sse4.2,+popcnt"}


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="names an x86 target LLVM knows but ert's table does not")
def test_a_cpu_not_in_the_table_still_runs_and_says_why(tmp_path):
    """End to end through ert-run, compiling for a generic x86-64-v3 target: no rated value, and why."""
    import os

    cfg = write_config(tmp_path / "micro.yaml", MICRO, backend="numba-cpu")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), **UNKNOWN_CPU)
    proc = subprocess.run([str(Path(sys.executable).parent / "ert-run"), str(cfg), "--out", str(tmp_path / "run"), "-q"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "run" / "ceilings.json").read_text())
    info = doc["metadata"]["backend_info"]
    assert info["numba_effective"]["cpu_name"] == "x86-64-v3" and info["numba_effective"]["vector_bits"] == 256
    (peak,) = doc["ceilings"]["compute"]
    assert peak["rated"]["ratio"] is None
    assert peak["rated"]["derivation"].startswith("no rated value: CPU 'x86-64-v3'")
    show = run_cmd("ert", "show", tmp_path / "run")
    assert show.returncode == 0 and "of rated" not in show.stdout
    assert "] no rated value: CPU 'x86-64-v3'" in show.stdout  # a footnote (the default screen)
    full = run_cmd("ert", "show", "--verbose", tmp_path / "run")
    assert full.returncode == 0 and "  no rated value: CPU 'x86-64-v3'" in full.stdout


def test_without_a_clock_there_is_no_rated_value_and_the_run_says_why(monkeypatch):
    """A CPU whose clock cannot be measured (no user-space counter) still describes itself, unrated."""
    backend = NumbaCpuBackend(threads=1)

    def no_counter(*_args, **_kw):
        raise RuntimeError("no user-space cycle counter on riscv64")

    monkeypatch.setattr(backend, "measure_clock", no_counter)
    rated = backend.describe()["rated"]
    assert all(e["gflops_per_s"] is None for e in rated["compute"])
    assert all(e["derivation"].startswith("no rated value: ") for e in rated["compute"] + rated["memory"])
    backend.close()


# --------------------------------------------------------------------------- rated L2 and L3 (issue 21)
_SOURCED = ("Optimization", "AIDA64", "Chips and Cheese")


@pytest.mark.parametrize("llvm_cpu", ["znver2", "znver3", "znver4", "znver5", "skylake-avx512", "cascadelake",
                                 "icelake-server", "sapphirerapids", "emeraldrapids", "graniterapids",
                                 "neoverse-n1", "neoverse-v1", "neoverse-v2"])
def test_every_lower_level_is_rated_with_its_source_or_says_why_not(llvm_cpu):
    arch, _ = cpu.lookup(llvm_cpu)
    rated = cpu.rated_ceilings(arch=arch, why_none="", clock_ghz=3.0, clock_how="measured", cores=2)
    lower = [m for m in rated["memory"] if m["level"] in ("L2", "L3")]
    assert {(m["level"], m["access"]) for m in lower} == {(lv, a) for lv in ("L2", "L3") for a in ("rw", "ro")}
    for m in lower:
        if m["gbytes_per_s"] is None:
            assert m["derivation"].startswith("no rated value: "), m
        else:
            assert any(s in m["derivation"] for s in _SOURCED), m
            assert m["gbytes_per_s"] == pytest.approx(2 * 3.0 * m["bytes_per_cycle_per_core"], abs=0.05)


@pytest.mark.parametrize("llvm_cpu, l2_ro, l2_rw, l3_ro", [("znver4", 32, 64, 32), ("znver5", 64, 128, 32),
                                                      ("sapphirerapids", 64, None, None),
                                                      ("neoverse-v2", None, None, None)])
def test_lower_level_bytes_per_cycle(llvm_cpu, l2_ro, l2_rw, l3_ro):
    arch, _ = cpu.lookup(llvm_cpu)
    rated = cpu.rated_ceilings(arch=arch, why_none="", clock_ghz=1.0, clock_how="x", cores=1)
    got = {(m["level"], m["access"]): m.get("bytes_per_cycle_per_core") for m in rated["memory"]}
    assert (got[("L2", "ro")], got[("L2", "rw")], got[("L3", "ro")]) == (l2_ro, l2_rw, l3_ro)


def test_the_zen4_rw_l2_derivation_says_fill_and_write_back_are_separate():
    arch, _ = cpu.lookup("znver4")
    rated = cpu.rated_ceilings(arch=arch, why_none="", clock_ghz=3.69, clock_how="measured", cores=2)
    (l2,) = [m for m in rated["memory"] if (m["level"], m["access"]) == ("L2", "rw")]
    assert l2["gbytes_per_s"] == pytest.approx(472.3)
    assert "L2 -> L1 fill 32 + write-back 32 B/cycle, two paths" in l2["derivation"]
    assert "57647" in l2["derivation"]


def test_an_older_runs_rated_values_get_l2_and_l3_from_the_table():
    old = {"per_core": True, "cores_per_rank": 2, "clock_ghz": 3.692, "clock_source": "measured",
           "microarchitecture": "Zen 4", "memory": [{"level": "L1", "access": "ro", "gbytes_per_s": 472.6}]}
    new = cpu.complete_rated(old)
    l2 = {m["access"]: m for m in new["memory"] if m["level"] == "L2"}
    assert l2["ro"]["gbytes_per_s"] == pytest.approx(236.3) and "3.69 GHz (measured)" in l2["ro"]["derivation"]
    assert cpu.complete_rated(new) == new  # once only
    assert cpu.complete_rated({"memory": []}) == {"memory": []}  # not a CPU's


def test_zen5_l3_is_rated_from_amds_guide_and_an_older_zen5_run_gets_it():
    arch, _ = cpu.lookup("znver5")
    rated = cpu.rated_ceilings(arch=arch, why_none="", clock_ghz=3.97, clock_how="measured", cores=2)
    l3 = {m["access"]: m for m in rated["memory"] if m["level"] == "L3"}
    assert (l3["ro"]["gbytes_per_s"], l3["rw"]["gbytes_per_s"]) == (pytest.approx(254.1), pytest.approx(508.2))
    assert "58455" in l3["rw"]["derivation"]
    # A Zen 5 run recorded before: its L3 said "no rated value"; analysing it again fills the value in.
    old = {**rated, "per_core": True, "cores_per_rank": 2,
           "memory": [m if m["level"] != "L3" else {"level": "L3", "access": m["access"], "gbytes_per_s": None,
                                                    "derivation": "no rated value: x"} for m in rated["memory"]]}
    new = {(m["level"], m["access"]): m["gbytes_per_s"] for m in cpu.complete_rated(old)["memory"]}
    assert new[("L3", "rw")] == pytest.approx(508.2) and new[("L2", "rw")] == pytest.approx(1016.3)
