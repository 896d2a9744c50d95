"""find_plateaus on synthetic staircases: exact level counts, values, ranges, robustness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ert.analysis.plateaus import Plateau, find_plateaus, robust_noise, scattered_tail

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# (GB/s, capacity where the level ends); the last level never ends.
ZEN4 = [(390.0, 64 * KiB), (200.0, 2 * MiB), (100.0, 32 * MiB), (35.0, None)]
EMERALD = [(700.0, 96 * KiB), (250.0, 4 * MiB), (120.0, 1 * GiB), (45.0, None)]


def geometric_wss(lo: int, hi: int, growth: float) -> np.ndarray:
    n = int(math.floor(math.log(hi / lo) / math.log(growth) + 1e-9)) + 1
    return np.round(lo * growth ** np.arange(n)).astype(np.int64)


def staircase(wss: np.ndarray, levels, width: float) -> np.ndarray:
    """True bandwidth: flat levels joined by smoothstep transitions spanning a factor `width`."""
    log_w = np.log(wss.astype(float))
    y = np.full(log_w.shape, math.log(levels[0][0]))
    half = math.log(width) / 2
    for (gbps, cap), (next_gbps, _) in zip(levels, levels[1:]):
        t = np.clip((log_w - math.log(cap) + half) / (2 * half), 0.0, 1.0)
        y += t * t * (3 - 2 * t) * (math.log(next_gbps) - math.log(gbps))
    return np.exp(y)


def noisy_sweep(levels, *, growth, noise, width, seed, hi, n_outliers=3):
    """Lognormal jitter plus a few outliers dropping 20-50 % (other tenants)."""
    rng = np.random.default_rng(seed)
    wss = geometric_wss(4 * KiB, hi, growth)
    gbps = staircase(wss, levels, width) * np.exp(rng.normal(0.0, noise, wss.size))
    hit = rng.choice(wss.size, n_outliers, replace=False)
    gbps[hit] *= rng.uniform(0.5, 0.8, n_outliers)
    return wss, gbps


def check_staircase(plateaus: list[Plateau], wss: np.ndarray, levels, *, noise: float, width: float) -> None:
    assert len(plateaus) == len(levels), [(round(p.gbytes_per_s), p.wss_bytes) for p in plateaus]
    caps = [wss[0] / 2] + [cap for _, cap in levels[:-1]] + [wss[-1] * 2]
    half = math.sqrt(width)
    for k, (p, (truth, _)) in enumerate(zip(plateaus, levels)):
        flat_lo, flat_hi = caps[k] * half, caps[k + 1] / half
        n_flat = int(np.count_nonzero((wss >= flat_lo) & (wss <= flat_hi)))
        # 3 % where the sampling allows it; otherwise three standard errors of
        # the median of the level's flat points (1.2533 sigma / sqrt(n)).
        tolerance = max(0.03, 3 * 1.2533 * noise / math.sqrt(n_flat))
        assert abs(p.gbytes_per_s / truth - 1) <= tolerance, (k, p.gbytes_per_s, truth, tolerance)
        # Inside the level, its transitions included, never in a neighbour's flat part ...
        assert caps[k] / half <= p.wss_bytes[0] and p.wss_bytes[1] <= caps[k + 1] * half, (k, p.wss_bytes)
        # ... and covering the middle of its flat part.
        middle = math.sqrt(max(flat_lo, wss[0]) * min(flat_hi, wss[-1]))
        assert p.wss_bytes[0] <= middle <= p.wss_bytes[1], (k, p.wss_bytes, middle)
        assert p.n_points == len(p.indices) >= 3
        assert list(p.indices) == sorted(p.indices)
        assert p.wss_bytes == (int(wss[list(p.indices)].min()), int(wss[list(p.indices)].max()))
        assert p.noisy_points == 0 and p.spread >= 0


@pytest.mark.parametrize("machine", ["zen4", "emerald"])
@pytest.mark.parametrize(
    "noise,growth",
    [(0.03, 1.1), (0.03, 1.2), (0.03, 1.4), (0.06, 1.1), (0.06, 1.2), (0.06, 1.4), (0.10, 1.1), (0.10, 1.2)],
)
@pytest.mark.parametrize("width", [1.5, 3.0])
def test_staircase_levels(machine, noise, growth, width):
    levels, hi = (ZEN4, 1 * GiB) if machine == "zen4" else (EMERALD, 8 * GiB)
    for seed in range(2):
        wss, gbps = noisy_sweep(levels, growth=growth, noise=noise, width=width, seed=seed, hi=hi)
        check_staircase(find_plateaus(wss, gbps), wss, levels, noise=noise, width=width)


def test_sparse_and_very_noisy_still_counts_levels():
    # 10 % noise at growth 1.4 leaves 5-8 points per level: the count must hold.
    for seed in range(4):
        wss, gbps = noisy_sweep(ZEN4, growth=1.4, noise=0.10, width=2.0, seed=seed, hi=1 * GiB)
        assert len(find_plateaus(wss, gbps)) == 4


def test_pure_noise_is_one_plateau():
    wss = geometric_wss(4 * KiB, int(4 * KiB * 1.1**99) + 1, 1.1)
    assert wss.size == 100
    for seed in range(40):
        rng = np.random.default_rng(seed)
        gbps = 100.0 * np.exp(rng.normal(0.0, 0.10, wss.size))
        plateaus = find_plateaus(wss, gbps)
        assert len(plateaus) == 1, seed
        assert abs(plateaus[0].gbytes_per_s / 100.0 - 1) < 0.04
        assert plateaus[0].n_points >= 95


def test_pure_noise_with_outliers_is_one_plateau():
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.15)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        gbps = 100.0 * np.exp(rng.normal(0.0, 0.06, wss.size))
        hit = rng.choice(wss.size, 6, replace=False)
        gbps[hit] *= rng.uniform(0.5, 0.8, hit.size)
        plateaus = find_plateaus(wss, gbps)
        assert len(plateaus) == 1, seed
        # The outliers do not pull the value down, and the deep ones are no members.
        assert abs(plateaus[0].gbytes_per_s / 100.0 - 1) < 0.03
        deep = [int(i) for i in hit if gbps[i] < 0.65 * plateaus[0].gbytes_per_s]
        assert not set(deep) & set(plateaus[0].indices)


@pytest.mark.parametrize("growth", [1.1, 1.4])
@pytest.mark.parametrize("drop", [0.5, 0.75])
@pytest.mark.parametrize("width", [1, 2])
def test_outlier_or_short_dip_never_makes_or_splits_a_level(growth, drop, width):
    wss = geometric_wss(4 * KiB, 1 * GiB, growth)
    rng = np.random.default_rng(7)
    base = 100.0 * np.exp(rng.normal(0.0, 0.03, wss.size))
    # Every position on the sparse grid, every third on the dense one (keeps the suite fast).
    for pos in range(0, wss.size - width + 1, 1 if growth > 1.3 else 3):
        gbps = base.copy()
        gbps[pos : pos + width] *= drop
        plateaus = find_plateaus(wss, gbps)
        assert len(plateaus) == 1, pos
        assert abs(plateaus[0].gbytes_per_s / 100.0 - 1) < 0.03
        # The dip's points are no members: the level's value and spread ignore them.
        assert not set(range(pos, pos + width)) & set(plateaus[0].indices)


def test_dip_inside_a_staircase_level():
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.2)
    gbps = staircase(wss, ZEN4, 2.0) * np.exp(np.random.default_rng(3).normal(0.0, 0.03, wss.size))
    middle_of_l2 = int(np.searchsorted(wss, 400 * KiB))
    for pos, width in ((middle_of_l2, 1), (middle_of_l2, 2), (5, 2)):
        dipped = gbps.copy()
        dipped[pos : pos + width] *= 0.55
        plateaus = find_plateaus(wss, dipped)
        values = [p.gbytes_per_s for p in plateaus]
        assert values == pytest.approx([390, 200, 100, 35], rel=0.03), pos


@pytest.mark.parametrize("noise", [0.0, 0.01, 0.03])
def test_slow_drift_does_not_split_a_level(noise):
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.1)
    drift = np.linspace(0.0, math.log(0.95), wss.size)  # 5 % down across the level
    for seed in range(5):
        gbps = 100.0 * np.exp(drift + np.random.default_rng(seed).normal(0.0, noise, wss.size))
        plateaus = find_plateaus(wss, gbps)
        assert len(plateaus) == 1
        assert plateaus[0].wss_bytes == (int(wss[0]), int(wss[-1])) or plateaus[0].n_points >= wss.size - 6


def test_drift_inside_each_staircase_level():
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.1)
    # Every level loses 5 % across its own span.
    drift = np.zeros(wss.size)
    edges = [4 * KiB, 64 * KiB, 2 * MiB, 32 * MiB, 1 * GiB]
    for lo, hi in zip(edges, edges[1:]):
        inside = (wss >= lo) & (wss < hi)
        drift[inside] = math.log(0.95) * np.log(wss[inside] / lo) / math.log(hi / lo)
    gbps = staircase(wss, ZEN4, 2.0) * np.exp(drift + np.random.default_rng(11).normal(0.0, 0.03, wss.size))
    assert len(find_plateaus(wss, gbps)) == 4


def test_transition_knees_are_not_members():
    # Noiseless, densely sampled, wide transitions: members must sit on the level itself.
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.05)
    truth = staircase(wss, ZEN4, 3.0)
    plateaus = find_plateaus(wss, truth)
    assert len(plateaus) == 4
    for p, (level, _) in zip(plateaus, ZEN4):
        assert p.gbytes_per_s == pytest.approx(level, rel=1e-6)
        assert np.all(np.abs(truth[list(p.indices)] / level - 1) < 0.01)


def test_dropped_sample_before_a_transition_does_not_start_the_next_level():
    # The last L2 point before the fall reads like L3 (another tenant): L3 must not start there.
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.1)
    gbps = staircase(wss, ZEN4, 1.5) * np.exp(np.random.default_rng(4).normal(0.0, 0.02, wss.size))
    last_flat_l2 = int(np.searchsorted(wss, 2 * MiB / math.sqrt(1.5))) - 1
    gbps[last_flat_l2] = 100.0
    plateaus = find_plateaus(wss, gbps)
    assert len(plateaus) == 4
    assert plateaus[2].wss_bytes[0] > wss[last_flat_l2]
    assert last_flat_l2 not in plateaus[1].indices + plateaus[2].indices


def test_points_after_a_dropped_sample_at_the_sweep_end_stay_members():
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.2)
    gbps = staircase(wss, ZEN4, 2.0) * np.exp(np.random.default_rng(6).normal(0.0, 0.03, wss.size))
    gbps[-3] *= 0.3
    last = find_plateaus(wss, gbps)[-1]
    assert last.wss_bytes[1] == wss[-1]
    assert wss.size - 3 not in last.indices and {wss.size - 2, wss.size - 1} <= set(last.indices)


def test_min_step_decides_whether_a_small_step_is_a_level():
    wss = geometric_wss(4 * KiB, 64 * MiB, 1.1)
    gbps = np.where(wss < 1 * MiB, 100.0, 92.0) * np.exp(np.random.default_rng(0).normal(0.0, 0.01, wss.size))
    assert len(find_plateaus(wss, gbps)) == 1  # an 8 % step is below the default 12 %
    two = find_plateaus(wss, gbps, min_step=0.05)
    assert [round(p.gbytes_per_s) for p in two] == [100, 92]


def test_noisy_points_are_members_but_not_fit():
    wss, gbps = noisy_sweep(ZEN4, growth=1.2, noise=0.03, width=2.0, seed=5, hi=1 * GiB, n_outliers=0)
    reference = find_plateaus(wss, gbps)
    flagged = np.zeros(wss.size, dtype=bool)
    l2 = [i for i in reference[1].indices][2:5]
    flagged[l2] = True
    corrupted = gbps.copy()
    corrupted[l2] *= 1.05  # flagged, still near the level: members that must not move the value
    plateaus = find_plateaus(wss, corrupted, noisy=flagged)
    assert len(plateaus) == 4
    assert plateaus[1].noisy_points == 3 and set(l2) <= set(plateaus[1].indices)
    unflagged = [i for i in plateaus[1].indices if i not in l2]
    assert plateaus[1].gbytes_per_s == pytest.approx(float(np.median(gbps[unflagged])))
    # Wildly wrong flagged points do not split or bend the levels either.
    wild = gbps.copy()
    wild[l2] = [20.0, 900.0, 20.0]
    plateaus = find_plateaus(wss, wild, noisy=flagged)
    assert [p.gbytes_per_s for p in plateaus] == pytest.approx([p.gbytes_per_s for p in reference], rel=0.01)


def test_input_order_does_not_matter_and_indices_map_back():
    wss, gbps = noisy_sweep(EMERALD, growth=1.2, noise=0.05, width=2.0, seed=1, hi=8 * GiB)
    perm = np.random.default_rng(0).permutation(wss.size)
    sorted_result = find_plateaus(wss, gbps)
    shuffled = find_plateaus(wss[perm], gbps[perm])
    assert len(shuffled) == len(sorted_result) == 4
    for a, b in zip(sorted_result, shuffled):
        assert a.gbytes_per_s == b.gbytes_per_s and a.wss_bytes == b.wss_bytes
        assert sorted(perm[list(b.indices)].tolist()) == list(a.indices)
    # Plain lists work too.
    assert find_plateaus(wss.tolist(), gbps.tolist()) == sorted_result


def test_bad_points_and_short_inputs():
    assert find_plateaus([], []) == []
    assert find_plateaus([1, 2], [5.0, 5.0]) == []
    wss = geometric_wss(4 * KiB, 1 * MiB, 1.2)
    gbps = np.full(wss.size, 50.0)
    gbps[3], gbps[7] = np.nan, -1.0
    (only,) = find_plateaus(wss, gbps)
    assert only.gbytes_per_s == pytest.approx(50.0) and only.spread == pytest.approx(0.0, abs=1e-12)
    assert only.n_points == wss.size - 2
    assert 3 not in only.indices and 7 not in only.indices
    with pytest.raises(ValueError):
        find_plateaus([1, 2, 3], [1.0, 2.0])
    with pytest.raises(ValueError):
        find_plateaus([1, 2, 3], [1.0, 2.0, 3.0], noisy=[True])


def test_robust_noise_ignores_steps_and_outliers():
    wss = geometric_wss(4 * KiB, 1 * GiB, 1.1)
    for noise in (0.03, 0.10):
        _, gbps = noisy_sweep(ZEN4, growth=1.1, noise=noise, width=2.0, seed=2, hi=1 * GiB)
        assert gbps.size == wss.size
        assert noise * 0.8 < robust_noise(gbps) < noise * 1.4
    assert robust_noise([1.0, 2.0]) == 0.0
    assert robust_noise([5.0] * 10) == 0.0


def test_scattered_tail_keeps_the_last_level_with_its_true_spread():
    """Memory bandwidth that flips between two values during the run forms no plateau; the level must not vanish."""
    rng = np.random.default_rng(7)
    wss = geometric_wss(16 << 10, 1 << 30, 1.25)
    bw = staircase(wss, [(420.0, 64 << 10), (232.0, 2 << 20), (193.0, 32 << 20), (35.0, None)], width=1.5)
    tail = wss > (96 << 20)
    bw[tail] = np.where(rng.random(tail.sum()) < 0.5, 35.0, 62.0)  # two host states, interleaved
    bw *= rng.lognormal(0.0, 0.01, bw.size)
    # The cache levels as the fit finds them; whatever it makes of the tail is left out.
    plateaus = [p for p in find_plateaus(wss, bw) if p.wss_bytes[1] < (64 << 20)]
    assert len(plateaus) == 3
    level = scattered_tail(wss, bw, plateaus)
    assert level is not None
    assert 35.0 <= level.gbytes_per_s <= 62.0
    assert level.spread > 0.3
    assert level.wss_bytes[1] == int(wss[-1])
    assert set(level.indices).isdisjoint(plateaus[-1].indices)


def test_no_scattered_tail_when_the_last_plateau_reaches_the_end():
    wss = geometric_wss(16 << 10, 1 << 30, 1.25)
    bw = staircase(wss, [(420.0, 64 << 10), (232.0, 2 << 20), (193.0, 32 << 20), (34.0, None)], width=1.5)
    plateaus = find_plateaus(wss, bw)
    assert len(plateaus) == 4
    assert scattered_tail(wss, bw, plateaus) is None
