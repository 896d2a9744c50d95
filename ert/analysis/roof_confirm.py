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
  records).  A point whose re-measurement reproduces its rate within the
  run's noise threshold is confirmed (a point flagged noisy too, when the
  re-measurement is clean: it is clean from then on); one that does not is
  a noisy point, named in a warning (``NOT_REPRODUCED``), and is never a
  roof.
* **Neighbours.**  A point with no re-measurement (a run made before them,
  an ERT curve, a point not among the fastest) is confirmed when a
  neighbouring clean point of the window (the next one in working-set order)
  reads the same rate within the noise threshold.
* **Roof.**  The level's value is its fastest confirmed point, even where
  only one or two working sets reach it, or the value the older rules give
  (plateau, regime, memory mode) where that is higher; ``confirmed`` in
  ceilings.json says which point, by what and how many measurements of the
  window agree with it.  Slower stretches stay in ``regimes`` and
  ``range_gbytes_per_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ert.spec import rates
from ert.units import human_bytes
from ert.records.warning_codes import warn
from ert.spec import NOISE_THRESHOLD, curve_name

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


def again_rates(confirms: Sequence[dict]) -> dict[str, list[float]]:
    """GB/s of each valid re-measurement, by the id of the point it measured again."""
    out: dict[str, list[float]] = {}
    for rec in confirms:
        if rec.get("valid"):
            out.setdefault(rec["point_id"], []).append(rates(rec).gbytes_per_s)
    return out


def _label(spec: dict) -> str:
    return curve_name(spec["precision"], spec["access"])


def mark_not_reproduced(points: list[dict], confirms: Sequence[dict], *,
                        threshold: float) -> tuple[list[dict], list[str]]:
    """``points`` with every point that its re-measurements did not reproduce flagged noisy, and the warnings.

    Such a point was a moment of the machine's, not a rate the level
    sustains: it keeps its record (``reproduced: false``) and is used like
    any noisy point, never as a roof.
    """
    again = again_rates(confirms)
    clean_again = again_rates([c for c in confirms if not c.get("noisy")])
    out, missed = [], {}
    for rec in points:
        rerun = again.get(rec["id"])
        if not rerun or not rec["valid"]:
            out.append(rec)
            continue
        own = rates(rec).gbytes_per_s
        if any(agree(own, r, threshold) for r in rerun):
            if rec["noisy"] and any(agree(own, r, threshold) for r in clean_again.get(rec["id"], [])):
                # A burst of other work in one of its regions, and a clean re-measurement reproduces its rate.
                rec = {**rec, "noisy": False, "reproduced": True}
            out.append(rec)
            continue
        out.append({**rec, "noisy": True, "reproduced": False})
        missed.setdefault(_label(rec["spec"]), []).append(
            f"{own:.4g} GB/s at {human_bytes(rec['wss_bytes'])} (again: "
            f"{', '.join(f'{r:.4g}' for r in rerun)})")
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
                   window: Sequence[int], again: Sequence[Sequence[float]], *, threshold: float) -> Confirmed | None:
    """The fastest confirmed point among the curve's points ``window`` (see the module), None when none is.

    ``again[i]`` are the rates of point i's re-measurements (empty: none).
    """
    clean = sorted((int(i) for i in window if not noisy[i] and math.isfinite(gbytes_per_s[i])
                    and gbytes_per_s[i] > 0), key=lambda i: wss_bytes[i])
    found: dict[int, str] = {}
    for k, i in enumerate(clean):
        rate = gbytes_per_s[i]
        if again[i]:
            if any(agree(rate, r, threshold) for r in again[i]):
                found[i] = "measured again"
            continue  # its own re-measurement decides (one that disagreed made it noisy)
        near = [clean[j] for j in (k - 1, k + 1) if 0 <= j < len(clean)]
        if any(agree(rate, gbytes_per_s[j], threshold) for j in near):
            found[i] = "neighbour"
    if not found:
        return None
    best = max(found, key=lambda i: (gbytes_per_s[i], -wss_bytes[i]))
    rate = gbytes_per_s[best]
    others = [gbytes_per_s[i] for i in clean if i != best] + [r for i in clean for r in again[i]]
    times = sum(1 for r in others if agree(rate, r, threshold))
    return Confirmed(float(rate), best, int(wss_bytes[best]), found[best], times)
