"""A roof is the best rate the run confirmed inside its level's window.

A cache can stream faster over part of its capacity than over the rest
(Zen 5: fp64 read+write L2 686-732 GB/s from 96 to 412 KiB per thread,
884-948 GB/s at 492-708 KiB per thread, the same on 4 KiB and huge pages),
and such a window can be narrower than three sweep points.  So a roof does
not wait for three points to agree: it is the fastest rate the run
*confirmed*.

* **Window.**  L1 from the smallest working set to its capacity; L2, L3 ...
  from 2 x the aggregate capacity of the cache before it to their own; the
  memory from 2 x the last cache on (``ert.analysis.regimes`` chooses the
  same windows for the slower stretches).
* **Measured again.**  After the sweep the planner measures the fastest
  clean point of every window a second time, at the same working set with a
  fresh calibration, interleaved with other points (raw.jsonl "confirm"
  records); one that did not reproduce is tried again later, and the
  next-fastest after it.  A rate is confirmed only by a measurement taken
  at another time: a point whose re-measurement reproduces its rate within
  the run's noise threshold is confirmed (a point flagged noisy too, when
  the re-measurement is clean: it is clean from then on); one that does not
  is a noisy point, named in a warning (``NOT_REPRODUCED``), and is never a
  roof by its own rate; but when two of its re-measurements agree with each
  other, the faster clean one is a rate the run confirmed there.
* **Neighbours.**  A point with no re-measurement (a run made before them,
  an ERT curve, a point not among the fastest) is confirmed when a
  neighbouring clean point of the window (the next one in working-set order)
  reads the same rate within the noise threshold.
* **Roof.**  The level's value is its fastest confirmed rate whenever there
  is one, even where only one or two working sets reach it, and even where
  the older rules (plateau, regime, memory mode) give another value: when
  the fastest points of a window do not reproduce, the roof comes from the
  next-fastest that does.  ``confirmed`` in ceilings.json says which point,
  by what and how many measurements of the window agree with it.  Slower
  stretches stay in ``regimes`` and ``range_gbytes_per_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple, Sequence

from ert.records.weather import Stretch, suspect as is_suspect
from ert.records.warning_codes import warn
from ert.spec import NOISE_THRESHOLD, curve_name, rates
from ert.units import human_bytes

# The short, stable code of the warning that names points a re-measurement did not reproduce.
NOT_REPRODUCED = "not-reproduced"
# The noise threshold of a run that records none (an ERT results run): the default config's.
DEFAULT_NOISE_THRESHOLD = NOISE_THRESHOLD


def agree(a: float, b: float, threshold: float) -> bool:
    """Two rates reproduce each other: the faster is within ``threshold`` of the slower (the spread's definition)."""
    lo, hi = min(a, b), max(a, b)
    return lo > 0 and math.isfinite(hi) and hi <= lo * (1.0 + threshold)


def noise_threshold(meta: dict) -> float:
    """The run's noise threshold (its config's timing), the default where it recorded none."""
    try:
        value = float(meta["config"]["timing"]["noise_threshold"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_NOISE_THRESHOLD
    return value if value > 0 else DEFAULT_NOISE_THRESHOLD


class Measured(NamedTuple):
    """One measurement of a working set: its rate, whether it is clean (not flagged noisy), and whether it was
    taken inside a disturbed stretch (``ert.records.weather``: suspect, it confirms nothing and is confirmed by
    nothing)."""

    gbytes_per_s: float
    clean: bool = True
    suspect: bool = False


def re_measurements(confirms: Sequence[dict], stretches: Sequence[Stretch] = ()) -> dict[str, list[Measured]]:
    """Each valid re-measurement ("confirm" record), by the id of the point it measured again."""
    out: dict[str, list[Measured]] = {}
    for rec in confirms:
        if not rec.get("valid"):
            continue
        rate = rates(rec).gbytes_per_s
        if rate > 0 and math.isfinite(rate):
            out.setdefault(rec["point_id"], []).append(Measured(rate, not rec.get("noisy"), is_suspect(rec, stretches)))
    return out


def pair_rate(measured: Sequence[Measured], threshold: float) -> float | None:
    """The fastest rate two measurements of one working set reproduce, or None.

    Two measurements reproduce each other when neither is suspect, at least one is clean and they agree within
    ``threshold``; the rate they confirm is the faster clean one of the two (a roof is an upper bound).  They are
    always taken at different times: a point and its re-measurements, or two re-measurements."""
    best = None
    usable = [m for m in measured if not m.suspect]
    for a, b in combinations(usable, 2):
        if (a.clean or b.clean) and agree(a.gbytes_per_s, b.gbytes_per_s, threshold):
            value = max(m.gbytes_per_s for m in (a, b) if m.clean)
            best = value if best is None else max(best, value)
    return best


def _label(spec: dict) -> str:
    return curve_name(spec["precision"], spec["access"])


def mark_not_reproduced(points: list[dict], confirms: Sequence[dict], *, threshold: float,
                        stretches: Sequence[Stretch] = ()) -> tuple[list[dict], list[str]]:
    """``points`` with every point that its re-measurements did not reproduce flagged noisy, and the warnings.

    Such a point was a moment of the machine's, not a rate the level
    sustains: it keeps its record (``reproduced: false``) and is used like
    any noisy point, never as a roof by its own rate.  A re-measurement taken
    inside a disturbed stretch (``stretches``) decides nothing: the planner
    tries it again.
    """
    again = re_measurements(confirms, stretches)
    out, missed = [], {}
    for rec in points:
        rerun = [m for m in again.get(rec["id"], []) if not m.suspect]
        if not rerun or not rec["valid"]:
            out.append(rec)
            continue
        own = rates(rec).gbytes_per_s
        if any(agree(own, m.gbytes_per_s, threshold) for m in rerun):
            if rec["noisy"] and any(m.clean and agree(own, m.gbytes_per_s, threshold) for m in rerun):
                # A burst of other work in one of its regions, and a clean re-measurement reproduces its rate.
                rec = {**rec, "noisy": False, "reproduced": True}
            out.append(rec)
            continue
        out.append({**rec, "noisy": True, "reproduced": False})
        missed.setdefault(_label(rec["spec"]), []).append(
            f"{own:.4g} GB/s at {human_bytes(rec['wss_bytes'])} (again: "
            f"{', '.join(f'{m.gbytes_per_s:.4g}' for m in rerun)})")
    warnings = [warn(NOT_REPRODUCED, f"{label}: {len(items)} point(s) not reproduced within the noise threshold "
                     f"({threshold:.0%}) when measured again: {'; '.join(items)}; noisy, never a roof")
                for label, items in missed.items()]
    return out, warnings


@dataclass(frozen=True)
class Confirmed:
    """A window's fastest confirmed point: its rate, index into the curve, and the evidence."""

    gbytes_per_s: float
    index: int
    wss_bytes: int
    by: str      # "measured again" or "neighbour"
    times: int   # other measurements of the window (points and re-measurements) that reproduce its rate

    def as_dict(self, point_id: str) -> dict:
        return {"gbytes_per_s": round(self.gbytes_per_s, 4), "wss_bytes": int(self.wss_bytes), "by": self.by,
                "times": self.times, "point_id": point_id}

    def describe(self) -> str:
        return (f"{self.gbytes_per_s:.4g} GB/s at {human_bytes(self.wss_bytes)} ({self.by}; "
                f"{self.times} measurement(s) of the window agree)")


def confirmed_roof(wss_bytes: Sequence[float], gbytes_per_s: Sequence[float], noisy: Sequence[bool],
                   window: Sequence[int], again: Sequence[Sequence[Measured]], *, threshold: float,
                   suspect: Sequence[bool] | None = None) -> Confirmed | None:
    """The fastest rate the run confirmed among the curve's points ``window`` (see the module), None when none is.

    ``again[i]`` are point i's re-measurements (empty: none); ``suspect[i]`` whether point i was measured inside
    a disturbed stretch (None: none was).  A point with re-measurements taken calm is confirmed by them
    (``pair_rate``: its own rate and theirs); one without, by a clean calm neighbour of the window.
    """
    n = len(gbytes_per_s)
    sus = [False] * n if suspect is None else list(suspect)

    def usable(i: int) -> bool:
        return math.isfinite(gbytes_per_s[i]) and gbytes_per_s[i] > 0

    window = [int(i) for i in window if usable(int(i))]
    clean = sorted((i for i in window if not noisy[i] and not sus[i]), key=lambda i: wss_bytes[i])
    found: dict[int, tuple[float, str]] = {}
    for i in window:
        calm_again = [m for m in again[i] if not m.suspect]
        if calm_again:  # its own re-measurements decide (one that disagreed made it noisy)
            rate = pair_rate([Measured(gbytes_per_s[i], not noisy[i], sus[i]), *calm_again], threshold)
            if rate is not None:
                found[i] = (rate, "measured again")
    for k, i in enumerate(clean):
        if i in found or any(not m.suspect for m in again[i]):
            continue
        near = [clean[j] for j in (k - 1, k + 1) if 0 <= j < len(clean)]
        if any(agree(gbytes_per_s[i], gbytes_per_s[j], threshold) for j in near):
            found[i] = (gbytes_per_s[i], "neighbour")
    if not found:
        return None
    best = max(found, key=lambda i: (found[i][0], -wss_bytes[i]))
    rate, by = found[best]
    others = [gbytes_per_s[i] for i in clean] + [m.gbytes_per_s for i in window for m in again[i] if not m.suspect]
    others.remove(rate)  # the measurement that is the rate (a clean calm point or re-measurement)
    times = sum(1 for r in others if agree(rate, r, threshold))
    return Confirmed(float(rate), best, int(wss_bytes[best]), by, times)
