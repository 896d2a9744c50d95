"""Rule 6 (ert.analysis.regimes): a cache level's roof is its fastest sustained regime inside the cache.

Synthetic curves with a known answer (seeded noise), then the real Zen 4
curve in tests/data: the roof is an upper bound of what the run measured in
the cache, and no point between two caches goes unexplained.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ert.analysis.ceilings import build
from ert.analysis.memory import memory_ceilings
from ert.analysis.levels import NamedLevel
from ert.analysis.plateaus import Plateau
from ert.analysis.regimes import MIN_REGIME_POINTS, find_regimes, judge_levels, unassigned_points
from ert.hardware.hwinfo import CacheInfo
from ert.records.rawio import read_raw
from ert.spec import rates

DATA = Path(__file__).parent / "data"
KIB, MIB = 1024, 1024 * 1024
# One thread: L1d 32 KiB, L2 1 MiB, L3 32 MiB.
CACHES = [CacheInfo(1, "Data", 32 * KIB, 1), CacheInfo(2, "Unified", MIB, 1), CacheInfo(3, "Unified", 32 * MIB, 1)]


def _sizes(lo: float, hi: float, per_octave: int) -> np.ndarray:
    n = int(round(math.log2(hi / lo) * per_octave)) + 1
    return np.unique(np.round(np.geomspace(lo, hi, n) / 64) * 64).astype(int)


def _level(name: str, idx: np.ndarray, wss: np.ndarray, bw: np.ndarray) -> NamedLevel:
    return NamedLevel(name, Plateau(float(np.median(bw[idx])), 0.0, (int(wss[idx].min()), int(wss[idx].max())),
                                    int(idx.size), tuple(int(i) for i in idx), 0), "test")


def _curve(shape, seed: int, noise: float = 0.02):
    """wss from 16 KiB to 256 MiB, 6 per octave; ``shape(wss)`` the noiseless rate."""
    rng = np.random.default_rng(seed)
    wss = _sizes(16 * KIB, 256 * MIB, 6)
    bw = np.array([shape(w) for w in wss]) * np.exp(rng.normal(0.0, noise, wss.size))
    return wss, bw


def _judge(wss, bw, named):
    noisy = [False] * wss.size
    return judge_levels(named, CACHES, workers=1, wss_bytes=wss, gbytes_per_s=bw, noisy=noisy, label="fp64 rw")


def _l2_cut(wss, lo, hi):
    return np.flatnonzero((wss >= lo) & (wss <= hi))


@pytest.mark.parametrize("seed", range(8))
def test_low_then_high_regime_the_roof_is_the_high_one(seed):
    # Zen 5's shape: 600 GB/s up to 0.4 x L2, then 950 to 0.7 x L2, then the transition to L3 (300).
    def shape(w):
        if w <= 32 * KIB:
            return 2000.0
        if w <= 400 * KIB:
            return 600.0
        if w <= 720 * KIB:
            return 950.0
        return 300.0 if w >= 2 * MIB else 500.0

    wss, bw = _curve(shape, seed)
    # The plateau fit kept only the lower regime as L2 (the upper one looked like a transition fragment).
    named = [_level("L1", _l2_cut(wss, 16 * KIB, 32 * KIB), wss, bw),
             _level("L2", _l2_cut(wss, 64 * KIB, 400 * KIB), wss, bw),
             _level("L3", _l2_cut(wss, 2 * MIB, 32 * MIB), wss, bw)]
    judged, warnings = _judge(wss, bw, named)
    l2 = judged[1]
    assert [round(r.gbytes_per_s, -2) for r in l2.regimes] == [600.0, 1000.0] or \
        len(l2.regimes) >= 2 and max(r.gbytes_per_s for r in l2.regimes) > 900
    assert 0.95 * 950 <= l2.level.plateau.gbytes_per_s <= 1.05 * 950
    best = max(r for r in l2.regimes if r.gbytes_per_s > 900)
    assert best.wss_bytes[0] >= 400 * KIB and best.wss_bytes[1] <= 720 * KIB
    # Its points are the whole window: the lower regime is in its range, not dropped.
    assert l2.range_gbytes_per_s[0] < 650 and l2.range_gbytes_per_s[1] > 900
    assert any("L2: 2 regimes" in w or "regimes inside the cache" in w for w in warnings)
    # L1 is never judged by rule 6 (its ramp rule stands): no regimes; its roof is its fastest confirmed point.
    l1 = judged[0]
    assert l1.regimes == () and l1.confirmed is not None
    assert l1.level.plateau.gbytes_per_s == l1.confirmed.gbytes_per_s >= named[0].plateau.gbytes_per_s
    assert 0.95 * 300 <= judged[2].level.plateau.gbytes_per_s <= 1.05 * 300


@pytest.mark.parametrize("seed", range(8))
def test_high_then_low_regime_the_roof_is_the_high_one(seed):
    # A level that falls well before its capacity (L2 shared with other data): 450, then 350 from 600 KiB.
    def shape(w):
        if w <= 32 * KIB:
            return 900.0
        if w <= 2 * MIB:
            return 450.0 if w <= 560 * KIB else 350.0
        return 250.0

    wss, bw = _curve(shape, seed)
    named = [_level("L1", _l2_cut(wss, 16 * KIB, 32 * KIB), wss, bw),
             _level("L2", _l2_cut(wss, 600 * KIB, 1.9 * MIB), wss, bw),
             _level("L3", _l2_cut(wss, 2.1 * MIB, 32 * MIB), wss, bw)]
    judged, _ = _judge(wss, bw, named)
    assert 0.95 * 450 <= judged[1].level.plateau.gbytes_per_s <= 1.05 * 450


@pytest.mark.parametrize("seed", range(8))
def test_a_ramp_inside_the_cache_gives_its_top(seed):
    def shape(w):
        if w <= 32 * KIB:
            return 900.0
        if w <= MIB:  # a smooth rise from 300 at 64 KiB to 500 at 1 MiB
            return 300.0 * (500.0 / 300.0) ** (math.log(max(w, 64 * KIB) / (64 * KIB)) / math.log(16))
        return 200.0

    wss, bw = _curve(shape, seed, noise=0.01)
    named = [_level("L1", _l2_cut(wss, 16 * KIB, 32 * KIB), wss, bw),
             _level("L2", _l2_cut(wss, 64 * KIB, 200 * KIB), wss, bw),
             _level("L3", _l2_cut(wss, 2.5 * MIB, 32 * MIB), wss, bw)]
    judged, _ = _judge(wss, bw, named)
    roof = judged[1].level.plateau.gbytes_per_s
    top = max(bw[(wss >= 64 * KIB) & (wss <= MIB)])
    assert roof >= 0.90 * top and roof <= top


@pytest.mark.parametrize("seed", range(20))
def test_pure_noise_is_one_regime_and_one_fast_outlier_is_no_roof(seed):
    rng = np.random.default_rng(seed)
    wss = _sizes(64 * KIB, MIB, 8)
    bw = 400.0 * np.exp(rng.normal(0.0, 0.02, wss.size))
    regimes = find_regimes(wss, bw, range(wss.size))
    # The rate three points reach: above the median by about 1.5 sigma of the noise, never by a step.
    assert len(regimes) == 1 and 1.0 < regimes[0].gbytes_per_s / 400.0 < 1.07
    # One point lifted by 40 % (a quiet moment) does not become the roof.
    bw[wss.size // 2] *= 1.4
    regimes = find_regimes(wss, bw, range(wss.size))
    assert max(r.gbytes_per_s for r in regimes) < 400.0 * 1.07
    assert all(r.n_points >= MIN_REGIME_POINTS for r in regimes)


def test_noisy_points_do_not_make_a_regime():
    wss = _sizes(64 * KIB, MIB, 8)
    bw = np.full(wss.size, 400.0)
    bw[10:13] = 700.0  # three fast points, all flagged noisy
    noisy = np.zeros(wss.size, dtype=bool)
    noisy[10:13] = True
    regimes = find_regimes(wss, bw, range(wss.size), noisy=noisy)
    assert [round(r.gbytes_per_s) for r in regimes] == [400]


def test_unassigned_points_each_have_a_reason():
    wss = np.array([16, 24, 32, 48, 64, 96, 128, 192, 256]) * KIB
    bw = np.array([100, 900, 900, 900, 700, 500, 400, 400, 400], dtype=float)
    named = [_level("L1", np.array([1, 2, 3]), wss, bw), _level("L2", np.array([6, 7, 8]), wss, bw)]
    left = unassigned_points(named, wss, bw, [False] * 9)
    assert [(u["wss_bytes"] // KIB, u["why"]) for u in left] == [
        (16, "overhead ramp below L1"), (64, "transition L1 -> L2"), (96, "transition L1 -> L2")]


def _curve_of(raw, precision: str, access: str):
    pts = [r for r in raw.points if r["spec"]["precision"] == precision and r["spec"]["access"] == access
           and r["valid"]]
    fewest = min(r["spec"]["flops_per_element"] for r in pts)
    return sorted((r for r in pts if r["spec"]["flops_per_element"] == fewest), key=lambda r: r["wss_bytes"])


def test_real_zen4_l2_roof_is_an_upper_bound_of_the_points_in_l2():
    """AMD EPYC Zen 4, 2 threads: the fp64 FLOPs=1 curves of a bare run (L1d 32 KiB, L2 1 MiB per core)."""
    raw = read_raw(DATA / "bare-zen4-fp64.raw.jsonl")
    doc = build(raw)
    threads = int(raw.header["metadata"]["threads_per_rank"]) * int(raw.header["metadata"]["ranks"])
    for access in ("rw", "ro"):
        curve = _curve_of(raw, "fp64", access)
        per_thread = [r["wss_bytes"] / threads for r in curve]
        qualifying = [rates(r).gbytes_per_s for r, w in zip(curve, per_thread)
                      if 2 * 32 * KIB <= w <= MIB and not r["noisy"]]
        l2 = next(m for m in doc["ceilings"]["memory"]
                  if m["level"] == "L2" and m["access"] == access and m["precision"] == "fp64")
        assert l2["gbytes_per_s"] >= 0.90 * max(qualifying), (access, l2["gbytes_per_s"], max(qualifying))
        assert l2["regimes"] and l2["range_gbytes_per_s"][0] <= l2["gbytes_per_s"] <= l2["range_gbytes_per_s"][1]


def test_real_zen4_every_point_between_the_caches_is_in_a_level_or_noted():
    raw = read_raw(DATA / "bare-zen4-fp64.raw.jsonl")
    points = [r for r in raw.points if r["valid"]]
    caches = [CacheInfo(1, "Data", 32 * KIB, 1), CacheInfo(2, "Unified", MIB, 1), CacheInfo(3, "Unified", 32 * MIB, 2)]
    memory, warnings = memory_ceilings(points, caches, workers=2)
    for access in ("rw", "ro"):
        curve = _curve_of(raw, "fp64", access)
        ids = {i for m in memory if m["access"] == access for i in m["evidence"]["point_ids"]}
        missing = [r for r in curve if r["id"] not in ids]
        label = f"fp64 {'read+write' if access == 'rw' else 'read-only'}"
        note = [w for w in warnings if w.startswith(f"{label}: ") and "in no level" in w]
        if missing:
            assert note and note[0].startswith(f"{label}: {len(missing)} point(s) in no level"), (missing, warnings)
        else:
            assert not note


def test_a_last_level_break_far_past_the_l3_hint_says_what_it_suggests():
    from ert.analysis.levels import name_levels

    # 2 threads: L2 2 MiB aggregate, L3 32 MiB; the L3 -> DRAM break comes at ~100 MiB.
    plateaus = [Plateau(900.0, 0.02, (16 * KIB, 48 * KIB), 5, (0, 1, 2, 3, 4), 0),
                Plateau(600.0, 0.02, (128 * KIB, 1 * MIB), 5, (5, 6, 7, 8, 9), 0),
                Plateau(300.0, 0.02, (4 * MIB, 80 * MIB), 5, (10, 11, 12, 13, 14), 0),
                Plateau(60.0, 0.02, (128 * MIB, 1024 * MIB), 5, (15, 16, 17, 18, 19), 0)]
    caches = CACHES[:2] + [CacheInfo(3, "Unified", 32 * MIB, 2)]  # one L3 shared by both cores
    _, warnings = name_levels(plateaus, caches, workers=2)
    note = [w for w in warnings if "off the L3 hint" in w]
    assert note and "What the data suggests" in note[0]
    assert "victim L3 adds the L2s" in note[0] and "dies (CCDs)" in note[0]


def test_ert_show_prints_a_level_with_several_regimes_as_its_range_and_regimes():
    from ert.consumers.report_rows import regimes_note

    entry = {"level": "L2", "gbytes_per_s": 950.0, "range_gbytes_per_s": [560.0, 1010.0],
             "regimes": [{"wss_bytes": [96 * KIB, 400 * KIB], "gbytes_per_s": 610.0, "n_points": 6},
                         {"wss_bytes": [450 * KIB, 700 * KIB], "gbytes_per_s": 950.0, "n_points": 4}]}
    assert regimes_note({"level": "L3", "regimes": [entry["regimes"][0]], "range_gbytes_per_s": [1, 2]}) is None
    assert regimes_note(entry) == ("L2: 560.0 - 1010 GB/s over its points; regimes 610.0 at 96 KiB - 400 KiB "
                                   "(6 points); 950.0 at 450 KiB - 700 KiB (4 points); the roof is the fastest")


def _two_mode_memory(fast_every: int, seed: int = 0, *, memory_from: int = 128 * MIB):
    """L3 at 190 GB/s to 32 MiB, then memory that alternates: every ``fast_every``-th point 57, else 34 GB/s
    (a shared host's DRAM, seen on the Zen 4 guest); the memory level holds every point from ``memory_from``."""
    wss, bw = _curve(lambda w: 190.0 if w <= 32 * MIB else 34.0, seed, noise=0.01)
    memory = _l2_cut(wss, memory_from, 256 * MIB)
    if fast_every:
        bw[memory[::fast_every]] *= 57.0 / 34.0
    named = [_level("L3", _l2_cut(wss, 2 * MIB, 32 * MIB), wss, bw), _level("DRAM", memory, wss, bw)]
    # The fit's plateau: the slow mode (the median), as rule 5 leaves it.
    named[1] = _level("DRAM", memory[bw[memory] < 45], wss, bw)
    return wss, bw, named


def test_memory_that_changed_under_the_run_is_roofed_by_its_fast_mode():
    # Every point from 2 x L3 on alternates: no two neighbours agree, nothing is confirmed, the fast mode is the roof.
    wss, bw, named = _two_mode_memory(fast_every=2, memory_from=64 * MIB)
    judged, warnings = _judge(wss, bw, named)
    dram = judged[-1]
    assert dram.confirmed is None
    assert dram.level.plateau.gbytes_per_s == pytest.approx(57.0, rel=0.03)  # an upper bound of the run
    assert max(bw[list(dram.level.plateau.indices)]) <= 1.05 * dram.level.plateau.gbytes_per_s
    assert dram.range_gbytes_per_s[0] == pytest.approx(34.0, rel=0.05)  # the slow mode shows in its range
    assert any("DRAM: the memory read" in w and "changed during the run" in w for w in warnings)


def test_a_confirmed_memory_rate_is_the_roof_over_an_unconfirmed_fast_mode():
    # The slow points from 64 to 128 MiB agree with each other: 34 GB/s is confirmed, and it is the roof.
    wss, bw, named = _two_mode_memory(fast_every=2)
    judged, warnings = _judge(wss, bw, named)
    dram = judged[-1]
    assert dram.confirmed is not None and dram.confirmed.by == "neighbour"
    assert dram.level.plateau.gbytes_per_s == dram.confirmed.gbytes_per_s == pytest.approx(34.0, rel=0.05)
    assert dram.range_gbytes_per_s[1] == pytest.approx(57.0, rel=0.05)  # the fast mode shows in its range
    (note,) = [w for w in warnings if "DRAM: the memory read" in w]
    assert "the fastest rate the run confirmed" in note and "not the 5" in note


@pytest.mark.parametrize("fast_every", [0, 6])
def test_flat_memory_or_two_fast_points_keep_the_plateau(fast_every):
    wss, bw, named = _two_mode_memory(fast_every)
    fast = np.count_nonzero(bw[_l2_cut(wss, 128 * MIB, 256 * MIB)] > 45)
    assert fast == (0 if not fast_every else 2) < MIN_REGIME_POINTS  # none, or too few to be a roof
    judged, warnings = _judge(wss, bw, named)
    # The roof: the slow mode's fastest confirmed point (neighbours agree), never a lone fast point.
    roof = judged[-1].level.plateau.gbytes_per_s
    slow = bw[list(named[1].plateau.indices)]
    assert named[1].plateau.gbytes_per_s <= roof <= slow.max() and judged[-1].confirmed.by == "neighbour"
    assert not any("memory read" in w for w in warnings)
    # Too few to be a roof, but never passed over: the fast points are named above the roof.
    above = [w for w in warnings if "clean point(s) read above its roof" in w]
    assert len(above) == (1 if fast_every else 0)
    if fast_every:  # each fast point inside the level's range, by name
        memory = _l2_cut(wss, named[1].plateau.wss_bytes[0], 256 * MIB)
        inside = memory[bw[memory] > 45]
        assert above[0].startswith(f"fp64 rw DRAM: {inside.size} clean point(s)") and "not a roof" in above[0]
        assert all(f"{bw[i]:.4g} GB/s at" in above[0] for i in inside)


def test_memory_points_below_twice_the_last_cache_above_its_roof_are_the_transition():
    # The Zen 4 guest's read-only curve: the L3 hint is 32 MiB, but the rate stays up to 60 MiB (the host's
    # cache) before the memory's 34 GB/s; the memory plateau as the fit found it starts at 38 MiB.
    wss, bw = _curve(lambda w: 190.0 if w <= 32 * MIB else 120.0 if w <= 60 * MIB else 34.0, 0, noise=0.01)
    memory = _l2_cut(wss, 38 * MIB, 256 * MIB)
    named = [_level("L3", _l2_cut(wss, 2 * MIB, 32 * MIB), wss, bw),
             _level("DRAM", memory[bw[memory] < 45], wss, bw)]
    named[1] = replace(named[1], plateau=replace(named[1].plateau, indices=tuple(int(i) for i in memory),
                                                 wss_bytes=(int(wss[memory].min()), int(wss[memory].max()))))
    judged, warnings = _judge(wss, bw, named)
    dram = judged[-1].level.plateau
    assert dram.wss_bytes[0] > 60 * MIB
    assert named[1].plateau.gbytes_per_s <= dram.gbytes_per_s <= 1.05 * named[1].plateau.gbytes_per_s
    assert max(bw[list(dram.indices)]) <= 1.10 * dram.gbytes_per_s   # no point inside the level above its roof
    assert any("DRAM:" in w and "left out of DRAM" in w and "transition" in w for w in warnings)
