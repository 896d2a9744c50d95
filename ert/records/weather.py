"""The host's weather from sentinel records: the disturbed stretches, the one rule measuring and analysis share.

A sentinel is a short fixed kernel for one cache level, measured between the
sweep's points ("sentinel" records in raw.jsonl, ``ert/schemas/RAW.md``).  Its
rate is that of its fastest timed region (``sentinel_rate``).  The rule:

* a level's **best** is the highest rate of its valid sentinels in the run;
* a sentinel is **disturbed** when its level's best is above its rate by more
  than the noise threshold (``best > rate x (1 + threshold)``: the two would
  not reproduce each other, ``ert.analysis.roof_confirm.agree``);
* a **disturbed stretch** of one level runs from the calm sentinel of that
  level before its disturbed ones to the calm one after them (from the run's
  start where none came before, to its end where none came after); the
  stretches of every level are joined where they overlap;
* a measurement whose ``time`` falls inside a stretch is **suspect**.

Pure functions of the records: the planner (while the run goes on) and the
analysis (after it) get the same answer from the same file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from ert.spec import KernelSpec


@dataclass(frozen=True)
class Stretch:
    """A disturbed stretch of the run: its times (unix seconds, open ends infinite) and what the sentinels read."""

    start: float               # the calm sentinel before it; -inf: from the run's start
    end: float                 # the calm sentinel after it; inf: the run ended disturbed
    levels: tuple[str, ...]    # the levels whose sentinels read low in it
    low: float                 # the lowest rate of a sentinel in it, as a share of its level's best (0.84)
    low_level: str             # that sentinel's level
    sentinels: tuple[str, ...]  # the ids of its disturbed sentinels

    def holds(self, t: float) -> bool:
        """Whether a measurement written at ``t`` was measured inside the stretch."""
        return self.start < t < self.end

    def seconds(self, run_start: float, run_end: float) -> float:
        """The stretch's length within the run's span."""
        return max(0.0, min(self.end, run_end) - max(self.start, run_start))


def sentinel_rate(record: dict) -> float | None:
    """GB/s of a valid sentinel at its fastest timed region (``seconds.min``), None for an invalid or unusable one.

    Its spec, elements and trials give the bytes as for a point (``ert.spec.KernelSpec``); the fastest of its few
    regions, not their median, reads the host's state: a burst of other work inside one region of a few
    milliseconds is that region's noise, while a disturbance that lasts (a co-tenant on the core for seconds)
    slows every region of the reading."""
    if not record.get("valid"):
        return None
    spec = KernelSpec.from_dict(record["spec"])
    value = spec.gbytes_per_s(elements=record["elements"], trials=record["trials"], seconds=record["seconds"]["min"])
    return value if value > 0 and math.isfinite(value) else None


def level_best(sentinels: Iterable[dict]) -> dict[str, float]:
    """Each level's best sentinel rate in the run."""
    return _best([(rec, sentinel_rate(rec)) for rec in sentinels])


def _best(rated: list[tuple[dict, float | None]]) -> dict[str, float]:
    best: dict[str, float] = {}
    for rec, rate in rated:
        if rate is not None:
            best[rec["level"]] = max(best.get(rec["level"], 0.0), rate)
    return best


def ratios(sentinels: Sequence[dict]) -> list[tuple[dict, float]]:
    """Every valid sentinel with its rate as a share of its level's best, in time order."""
    rated = [(rec, sentinel_rate(rec)) for rec in sentinels]
    best = _best(rated)
    out = [(rec, rate / best[rec["level"]]) for rec, rate in rated if rate is not None]
    return sorted(out, key=lambda pair: pair[0]["time"])


def is_disturbed(ratio: float, threshold: float) -> bool:
    """A sentinel at ``ratio`` of its level's best reads low by more than the noise threshold."""
    return ratio * (1.0 + threshold) < 1.0


def _level_stretches(series: list[tuple[dict, float]], threshold: float) -> list[Stretch]:
    """One level's stretches from its sentinels (time order)."""
    out: list[Stretch] = []
    run: list[tuple[dict, float]] = []
    calm_before = -math.inf
    for rec, ratio in [*series, (None, 1.0)]:  # a calm end marker closes an open run
        if rec is not None and is_disturbed(ratio, threshold):
            run.append((rec, ratio))
            continue
        if run:
            low_rec, low = min(run, key=lambda pair: pair[1])
            out.append(Stretch(start=calm_before, end=math.inf if rec is None else float(rec["time"]),
                               levels=(low_rec["level"],), low=low, low_level=low_rec["level"],
                               sentinels=tuple(r["id"] for r, _ in run)))
            run = []
        if rec is not None:
            calm_before = float(rec["time"])
    return out


def disturbed_stretches(sentinels: Sequence[dict], threshold: float) -> list[Stretch]:
    """The run's disturbed stretches (see the module), in time order."""
    by_level: dict[str, list[tuple[dict, float]]] = {}
    for rec, ratio in ratios(sentinels):
        by_level.setdefault(rec["level"], []).append((rec, ratio))
    pieces = sorted((s for series in by_level.values() for s in _level_stretches(series, threshold)),
                    key=lambda s: (s.start, s.end))
    joined: list[Stretch] = []
    for s in pieces:
        last = joined[-1] if joined else None
        if last is None or s.start >= last.end:
            joined.append(s)
            continue
        low, low_level = min((last.low, last.low_level), (s.low, s.low_level))
        joined[-1] = Stretch(start=last.start, end=max(last.end, s.end),
                             levels=tuple(sorted(set(last.levels) | set(s.levels))), low=low, low_level=low_level,
                             sentinels=last.sentinels + s.sentinels)
    return joined


def stretch_at(t: float, stretches: Sequence[Stretch]) -> Stretch | None:
    """The stretch a measurement written at ``t`` was measured in, or None when it was measured calm."""
    return next((s for s in stretches if s.holds(t)), None)


def suspect(record: dict, stretches: Sequence[Stretch]) -> bool:
    """Whether a point (or any record with a ``time``) was measured inside a disturbed stretch."""
    t = record.get("time")
    return isinstance(t, (int, float)) and stretch_at(float(t), stretches) is not None
