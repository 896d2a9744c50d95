"""The one measuring engine (ert/measure/timing.py): calibration and samples under one noise policy."""

from __future__ import annotations

import time

import pytest

from ert.measure import timing


class Clock:
    """A timed closure whose seconds are ``per_repeat * n`` (plus scripted disturbances), counting its calls."""

    def __init__(self, per_repeat: float, extra: list[float] | None = None):
        self.per_repeat, self.extra, self.calls = per_repeat, list(extra or []), []

    def __call__(self, n: int) -> float:
        self.calls.append(n)
        return self.per_repeat * n + (self.extra.pop(0) if self.extra else 0.0)


def test_calibrate_doubles_until_a_sample_lasts_min_seconds():
    clock = Clock(1e-4)
    count, seconds = timing.calibrate(clock, min_seconds=0.01, jump=False)
    assert count == 128 and seconds == pytest.approx(0.0128)
    assert clock.calls == [1, 2, 4, 8, 16, 32, 64, 128]


def test_calibrate_jumps_by_at_most_16x_and_stops_at_the_cap():
    clock = Clock(1e-6)
    count, _ = timing.calibrate(clock, min_seconds=0.01)
    assert clock.calls[:3] == [1, 16, 256] and count * 1e-6 >= 0.01
    capped = Clock(1e-9)
    count, seconds = timing.calibrate(capped, min_seconds=1.0, max_count=4096)
    assert count == 4096 and seconds < 1.0  # a clock that barely advances cannot hang the run


def test_calibrate_confirm_takes_the_faster_of_two_so_one_stall_cannot_fix_the_count_low():
    # At n=2 a stall makes the sample look long enough; timed again, it is not, so calibration goes on.
    clock = Clock(1e-3, extra=[0.0, 0.05, 0.0])
    count, _ = timing.calibrate(clock, min_seconds=0.01, confirm=True, jump=False)
    assert count == 16 and clock.calls[:3] == [1, 2, 2]


def test_sample_remeasures_a_noisy_size_and_keeps_the_quietest_attempt():
    clock = Clock(1e-3, extra=[0.0, 0.004, 0.0] + [0.0, 0.00005, 0.0] + [0.0, 0.0001, 0.0])
    got = timing.sample(clock, 1, samples=3, noise_threshold=0.1, max_remeasure=2)
    assert got.attempts == 2 and got.kept == 1 and not got.noisy  # the second attempt was quiet: no third
    assert got.seconds == pytest.approx([0.001, 0.00105, 0.001])


def test_sample_keeps_the_least_noisy_when_every_attempt_is_noisy():
    clock = Clock(1e-3, extra=[0, 0.003, 0, 0, 0.001, 0, 0, 0.002, 0])
    got = timing.sample(clock, 1, samples=3, noise_threshold=0.1, max_remeasure=2)
    assert got.attempts == 3 and got.kept == 1 and got.noisy and got.spread == pytest.approx(1.0)


def test_a_real_closure_is_timed():
    def spin(n: int) -> float:
        start = time.perf_counter()
        total = 0
        for i in range(n * 1000):
            total += i
        return time.perf_counter() - start

    count, seconds = timing.calibrate(spin, min_seconds=0.002)
    got = timing.sample(spin, count, samples=3, noise_threshold=10.0, max_remeasure=0)
    assert seconds >= 0.002 and len(got.seconds) == 3 and min(got.seconds) > 0


# ---------------------------------------------------------------------------- the budget (the sweep's points)
def test_a_budget_stops_at_min_samples_when_they_agree():
    clock = Clock(1e-3)
    got = timing.sample(clock, 10, samples=5, noise_threshold=0.1, max_remeasure=2, min_samples=2)
    assert clock.calls == [10, 10] and got.seconds == [pytest.approx(0.01)] * 2
    assert not got.noisy and got.attempts == 1 and got.calls == (0, 2)


def test_a_noisy_budget_grows_then_doubles_the_count_within_its_cap():
    # Every sample of the first attempt is disturbed differently: it grows to `samples`, stays noisy,
    # and the next attempt runs twice the repeats (quiet: kept).
    clock = Clock(1e-3, extra=[0.0, 0.01, 0.0, 0.02, 0.005])
    got = timing.sample(clock, 10, samples=5, noise_threshold=0.1, max_remeasure=2, min_samples=2, max_seconds=10)
    assert clock.calls == [10] * 5 + [20, 20]
    assert got.count == 20 and not got.noisy and got.kept == 1 and got.attempts == 2
    assert got.calls == (5, 7)  # the kept attempt's calls, for a caller's per-call rows
    # A cap the first attempt already nearly spent: no second attempt; flagged, never dropped.
    clock = Clock(1e-3, extra=[0.0, 0.01, 0.0, 0.02, 0.005])
    got = timing.sample(clock, 10, samples=5, noise_threshold=0.1, max_remeasure=2, min_samples=2,
                        max_seconds=0.09)
    assert len(clock.calls) == 5 and got.noisy and got.attempts == 1


def test_samples_fooled_by_a_stalled_calibration_are_retaken_longer():
    # Calibrated on one stalled sample, the count gives 1 ms regions where 10 ms were asked.
    clock = Clock(1e-4)
    got = timing.sample(clock, 10, samples=3, noise_threshold=0.1, max_remeasure=0, min_seconds=0.01)
    assert got.count == 160 and clock.calls == [10] * 3 + [160] * 3   # 2**ceil(log2(10)) = 16x
    assert got.calls == (3, 6)
