"""Calibration and re-measuring in the driver, with a backend whose timings are scripted.

A disturbance (a thread descheduled for a few milliseconds) cannot be produced
on demand, so these tests give the driver a stand-in backend that reports the
seconds a real one would, plus scripted stalls.  The real backend is exercised
end to end in test_run.py.
"""

from __future__ import annotations

import statistics

import pytest

from ert.measure.comm import SerialComm
from ert.config.schema import Timing
from ert.measure.driver import MAX_TRIALS, calibrate, measure
from ert.spec import KernelSpec
from ert.measure.plan import Point
from ert.records.rawio import point_record


class ScriptedBackend:
    """Each run() lasts trials x per_trial seconds, plus the stall scripted for that call (by call number)."""

    threads = 1

    def __init__(self, per_trial: float, stalls: dict[int, float] | None = None, extra=None):
        self.per_trial = per_trial
        self.stalls = stalls or {}
        self.extra = extra  # optional f(call) -> additional seconds
        self.calls: list[int] = []

    def run(self, trials: int) -> float:
        call = len(self.calls)
        self.calls.append(trials)
        seconds = trials * self.per_trial + self.stalls.get(call, 0.0)
        if self.extra:
            seconds += self.extra(call)
        return seconds


COMM = SerialComm()


def test_calibrate_doubles_until_min_seconds():
    b = ScriptedBackend(per_trial=1e-4)
    trials, seconds = calibrate(b, COMM, min_seconds=0.01)
    assert trials == 128  # 64 x 0.1 ms < 10 ms <= 128 x 0.1 ms
    assert seconds == pytest.approx(0.0128)
    assert b.calls[:8] == [1, 2, 4, 8, 16, 32, 64, 128]


@pytest.mark.parametrize("stalled_call", [0, 3, 7])
def test_one_stalled_region_does_not_set_the_trial_count(stalled_call):
    """A region stretched past min_seconds by a stall must not end the calibration early (calls 0, 3),
    nor push it further (call 7 is the run confirming 64 trials)."""
    b = ScriptedBackend(per_trial=1e-4, stalls={stalled_call: 0.008})
    trials, _ = calibrate(b, COMM, min_seconds=0.005)
    assert trials == 64, f"calibrated to {trials} trials after a stall on call {stalled_call}: {b.calls}"


def test_measured_regions_last_about_min_seconds_despite_a_calibration_stall():
    b = ScriptedBackend(per_trial=2e-6, stalls={0: 0.008})  # the first region after prepare waits 8 ms
    timing = Timing(min_seconds=0.002, repeats=3, noise_threshold=0.25, max_remeasure=1)
    m = measure(b, COMM, timing=timing)
    assert m.trials > 1
    assert min(m.samples) >= timing.min_seconds / 2, m


def test_calibrate_stops_at_max_trials_for_a_zero_timer():
    b = ScriptedBackend(per_trial=0.0)
    trials, seconds = calibrate(b, COMM, min_seconds=0.01)
    assert trials == MAX_TRIALS and seconds == 0.0


def test_noisy_point_is_remeasured_a_bounded_number_of_times_and_flagged():
    # Every other region is 50 % slower: every attempt is noisy.
    b = ScriptedBackend(per_trial=1e-3, extra=lambda call: 0.5e-3 * 16 * (call % 2))
    timing = Timing(min_seconds=0.01, repeats=4, noise_threshold=0.1, max_remeasure=2)
    m = measure(b, COMM, timing=timing)
    assert m.noisy and m.remeasured == 2
    assert len(m.samples) == 4


def test_quiet_point_is_measured_once():
    b = ScriptedBackend(per_trial=1e-3)
    timing = Timing(min_seconds=0.01, repeats=5, noise_threshold=0.1, max_remeasure=3)
    m = measure(b, COMM, timing=timing)
    assert not m.noisy and m.remeasured == 0 and m.spread == 0
    # Calibration, its confirming run, then 3 more repeats: the calibration's two regions at 16 trials are the
    # first 2 of the 5 (samples of the same work, not timed again).
    assert b.calls == [1, 2, 4, 8, 16, 16] + [16] * 3
    assert len(m.samples) == 5 and b.calls[-5:] == [m.trials] * 5


def test_the_quietest_attempt_is_kept():
    # Calibration is calls 0-5; attempt 1 (calls 4-6: the calibration's last two) has one slow region; attempt 2
    # (calls 7-9) is quiet.
    b = ScriptedBackend(per_trial=1e-3, stalls={6: 0.01})
    timing = Timing(min_seconds=0.01, repeats=3, noise_threshold=0.1, max_remeasure=3)
    m = measure(b, COMM, timing=timing)
    assert m.spread == 0 and not m.noisy and m.remeasured == 1


def test_point_record_orders_the_seconds():
    b = ScriptedBackend(per_trial=1e-3, extra=lambda call: 1e-4 * (call % 3))
    m = measure(b, COMM, timing=Timing(min_seconds=0.005, repeats=5, noise_threshold=0.5, max_remeasure=0))
    point = Point(KernelSpec("fp64", 1, False), 16384, 1024)
    rec = point_record(point_id=point.id, spec=point.spec.to_dict(), wss_bytes=point.wss_bytes,
                       elements_per_thread=point.elements_per_thread, launch=None, ranks=1, threads_per_rank=2,
                       trials=m.trials, samples=m.samples, rank_seconds=m.rank_seconds, spread=m.spread,
                       noisy=m.noisy, remeasured=m.remeasured, serialized=m.serialized, valid=True, check="ok")
    samples = m.samples
    assert min(samples) < max(samples)  # the scripted regions differ, so the order is tested
    assert rec["seconds"] == {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}
    assert rec["elements"] == 2048 and rec["id"] == "fp64-add-rw-f1-w16384"
    # One rank: its fastest and slowest region are the point's.
    assert rec["rank_seconds"] == {"min": min(samples), "max": max(samples),
                                   "per_rank": [{"min": min(samples), "max": max(samples)}]}


def test_repeats_far_shorter_than_min_seconds_recalibrate():
    """If calibration was fooled (both of its long regions stalled) the repeats show it, and trials grow."""
    b = ScriptedBackend(per_trial=1e-6, stalls={0: 0.05, 1: 0.05})
    m = measure(b, COMM, timing=Timing(min_seconds=0.01, repeats=3, max_remeasure=0))
    assert statistics.median(m.samples) >= 0.005, m.samples
    assert m.trials >= 5000


# --------------------------------------------------------------------------- timing budget


def test_budget_stops_a_quiet_point_at_min_repeats():
    b = ScriptedBackend(per_trial=1e-3)
    timing = Timing(min_seconds=0.01, repeats=7, min_repeats=3, noise_threshold=0.1, max_remeasure=3)
    m = measure(b, COMM, timing=timing)
    assert not m.noisy and len(m.samples) == 3
    assert b.calls == [1, 2, 4, 8, 16, 16] + [16]  # the calibration's two regions at 16 trials, and one more


def test_budget_adds_repeats_then_longer_regions_to_a_noisy_point():
    # Region 6 (the third repeat, after the calibration's two) is disturbed: more repeats are taken, but the
    # spread stays above the threshold, so the next attempt uses regions twice as long.
    b = ScriptedBackend(per_trial=1e-3, stalls={6: 0.01})
    timing = Timing(min_seconds=0.01, repeats=5, min_repeats=3, noise_threshold=0.1, max_remeasure=2)
    m = measure(b, COMM, timing=timing)
    assert b.calls[4:9] == [16] * 5  # the first attempt grew to `repeats`
    assert b.calls[9:12] == [32] * 3  # the second: longer regions, quiet after min_repeats
    assert not m.noisy and m.trials == 32 and m.remeasured == 1


def test_budget_caps_the_timed_work_and_flags_what_stays_noisy():
    b = ScriptedBackend(per_trial=1e-3, extra=lambda call: 8e-3 * (call % 2))
    timing = Timing(min_seconds=0.01, repeats=5, min_repeats=3, noise_threshold=0.1, max_remeasure=10,
                    max_point_seconds=0.2)
    m = measure(b, COMM, timing=timing)
    timed = sum(b.calls[6:]) * 1e-3  # per-trial seconds of every region after calibration
    assert m.noisy and m.remeasured < 10
    assert timed < 0.2 + 0.05  # within the cap (plus the disturbances themselves)


def test_a_trial_guess_skips_calibration_doublings():
    b = ScriptedBackend(per_trial=1e-3)
    m = measure(b, COMM, timing=Timing(min_seconds=0.01, repeats=3, min_repeats=3), start_trials=8)
    assert b.calls[:3] == [8, 16, 16] and m.trials == 16


# ---------------------------------------------------------------------------- ranks that take turns
from ert.measure.driver import CONCURRENT_SLACK, region_seconds  # noqa: E402


def test_concurrent_ranks_are_timed_by_the_slowest():
    # Two ranks of one host ran together (ends 5 us apart): the slowest region decides.
    everyone = [(0.0020, 10.0020), (0.0021, 10.002105)]
    assert region_seconds(everyone, ["node1", "node1"]) == (0.0021, False)


def test_ranks_that_took_turns_on_one_host_are_timed_over_the_span():
    # Rank 1 ran its whole region after rank 0's: each timed 2 ms, the host's work took 4 ms.
    everyone = [(0.002, 10.002), (0.002, 10.004)]
    seconds, serialized = region_seconds(everyone, ["node1", "node1"])
    assert serialized and seconds == pytest.approx(0.004)
    # Ranks on different hosts never share a clock or cores: their offsets say nothing.
    assert region_seconds(everyone, ["node1", "node2"]) == (0.002, False)
    # Two hosts, each with a pair that took turns on one: the worst host's span.
    four = [(0.002, 1.002), (0.002, 1.004), (0.002, 7.002), (0.002, 7.0021)]
    assert region_seconds(four, ["a", "a", "b", "b"])[0] == pytest.approx(0.004)
    # Without host names (a serial run), nothing can be said.
    assert region_seconds(everyone, None) == (0.002, False)


def test_the_slack_separates_skew_from_turns():
    just_under = [(0.010, 5.0), (0.010, 5.0 + 0.010 * (CONCURRENT_SLACK - 1) * 0.9)]
    just_over = [(0.010, 5.0), (0.010, 5.0 + 0.010 * (CONCURRENT_SLACK - 1) * 1.1)]
    assert region_seconds(just_under, ["h", "h"])[1] is False
    assert region_seconds(just_over, ["h", "h"])[1] is True
