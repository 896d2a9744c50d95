"""The disturbed-stretch rule (ert.records.weather) on synthetic sentinel series with known answers."""

from __future__ import annotations

import math

from ert.records.weather import disturbed_stretches, joined, ratios, stretch_at, suspect

SPEC = {"precision": "fp64", "flops_per_element": 1, "fma": False, "access": "rw"}


def sentinel(n: int, level: str, t: float, gbs: float, *, valid: bool = True, wss: int = 16 * 10**6) -> dict:
    """A sentinel record at time ``t`` reading ``gbs`` GB/s (1e6 elements, 10 trials, read+write fp64: 16 B each)."""
    seconds = 16e6 * 10 / (gbs * 1e9)
    return {"type": "sentinel", "id": f"sentinel-{n}", "level": level, "spec": SPEC, "wss_bytes": wss,
            "elements_per_thread": 500_000, "elements": 10**6, "ranks": 1, "threads_per_rank": 2, "trials": 10,
            "seconds": {"min": seconds, "median": seconds, "max": seconds}, "samples": [seconds], "valid": valid,
            "time": t, "after_point": None}


def series(level: str, rates: list[float], *, t0: float = 100.0, step: float = 1.0, first: int = 0) -> list[dict]:
    return [sentinel(first + k, level, t0 + k * step, r) for k, r in enumerate(rates)]


def test_a_calm_run_has_no_stretch():
    recs = series("L1", [400, 395, 401, 380, 399])  # 380 is 0.95 of the best: within the 10 % threshold
    assert disturbed_stretches(recs, 0.10) == []
    assert [round(r, 3) for _, r in ratios(recs)] == [0.998, 0.985, 1.0, 0.948, 0.995]


def test_a_stretch_spans_from_the_calm_sentinel_before_to_the_calm_one_after():
    recs = series("L1", [400, 400, 336, 300, 400, 400])  # 0.84 and 0.75 of the best at t=102, 103
    (s,) = disturbed_stretches(recs, 0.10)
    assert (s.start, s.end) == (101.0, 104.0)
    assert s.levels == ("L1",) and s.low_level == "L1" and math.isclose(s.low, 0.75)
    assert s.sentinels == ("sentinel-2", "sentinel-3")
    assert stretch_at(101.5, [s]) is s and stretch_at(104.5, [s]) is None
    assert suspect({"time": 103.9}, [s]) and not suspect({"time": 101.0}, [s]) and not suspect({}, [s])
    assert s.seconds(100.0, 105.0) == 3.0


def test_open_ends_reach_the_run_start_and_end():
    recs = series("L2", [200, 250, 250, 200])
    first, last = disturbed_stretches(recs, 0.10)
    assert first.start == -math.inf and first.end == 101.0
    assert last.start == 102.0 and last.end == math.inf
    assert first.seconds(99.0, 104.0) == 2.0 and last.seconds(99.0, 104.0) == 2.0


def test_levels_overlapping_join_and_an_invalid_sentinel_counts_for_nothing():
    l1 = series("L1", [400, 300, 400, 400], t0=100.0, step=2.0)           # L1 low at 102: stretch 100-104
    l2 = series("L2", [200, 200, 150, 200], t0=101.0, step=2.0, first=10)  # L2 low at 105: stretch 103-107
    bad = [sentinel(20, "L1", 102.5, 50.0, valid=False)]
    own = disturbed_stretches(l1 + l2 + bad, 0.10)
    assert [(x.start, x.end, x.levels) for x in own] == [(100.0, 104.0, ("L1",)), (103.0, 107.0, ("L2",))]
    (s,) = joined(own)
    assert (s.start, s.end) == (100.0, 107.0) and s.levels == ("L1", "L2")
    assert s.low_level == "L1" and math.isclose(s.low, 0.75)
    assert set(s.sentinels) == {"sentinel-1", "sentinel-12"}


def test_a_stretch_of_a_larger_level_leaves_the_smaller_working_sets_calm():
    l1 = [sentinel(k, "L1", 100.0 + 2 * k, 470.0, wss=32 * 1024) for k in range(5)]
    l2 = [sentinel(10 + k, "L2", 101.0 + 2 * k, r, wss=512 * 1024) for k, r in enumerate([450, 395, 392, 450, 452])]
    (s,) = disturbed_stretches(l1 + l2, 0.10)
    assert s.levels == ("L2",) and s.above_bytes == 32 * 1024 and (s.start, s.end) == (101.0, 107.0)
    in_l1 = {"time": 104.0, "wss_bytes": 24 * 1024}
    in_l2 = {"time": 104.0, "wss_bytes": 96 * 1024}
    assert not suspect(in_l1, [s]) and suspect(in_l2, [s]) and suspect({"time": 104.0}, [s])
    assert stretch_at(104.0, [s], in_l1) is None and stretch_at(104.0, [s]) is s
    # The smallest level's stretch concerns every working set (a co-tenant taking the core's time slows all).
    l1_low = [sentinel(k, "L1", 100.0 + 2 * k, r, wss=32 * 1024) for k, r in enumerate([470, 300, 470])]
    (t,) = disturbed_stretches(l1_low, 0.10)
    assert t.above_bytes == 0.0 and suspect({"time": 102.5, "wss_bytes": 2**30}, [t])
