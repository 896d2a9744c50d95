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
from ert.hardware import cpu as cpu_rated
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
    l1 = {e["access"]: e["gbytes_per_s"] for e in rated["memory"] if e["level"] == "L1"}
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


# --------------------------------------------------------------------------- rated L2, L3 and DRAM (issue 21)
from ert.hardware import dram as dram_rated  # noqa: E402
from ert.errors import ErtError  # noqa: E402

DATA = Path(__file__).parent / "data"
_SOURCED = ("Optimization", "AIDA64", "Chips and Cheese")


@pytest.mark.parametrize("cpu", ["znver2", "znver3", "znver4", "znver5", "skylake-avx512", "cascadelake",
                                 "icelake-server", "sapphirerapids", "emeraldrapids", "graniterapids",
                                 "neoverse-n1", "neoverse-v1", "neoverse-v2"])
def test_every_lower_level_is_rated_with_its_source_or_says_why_not(cpu):
    arch, _ = cpu_rated.lookup(cpu)
    rated = cpu_rated.rated_ceilings(arch=arch, why_none="", clock_ghz=3.0, clock_how="measured", cores=2)
    lower = [m for m in rated["memory"] if m["level"] in ("L2", "L3")]
    assert {(m["level"], m["access"]) for m in lower} == {(lv, a) for lv in ("L2", "L3") for a in ("rw", "ro")}
    for m in lower:
        if m["gbytes_per_s"] is None:
            assert m["derivation"].startswith("no rated value: "), m
        else:
            assert any(s in m["derivation"] for s in _SOURCED), m
            assert m["gbytes_per_s"] == pytest.approx(2 * 3.0 * m["bytes_per_cycle_per_core"], abs=0.05)


@pytest.mark.parametrize("cpu, l2_ro, l2_rw, l3_ro", [("znver4", 32, 64, 32), ("znver5", 64, 128, 32),
                                                      ("sapphirerapids", 64, None, None),
                                                      ("neoverse-v2", None, None, None)])
def test_lower_level_bytes_per_cycle(cpu, l2_ro, l2_rw, l3_ro):
    arch, _ = cpu_rated.lookup(cpu)
    rated = cpu_rated.rated_ceilings(arch=arch, why_none="", clock_ghz=1.0, clock_how="x", cores=1)
    got = {(m["level"], m["access"]): m.get("bytes_per_cycle_per_core") for m in rated["memory"]}
    assert (got[("L2", "ro")], got[("L2", "rw")], got[("L3", "ro")]) == (l2_ro, l2_rw, l3_ro)


def test_the_zen4_rw_l2_derivation_says_fill_and_write_back_are_separate():
    arch, _ = cpu_rated.lookup("znver4")
    rated = cpu_rated.rated_ceilings(arch=arch, why_none="", clock_ghz=3.69, clock_how="measured", cores=2)
    (l2,) = [m for m in rated["memory"] if (m["level"], m["access"]) == ("L2", "rw")]
    assert l2["gbytes_per_s"] == pytest.approx(472.3)
    assert "fill 32 + L1 -> L2 write-back 32 B/cycle on separate paths" in l2["derivation"]
    assert "57647" in l2["derivation"]


def test_an_older_runs_rated_values_get_l2_and_l3_from_the_table():
    old = {"per_core": True, "cores_per_rank": 2, "clock_ghz": 3.692, "clock_source": "measured",
           "microarchitecture": "Zen 4", "memory": [{"level": "L1", "access": "ro", "gbytes_per_s": 472.6}]}
    new = cpu_rated.complete_rated(old)
    l2 = {m["access"]: m for m in new["memory"] if m["level"] == "L2"}
    assert l2["ro"]["gbytes_per_s"] == pytest.approx(236.3) and "3.69 GHz (measured)" in l2["ro"]["derivation"]
    assert cpu_rated.complete_rated(new) == new  # once only
    assert cpu_rated.complete_rated({"memory": []}) == {"memory": []}  # not a CPU's


# Made-up dmidecode output (not copied from a machine): two DDR5 DIMMs, one empty slot.
DMI_SERVER = """# dmidecode 3.4
Getting SMBIOS data from sysfs.

Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tTotal Width: 80 bits
\tData Width: 64 bits
\tSize: 32 GB
\tLocator: DIMM_A1
\tType: DDR5
\tSpeed: 5600 MT/s
\tConfigured Memory Speed: 4800 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tData Width: 64 bits
\tSize: No Module Installed
\tLocator: DIMM_A2
\tSpeed: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tData Width: 64 bits
\tSize: 32 GB
\tLocator: DIMM_B1
\tSpeed: 5600 MT/s
\tConfigured Memory Speed: 4800 MT/s
"""
DMI_GUEST = """Handle 0x1100, DMI type 17, 40 bytes
Memory Device
\tData Width: Unknown
\tSize: 16 GB
\tLocator: DIMM 0
\tSpeed: Unknown
\tManufacturer: Made Up Hypervisor
"""


def test_dmidecode_devices_give_channels_x_rate_x_width():
    devices = dram_rated.parse_dmidecode(DMI_SERVER)
    assert [d.locator for d in devices] == ["DIMM_A1", "DIMM_B1"]
    assert devices[0].mts == 4800 and devices[0].data_width_bits == 64  # configured, not the rated 5600
    gbps, how = dram_rated.rate_devices(devices)
    assert gbps == pytest.approx(76.8)
    assert how.startswith("2 populated memory device(s) x 4800 MT/s x 8 B per transfer (SMBIOS type 17")


def test_a_vm_guests_devices_without_speed_are_no_rating():
    gbps, how = dram_rated.rate_devices(dram_rated.parse_dmidecode(DMI_GUEST))
    assert gbps is None and "not their transfer rate" in how
    assert dram_rated.rate_devices([])[0] is None


def test_dram_precedence_user_then_smbios_then_why_not():
    user = dram_rated.dram_entry(user_gbps=90.0, smbios_text=DMI_SERVER)
    assert user["gbytes_per_s"] == 90.0 and "given by the user" in user["derivation"]
    assert "SMBIOS gives 76.8 GB/s" in user["derivation"] and user["scope"] == "host"
    assert dram_rated.dram_entry(user_gbps=None, smbios_text=DMI_SERVER)["gbytes_per_s"] == 76.8
    none = dram_rated.dram_entry(user_gbps=None, smbios_text=None, smbios_why="dmidecode is not installed")
    assert none["gbytes_per_s"] is None
    assert none["derivation"] == ("no rated value: dmidecode is not installed and the config has no "
                                  "rated.dram_gbytes_per_s (or pass ert-run --rated-dram GBPS)")


def test_the_configs_rated_dram_is_validated_and_absent_by_default():
    assert from_dict({"rated": {"dram_gbytes_per_s": 120}}).rated.dram_gbytes_per_s == 120.0
    assert "rated" not in from_dict({}).to_dict()  # older configs keep their hash
    with pytest.raises(ErtError) as err:
        from_dict({"rated": {"dram_gbytes_per_s": -3}}, source="run.yaml")
    assert "run.yaml" in str(err.value) and "rated.dram_gbytes_per_s" in str(err.value)
    with pytest.raises(ErtError, match="rated.dram_gbps"):
        from_dict({"rated": {"dram_gbps": 3}}, source="run.yaml")


def test_the_rated_dram_flag_overrides_the_config(tmp_path):
    import argparse

    from ert.cli.run import _add_run_arguments, _new_run
    from ert.measure.comm import world

    cfg = write_config(tmp_path / "c.yaml", dict(MICRO, rated={"dram_gbytes_per_s": 50}), backend="numba-cpu")
    parser = argparse.ArgumentParser()
    _add_run_arguments(parser)
    for argv, want in (([], 50.0), (["--rated-dram", "75.5"], 75.5)):
        args = parser.parse_args([str(cfg), "--out", str(tmp_path / f"run{len(argv)}")] + argv)
        resolved, _ = _new_run(args, world(), None)
        assert resolved.rated.dram_gbytes_per_s == want
    with pytest.raises(SystemExit):
        parser.parse_args(["--rated-dram", "0"])


CACHES3 = CACHES + [dict(level=3, kind="Unified", size_bytes=32 << 20, shared_cpu_count=2)]
RATED3 = dict(RATED, memory=RATED["memory"] + [
    {"level": "L2", "access": "rw", "gbytes_per_s": 500.0, "derivation": "2 cores x 64 B (L2 source)"},
    {"level": "L3", "access": "rw", "gbytes_per_s": 400.0, "derivation": "2 cores x 64 B (L3 source)"},
    {"level": "DRAM", "access": None, "scope": "host", "gbytes_per_s": 100.0, "derivation": "4 x 3200 x 8 B"}])


def _doc3(points):
    for p in points:
        p["threads_per_rank"] = 2
    cfg = from_dict({"backend": "numba-cpu", "precisions": ["fp64"], "threads": 2})
    meta = {"threads_per_rank": 2, "ranks": 1, "caches_reported": CACHES3, "config": cfg.to_dict(),
            "backend_info": {"rated": RATED3}}
    return build(RawData(path=None, header={"metadata": meta, "planned_points": len(points)}, points=points, ends=[]))


def test_a_point_inside_l2_above_its_rated_value_is_invalid():
    # 2 threads: L1 96 KiB, L2 4 MiB, L3 32 MiB in all.  A point at 1 MiB is inside L2 (past 2 x L1).
    points = [_point(ADD, 1 << 20, 600.0)]  # 600 > 1.05 x 500, though under the L1's 800
    points += [_point(ADD, 1 << 20, 400.0), _point(ADD, 64 << 10, 700.0)]
    for i, p in enumerate(points):
        p["id"] += f"-{i}"
    doc = _doc3(points)
    assert doc["metadata"]["points"]["invalid"] == 1
    assert any("above 1.05 x the rated rw GB/s of L2" in w for w in doc["warnings"])


def test_a_point_just_past_l1_is_not_held_to_l2():
    # 128 KiB over 2 threads is under 2 x the L1s: some lines may still hit the L1.
    doc = _doc3([_point(ADD, 128 << 10, 700.0)])
    assert doc["metadata"]["points"]["invalid"] == 0


def test_lower_roofs_below_three_quarters_of_rated_are_warned_with_the_derivation():
    points = [_point(ADD, w, 700.0) for w in (16 << 10, 32 << 10, 64 << 10)]
    points += [_point(ADD, w, 350.0) for w in (512 << 10, 1 << 20, 2 << 20, 3 << 20)]  # L2 at 70 % of 500
    points += [_point(ADD, w, 250.0) for w in (8 << 20, 16 << 20, 24 << 20)]  # L3 at 62 % of 400
    points += [_point(ADD, w, 50.0) for w in (512 << 20, 1 << 30, 2 << 30)]  # DRAM at 50 % of 100
    doc = _doc3(points)
    warnings = [w for w in doc["warnings"] if "of the rated" in w]
    assert any("L2: 350 GB/s is 70% of the rated 500 GB/s (2 cores x 64 B (L2 source))" in w for w in warnings)
    assert any("L3: 250 GB/s is 62% of the rated 400 GB/s (2 cores x 64 B (L3 source))" in w for w in warnings)
    dram = [w for w in warnings if "DRAM" in w]
    assert dram and "(4 x 3200 x 8 B)" in dram[0] and "shared or virtual host" in dram[0]


def test_dram_rated_is_per_host_not_per_core():
    one = scaled_rated({"ranks": 1, "hosts": ["a"], "backend_info": {"rated": RATED3}}, threads_per_rank=1)
    assert one["memory"][("DRAM", None)]["gbytes_per_s"] == 100.0
    assert one["memory"][("L2", "rw")]["gbytes_per_s"] == 250.0


def test_ert_analyze_of_a_bare_zen4_run_shows_rated_l2_l3_and_why_no_dram(tmp_path):
    """fp64 FLOPs-1 points of a real bare ert-run on a 2-core Zen 4 (3.69 GHz), made before L2/L3 were rated."""
    out = tmp_path / "ceilings.json"
    proc = run_cmd("ert", "analyze", DATA / "bare-zen4-fp64.raw.jsonl", "-o", out)
    assert proc.returncode == 0, proc.stderr
    memory = json.loads(out.read_text())["ceilings"]["memory"]
    got = {(m["level"], m["access"]): m["rated"] for m in memory}
    assert got[("L2", "ro")]["gbytes_per_s"] == pytest.approx(236.3)
    assert 0.95 < got[("L2", "ro")]["ratio"] <= 1.05
    assert 0.8 < got[("L2", "rw")]["ratio"] <= 1.05
    assert got[("L3", "rw")]["gbytes_per_s"] == pytest.approx(472.6)
    assert got[("DRAM", "ro")]["derivation"].startswith("no rated value: the run recorded none")
    assert "[" in proc.stdout and "no rated value: the run recorded none" in proc.stdout


def test_zen5_l3_is_rated_from_amds_guide_and_an_older_zen5_run_gets_it():
    arch, _ = cpu_rated.lookup("znver5")
    rated = cpu_rated.rated_ceilings(arch=arch, why_none="", clock_ghz=3.97, clock_how="measured", cores=2)
    l3 = {m["access"]: m for m in rated["memory"] if m["level"] == "L3"}
    assert (l3["ro"]["gbytes_per_s"], l3["rw"]["gbytes_per_s"]) == (pytest.approx(254.1), pytest.approx(508.2))
    assert "58455" in l3["rw"]["derivation"]
    # A Zen 5 run recorded before: its L3 said "no rated value"; analysing it again fills the value in.
    old = {**rated, "per_core": True, "cores_per_rank": 2, "memory": [m if m["level"] != "L3" else {"level": "L3", "access": m["access"],
                                                            "gbytes_per_s": None, "derivation": "no rated value: x"}
                               for m in rated["memory"]]}
    new = {(m["level"], m["access"]): m["gbytes_per_s"] for m in cpu_rated.complete_rated(old)["memory"]}
    assert new[("L3", "rw")] == pytest.approx(508.2) and new[("L2", "rw")] == pytest.approx(1016.3)
