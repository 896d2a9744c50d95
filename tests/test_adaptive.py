"""The adaptive planner on synthetic machines whose levels are known, and its replay after a kill."""

from __future__ import annotations

import math
import random

import pytest

from ert.measure.adaptive import AdaptivePlanner
from ert.analysis.ceilings import build
from ert.config.schema import from_dict
from ert.records.rawio import RawData
from ert.measure.plan import plan

# A Zen 4-like machine, 2 threads: (aggregate capacity, GB/s) per level, then memory.
LEVELS = {"ro": [(64 << 10, 418.0), (2 << 20, 233.0), (32 << 20, 193.0), (None, 34.0)],
          "rw": [(64 << 10, 460.0), (2 << 20, 376.0), (32 << 20, 364.0), (None, 100.0)]}
PEAK = {("fp64", True): 116.5, ("fp64", False): 117.2, ("fp32", True): 233.0, ("fp32", False): 234.0}
CACHES = [dict(level=1, kind="Data", size_bytes=32 << 10, shared_cpu_count=1),
          dict(level=2, kind="Unified", size_bytes=1 << 20, shared_cpu_count=1),
          dict(level=3, kind="Unified", size_bytes=32 << 20, shared_cpu_count=2)]
CONFIG = {"backend": "numba-cpu", "precisions": ["fp64", "fp32"], "flops_per_element": [1, 8, 32, 128],
          "fma": "both", "access": ["rw", "ro"], "sweep": "adaptive", "threads": 2,
          "working_set": {"min_bytes": 16384, "max_bytes": 1 << 30, "growth": 1.25, "compute_max_bytes": 1 << 26}}


def bandwidth(access: str, wss: int) -> float:
    """The staircase, each step a smooth log-linear slope over a factor 1.6 past the capacity."""
    levels = LEVELS[access]
    gbs = levels[0][1]
    for (cap, value), (_, following) in zip(levels, levels[1:]):
        if wss > cap:
            gbs = value * (following / value) ** min(1.0, math.log(wss / cap) / math.log(1.6))
    return gbs


def record(point, rng: random.Random, noise: float, saturate_flops: float = 6.0, stall=None) -> dict:
    spec = point.spec
    jitter = math.exp(rng.gauss(0, noise))
    elements = point.wss_bytes // spec.itemsize
    if spec.flops_per_element == 1:
        seconds = elements * spec.bytes_per_element / (bandwidth(spec.access, point.wss_bytes) * jitter) / 1e9
    else:
        peak = PEAK[(spec.precision, spec.fma)] * (1 - math.exp(-spec.flops_per_element / saturate_flops))
        gflops = min(peak, spec.arithmetic_intensity * bandwidth("rw", point.wss_bytes)) * jitter
        if stall is not None:  # a machine whose GFLOP/s stalls over some FLOP counts (bandwidth, noise)
            gflops = stall(spec.flops_per_element, gflops)
        seconds = elements * spec.flops_per_element / gflops / 1e9
    spread = abs(rng.gauss(0, noise)) * 2
    return {"type": "point", "id": point.id, "spec": spec.to_dict(), "wss_bytes": point.wss_bytes,
            "elements": elements, "trials": 1, "spread": spread, "noisy": spread > 0.1, "valid": True,
            "seconds": {"min": seconds * (1 - spread / 3), "median": seconds, "max": seconds * (1 + spread / 3)},
            "check": "", "remeasured": 0}


def analyse(cfg, records: list[dict]) -> dict:
    header = {"metadata": {"threads_per_rank": 2, "ranks": 1, "caches_reported": CACHES, "config": cfg.to_dict()},
              "planned_points": len(records)}
    return build(RawData(path=None, header=header, points=records, ends=[]))


def candidates(cfg):
    return plan(cfg, workers=2, granule_elements_of=lambda spec: 512 // spec.itemsize)


def run_adaptive(cfg, rng, noise, *, stop_after: int | None = None, records=None, **kw) -> dict:
    """Measure what the planner asks for, batch by batch; ``stop_after`` points: a kill."""
    planner = AdaptivePlanner(candidates(cfg), growth=cfg.working_set.growth, cache_resident_bytes=1 << 20)
    records = dict(records or {})
    while batch := planner.next_batch(records):
        for point in batch:
            if stop_after is not None and len(records) >= stop_after:
                return records
            records[point.id] = record(point, rng, noise, **kw)
    return records


def levels(doc: dict) -> dict:
    return {(e["precision"], e["access"], e["level"]): e["gbytes_per_s"] for e in doc["ceilings"]["memory"]}


@pytest.fixture(scope="module")
def cfg():
    return from_dict(CONFIG)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_levels_as_the_dense_sweep_from_a_fraction_of_the_points(cfg, seed):
    dense_points = candidates(cfg)
    rng = random.Random(seed)
    dense = analyse(cfg, [record(p, rng, 0.01) for p in dense_points])
    adaptive_records = run_adaptive(cfg, random.Random(seed), 0.01)
    adaptive = analyse(cfg, list(adaptive_records.values()))
    assert len(adaptive_records) < 0.3 * len(dense_points)
    want, got = levels(dense), levels(adaptive)
    assert set(got) == set(want) and len(want) == 16  # L1, L2, L3, DRAM of four curves
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=0.03), key
    assert len(adaptive["ceilings"]["compute"]) == len(dense["ceilings"]["compute"]) == 4
    for d, a in zip(dense["ceilings"]["compute"], adaptive["ceilings"]["compute"]):
        assert (a["precision"], a["fma"]) == (d["precision"], d["fma"])
        assert a["gflops_per_s"] == pytest.approx(d["gflops_per_s"], rel=0.03)


def test_transitions_are_sampled_densely_and_plateaus_sparsely(cfg):
    records = run_adaptive(cfg, random.Random(5), 0.005)
    wss = sorted(r["wss_bytes"] for r in records.values() if r["id"].startswith("fp64-add-ro-f1-"))
    grid = sorted({p.wss_bytes for p in candidates(cfg) if p.id.startswith("fp64-add-ro-f1-")})
    inside = lambda lo, hi: sum(lo <= w <= hi for w in wss) / sum(lo <= w <= hi for w in grid)
    # The L2 -> L3 slope (2 - 3.2 MiB aggregate) versus the middle of the L2 plateau.
    assert inside(2 << 20, int(3.2 * (1 << 20))) == 1.0
    assert inside(200 << 10, 1 << 20) < 0.6


def test_compute_search_stops_once_gflops_saturate(cfg):
    wide = from_dict({**CONFIG, "precisions": ["fp64"], "fma": "on", "access": ["rw"],
                      "flops_per_element": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]})
    records = run_adaptive(wide, random.Random(7), 0.002, saturate_flops=3.0)
    flops = sorted({r["spec"]["flops_per_element"] for r in records.values() if r["spec"]["flops_per_element"] > 1})
    # Saturated (within 3 %) by 16 FLOPs per element: two more steps confirm it, nothing beyond.
    assert flops[-1] <= 64 and 2 in flops
    best = analyse(wide, list(records.values()))["ceilings"]["compute"][0]
    assert best["gflops_per_s"] == pytest.approx(PEAK[("fp64", True)], rel=0.02)
    # The peak is confirmed at working sets on both sides of the cache-resident one.
    at_best = {r["wss_bytes"] for r in records.values() if r["spec"]["flops_per_element"] == best["flops_per_element"]}
    assert len(at_best) == 3


def test_compute_search_does_not_stop_on_a_stalled_step(cfg):
    """FLOPs 8 and 32 equally bandwidth-bound (or one noisy step) must not end the search below the peak.

    A default run once measured FP64 FMA at FLOPs 8 and 32 only and kept the
    FLOPs-8 value: one step without gain looked like saturation.
    """
    wide = from_dict({**CONFIG, "precisions": ["fp64"], "fma": "on", "access": ["rw"],
                      "flops_per_element": [1, 8, 32, 128, 256, 512]})
    peak = PEAK[("fp64", True)]
    # 55 GFLOP/s at FLOPs 8 and 32 alike, then the real peak from 128 on.
    records = run_adaptive(wide, random.Random(3), 0.002,
                           stall=lambda flops, g: 0.47 * peak if flops <= 32 else peak)
    flops = sorted({r["spec"]["flops_per_element"] for r in records.values() if r["spec"]["flops_per_element"] > 1})
    assert 128 in flops
    best = analyse(wide, list(records.values()))["ceilings"]["compute"][0]
    assert best["gflops_per_s"] == pytest.approx(peak, rel=0.02)


@pytest.mark.parametrize("kill_at", [5, 60, 97])
def test_a_killed_run_resumes_to_the_same_plan(cfg, kill_at):
    """Replaying from the records on disk makes the decisions of the uninterrupted run."""
    whole = run_adaptive(cfg, random.Random(11), 0.02)
    # Same random stream: a point's value depends only on its position in the measuring order.
    partial = run_adaptive(cfg, random.Random(11), 0.02, stop_after=kill_at)
    assert len(partial) == kill_at
    rng = random.Random(11)
    for _ in range(kill_at):  # advance the stream past the points already on disk
        rng.gauss(0, 1), rng.gauss(0, 1)
    resumed = run_adaptive(cfg, rng, 0.02, records=partial)
    assert list(resumed) == list(whole)
    assert resumed == whole


def test_a_flat_curve_needs_no_refinement_beyond_plateau_sampling(cfg):
    # 128 KiB - 1.5 MiB lies inside the modelled L2 plateau.
    flat = from_dict({**CONFIG, "precisions": ["fp64"], "access": ["ro"], "flops_per_element": [1],
                      "working_set": {"min_bytes": 128 << 10, "max_bytes": 3 << 19, "growth": 1.25}})
    grid = candidates(flat)
    planner = AdaptivePlanner(grid, growth=1.25, cache_resident_bytes=1 << 20)
    records = {}
    while batch := planner.next_batch(records):
        for p in batch:
            records[p.id] = record(p, random.Random(len(records)), 0.0)
    coarse = len(range(len(grid) - 1, -1, -3)) + 1
    assert len(grid) >= 10 and len(records) <= coarse


def test_each_cache_window_is_sampled_densely_from_the_first_pass():
    """A faster regime deep inside a cache (Zen 5: 0.45-0.7 x L2) lies between breaks: the coarse pass
    samples every cache window (2 x the cache before it up to its own) at >= WINDOW_PER_OCTAVE points
    per octave, on each bandwidth curve, whatever the refinement later adds."""
    from ert.measure.adaptive import WINDOW_PER_OCTAVE
    from ert.measure.driver import cache_windows

    cfg = from_dict(CONFIG)
    windows = cache_windows(CACHES, 2)
    assert windows == [(128 << 10, 2 << 20), (4 << 20, 32 << 20)]
    planner = AdaptivePlanner(candidates(cfg), growth=cfg.working_set.growth, cache_resident_bytes=1 << 20,
                              cache_windows=windows)
    first = planner.next_batch({})
    plain = AdaptivePlanner(candidates(cfg), growth=cfg.working_set.growth, cache_resident_bytes=1 << 20)
    for precision in ("fp64", "fp32"):
        for access in ("rw", "ro"):
            wss = sorted({p.wss_bytes for p in first if p.spec.precision == precision and p.spec.access == access
                          and p.spec.flops_per_element == 1})
            for lo, hi in windows:
                inside = [w for w in wss if lo <= w <= hi]
                octaves = math.log2(hi / lo)
                assert len(inside) >= WINDOW_PER_OCTAVE * octaves - 1, (precision, access, lo, inside)
                # No gap inside the window wider than the grid's step at that density.
                assert max(b / a for a, b in zip(inside, inside[1:])) <= 2 ** (1 / WINDOW_PER_OCTAVE) * 1.01
    # Without the windows the first pass is the coarse one: about one point per octave there.
    sparse = {p.wss_bytes for p in plain.next_batch({}) if p.spec.flops_per_element == 1}
    assert len([w for w in sparse if 128 << 10 <= w <= 2 << 20]) <= 5


def test_the_memory_window_is_not_bisected_for_a_shared_hosts_modes():
    """Past 2 x the last cache there is one level, the memory: a host switching between modes (Zen 4 guest:
    read-only 34 or 57 GB/s from one point to the next) makes no transitions to bisect there, and no scattered
    plateau to sample more densely; its fastest point is measured again instead (ert.measure.window_search)."""
    from ert.measure.window_search import level_windows

    cfg = from_dict({**CONFIG, "precisions": ["fp64"], "flops_per_element": [1]})
    windows = level_windows([64 << 10, 2 << 20, 32 << 20])
    assert windows[-1] == (64 << 20, math.inf)

    def sweep(level_windows):
        rng = random.Random(5)
        planner = AdaptivePlanner(candidates(cfg), growth=cfg.working_set.growth, cache_resident_bytes=1 << 20,
                                  level_windows=level_windows, granule_bytes=lambda spec: 512, noise_threshold=0.10)
        records = {}
        while batch := planner.next_batch(records):
            for point in batch:
                rec = record(point, rng, 0.01)
                if point.wss_bytes >= 64 << 20 and rng.random() < 0.5:  # the host's fast mode, at random
                    rec["seconds"] = {k: v * 34.0 / 57.0 for k, v in rec["seconds"].items()}
                records[point.id] = rec
        return records

    records, before = sweep(windows), sweep(())  # the planner without the levels' windows, as before
    for access in ("rw", "ro"):
        def memory(recs):
            return [r for pid, r in recs.items() if r["spec"]["access"] == access and "~again" not in pid
                    and r["wss_bytes"] >= 64 << 20]
        grid = [p for p in candidates(cfg) if p.spec.access == access and p.wss_bytes >= 64 << 20]
        assert len(memory(records)) <= 7 and len(memory(records)) < len(memory(before)) <= len(grid), access
        again = [r for pid, r in records.items() if "~again" in pid and r["spec"]["access"] == access
                 and r["wss_bytes"] >= 64 << 20]
        assert again  # the memory's fastest point, measured again
