"""The host's weather in the ceilings: the sentinels' series and disturbed stretches, flagged ceilings, one warning.

The sweep measures a short fixed sentinel kernel per cache level between its
points ("sentinel" records); the disturbed stretches are the shared rule's
(``ert.records.weather``).  Here:

* a point or re-measurement taken inside a stretch is **suspect**: it
  confirms no rate and no rate is confirmed by it (``ert.analysis.roof_confirm``);
  the planner measures suspect points again once the host is calm (a
  ``point`` record with ``remeasured_for: "disturbed"``, the one read);
* a ceiling that rests mostly on suspect points (no confirmed rate, and more
  than half of the points of its roof's regime suspect) carries
  ``"disturbed": true``;
* ``weather`` in ceilings.json: each level's sentinel series (seconds into
  the run, share of its best) and summary, the stretches, how long the host
  was disturbed, and the points measured again or left suspect;
* the memory has no sentinel: a memory roof below its curve's best in
  earlier runs here by more than the noise threshold (``ert.measure.history``;
  the run's end record carries that best) is flagged too, and named;
* a run disturbed for ``NOTABLE_SHARE`` of its time or more (on
  ``MIN_SENTINELS`` disturbed readings or more), or with a ceiling measured
  while disturbed, gets one "act on it" warning (``host-disturbed``)
  that names the stretches.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from ert.records.weather import Stretch, disturbed_stretches, is_disturbed, joined, level_best, ratios, suspect
from ert.records.warning_codes import warn
from ert.spec import curve_name

# A run disturbed for at least this share of its time says so in a warning.
NOTABLE_SHARE = 0.10
# ... and at least this many disturbed sentinels: one level's lone low reading can be three bursts of other work
# in a row inside its few milliseconds, while a disturbance that lasts slows every level's sentinel, reading after
# reading.
MIN_SENTINELS = 2
# A run whose L1 sentinel never read above this share of the rated L1 read+write rate was disturbed throughout:
# the sentinel is the sweep's own 1-FLOP read+write kernel at half the L1, which reads 0.99-1.00 of that rate on a
# calm Zen 4 (docs/measurements/), while a whole run shared with a co-tenant read every level at 0.35-0.45 (issue
# 39).  Set well below the calm share, for cores whose L1 this kernel cannot saturate as Zen 4's.
THROUGHOUT_SHARE = 0.6
# A run disturbed for at least this share of its time has no calm moment long enough to trust: a rate it
# confirmed (two measurements that agree) can be two readings of the same busy host.  On the Zen 4 guest in a busy
# hour a run disturbed for 60 of its 61 s confirmed its fp64 read+write L1 at 426 GB/s (calm runs: 466) in a
# 1-s gap when its L1 sentinel read 0.95 of its earlier best: its ceilings are flagged, confirmed or not.
MOSTLY_SHARE = 0.75
# A ceiling at this share of its rated value or more (what the hardware can physically do) is never flagged: a
# disturbance did not hold it down by more than 5 %.  On the Zen 4 guest a run disturbed for 47 of its 53 s read
# its compute peaks at 0.97-0.99 and its fp64 read-only L2 at 0.98 of rated, and flagged them "not the machine's".
NEAR_RATED_SHARE = 0.95
# The stretches a warning names at most (the rest are counted).
NAMED_STRETCHES = 3
WARNING_CODE = "host-disturbed"


def run_span(*groups: Sequence[dict]) -> tuple[float, float] | None:
    """(first, last) unix time of the records that have one: the run's span as its records saw it."""
    times = [float(r["time"]) for g in groups for r in g if isinstance(r.get("time"), (int, float))]
    return (min(times), max(times)) if times else None


def stretches_of(sentinels: Sequence[dict], threshold: float) -> list[Stretch]:
    """The run's disturbed stretches ([] without sentinels)."""
    return disturbed_stretches(sentinels, threshold) if sentinels else []


def _round(x: float, digits: int = 3) -> float:
    return round(float(x), digits)


def weather_block(sentinels: Sequence[dict], stretches: Sequence[Stretch], points: Sequence[dict],
                  confirms: Sequence[dict], threshold: float, memory_earlier: dict[str, float] | None = None,
                  ) -> dict | None:
    """ceilings.json's ``weather`` (schema 1.11; ``memory`` since 1.13: each curve's best memory roof in earlier
    runs here, ``memory_earlier``), None for a run without sentinels (docs/ceiling-json.md)."""
    span = run_span(sentinels, points, confirms)
    if not sentinels or span is None:
        return None
    start, end = span
    series: dict[str, list] = {}
    for rec, ratio in ratios(sentinels):
        series.setdefault(rec["level"], []).append([_round(rec["time"] - start, 2), _round(ratio)])
    best = level_best(sentinels)
    levels = {level: {"readings": len(values), "best_gbytes_per_s": _round(best.get(level, 0.0), 4),
                      "median": _round(statistics.median(v for _, v in values)),
                      "lowest": _round(min(v for _, v in values))}
              for level, values in series.items()}
    for rec in sentinels:  # each level's best in earlier runs on this machine, where the run had it
        earlier = rec.get("earlier_best_gbytes_per_s")
        if isinstance(earlier, (int, float)) and earlier > 0 and rec.get("level") in levels:
            entry = levels[rec["level"]]
            entry["earlier_best_gbytes_per_s"] = max(entry.get("earlier_best_gbytes_per_s", 0.0), float(earlier))
    again = [p for p in points if p.get("remeasured_for") == "disturbed"]
    left = [p for p in points if suspect(p, stretches)]
    time_line = joined(stretches)
    block = {
        "noise_threshold": threshold,
        "start_time": _round(start, 3),
        "seconds": _round(end - start, 2),
        "disturbed_seconds": _round(sum(s.seconds(start, end) for s in time_line), 2),
        "levels": levels,
        "series": series,
        "stretches": [{"start_s": _round(max(s.start, start) - start, 2), "end_s": _round(min(s.end, end) - start, 2),
                       "open": [math.isinf(s.start), math.isinf(s.end)], "levels": list(s.levels),
                       "lowest": _round(s.low), "lowest_level": s.low_level, "sentinels": len(s.sentinels)}
                      for s in time_line],
        "points": {"measured_again": len(again), "suspect": len(left)},
    }
    if memory_earlier:
        block["memory"] = {curve: {"earlier_best_gbytes_per_s": _round(v, 4)} for curve, v in memory_earlier.items()}
    return block


def _is_memory(entry: dict) -> bool:
    """A memory level's entry (DRAM, HBM): not a cache (L2, L2b), a link or the network."""
    level = str(entry.get("level", ""))
    return "level" in entry and entry.get("kind") is None and not (level[:1] == "L" and level[1:2].isdigit())


def memory_roofs(doc: dict) -> dict[str, float]:
    """curve ("fp64-rw") -> its memory roof among ``doc``'s top-level ceilings (what ``ert.measure.history``
    keeps for the next run)."""
    return {f"{e['precision']}-{e['access']}": float(e["gbytes_per_s"])
            for e in (doc.get("ceilings") or {}).get("memory", []) if _is_memory(e) and e.get("gbytes_per_s")}


def memory_earlier(ends: Sequence[dict]) -> dict[str, float]:
    """Each curve's best memory roof in earlier runs here, from the run's end records (the best of them)."""
    out: dict[str, float] = {}
    for end in ends:
        for curve, value in (((end.get("weather") or {}).get("memory_earlier")) or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                out[str(curve)] = max(out.get(str(curve), 0.0), float(value))
    return out


def memory_below_earlier(block: dict | None, entries: list[dict], threshold: float) -> list[tuple[dict, float, float]]:
    """(entry, its roof as a share of its curve's best in earlier runs, that best) for each memory roof below that
    best by more than the noise threshold: the host's memory traffic (other tenants' streams), which no sentinel
    reads."""
    earlier = (block or {}).get("memory") or {}
    out = []
    for entry in entries:
        best = (earlier.get(f"{entry.get('precision')}-{entry.get('access')}") or {}).get("earlier_best_gbytes_per_s")
        if _is_memory(entry) and best and entry.get("gbytes_per_s") and not near_rated(entry) and \
                is_disturbed(entry["gbytes_per_s"] / best, threshold):
            out.append((entry, entry["gbytes_per_s"] / best, best))
    return out


def near_rated(entry: dict) -> bool:
    """Whether a ceiling reads ``NEAR_RATED_SHARE`` of its rated value or more: no disturbance's flag for it."""
    ratio = (entry.get("rated") or {}).get("ratio")
    return isinstance(ratio, (int, float)) and ratio >= NEAR_RATED_SHARE


def flag_memory_below_earlier(low_memory: Sequence[tuple[dict, float, float]]) -> list[dict]:
    """Set ``disturbed: true`` on the memory roofs below their earlier runs' best (``memory_below_earlier``)."""
    for entry, _, _ in low_memory:
        entry["disturbed"] = True
    return [entry for entry, _, _ in low_memory]


def memory_text(low: Sequence[tuple[dict, float, float]]) -> str:
    """``the fp64 read+write DRAM roof is 0.55 of its best in earlier runs here (96.7 GB/s)``, for each."""
    return "; ".join(f"the {_name(e)} roof is {share:.2f} of its best in earlier runs here ({best:.4g} GB/s)"
                     for e, share, best in low)


def mostly_disturbed(block: dict | None) -> bool:
    """Whether the run was disturbed for ``MOSTLY_SHARE`` of its time or more."""
    return bool(block) and block["seconds"] > 0 and block["disturbed_seconds"] >= MOSTLY_SHARE * block["seconds"]


def flag_disturbed(entries: list[dict], points_by_id: dict[str, dict], stretches: Sequence[Stretch],
                   mostly: bool = False) -> list[dict]:
    """Set ``disturbed: true`` on each ceiling that rests mostly on suspect points; the entries flagged.

    A memory level rests on its ``evidence.point_ids`` unless the run confirmed its rate (a confirmed rate is
    reproduced by calm measurements; not so in a run disturbed ``mostly``: ``mostly_disturbed``), and of those on
    the points of its roof's regime where it has regimes (the fastest sustained one: a calm point elsewhere in
    the level does not make a roof read while disturbed any truer); a compute peak on its
    ``evidence.point_id``.  Flagged when more than half of those are suspect, unless it reads near its rated
    value (``near_rated``)."""
    if not stretches:
        return []
    flagged = []
    for entry in entries:
        evidence = entry.get("evidence") or {}
        ids = evidence.get("point_ids") or ([evidence["point_id"]] if evidence.get("point_id") else [])
        recs = _roof_points([points_by_id[i] for i in ids if i in points_by_id], entry.get("regimes"))
        # Most of them suspect: a calm point or two beside a roof read while disturbed do not make it the machine's.
        trusted = (entry.get("confirmed") and not mostly) or near_rated(entry)
        if not recs or trusted or 2 * sum(suspect(r, stretches) for r in recs) <= len(recs):
            continue
        entry["disturbed"] = True
        flagged.append(entry)
    return flagged


def disturbed_throughout(block: dict | None, rated: dict | None) -> tuple[float, float] | None:
    """(the L1 sentinel's best as a share of the rated L1 read+write rate, that rate) when the share is below
    ``THROUGHOUT_SHARE``: no calm reading in the whole run to hold the others against, so the relative rule
    (``ert.records.weather``) cannot see it; None otherwise, or where the run has no such rate.

    ``rated``: the run's rated ceilings at its own thread count (``ert.analysis.rated.scaled_rated``)."""
    best = ((block or {}).get("levels") or {}).get("L1", {}).get("best_gbytes_per_s")
    entry = ((rated or {}).get("memory") or {}).get(("L1", "rw")) or {}
    value = entry.get("gbytes_per_s")
    # Oversubscribed threads take turns on the cores: a low sentinel is that, said in its own warning.
    if not best or not isinstance(value, (int, float)) or value <= 0 or entry.get("oversubscribed"):
        return None
    return (best / value, value) if best < THROUGHOUT_SHARE * value else None


def below_earlier(block: dict | None, threshold: float) -> dict[str, tuple[float, float]]:
    """level -> (its best in this run as a share of its best in earlier runs on this machine, that best), for the
    levels whose whole run read below it by more than the noise threshold: disturbed from start to end, as far
    as the earlier runs show (``ert.measure.history``)."""
    out = {}
    for level, entry in ((block or {}).get("levels") or {}).items():
        earlier, best = entry.get("earlier_best_gbytes_per_s"), entry.get("best_gbytes_per_s")
        if earlier and best and is_disturbed(best / earlier, threshold):
            out[level] = (best / earlier, earlier)
    return out


def flag_below_earlier(entries: list[dict], low: dict[str, tuple[float, float]]) -> list[dict]:
    """Set ``disturbed: true`` on the memory levels whose sentinel read below its earlier runs' best all run (every
    memory level where the L1's did: a co-tenant taking the core's time slows them all); the entries flagged."""
    flagged = [e for e in entries if "level" in e and e.get("kind") is None and ("L1" in low or e["level"] in low)
               and not near_rated(e)]
    for entry in flagged:
        entry["disturbed"] = True
    return flagged


def earlier_text(low: dict[str, tuple[float, float]]) -> str:
    """``the L2 sentinel never read above 0.88 of its best in earlier runs here (451 GB/s)``, for each level."""
    parts = [f"the {level} sentinel never read above {share:.2f} of its best in earlier runs here ({best:.4g} GB/s)"
             for level, (share, best) in sorted(low.items())]
    return "; ".join(parts)


def flag_throughout(entries: list[dict]) -> list[dict]:
    """Set ``disturbed: true`` on every memory level a host disturbed throughout measured (its links and network
    levels are not the cores'), and on every compute peak below ``THROUGHOUT_SHARE`` of its rated value; the
    entries flagged."""
    def slowed(entry: dict) -> bool:
        if near_rated(entry):
            return False
        if "level" in entry:
            return entry.get("kind") is None
        return ((entry.get("rated") or {}).get("ratio") or 1.0) < THROUGHOUT_SHARE

    flagged = [entry for entry in entries if slowed(entry)]
    for entry in flagged:
        entry["disturbed"] = True
    return flagged


def throughout_warning(share: float, rated: float, flagged: Sequence[dict]) -> str:
    """The one "act on it" warning of a run disturbed from its start to its end."""
    return warn(WARNING_CODE, f"the host was disturbed throughout: the L1 sentinel never read above {share:.2f} of "
                              f"the rated L1 read+write rate ({rated:.4g} GB/s) in the whole run, so no calm "
                              f"reading shows how far; {len(flagged)} ceilings flagged as measured while "
                              f"disturbed: measure again when the host is calm")


def _roof_points(recs: list[dict], regimes) -> list[dict]:
    """The points of ``recs`` inside the working sets of the fastest regime (all of them without regimes)."""
    if not regimes:
        return recs
    lo, hi = max(regimes, key=lambda r: r["gbytes_per_s"])["wss_bytes"]
    return [r for r in recs if lo <= r.get("wss_bytes", -1) <= hi] or recs


def _name(entry: dict) -> str:
    if "level" in entry:
        return f"{curve_name(entry['precision'], entry['access'])} {entry['level']}"
    return f"{entry['precision']} {'FMA' if entry.get('fma') else 'no-FMA'} peak"


def _seconds(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def weather_warning(block: dict | None, stretches: Sequence[Stretch], flagged: Sequence[dict],
                    low: dict[str, tuple[float, float]] | None = None,
                    low_memory: Sequence[tuple[dict, float, float]] = ()) -> str | None:
    """The one "act on it" warning of a disturbed run, or None when the host was calm enough.  ``low``: the levels
    whose whole run read below their earlier runs' best (``below_earlier``); ``low_memory``: the memory roofs
    below theirs (``memory_below_earlier``)."""
    if block is None or not (stretches or low or low_memory):
        return None
    total, disturbed = block["seconds"], block["disturbed_seconds"]
    readings = sum(len(s.sentinels) for s in stretches)
    notable = total > 0 and disturbed >= NOTABLE_SHARE * total and readings >= MIN_SENTINELS
    if not (flagged or low or low_memory or notable):
        return None
    parts = []
    if stretches:
        lowest = min(stretches, key=lambda s: s.low)
        named = ", ".join(f"{s['start_s']:.1f}-{s['end_s']:.1f} s" for s in block["stretches"][:NAMED_STRETCHES])
        more = len(block["stretches"]) - NAMED_STRETCHES
        parts.append(f"the host was disturbed for {_seconds(disturbed)} of {_seconds(total)} s ({named}"
                     + (f" and {more} more" if more > 0 else "")
                     + f"; {lowest.low_level} sentinel down to {lowest.low:.2f} of its best): "
                     f"{block['points']['measured_again']} points measured again"
                     + (f", {block['points']['suspect']} left suspect" if block["points"]["suspect"] else ""))
    if low:
        parts.append(("and" if parts else "the host was disturbed") + f" throughout, as earlier runs here show: "
                     + earlier_text(low))
    if low_memory:
        parts.append(("and its memory was busy" if parts else "the host's memory was busy")
                     + " (other tenants' streams, which no sentinel reads): " + memory_text(low_memory))
    text = "; ".join(parts)
    if flagged:
        text += f"; {', '.join(_name(e) for e in flagged)} {'was' if len(flagged) == 1 else 'were'} measured " \
                f"while disturbed: what other work left, not the machine's ceiling{'s' * (len(flagged) > 1)}; " \
                f"measure again when the host is quiet"
    return warn(WARNING_CODE, text)
