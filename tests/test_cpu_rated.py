"""Rated CPU ceilings: the microarchitecture table, the measured clock, the analysis of measured against rated,
and the regression that let a bare ert-run compile 256-bit code (numba imported before its settings)."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
import sys

import pytest

from ert.analysis.ceilings import build
from ert.analysis.rated import ABOVE_RATED, scaled_rated
from ert.backends import cpu_rated
from ert.backends.numba_cpu import NumbaCpuBackend
from ert.config import from_dict
from ert.rawio import RawData
from ert.spec import KernelSpec

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
@pytest.mark.parametrize("cpu, fp64_fma, fp64_nofma, fp32_fma, l1_rw, l1_ro", [
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
def test_table_figures_per_core_per_cycle(cpu, fp64_fma, fp64_nofma, fp32_fma, l1_rw, l1_ro):
    arch, why = cpu_rated.lookup(cpu, "")
    assert why == ""
    assert arch.flops_per_cycle("fp64", True) == fp64_fma
    assert arch.flops_per_cycle("fp64", False) == fp64_nofma
    assert arch.flops_per_cycle("fp32", True) == fp32_fma
    assert arch.l1_bytes_per_cycle("rw") == l1_rw
    assert arch.l1_bytes_per_cycle("ro") == l1_ro


def test_intel_chains_needed_is_two_units_times_latency_four():
    arch, _ = cpu_rated.lookup("sapphirerapids", "Intel(R) Xeon(R) Platinum 8480+")
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
    arch, _ = cpu_rated.lookup("cascadelake", model)
    assert arch.fma_units == units
    assert arch.flops_per_cycle("fp64", True) == 8 * units * 2


def test_unknown_cpu_has_no_rated_value_and_says_why():
    arch, why = cpu_rated.lookup("mystery-core", "Acme 9000")
    assert arch is None and why.startswith("no rated value: CPU 'mystery-core' (Acme 9000)")
    rated = cpu_rated.rated_ceilings(arch=None, why_none=why, clock_ghz=4.0, clock_how="x", cores=2)
    assert all(e["gflops_per_s"] is None and e["derivation"] == why for e in rated["compute"])
    assert all(e["gbytes_per_s"] is None for e in rated["memory"])


def test_rated_ceilings_arithmetic_and_derivation():
    arch, _ = cpu_rated.lookup("sapphirerapids", "")
    rated = cpu_rated.rated_ceilings(arch=arch, why_none="", clock_ghz=3.56, clock_how="measured", cores=2)
    fma = next(e for e in rated["compute"] if e["precision"] == "fp64" and e["fma"])
    assert fma["gflops_per_s"] == pytest.approx(2 * 3.56 * 32, abs=0.1)  # 227.8: the 228
    assert "2 core(s) x 3.56 GHz" in fma["derivation"] and "8 lanes x 2 FMA unit(s) x 2" in fma["derivation"]
    l1 = {e["access"]: e["gbytes_per_s"] for e in rated["memory"]}
    assert l1["rw"] == pytest.approx(911.4, abs=0.1) and l1["ro"] == pytest.approx(911.4, abs=0.1)


def test_clock_from_chains():
    vec, scalar, how = cpu_rated.clock_from_chains(fma_seconds=1e-3, fma_count=1_000_000, fma_latency=4,
                                                  imul_seconds=1e-3, imul_count=1_300_000, vector_bits=512)
    assert vec == pytest.approx(4.0) and scalar == pytest.approx(3.9)
    assert "512-bit FMA chain" in how and "4-cycle latency" in how


# --------------------------------------------------------------------------- measured on this machine
@pytest.fixture(scope="module")
def described():
    backend = NumbaCpuBackend(threads=2)
    yield backend.describe()
    backend.close()


def test_clock_chains_agree_here(described):
    clock = described["rated"]["clock"]
    assert clock["agree"], clock
    assert 0.8 < clock["vector_ghz"] < 7.0


def test_rated_in_metadata_names_this_cpu(described):
    rated = described["rated"]
    assert rated["per_core"] and rated["cores_per_rank"] >= 1
    arch, why = cpu_rated.lookup(described["llvm_cpu"], "")
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


def test_probe_and_auto_selection_do_not_import_numba():
    """Numba reads NUMBA_CPU_FEATURES when imported: the probe must not import it first."""
    proc = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


MICRO = {"backend": "auto", "precisions": ["fp64"], "flops_per_element": [1, 8], "fma": "on", "access": ["rw"],
         "working_set": {"min_bytes": 65536, "max_bytes": 131072, "growth": 2.0},
         "timing": {"min_seconds": 0.001, "repeats": 1, "noise_threshold": 100.0, "max_remeasure": 0},
         "threads": 1}


@pytest.mark.skipif(WIDEST is None, reason="the vector-width check reads x86 flags")
@pytest.mark.parametrize("backend", ["auto", "numba-cpu"])
def test_a_run_compiles_the_widest_vectors_the_cpu_offers(tmp_path, backend):
    """Through the installed ert-run, with the backend chosen automatically and named explicitly."""
    cfg = write_config(tmp_path / "micro.yaml", MICRO, backend=backend)
    proc = run_cmd("ert-run", cfg, "--out", tmp_path / "run", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "run" / "ceilings.json").read_text())["metadata"]["backend_info"]
    assert info["backend"] == "numba-cpu"
    assert info["numba_effective"]["vector_bits"] == WIDEST, info["numba_effective"]


# --------------------------------------------------------------------------- measured against rated
RATED = {"per_core": True, "cores_per_rank": 2,
         "compute": [{"precision": "fp64", "fma": True, "gflops_per_s": 200.0, "derivation": "2 cores x ..."}],
         "memory": [{"level": "L1", "access": "rw", "gbytes_per_s": 800.0, "derivation": "2 cores x 128 B"}]}
CACHES = [dict(level=1, kind="Data", size_bytes=48 << 10, shared_cpu_count=1),
          dict(level=2, kind="Unified", size_bytes=2 << 20, shared_cpu_count=1)]


def _point(spec: KernelSpec, wss: int, rate: float, threads: int | None = None) -> dict:
    """A record whose rate (GB/s for FLOPs 1, GFLOP/s otherwise) is ``rate``."""
    elements = wss // spec.itemsize
    per_second = rate * 1e9 / (spec.bytes_per_element if spec.flops_per_element == 1 else spec.flops_per_element)
    seconds = elements / per_second
    pid = f"{spec.key}-w{wss}" + (f"-t{threads}" if threads else "")
    rec = {"type": "point", "id": pid, "spec": spec.to_dict(), "wss_bytes": wss, "elements": elements,
           "trials": 1, "spread": 0.01, "noisy": False, "valid": True,
           "seconds": {"min": seconds, "median": seconds, "max": seconds}, "check": "", "remeasured": 0}
    if threads:
        rec["threads"] = threads
    return rec


def _doc(points: list[dict], rated=RATED, threads=2) -> dict:
    cfg = from_dict({"backend": "numba-cpu", "precisions": ["fp64"], "threads": threads})
    meta = {"threads_per_rank": threads, "ranks": 1, "caches_reported": CACHES, "config": cfg.to_dict(),
            "backend_info": {"rated": rated}}
    return build(RawData(path=None, header={"metadata": meta, "planned_points": len(points)}, points=points, ends=[]))


FMA = KernelSpec("fp64", 64, True)
ADD = KernelSpec("fp64", 1, False)


def test_a_point_above_rated_is_invalid_and_said():
    points = [_point(FMA, 65536, 150.0), _point(FMA, 131072, 230.0)]  # 230 > 1.05 x 200
    doc = _doc(points)
    (peak,) = doc["ceilings"]["compute"]
    assert peak["gflops_per_s"] == pytest.approx(150.0)
    assert doc["metadata"]["points"]["invalid"] == 1
    assert any("above 1.05 x the rated fp64 FMA GFLOP/s" in w for w in doc["warnings"])
    assert ABOVE_RATED == 1.05


def test_a_compute_ceiling_below_three_quarters_of_rated_is_warned():
    doc = _doc([_point(FMA, 65536, 140.0)])
    (peak,) = doc["ceilings"]["compute"]
    assert peak["rated"] == {"gflops_per_s": 200.0, "ratio": 0.7, "derivation": "2 cores x ..."}
    assert any(w.startswith("fp64 FMA peak: 140 GFLOP/s is 70% of the rated 200 GFLOP/s (2 cores x ...)")
               for w in doc["warnings"])
    assert not any("rated" in w for w in _doc([_point(FMA, 65536, 190.0)])["warnings"])


def test_bandwidth_points_are_held_to_the_l1_rate():
    points = [_point(ADD, w, 700.0) for w in (16384, 24576, 32768, 49152)]
    points += [_point(ADD, w, 900.0) for w in (65536,)]  # 900 > 1.05 x 800: impossible
    doc = _doc(points)
    assert doc["metadata"]["points"]["invalid"] == 1
    l1 = [m for m in doc["ceilings"]["memory"] if m["level"] == "L1"]
    assert l1 and l1[0]["rated"]["gbytes_per_s"] == 800.0 and l1[0]["rated"]["ratio"] == pytest.approx(0.875)


def test_per_core_rated_scales_with_threads():
    meta = {"ranks": 2, "backend_info": {"rated": RATED}}
    one = scaled_rated(meta, threads_per_rank=1)
    assert one["compute"][("fp64", True)]["gflops_per_s"] == 200.0  # 1 of 2 cores, x 2 ranks
    assert "for 1 core(s) per rank, x 2 ranks" in one["compute"][("fp64", True)]["derivation"]
    two = scaled_rated(meta, threads_per_rank=2)
    assert two["memory"][("L1", "rw")]["gbytes_per_s"] == 1600.0


def test_without_rated_values_nothing_is_invalidated_or_warned():
    doc = _doc([_point(FMA, 65536, 5000.0)], rated=None)
    assert doc["ceilings"]["compute"][0]["rated"]["ratio"] is None
    assert doc["metadata"]["points"]["invalid"] == 0


def test_one_thread_is_rated_at_the_one_core_clock():
    rated = dict(RATED, clock_ghz=4.0, clock_ghz_by_threads={"2": 4.0, "1": 4.4})
    one = scaled_rated({"ranks": 1, "backend_info": {"rated": rated}}, threads_per_rank=1)
    assert one["compute"][("fp64", True)]["gflops_per_s"] == pytest.approx(110.0)  # 200 / 2 cores x 4.4 / 4.0
    assert "for 1 core(s) per rank at 4.40 GHz" in one["compute"][("fp64", True)]["derivation"]


def test_a_low_ceiling_on_noisy_points_blames_the_noise_not_the_kernel():
    noisy = dict(_point(FMA, 65536, 100.0), noisy=True, spread=0.5)
    (warning,) = [w for w in _doc([noisy])["warnings"] if "of the rated" in w]
    assert warning.endswith("other work sharing the cores may be the limit; measure again")


UNKNOWN_CPU = {"NUMBA_CPU_NAME": "x86-64-v3", "NUMBA_CPU_FEATURES": "+avx2,+avx,+fma,+sse4.2,+popcnt"}


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
    assert "  no rated value: CPU 'x86-64-v3'" in show.stdout


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
