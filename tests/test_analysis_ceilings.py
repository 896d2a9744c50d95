"""Ceilings from raw records: levels, cross-curve level ranges, compute peaks, warnings (synthetic records)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ert.analysis.ceilings import build, compute_ceilings
from ert.analysis.memory import memory_ceilings
from ert.spec import rates
from ert.analysis.plateaus import _densest_median, level_over_range
from ert.hardware.hwinfo import CacheInfo
from ert.records.rawio import RawData
from ert.spec import KernelSpec

ZEN4_CACHES = [CacheInfo(1, "Data", 32 << 10, 1), CacheInfo(2, "Unified", 1 << 20, 1),
               CacheInfo(3, "Unified", 32 << 20, 2)]


def record(spec: KernelSpec, wss: int, gbytes_per_s: float, *, noisy=False, valid=True, spread=0.01) -> dict:
    """A point record whose median seconds give exactly ``gbytes_per_s`` for this spec."""
    elements = wss // spec.itemsize
    trials = 64
    seconds = spec.bytes_moved(elements=elements, trials=trials) / (gbytes_per_s * 1e9)
    return {"type": "point", "id": f"{spec.key}-w{wss}", "spec": spec.to_dict(), "wss_bytes": wss,
            "elements": elements, "trials": trials,
            "seconds": {"min": seconds * (1 - spread / 2), "median": seconds, "max": seconds * (1 + spread / 2)},
            "samples": [seconds], "spread": spread, "noisy": noisy, "valid": valid, "check": "ok"}


def sweep(spec, levels, *, seed=0, noise=0.02, lo=16 << 10, hi=1 << 30, growth=1.25):
    """levels: [(gbytes_per_s, capacity_bytes or None)], step transitions at each capacity."""
    rng = np.random.default_rng(seed)
    out, wss = [], float(lo)
    while wss <= hi:
        w = int(wss) // 512 * 512
        value = next(v for v, cap in levels if cap is None or w <= cap)
        out.append(record(spec, w, value * math.exp(rng.normal(0, noise))))
        wss *= growth
    return out


RW = KernelSpec("fp64", 1, False, "rw")
RO = KernelSpec("fp64", 1, False, "ro")
RO_LEVELS = [(420.0, 64 << 10), (232.0, 2 << 20), (193.0, 48 << 20), (34.0, None)]


def test_rates_come_from_the_kernel_spec():
    r = record(RW, 1 << 20, 123.0)
    gbs, gflops = rates(r)
    assert gbs == pytest.approx(123.0)
    assert gflops == pytest.approx(123.0 / 16)  # 1 FLOP per 16 bytes


def test_clear_curve_names_its_own_levels():
    ceilings, warnings = memory_ceilings(sweep(RO, RO_LEVELS), ZEN4_CACHES, workers=2)
    assert [c["level"] for c in ceilings] == ["L1", "L2", "L3", "DRAM"]
    for c, (value, _) in zip(ceilings, RO_LEVELS):
        # A roof: the fastest confirmed point, at or above the level's value by at most the 2 % noise's reach.
        assert 0.99 * value <= c["gbytes_per_s"] <= 1.07 * value, c
        assert c["access"] == "ro" and c["evidence"]["point_ids"] and c["confirmed"]["by"] == "neighbour"
    assert not any("measured over" in w for w in warnings)


def test_curve_with_similar_levels_is_cut_at_the_cache_capacities():
    """Zen 4: read+write runs at nearly one speed in L1, L2 and L3; read-only separates them.

    The read+write fit makes one plateau across the caches; cut at the L1s' 64 KiB and the L2s' 2 MiB it gives
    each cache its own level, none of which holds the working sets of the cache before it."""
    rw_levels = [(465.0, 64 << 10), (430.0, 2 << 20), (380.0, 48 << 20), (55.0, None)]
    points = sweep(RW, rw_levels, seed=1, noise=0.04) + sweep(RO, RO_LEVELS, seed=2)
    ceilings, warnings = memory_ceilings(points, ZEN4_CACHES, workers=2)
    rw = [c for c in ceilings if c["access"] == "rw"]
    ro = [c for c in ceilings if c["access"] == "ro"]
    assert [c["level"] for c in rw] == [c["level"] for c in ro] == ["L1", "L2", "L3", "DRAM"]
    for c, (value, _) in zip(rw, rw_levels):
        assert 0.97 * value <= c["gbytes_per_s"] <= 1.12 * value, c  # a roof, with 4 % noise
    assert rw[0]["wss_bytes"][1] <= 64 << 10 < rw[1]["wss_bytes"][0]
    assert rw[1]["wss_bytes"][1] <= 2 << 20 < rw[2]["wss_bytes"][0]
    assert any(w.code == "level-cut" and w.startswith("fp64 read+write: one plateau of the fit") for w in warnings)
    assert not any(w.code == "level-cut" for w in warnings if w.startswith("fp64 read-only"))


def test_invalid_points_are_never_used():
    points = sweep(RO, RO_LEVELS)
    poisoned = [dict(p, valid=False, seconds={k: v / 100 for k, v in p["seconds"].items()})
                for p in points[:3]]  # 100x faster but failed the check
    ceilings, _ = memory_ceilings(poisoned + points[3:], ZEN4_CACHES, workers=2)
    assert max(c["gbytes_per_s"] for c in ceilings) < 500


def test_densest_median_ignores_a_minority_of_slow_points():
    values = np.array([466.0, 465.0, 197.0, 465.0, 240.0, 460.0, 230.0])
    assert _densest_median(values, window=0.08) == pytest.approx(465.0, rel=0.01)
    assert np.median(values) < 465  # what a plain median would have said


def test_level_over_range_takes_the_points_in_the_range():
    wss = [1, 2, 3, 4, 5, 6]
    level = level_over_range(wss, [9, 10, 10, 11, 3, 3], (2, 4))
    assert level.n_points == 3 and level.wss_bytes == (2, 4) and level.indices == (1, 2, 3)
    assert level.gbytes_per_s == pytest.approx(10.0)
    assert level_over_range(wss, [9, 10, 10, 11, 3, 3], (5, 5)) is None  # fewer than 3 points


def compute_record(spec: KernelSpec, gflops_per_s: float, **kw) -> dict:
    return record(spec, 64 << 10, gflops_per_s * spec.bytes_per_element / spec.flops_per_element, **kw)


def test_compute_peak_is_the_best_median_per_precision_and_fma():
    points = [compute_record(KernelSpec("fp64", f, fma), g)
              for f, fma, g in [(8, True, 100.0), (32, True, 117.0), (8, False, 60.0), (32, False, 58.0)]]
    points.append(compute_record(KernelSpec("fp64", 128, True), 500.0, valid=False))  # failed check: unused
    compute, warnings = compute_ceilings(points)
    by = {(c["precision"], c["fma"]): c for c in compute}
    assert set(by) == {("fp64", True), ("fp64", False)}
    assert by[("fp64", True)]["gflops_per_s"] == pytest.approx(117.0)
    assert by[("fp64", True)]["evidence"]["point_id"] == "fp64-fma-rw-f32-w65536"
    assert by[("fp64", False)]["gflops_per_s"] == pytest.approx(60.0)
    assert by[("fp64", False)]["flops_per_element"] == 8
    assert by[("fp64", True)]["spread"] == pytest.approx(0.01)
    assert not warnings


def test_build_counts_and_warns_about_partial_runs():
    points = sweep(RO, RO_LEVELS)
    header = {"type": "header", "raw_version": "1.0", "planned_points": len(points) + 10,
              "metadata": {"ranks": 1, "threads_per_rank": 2, "config": {"timing": {"noise_threshold": 0.1}},
                           "caches_reported": [{"level": c.level, "kind": c.kind, "size_bytes": c.size_bytes,
                                                "shared_cpu_count": c.shared_cpu_count} for c in ZEN4_CACHES]}}
    doc = build(RawData(path=None, header=header, points=points, ends=[{"wall_seconds": 12.5}]))
    assert doc["metadata"]["points"] == {"planned": len(points) + 10, "measured": len(points), "noisy": 0, "invalid": 0}
    assert doc["metadata"]["wall_seconds"] == 12.5
    assert any("partial run" in w for w in doc["warnings"])


def test_best_launch_per_working_set_is_used_and_others_kept_as_evidence():
    from ert.records.rawio import best_launches

    curve = sweep(RW, [(400.0, 64 << 10), (50.0, None)], hi=64 << 20, seed=3)
    measured = []
    for rec in curve:  # three launch geometries per working set; the middle one is the fastest
        for i, factor in enumerate((0.5, 1.0, 0.8)):
            r = dict(rec, id=f"{rec['id']}-g{1024 * (i + 1)}-l64", launch={"global": 1024 * (i + 1), "local": 64})
            r["seconds"] = {k: v / factor for k, v in rec["seconds"].items()}
            measured.append(r)
    measured.append(dict(measured[1], id=measured[1]["id"] + "-bad", valid=False))
    best = best_launches(measured)
    kept = [r for r in best if r["valid"]]
    assert len(kept) == len(curve)
    assert all(r["launch"]["global"] == 2048 for r in kept)
    assert sum(not r["valid"] for r in best) == 1  # invalid records stay, to be counted and reported
    # One cache, as the curve has (ZEN4_CACHES' L2 and L3 would cut its memory plateau at their capacities).
    levels, _ = memory_ceilings(best, [CacheInfo(1, "Data", 64 << 10, 1)], workers=1)
    assert [lvl["gbytes_per_s"] for lvl in levels] == [pytest.approx(400.0, rel=0.05), pytest.approx(50.0, rel=0.05)]


def test_a_busy_machine_is_the_first_warning_and_a_quiet_run_has_none():
    """A run where most points stayed noisy was measured under other work: said first, never silently."""
    from pathlib import Path

    from ert.analysis.ceilings import BUSY_NOISY_SHARE, build
    from ert.records.rawio import read_raw

    raw = read_raw(Path(__file__).parent / "data" / "bare-zen4-full.raw.jsonl")  # a quiet Zen 4 run
    quiet = build(raw)
    assert not any(w.startswith("busy machine") for w in quiet["warnings"])
    points = raw.points
    for rec in points[: int(len(points) * BUSY_NOISY_SHARE) + 1]:
        rec["noisy"] = True
    raw.header["metadata"]["load_average_at_start"] = {"load1": 1.93, "cpus": 2}
    busy = build(raw)
    share = sum(r["noisy"] for r in points) / len(points)
    assert busy["warnings"][0].startswith("busy machine: ") and f"({share:.0%})" in busy["warnings"][0]
    assert busy["warnings"][0].endswith("(load average 1.93 on 2 cpu(s) when it started)")
