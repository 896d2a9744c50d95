"""Tests of KernelSpec: the one place bytes and FLOPs per element, and so GB/s and GFLOP/s, are defined."""

from __future__ import annotations

import pytest

from ert.spec import rates
from ert.spec import ITEMSIZE, KernelSpec


@pytest.mark.parametrize("precision, itemsize", [("fp64", 8), ("fp32", 4), ("fp16", 2)])
def test_bytes_per_element(precision, itemsize):
    assert KernelSpec(precision, 1, False, "rw").bytes_per_element == 2 * itemsize  # load + store
    assert KernelSpec(precision, 8, True, "rw").bytes_per_element == 2 * itemsize
    assert KernelSpec(precision, 1, False, "ro").bytes_per_element == itemsize      # load only
    assert KernelSpec(precision, 1, False).itemsize == ITEMSIZE[precision] == itemsize


def test_one_flop_is_a_single_add():
    spec = KernelSpec("fp64", 1, False)
    assert spec.fma_ops_per_element == 0
    assert spec.key == "fp64-add-rw-f1"
    with pytest.raises(ValueError, match="no FMA form"):
        KernelSpec("fp64", 1, True)


@pytest.mark.parametrize("flops", [2, 8, 64, 1024])
def test_even_flops_are_multiply_add_pairs(flops):
    for fma in (True, False):
        spec = KernelSpec("fp32", flops, fma)
        assert spec.fma_ops_per_element == flops // 2
    assert KernelSpec("fp32", flops, True).key == f"fp32-fma-rw-f{flops}"
    assert KernelSpec("fp32", flops, False).key == f"fp32-nofma-rw-f{flops}"


def test_read_only_is_one_add():
    spec = KernelSpec("fp32", 1, False, "ro")
    assert spec.key == "fp32-add-ro-f1"
    assert spec.arithmetic_intensity == 1 / 4
    for flops, fma in ((2, False), (8, True), (1, True)):
        with pytest.raises(ValueError):
            KernelSpec("fp32", flops, fma, "ro")


@pytest.mark.parametrize("args", [("fp128", 1, False, "rw"), ("fp64", 3, False, "rw"), ("fp64", 0, False, "rw"),
                                  ("fp64", -2, True, "rw"), ("fp64", 2, True, "wo")])
def test_invalid_specs(args):
    with pytest.raises(ValueError):
        KernelSpec(*args)


def test_arithmetic_intensity():
    assert KernelSpec("fp64", 1, False).arithmetic_intensity == 1 / 16
    assert KernelSpec("fp64", 32, True).arithmetic_intensity == 2.0
    assert KernelSpec("fp32", 32, False).arithmetic_intensity == 4.0


def test_totals_and_rates():
    spec = KernelSpec("fp64", 8, True)
    elements, trials, seconds = 1000, 50, 0.002
    assert spec.bytes_moved(elements=elements, trials=trials) == 1000 * 50 * 16
    assert spec.flops_done(elements=elements, trials=trials) == 1000 * 50 * 8
    assert spec.gbytes_per_s(elements=elements, trials=trials, seconds=seconds) == pytest.approx(0.4)
    assert spec.gflops_per_s(elements=elements, trials=trials, seconds=seconds) == pytest.approx(0.2)
    ro = KernelSpec("fp32", 1, False, "ro")
    assert ro.gbytes_per_s(elements=2_000_000, trials=10, seconds=0.01) == pytest.approx(8.0)
    assert ro.gflops_per_s(elements=2_000_000, trials=10, seconds=0.01) == pytest.approx(2.0)


def test_rates_of_a_raw_record_use_the_median():
    spec = KernelSpec("fp32", 2, False)
    record = {"spec": spec.to_dict(), "elements": 4096, "trials": 1000,
              "seconds": {"min": 0.001, "median": 0.002, "max": 0.004}}
    gbs, gflops = rates(record)
    assert gbs == pytest.approx(4096 * 1000 * 8 / 0.002 / 1e9)
    assert gflops == pytest.approx(4096 * 1000 * 2 / 0.002 / 1e9)


def test_dict_round_trip_and_default_access():
    for spec in (KernelSpec("fp64", 1, False), KernelSpec("fp32", 16, True), KernelSpec("fp64", 1, False, "ro")):
        assert KernelSpec.from_dict(spec.to_dict()) == spec
    old = {"precision": "fp64", "flops_per_element": "4", "fma": 1}  # a record written without access
    assert KernelSpec.from_dict(old) == KernelSpec("fp64", 4, True, "rw")


def test_specs_are_hashable_values():
    assert len({KernelSpec("fp64", 2, True), KernelSpec("fp64", 2, True), KernelSpec("fp64", 2, False)}) == 2
    with pytest.raises(Exception):
        KernelSpec("fp64", 2, True).precision = "fp32"
