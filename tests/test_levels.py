"""name_levels: names from breaks vs cache hints, on the two reference machines and edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ert.analysis.levels import NamedLevel, fmt_bytes, name_levels
from ert.analysis.plateaus import Plateau, find_plateaus
from ert.hardware.hwinfo import CacheInfo

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# This VM: AMD EPYC Zen 4, 2 threads.
ZEN4_CACHES = [
    CacheInfo(level=1, kind="Data", size_bytes=32 * KiB, shared_cpu_count=1),
    CacheInfo(level=2, kind="Unified", size_bytes=1 * MiB, shared_cpu_count=1),
    CacheInfo(level=3, kind="Unified", size_bytes=32 * MiB, shared_cpu_count=2),
]
ZEN4_LEVELS = [(390.0, 64 * KiB), (200.0, 2 * MiB), (100.0, 32 * MiB), (35.0, None)]

# Intel Emerald Rapids VM, 2 threads: the reported 260 MiB L3 is the host's;
# DRAM is only reached above about 1 GiB.
EMERALD_CACHES = [
    CacheInfo(level=1, kind="Data", size_bytes=48 * KiB, shared_cpu_count=1),
    CacheInfo(level=1, kind="Instruction", size_bytes=32 * KiB, shared_cpu_count=1),
    CacheInfo(level=2, kind="Unified", size_bytes=2 * MiB, shared_cpu_count=1),
    CacheInfo(level=3, kind="Unified", size_bytes=260 * MiB, shared_cpu_count=2),
]
EMERALD_LEVELS = [(700.0, 96 * KiB), (250.0, 4 * MiB), (120.0, 1 * GiB), (45.0, None)]


def sweep_plateaus(levels, *, hi, seed=0, growth=1.2, noise=0.05, width=2.0) -> list[Plateau]:
    """Plateaus of a noisy synthetic staircase (smoothstep transitions, a few outliers)."""
    rng = np.random.default_rng(seed)
    n = int(math.floor(math.log(hi / (4 * KiB)) / math.log(growth) + 1e-9)) + 1
    wss = np.round(4 * KiB * growth ** np.arange(n)).astype(np.int64)
    log_w = np.log(wss.astype(float))
    y = np.full(n, math.log(levels[0][0]))
    half = math.log(width) / 2
    for (gbps, cap), (next_gbps, _) in zip(levels, levels[1:]):
        t = np.clip((log_w - math.log(cap) + half) / (2 * half), 0.0, 1.0)
        y += t * t * (3 - 2 * t) * (math.log(next_gbps) - math.log(gbps))
    gbps = np.exp(y + rng.normal(0.0, noise, n))
    hit = rng.choice(n, 3, replace=False)
    gbps[hit] *= rng.uniform(0.5, 0.8, 3)
    return find_plateaus(wss, gbps)


def plateau(gbps: float, lo: int, hi: int) -> Plateau:
    return Plateau(
        gbytes_per_s=gbps, spread=0.05, wss_bytes=(lo, hi), n_points=10, indices=tuple(range(10)), noisy_points=0
    )


def names(levels: list[NamedLevel]) -> list[str]:
    return [lv.name for lv in levels]


@pytest.mark.parametrize("seed", range(4))
def test_zen4_vm_is_named_l1_l2_l3_dram_without_warnings(seed):
    plateaus = sweep_plateaus(ZEN4_LEVELS, hi=1 * GiB, seed=seed)
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    assert warnings == []
    assert [lv.plateau for lv in levels] == plateaus
    assert "matches 2 x 32 KiB L1d" in levels[0].basis
    assert "matches 2 x 1 MiB L2" in levels[1].basis
    assert "matches 1 x 32 MiB L3" in levels[2].basis
    assert "largest cache" in levels[3].basis


@pytest.mark.parametrize("seed", range(4))
def test_emerald_rapids_vm_names_all_four_and_warns_about_the_l3_hint(seed):
    plateaus = sweep_plateaus(EMERALD_LEVELS, hi=8 * GiB, seed=seed)
    levels, warnings = name_levels(plateaus, EMERALD_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    assert len(warnings) == 1
    assert "260 MiB" in warnings[0] and "L3 hint" in warnings[0]
    break_bytes = math.sqrt(plateaus[2].wss_bytes[1] * plateaus[3].wss_bytes[0])
    assert f"break at {fmt_bytes(break_bytes)}" in warnings[0]
    assert "L3" in levels[2].basis


def test_emerald_rapids_observed_plateaus():
    # Plateau ranges as observed on the real VM (L1 540-920, L2 130-350, L3 45-195, DRAM 23-70 GB/s).
    plateaus = [
        plateau(900.0, 4 * KiB, 64 * KiB),
        plateau(300.0, 160 * KiB, 3 * MiB),
        plateau(150.0, 6 * MiB, 700 * MiB),
        plateau(60.0, 1600 * MiB, 8 * GiB),
    ]
    levels, warnings = name_levels(plateaus, EMERALD_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    assert any("260 MiB" in w for w in warnings)


def test_no_hints_gives_positional_names_and_a_warning():
    plateaus = sweep_plateaus(ZEN4_LEVELS, hi=1 * GiB)
    levels, warnings = name_levels(plateaus, [], workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    assert len(warnings) == 1 and "position" in warnings[0]
    assert all("position" in lv.basis for lv in levels)
    # Instruction caches alone are no hints either.
    only_icache = [CacheInfo(level=1, kind="Instruction", size_bytes=32 * KiB, shared_cpu_count=1)]
    assert names(name_levels(plateaus, only_icache, workers=2)[0]) == ["L1", "L2", "L3", "DRAM"]


def test_sweep_ending_inside_the_last_cache_names_no_memory():
    plateaus = sweep_plateaus(ZEN4_LEVELS, hi=16 * MiB)
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3"]
    assert len(warnings) == 1
    assert "DRAM" in warnings[0] and "32 MiB" in warnings[0]


def test_emerald_sweep_stopping_at_1_gib_names_no_memory():
    plateaus = sweep_plateaus(EMERALD_LEVELS, hi=1 * GiB - 1)
    levels, warnings = name_levels(plateaus, EMERALD_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3"]
    assert any("260 MiB" in w and "DRAM" in w for w in warnings)


def test_a_cache_level_without_a_plateau_is_reported():
    # L2 and L3 alike in speed: one plateau from 64 KiB to 32 MiB.
    plateaus = [
        plateau(390.0, 4 * KiB, 50 * KiB),
        plateau(150.0, 90 * KiB, 26 * MiB),
        plateau(35.0, 45 * MiB, GiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L3", "DRAM"]
    assert len(warnings) == 1 and "no separate plateau for L2" in warnings[0]


def test_last_plateau_mostly_beyond_the_largest_cache_is_memory():
    # No L3 plateau: after L2 the bandwidth falls straight to the memory's.
    plateaus = [
        plateau(390.0, 4 * KiB, 50 * KiB),
        plateau(200.0, 90 * KiB, 1500 * KiB),
        plateau(40.0, 3 * MiB, 4 * GiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "DRAM"]
    assert any("no separate plateau for L3" in w for w in warnings)


def test_two_plateaus_on_one_cache_are_one_level_at_the_faster_value():
    # The original ERT's failure: L1 split in two by a knee before the L1 break.
    plateaus = [
        plateau(420.0, 4 * KiB, 24 * KiB),
        plateau(370.0, 30 * KiB, 56 * KiB),
        plateau(200.0, 90 * KiB, 1500 * KiB),
        plateau(100.0, 3 * MiB, 26 * MiB),
        plateau(35.0, 45 * MiB, GiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    l1 = levels[0]
    assert l1.pieces == tuple(plateaus[:2]) and l1.ramp == ()
    assert l1.plateau.gbytes_per_s == 420.0
    assert l1.plateau.wss_bytes == (4 * KiB, 56 * KiB) and l1.plateau.n_points == 10  # the pieces' indices overlap
    # Without the curve the spread is that of the pieces' values, weighted by their points.
    assert l1.plateau.spread == pytest.approx((420.0 - 370.0) / 395.0)
    assert [lv.plateau for lv in levels[1:]] == plateaus[2:]
    assert len(warnings) == 1 and "L1: 2 plateaus with no cache boundary" in warnings[0]


def test_extra_plateaus_beyond_the_largest_cache_are_one_memory_level_with_its_modes():
    plateaus = [
        plateau(390.0, 4 * KiB, 50 * KiB),
        plateau(200.0, 90 * KiB, 1500 * KiB),
        plateau(100.0, 3 * MiB, 26 * MiB),
        plateau(45.0, 45 * MiB, 200 * MiB),
        plateau(30.0, 400 * MiB, 4 * GiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2, memory_name="HBM")
    assert names(levels) == ["L1", "L2", "L3", "HBM"]
    hbm = levels[-1]
    assert hbm.plateau.gbytes_per_s == 30.0  # the largest working sets
    assert hbm.plateau.wss_bytes == (45 * MiB, 4 * GiB) and hbm.pieces == tuple(plateaus[3:])
    assert len(warnings) == 1
    assert "HBM changes within the level: 45 GB/s at 45 MiB - 200 MiB, 30 GB/s at 400 MiB - 4 GiB" in warnings[0]


def test_thread_count_sets_the_aggregate_capacity():
    plateaus = [
        plateau(200.0, 4 * KiB, 28 * KiB),
        plateau(100.0, 48 * KiB, 700 * KiB),
        plateau(20.0, 4 * MiB, GiB),
    ]
    one, warn_one = name_levels(plateaus, ZEN4_CACHES, workers=1)
    assert names(one) == ["L1", "L2", "DRAM"]
    assert "1 x 32 KiB L1d" in one[0].basis and "1 x 1 MiB L2" in one[1].basis
    assert warn_one == ["no separate plateau for L3 (32 MiB = 1 x 32 MiB L3 shared by 2 cpus)"]
    # With 16 threads the same breaks no longer fit L1 (512 KiB): the mismatch is reported.
    many, warn_many = name_levels(plateaus, ZEN4_CACHES, workers=16)
    assert names(many)[0] == "L1"
    assert any("512 KiB" in w for w in warn_many)


def test_rising_bandwidth_between_levels_is_flagged():
    plateaus = [
        plateau(390.0, 4 * KiB, 50 * KiB),
        plateau(200.0, 90 * KiB, 1500 * KiB),
        plateau(300.0, 3 * MiB, 26 * MiB),
        plateau(35.0, 45 * MiB, GiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2", "L3", "DRAM"]
    assert warnings == ["bandwidth rises from 200 to 300 GB/s at 3 MiB: not a memory-level step "
                        "(start-up overhead or interference?)"]


def test_a_slower_plateau_below_the_first_cache_is_a_ramp_of_l1_not_a_level():
    plateaus = [
        plateau(200.0, 4 * KiB, 12 * KiB),
        plateau(390.0, 20 * KiB, 50 * KiB),
        plateau(200.0, 90 * KiB, MiB),
    ]
    levels, warnings = name_levels(plateaus, ZEN4_CACHES, workers=2)
    assert names(levels) == ["L1", "L2"]
    assert levels[0].plateau is plateaus[1] and levels[0].ramp == (plateaus[0],)
    assert not any("rises" in w for w in warnings)
    assert any(w.startswith("L1: from 4 KiB to 12 KiB the kernel is overhead-bound (200 GB/s)") for w in warnings)


def test_empty_and_bad_input():
    assert name_levels([], ZEN4_CACHES, workers=2) == ([], ["no plateaus: no levels to name"])
    with pytest.raises(ValueError):
        name_levels([plateau(1.0, 1, 2)], ZEN4_CACHES, workers=0)


def test_fmt_bytes():
    assert fmt_bytes(70 * KiB) == "70 KiB"
    assert fmt_bytes(1.5 * MiB) == "1.5 MiB"
    assert fmt_bytes(260 * MiB) == "260 MiB"
    assert fmt_bytes(512) == "512 B"
