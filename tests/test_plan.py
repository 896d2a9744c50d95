"""The sweep plan (ert/measure/plan.py): working-set grids, kernel variants, points and their ids."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from ert.config.schema import RunConfig, from_dict, load
from ert.spec import KernelSpec
from ert.measure.plan import Point, kernel_specs, plan, working_sets

from conftest import CONFIGS

GRANULE_BYTES = 512  # the Numba backend's per-thread granule (kernels/numba_cpu.py)


def granule_of(spec: KernelSpec) -> int:
    return GRANULE_BYTES // spec.itemsize


# --------------------------------------------------------------------------- working_sets


def test_powers_of_two_exactly():
    assert working_sets(min_bytes=1024, max_bytes=1 << 20, growth=2.0, granule_bytes=1) == [
        1 << k for k in range(10, 21)]


@pytest.mark.parametrize("min_bytes, max_bytes, growth, granule", [
    (16384, 1 << 30, 1.25, 1024),
    (4096, 1 << 31, 1.1, 512),
    (16384, 4194304, 2.0, 1536),   # 3 threads x 512 B: max is not a whole number of granules
    (1000, 1500, 1.4, 512),
    (100, 100, 2.0, 512),          # below one granule
    (7, 10 ** 6, 3.7, 48),
    (16384, 16384, 1.5, 1024),
])
def test_grid_properties(min_bytes, max_bytes, growth, granule):
    sizes = working_sets(min_bytes=min_bytes, max_bytes=max_bytes, growth=growth, granule_bytes=granule)
    assert sizes, "never empty"
    assert all(s % granule == 0 and s >= granule for s in sizes), "whole granules"
    assert all(b > a for a, b in zip(sizes, sizes[1:])), "strictly increasing, so no repeats"
    top = max(granule, max_bytes // granule * granule)
    assert sizes[-1] == top, "the largest granule multiple within max_bytes is always the last set"
    assert all(s <= top for s in sizes), "nothing beyond what was asked"
    assert abs(sizes[0] - max(min_bytes, granule)) <= granule, "starts at min_bytes (to the nearest granule)"


def test_grid_is_geometric():
    growth, granule = 1.25, 1024
    sizes = working_sets(min_bytes=16384, max_bytes=1 << 30, growth=growth, granule_bytes=granule)
    for a, b in zip(sizes[:-2], sizes[1:-1]):  # the last step may be shorter (max is appended)
        assert b / a == pytest.approx(growth, abs=2 * granule / a), (a, b)
    expected_count = math.floor(math.log((1 << 30) / 16384, growth)) + 1
    assert abs(len(sizes) - expected_count) <= 1


def test_max_is_included_when_the_growth_overshoots_it():
    sizes = working_sets(min_bytes=4096, max_bytes=100_000, growth=3.0, granule_bytes=512)
    assert sizes[-1] == 100_000 // 512 * 512
    assert sizes[:-1] == [4096, 12288, 36864]


def test_small_sets_collapse_to_one_granule_without_repeats():
    sizes = working_sets(min_bytes=64, max_bytes=8192, growth=1.1, granule_bytes=1024)
    assert sizes[0] == 1024
    assert len(sizes) == len(set(sizes))
    assert sizes[-1] == 8192


# --------------------------------------------------------------------------- kernel_specs


def test_kernel_specs_of_tiny():
    specs = kernel_specs(load(CONFIGS / "tiny.yaml"))
    keys = [s.key for s in specs]
    assert len(keys) == len(set(keys)) == 8
    assert set(keys) == {
        "fp64-add-rw-f1", "fp32-add-rw-f1",
        "fp64-fma-rw-f8", "fp64-nofma-rw-f8", "fp32-fma-rw-f8", "fp32-nofma-rw-f8",
        "fp64-add-ro-f1", "fp32-add-ro-f1",
    }
    # Bandwidth kernels first, load-only last.
    assert [s.access for s in specs] == ["rw"] * 6 + ["ro"] * 2
    assert specs[0].flops_per_element == 1


@pytest.mark.parametrize("fma, modes", [("on", {True}), ("off", {False}), ("both", {True, False})])
def test_fma_modes_apply_to_multiply_add_kernels_only(fma, modes):
    cfg = from_dict({"precisions": ["fp64"], "flops_per_element": [1, 2, 32], "fma": fma, "access": ["rw"]})
    specs = kernel_specs(cfg)
    assert {s.fma for s in specs if s.flops_per_element == 1} == {False}
    for flops in (2, 32):
        assert {s.fma for s in specs if s.flops_per_element == flops} == modes
    assert len(specs) == 1 + 2 * len(modes)


def test_read_only_access_is_one_kernel_per_precision():
    cfg = from_dict({"precisions": ["fp64", "fp32"], "flops_per_element": [1, 8, 64], "access": ["ro"]})
    specs = kernel_specs(cfg)
    assert sorted(s.key for s in specs) == ["fp32-add-ro-f1", "fp64-add-ro-f1"]


# --------------------------------------------------------------------------- plan


@pytest.mark.parametrize("name", ["tiny.yaml", "default.yaml", "thorough-cpu.yaml"])
@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_plan_points(name, workers):
    cfg = load(CONFIGS / name)
    points = plan(cfg, workers=workers, granule_elements_of=granule_of)
    ids = [p.id for p in points]
    assert len(ids) == len(set(ids)), "point ids are unique"
    assert {p.spec for p in points} == set(kernel_specs(cfg))
    for p in points:
        assert isinstance(p, Point)
        assert p.elements_per_thread % granule_of(p.spec) == 0 and p.elements_per_thread > 0
        # wss_bytes is the one array over all workers: each worker's share is whole.
        assert p.elements_per_thread * p.spec.itemsize * workers == p.wss_bytes
        assert p.id == f"{p.spec.key}-w{p.wss_bytes}"


def test_plan_is_deterministic_and_ids_are_stable():
    cfg = load(CONFIGS / "tiny.yaml")
    a = plan(cfg, workers=2, granule_elements_of=granule_of)
    b = plan(cfg, workers=2, granule_elements_of=granule_of)
    assert [p.id for p in a] == [p.id for p in b]
    assert "fp64-add-rw-f1-w16384" in {p.id for p in a}


def test_plan_reaches_max_for_every_kernel_without_a_compute_cap():
    cfg = load(CONFIGS / "tiny.yaml")
    assert cfg.working_set.compute_max_bytes is None
    by_spec = defaultdict(list)
    for p in plan(cfg, workers=2, granule_elements_of=granule_of):
        by_spec[p.spec].append(p.wss_bytes)
    for spec, sizes in by_spec.items():
        assert max(sizes) == cfg.working_set.max_bytes, spec.key
        assert sorted(sizes) == working_sets(min_bytes=16384, max_bytes=4194304, growth=2.0,
                                             granule_bytes=GRANULE_BYTES * 2)


def test_compute_max_bytes_caps_only_kernels_above_2_flops():
    cfg = from_dict({"precisions": ["fp64", "fp32"], "flops_per_element": [1, 2, 8, 32], "access": ["rw", "ro"],
                     "working_set": {"min_bytes": 16384, "max_bytes": 1 << 26, "growth": 2.0,
                                     "compute_max_bytes": 1 << 20}})
    by_spec = defaultdict(set)
    for p in plan(cfg, workers=2, granule_elements_of=granule_of):
        by_spec[p.spec].add(p.wss_bytes)
    for spec, sizes in by_spec.items():
        if spec.flops_per_element > 2:
            assert max(sizes) <= 1 << 20, spec.key
            # The same grid, cut: compute points line up with bandwidth points.
            bandwidth = by_spec[KernelSpec(spec.precision, 1, False, "rw")]
            assert sizes <= bandwidth
            assert max(sizes) == max(s for s in bandwidth if s <= 1 << 20)
        else:
            assert max(sizes) == 1 << 26, spec.key


def test_compute_max_below_the_smallest_set_keeps_one_point():
    cfg = from_dict({"precisions": ["fp64"], "flops_per_element": [1, 8], "fma": "on",
                     "working_set": {"min_bytes": 65536, "max_bytes": 1 << 20, "growth": 2.0,
                                     "compute_max_bytes": 1024}})
    points = plan(cfg, workers=1, granule_elements_of=granule_of)
    compute = [p for p in points if p.spec.flops_per_element == 8]
    assert [p.wss_bytes for p in compute] == [65536]
    assert len([p for p in points if p.spec.flops_per_element == 1]) == 5


def test_default_config_has_a_compute_cap_and_points_per_spec():
    cfg = load(CONFIGS / "default.yaml")
    points = plan(cfg, workers=2, granule_elements_of=granule_of)
    cap = cfg.working_set.compute_max_bytes
    assert cap is not None
    assert all(p.wss_bytes <= cap for p in points if p.spec.flops_per_element > 2)
    assert max(p.wss_bytes for p in points) == cfg.working_set.max_bytes


def test_plan_with_default_run_config_object():
    points = plan(RunConfig(), workers=4, granule_elements_of=granule_of)
    assert len(points) == len({p.id for p in points}) > 0
