"""The host's weather from sentinel records: the disturbed stretches, the one rule measuring and analysis share.

A sentinel is a short fixed kernel for one cache level, measured between the
sweep's points ("sentinel" records in raw.jsonl, ``ert/schemas/RAW.md``).  Its
rate is that of its fastest timed region (``sentinel_rate``).  The rule:

* a level's **best** is the highest rate of its valid sentinels in the run (a
  sentinel cannot read faster than the hardware: a calm reading is never
  outvoted by a disturbance that lasts, however often it reproduces itself);
* a sentinel is **disturbed** when its level's best is above its rate by more
  than the noise threshold (``best > rate x (1 + threshold)``: the two would
  not reproduce each other, ``ert.analysis.roof_confirm.agree``);
* a **disturbed stretch** of one level runs from the calm sentinel of that
  level before its disturbed ones to the calm one after them (from the run's
  start where none came before, to its end where none came after);
* a stretch **concerns** the working sets above the sentinel of the level
  before its own (all of them for the smallest level): a co-tenant that takes
  the core's time slows every level, one that only shares the L2 or the last
  cache slows the working sets that live there and beyond, never the L1's;
* a measurement whose ``time`` falls inside a stretch that concerns its
  working set is **suspect**.

``disturbed_stretches`` gives each level's stretches (what suspicion uses);
``joined`` joins those of every level where they overlap (what the run
reports as its disturbed time).  Pure functions of the records: the planner
(while the run goes on) and the analysis (after it) get the same answer from
the same file.
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
    above_bytes: float = 0.0   # it concerns the working sets above this many bytes (the level before's sentinel)

    def holds(self, t: float) -> bool:
        """Whether a measurement written at ``t`` was measured inside the stretch."""
        return self.start < t < self.end

    def concerns(self, record: dict) -> bool:
        """Whether the stretch can slow ``record``'s working set (every record without a ``wss_bytes``)."""
        wss = record.get("wss_bytes")
        return not isinstance(wss, (int, float)) or wss > self.above_bytes

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


def _level_stretches(series: list[tuple[dict, float]], threshold: float, above_bytes: float) -> list[Stretch]:
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
                               sentinels=tuple(r["id"] for r, _ in run), above_bytes=above_bytes))
            run = []
        if rec is not None:
            calm_before = float(rec["time"])
    return out


def _sentinel_bytes(series: list[tuple[dict, float]]) -> float:
    sizes = [r.get("wss_bytes") for r, _ in series]
    return float(max((b for b in sizes if isinstance(b, (int, float))), default=0))


def disturbed_stretches(sentinels: Sequence[dict], threshold: float) -> list[Stretch]:
    """Each level's disturbed stretches (see the module), in time order; each concerns the working sets above
    the sentinel of the level before its own."""
    by_level: dict[str, list[tuple[dict, float]]] = {}
    for rec, ratio in ratios(sentinels):
        by_level.setdefault(rec["level"], []).append((rec, ratio))
    sizes = sorted((_sentinel_bytes(series), level) for level, series in by_level.items())
    below = {level: (sizes[k - 1][0] if k else 0.0) for k, (_, level) in enumerate(sizes)}
    return sorted((s for level, series in by_level.items()
                   for s in _level_stretches(series, threshold, below[level])), key=lambda s: (s.start, s.end))


def joined(stretches: Sequence[Stretch]) -> list[Stretch]:
    """The stretches of every level joined where they overlap: the run's disturbed time, in time order."""
    out: list[Stretch] = []
    for s in sorted(stretches, key=lambda s: (s.start, s.end)):
        last = out[-1] if out else None
        if last is None or s.start >= last.end:
            out.append(s)
            continue
        low, low_level = min((last.low, last.low_level), (s.low, s.low_level))
        out[-1] = Stretch(start=last.start, end=max(last.end, s.end),
                          levels=tuple(sorted(set(last.levels) | set(s.levels))), low=low, low_level=low_level,
                          sentinels=last.sentinels + s.sentinels, above_bytes=min(last.above_bytes, s.above_bytes))
    return out


def stretch_at(t: float, stretches: Sequence[Stretch], record: dict | None = None) -> Stretch | None:
    """The stretch a measurement written at ``t`` was measured in (one that concerns ``record``'s working set,
    where given), or None when it was measured calm."""
    return next((s for s in stretches if s.holds(t) and (record is None or s.concerns(record))), None)


def suspect(record: dict, stretches: Sequence[Stretch]) -> bool:
    """Whether a point (or any record with a ``time``) was measured inside a disturbed stretch that concerns its
    working set."""
    t = record.get("time")
    return isinstance(t, (int, float)) and stretch_at(float(t), stretches, record) is not None
