"""The one output check (ert/backends/check.py): the host replay against exact arithmetic, the tolerance policy, the metric."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ert.backends import check
from ert.spec import KernelSpec

DTYPES = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}


def _exact_replay(precision: str, fma_ops: int, trials: int, *, fused: bool) -> np.ndarray:
    """The recurrence in exact rationals, rounded to the precision once per multiply-add (fused) or per operation."""
    dtype = DTYPES[precision]

    def rnd(x):
        return Fraction(float(dtype(float(x)))) if dtype is not np.float64 else Fraction(float(x))

    a, c = Fraction(check.A), Fraction(check.C)
    xs = [Fraction(float(v)) for v in check.initial_values(dtype)]
    for t in range(trials):
        ct = c if t % 2 == 0 else -c
        if fma_ops == 0:
            xs = [rnd(x + ct) for x in xs]
        for _ in range(fma_ops):
            xs = [rnd(x * a + ct) if fused else rnd(rnd(x * a) + ct) for x in xs]
    return np.array([float(x) for x in xs], dtype=dtype)


@pytest.mark.parametrize("precision", ["fp64", "fp32", "fp16"])
@pytest.mark.parametrize("flops, fma", [(1, False), (2, False), (8, False), (2, True), (8, True)])
@pytest.mark.parametrize("trials", [0, 1, 2, 3, 10, 41])
def test_replay_is_the_exact_recurrence_rounded_as_the_kernel_rounds(precision, flops, fma, trials):
    spec = KernelSpec(precision, flops, fma)
    if fma and not check.fma_exact(precision):
        pytest.skip("this host has no long double of 63+ bits: FP64 FMA is replayed with two roundings")
    got = check.replay_rw(spec, trials=trials)
    assert got.dtype == DTYPES[precision]
    np.testing.assert_array_equal(got, _exact_replay(precision, spec.fma_ops_per_element, trials, fused=fma))


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("trials", [400, 401])
def test_replay_cycle_jump_matches_the_long_way(precision, trials):
    """The replay jumps whole cycles once the state repeats; the parity of what is left must pick the right state."""
    spec = KernelSpec(precision, 4, False)
    np.testing.assert_array_equal(check.replay_rw(spec, trials=trials), _exact_replay(precision, 2, trials, fused=False))


def test_replay_parity_and_long_runs():
    spec = KernelSpec("fp32", 2, False)
    odd, even = check.replay_rw(spec, trials=1001), check.replay_rw(spec, trials=1002)
    assert not np.array_equal(odd, even)
    # 10**12 trials agree with the same parity a few thousand trials in.
    assert np.array_equal(check.replay_rw(spec, trials=10**12 + 2), even)


def test_fused_and_separate_replays_differ():
    """Otherwise the check could not tell an FMA kernel from a no-FMA one."""
    assert not np.array_equal(check.replay_rw(KernelSpec("fp32", 8, True), trials=7),
                              check.replay_rw(KernelSpec("fp32", 8, False), trials=7))


def test_tolerance_policy_is_one_for_every_backend(monkeypatch):
    # Bit-exact wherever the replay is exact: add, no-FMA, and FMA with a wide float.
    for spec in (KernelSpec("fp64", 1, False), KernelSpec("fp32", 8, False), KernelSpec("fp32", 8, True),
                 KernelSpec("fp16", 8, True)):
        assert check.rw_tolerance(spec) == 0.0, spec.key
    monkeypatch.setattr(check, "WIDE_FLOAT", None)  # a host whose long double is a double
    assert check.rw_tolerance(KernelSpec("fp64", 8, True)) == check.TWO_ROUNDINGS_TOLERANCE
    assert check.rw_tolerance(KernelSpec("fp64", 8, False)) == 0.0
    assert check.ro_tolerance(KernelSpec("fp64", 1, False, "ro")) == 1e-12
    assert check.ro_tolerance(KernelSpec("fp32", 1, False, "ro")) == 1e-5


def test_error_metric_counts_nan_as_infinite_and_scales_by_at_least_one():
    err = check.relative_errors(np.array([1.0, np.nan, 0.25, 4.0]), np.array([1.0, 1.0, 0.5, 2.0]))
    assert err.tolist() == [0.0, np.inf, 0.25, 1.0]
    assert check.worst(err) == (np.inf, 1)
    assert check.worst(np.array([])) == (0.0, 0)
    expected16 = check.initial_values(np.float64)
    values = np.tile(expected16, 2)[3:]  # starts at element 3 of the pattern
    assert check.rw_errors(values, first_element=3, expected16=expected16) == (0.0, 0)
    values[20] = np.nan
    assert check.rw_errors(values, first_element=3, expected16=expected16) == (np.inf, 20)


def test_verdict_names_the_worst_value_and_fails_on_nan():
    ok = check.verdict(error=0.0, tolerance=0.0, what="element 3", got=1.0, expected=1.0, trials=5)
    assert ok.ok and ok.detail == "max rel err 0"
    bad = check.verdict(error=0.5, tolerance=1e-5, what="element 3 of thread 1", got=1.5, expected=1.0, trials=5)
    assert not bad.ok and bad.detail.startswith("element 3 of thread 1: 1.5 != replay 1.0 after 5 trials")
    assert not check.verdict(error=float("nan"), tolerance=1.0, what="x", got=0, expected=0, trials=1).ok
    many = check.verdict(error=1.0, tolerance=0.0, what="element 9", got=2.0, expected=1.0, trials=1, count=4)
    assert many.detail.startswith("4 element(s) differ from the replay; the first, element 9")
