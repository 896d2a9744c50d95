"""The one measuring engine: calibrate a repeat count, then take timed samples under one noise policy.

Everything ert times goes through here: the sweep's kernels (``ert.measure.driver``),
device links and peers, the host-copy reference a CPU device's links are set
beside, the MPI network (``ert.measure.network``) and the numba-cpu reference
an OpenCL CPU device is rated with (``ert.measure.reference``). Each hands over a
closure ``timed(n) -> seconds`` that does ``n`` repeats of its work (a barrier
and the slowest rank inside it, where ranks take part) and returns how long
they took.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from ert.spec import timing_spread

Timed = Callable[[int], float]

# The default cap on the repeat count (a clock that never advances must not hang a run): 2**22 repeats, far
# beyond any region of a few milliseconds on real hardware; the host-copy and network references and the OpenCL
# CPU reference use it. Callers pass their own: the sweep's kernels ``driver.MAX_TRIALS`` (2**40 trials, as a
# trial may be one element), links and peers ``transfers.LINK_MAX_REPEATS`` (4096 copies).
MAX_COUNT = 1 << 22


@dataclass
class Samples:
    """Timed samples of ``count`` repeats each: the quietest attempt (``kept``, from 0), how many attempts
    were made, and its verdict. ``calls`` = (first, end): the kept samples were calls first..end-1 of
    ``timed`` (counted from 0 over this ``sample``), so a caller that logs each call can pick their rows."""

    count: int
    seconds: list[float]
    spread: float
    noisy: bool
    kept: int
    attempts: int = 0
    calls: tuple[int, int] = (0, 0)


def calibrate(timed: Timed, *, min_seconds: float, start: int = 1, max_count: int = MAX_COUNT,
              confirm: bool = False, jump: bool = True, kept: list | None = None) -> tuple[int, float]:
    """(count, seconds): the repeat count doubled from ``start`` until one sample lasts ``min_seconds``.

    The runs warm up what is timed. With ``confirm``, a sample that reaches
    ``min_seconds`` is timed once more and the faster of the two decides, so one
    sample stretched by a disturbance (a descheduled thread) cannot fix the
    count far too low. With ``jump``, a very short sample grows the count by up
    to 16x at once (to what ``min_seconds`` asks, with 20 % to spare), so tiny
    transfers do not take 20 doublings; without it the count doubles.
    ``kept`` (a list) receives the seconds of the samples taken at the count
    returned (one, or two with ``confirm``): samples like any other, which
    ``sample`` can start from instead of timing them again.
    """
    count = max(1, min(int(start), max_count))
    while True:
        seconds = timed(count)
        taken = [seconds]
        if confirm and seconds >= min_seconds:
            taken.append(timed(count))
            seconds = min(taken)
        if seconds >= min_seconds or count >= max_count:
            if kept is not None:
                kept[:] = taken
            return count, seconds
        grow = 2 if seconds <= 0 or not jump else min(16, max(2, int(min_seconds / seconds * 1.2)))
        count = min(max_count, count * grow)


def sample(timed: Timed, count: int, *, samples: int, noise_threshold: float, max_remeasure: int,
           min_samples: int | None = None,
           max_seconds: float | None = None, min_seconds: float | None = None,
           max_count: int = MAX_COUNT, initial: Sequence[float] = ()) -> Samples:
    """``samples`` timed samples of ``count`` repeats; while they spread more than ``noise_threshold``,
    up to ``max_remeasure`` more attempts, of which the quietest is kept (the others were disturbed by
    something outside the work).

    A budget (``min_samples``): each attempt starts with ``min_samples`` samples and stops there when
    they agree within half the noise threshold, else samples are added up to ``samples``; a noisy attempt
    is followed by one with twice the repeats (a short disturbance then weighs half as much), and
    ``max_seconds`` caps the sampled time: what is still noisy when it runs out is flagged, never dropped.
    ``min_seconds``: samples whose median is under half of it (a calibration fooled by one stalled
    sample) are retaken with the count scaled up to it.
    ``initial``: samples of ``count`` already taken (``calibrate``'s ``kept``), the first attempt's
    first ones; they count as calls before the first of ``timed`` here (``calls`` starts after them).
    """
    budgeted = min_samples is not None
    first = min_samples if budgeted else samples
    cap = max_seconds if max_seconds else float("inf")
    initial = list(initial)[:first]
    calls = len(initial)

    def take(n: int) -> float:
        nonlocal calls
        calls += 1
        return timed(n)

    spent = 0.0
    best: Samples | None = None
    for attempt in range(max_remeasure + 1):
        reuse = initial if attempt == 0 else []
        start = calls - len(reuse)
        seconds = reuse + [take(count) for _ in range(first - len(reuse))]
        # Judged on the samples timed here: the calibration's own may be the very ones a stall stretched.
        while min_seconds and statistics.median(seconds[len(reuse):] or seconds) < min_seconds / 2 \
                and count < max_count:
            factor = min_seconds / max(statistics.median(seconds[len(reuse):] or seconds), 1e-9)
            count = min(max_count, count * 2 ** max(1, math.ceil(math.log2(factor))))
            start, reuse = calls, []
            seconds = [take(count) for _ in range(first)]
        while (budgeted and len(seconds) < samples and timing_spread(seconds) > noise_threshold / 2
               and spent + sum(seconds) < cap):
            seconds.append(take(count))
        spent += sum(seconds)
        spread = timing_spread(seconds)
        current = Samples(count, seconds, spread, spread > noise_threshold, attempt, calls=(start, calls))
        if best is None or current.spread < best.spread:
            best = current
        if not current.noisy:
            break
        if budgeted:
            if spent + 2 * sum(seconds) > cap:
                break
            count = min(max_count, count * 2)
    best.attempts = attempt + 1
    return best
