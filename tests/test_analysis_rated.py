"""Measured against rated (ert/analysis/rated.py): a point above its rated value is invalid and said, a ceiling
far below it is warned, and the per-core rated values scale with threads, ranks and the one-core clock.
Synthetic records through ert.analysis.ceilings.build, and one real bare Zen 4 run through `ert analyze`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ert.analysis.ceilings import build
from ert.analysis.rated import ABOVE_RATED, scaled_rated
from ert.config.schema import from_dict
from ert.records.rawio import RawData
from ert.spec import KernelSpec

from conftest import run_cmd

DATA = Path(__file__).parent / "data"


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


@pytest.mark.slow
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


def test_a_low_ceiling_of_more_threads_than_cpus_blames_the_oversubscription_not_the_kernel():
    cfg = from_dict({"backend": "numba-cpu", "precisions": ["fp64"], "threads": 2})
    meta = {"threads_per_rank": 2, "ranks": 1, "caches_reported": CACHES, "config": cfg.to_dict(),
            "backend_info": {"rated": RATED}, "cpus_usable": 1}
    doc = build(RawData(path=None, header={"metadata": meta, "planned_points": 1},
                        points=[_point(FMA, 65536, 100.0)], ends=[]))
    (warning,) = [w for w in doc["warnings"] if "of the rated" in w]
    assert warning.endswith("2 threads took turns on 1 cpus (oversubscribed), so this is not the hardware's "
                            "limit; measure with at most 1 threads")
    assert "the kernel, not the hardware" not in warning
    meta["cpus_usable"] = 2  # as many threads as cpus: the kernel's, as before
    doc = build(RawData(path=None, header={"metadata": meta, "planned_points": 1},
                        points=[_point(FMA, 65536, 100.0)], ends=[]))
    assert any(w.endswith("the kernel, not the hardware, limits it") for w in doc["warnings"])
