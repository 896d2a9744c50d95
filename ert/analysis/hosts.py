"""Per-host ceilings of a run on two or more hosts: each host's levels and peaks from its own ranks' times.

The aggregate (``ert.analysis.ceilings``) is every rank's bytes over the
slowest rank's time, ERT's rule, so one slow host lowers every roof and the
aggregate cannot say which.  A point record of a run on 2+ hosts keeps each
host's seconds of every timed region (``host_seconds``, written by
``ert.records.rawio.point_record``); this module re-reads those, from raw.jsonl alone.

Same analysis, per host:

* a host's rate at a point is its own ranks' share of the work over its own
  median seconds, so it is the aggregate rate x (host's ranks / ranks) x
  (aggregate median / host's median): no kernel arithmetic is redone;
* a memory level of a host is the plateau statistic
  (``ert.analysis.plateaus.level_over_range``, the densest cluster's median)
  over the aggregate level's own points: every host gets the same levels, so
  hosts compare level by level (a host with its own plateau fit could name
  levels the others lack);
* a compute peak of a host is its highest rate over the aggregate's candidate
  points of that kernel (``compute_ceilings``' rule).

Each host's value is set beside the median of the hosts (``ratio_to_median``);
a host more than ``slow_host_threshold`` (config, default 0.10) below the
median on any ceiling, by more than the scatter of the values (NOISE_SIGMAS),
is named in a ``slow-host`` warning, with the number of the ceiling's points
at which it set the aggregate's time (``limiting_hosts`` on every aggregate
ceiling); one below it only within the scatter is listed in a ``noisy-level``
line instead.  Cost: one pass over the points, then one numpy
row per (ceiling, host): linear in hosts x points.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter

import numpy as np

from ert.analysis.plateaus import level_over_range
from ert.analysis.rated import compute_name
from ert.records.rawio import best_launches
from ert.spec import SLOW_HOST_THRESHOLD, curve_name, is_integer, rates
from ert.records.warning_codes import warn

DEFAULT_SLOW_HOST_THRESHOLD = SLOW_HOST_THRESHOLD
# A host is named slow on a ceiling only when its shortfall is beyond this many sigmas of the scatter of its
# value and of a typical host's (on a busy machine, 3-point levels of two healthy hosts differ by 30 % and more).
NOISE_SIGMAS = 2.0
_SPREAD_TO_SIGMA = 2.563  # p90 - p10 of a Gaussian, in sigmas (ert.analysis.levels)


def _natural(name: str) -> list:
    """node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def memory_name(entry: dict) -> str:
    """``DRAM fp64 read+write``: a memory ceiling as the per-host warning names it."""
    return f"{entry['level']} {curve_name(entry.get('precision', '?'), entry.get('access', '?'))}"


def _host_ranks(meta: dict, hosts: list[str]) -> dict[str, list[int]]:
    """Each host's ranks, from the placement every rank reported (``metadata.placement``)."""
    ranks: dict[str, list[int]] = {h: [] for h in hosts}
    for i, place in enumerate(meta.get("placement") or []):
        if isinstance(place, dict) and place.get("host") in ranks:
            ranks[place["host"]].append(int(place.get("rank", i)))
    return {h: sorted(r) for h, r in ranks.items()}


class _Table:
    """Every used point's per-host factor: host rate = aggregate rate x factor[point, host]."""

    def __init__(self, points: list[dict], hosts: list[str], shares: np.ndarray):
        self.row = {}
        self.factor = np.empty((len(points), len(hosts)))
        self.median = np.empty((len(points), len(hosts)))
        self.lo = np.empty_like(self.median)
        self.hi = np.empty_like(self.median)
        self.limiting: list[str] = []
        for i, rec in enumerate(points):
            by_host = rec["host_seconds"]
            samples = np.array([by_host.get(h, [np.nan]) for h in hosts], dtype=float)
            med = np.median(samples, axis=1)
            self.median[i], self.lo[i], self.hi[i] = med, samples.min(axis=1), samples.max(axis=1)
            self.factor[i] = shares * rec["seconds"]["median"] / med
            self.limiting.append(rec.get("limiting_host") or hosts[int(np.nanargmax(med))])
            self.row[rec["id"]] = i
        self.points = points


def _usable(points: list[dict]) -> list[dict]:
    return [r for r in best_launches(points) if r.get("valid") and isinstance(r.get("host_seconds"), dict)
            and len(r["host_seconds"]) > 1]


def _memory(table: _Table, entry: dict, hosts: list[str]) -> list[dict] | None:
    """Each host's value of one aggregate memory level, over that level's points; None: no points."""
    rows = [table.row[p] for p in entry.get("evidence", {}).get("point_ids", []) if p in table.row]
    if not rows:
        return None
    recs = [table.points[i] for i in rows]
    wss = [r["wss_bytes"] for r in recs]
    noisy = [bool(r.get("noisy")) for r in recs]
    agg = np.array([rates(r).gbytes_per_s for r in recs])
    per_host = agg[:, None] * table.factor[rows]
    out = []
    for j in range(len(hosts)):
        level = level_over_range(wss, per_host[:, j], (min(wss), max(wss)), noisy=noisy,
                                 min_points=min(3, len(rows)))
        if level is None:
            out.append(None)
            continue
        out.append({"level": entry["level"], "gbytes_per_s": round(level.gbytes_per_s, 4),
                    "spread": round(level.spread, 4), "wss_bytes": [int(x) for x in level.wss_bytes],
                    "n_points": level.n_points, "precision": entry.get("precision"), "access": entry.get("access"),
                    "flops_per_element": entry.get("flops_per_element"), "noisy_points": level.noisy_points,
                    "basis": f"this host's ranks over the aggregate {entry['level']} level's points",
                    "evidence": {"point_ids": [recs[i]["id"] for i in level.indices]}})
    entry["limiting_hosts"] = dict(Counter(table.limiting[i] for i in rows).most_common())
    return out


def _compute_key(spec: dict) -> tuple:
    return (spec["precision"], bool(spec["fma"]), spec.get("op", "madd"), spec.get("mix", ""),
            spec.get("pipe", "vector"), spec.get("instruction", ""))


def _entry_key(entry: dict) -> tuple:
    return (entry["precision"], bool(entry["fma"]), entry.get("op", "madd"), entry.get("mix", ""),
            entry.get("pipe", "vector"), entry.get("instruction", "") if entry.get("pipe") == "tensor" else "")


def _compute(table: _Table, entry: dict, hosts: list[str]) -> list[dict] | None:
    """Each host's peak for one aggregate compute ceiling: its highest rate over that kernel's points."""
    key = _entry_key(entry)
    rows = [i for i, r in enumerate(table.points)
            if r["spec"]["access"] == "rw" and r["spec"]["flops_per_element"] >= 2 and _compute_key(r["spec"]) == key]
    if not rows:
        return None
    agg = np.array([rates(table.points[i]).gflops_per_s for i in rows])
    per_host = agg[:, None] * table.factor[rows]
    best = np.nanargmax(np.nan_to_num(per_host, nan=-1.0), axis=0)
    out = []
    for j in range(len(hosts)):
        i = rows[int(best[j])]
        rec = table.points[i]
        med, lo, hi = table.median[i, j], table.lo[i, j], table.hi[i, j]
        value = round(float(per_host[best[j], j]), 4)
        host_entry = {"precision": entry["precision"], "fma": entry["fma"], "gflops_per_s": value,
                      "spread": round(float((hi - lo) / med), 4),
                      "flops_per_element": rec["spec"]["flops_per_element"], "wss_bytes": rec["wss_bytes"],
                      "noisy": bool(rec.get("noisy")),
                      "evidence": {"point_id": rec["id"], "trials": rec["trials"],
                                   "seconds": {"min": float(lo), "median": float(med), "max": float(hi)}}}
        for k in ("op", "mix", "mix_ratio", "unit", "pipe", "instruction", "input_type", "accumulate", "mma_shape"):
            if k in entry:
                host_entry[k] = entry[k]
        if is_integer(entry["precision"]) or entry.get("unit") == "GIOP/s":
            host_entry["giops_per_s"] = value
        out.append(host_entry)
    peak_id = entry.get("evidence", {}).get("point_id")
    if peak_id in table.row:
        entry["limiting_hosts"] = {table.limiting[table.row[peak_id]]: 1}
    return out


def host_ceilings(points: list[dict], memory: list[dict], compute: list[dict], meta: dict) -> tuple[list[dict], list[str]]:
    """(the ``hosts`` section, its warnings) for the run's points; ([], []) for a run on one host.

    ``points`` are the records the aggregate ``memory`` and ``compute``
    ceilings were drawn from (one thread count); every aggregate ceiling
    that has per-host values gains ``limiting_hosts`` ({host: points at which
    it set the aggregate's time}).
    """
    used = _usable(points)
    if not used:
        return [], []
    hosts = sorted({h for r in used for h in r["host_seconds"]}, key=_natural)
    if len(hosts) < 2:
        return [], []
    ranks = _host_ranks(meta, hosts)
    per_host_count = meta.get("ranks_per_host") or {}
    total = int(meta.get("ranks") or used[0].get("ranks") or len(hosts))
    counts = [len(ranks[h]) or int(per_host_count.get(h, 0)) or total / len(hosts) for h in hosts]
    table = _Table(used, hosts, np.array(counts, dtype=float) / total)

    sections = [{"host": h, "ranks": ranks[h], "ceilings": {"memory": [], "compute": []}} for h in hosts]
    # (name, aggregate entry, each host's entry) of every ceiling the hosts share.
    compared: list[tuple[str, dict, list]] = []
    for entry in memory:
        if entry.get("kind") is None:
            values = _memory(table, entry, hosts)
            if values:
                compared.append((memory_name(entry), entry, values))
                for sec, v in zip(sections, values):
                    if v is not None:
                        sec["ceilings"]["memory"].append(v)
    for entry in compute:
        values = _compute(table, entry, hosts)
        if values:
            compared.append((f"{compute_name(entry)} peak", entry, values))
            for sec, v in zip(sections, values):
                sec["ceilings"]["compute"].append(v)

    threshold = float((meta.get("config") or {}).get("slow_host_threshold", DEFAULT_SLOW_HOST_THRESHOLD))
    below: dict[int, list[tuple[float, str, dict]]] = {}
    within: list[tuple[str, str, float, float]] = []  # below the threshold, but inside the scatter
    for name, entry, values in compared:
        field = "gbytes_per_s" if "gbytes_per_s" in entry else "gflops_per_s"
        present = [v for v in values if v is not None]
        median = statistics.median(v[field] for v in present) if present else 0.0
        typical_spread = statistics.median(v["spread"] for v in present) if present else 0.0
        for j, v in enumerate(values):
            if v is None or median <= 0:
                continue
            ratio = v[field] / median
            v["ratio_to_median"] = round(ratio, 4)
            if ratio >= 1.0 - threshold:
                continue
            # Beyond the noise: the shortfall must exceed NOISE_SIGMAS of the host's and a typical host's
            # scatter together (a spread is p90 - p10, or max - min: about 2.56 sigmas).
            sigma = math.hypot(v["spread"], typical_spread) / _SPREAD_TO_SIGMA
            if ratio <= 0 or math.log(1.0 / ratio) > NOISE_SIGMAS * sigma:
                below.setdefault(j, []).append((ratio, name, entry))
            else:
                within.append((hosts[j], name, ratio, v["spread"]))
    warnings = []
    for j, found in sorted(below.items()):
        found.sort(key=lambda t: round(t[0], 3))  # stable: ties keep the report's order
        ratio, name, entry = found[0]
        host = hosts[j]
        limits = entry.get("limiting_hosts", {}).get(host, 0)
        points_of = entry.get("n_points", 1)
        text = (f"{host}: {name} {ratio:.2f} of the median of {len(hosts)} hosts "
                f"(limits the aggregate at {limits} of {points_of} point{'s' if points_of != 1 else ''})")
        if len(found) > 1:
            more = ", ".join(f"{n} {r:.2f}" for r, n, _ in found[1:4])
            text += f"; also {len(found) - 1} more ceiling(s) below {1 - threshold:.2f} of the median: {more}"
            text += ", ..." if len(found) > 4 else ""
        warnings.append(warn("slow-host", text))
        sections[j]["slow"] = {"ceiling": name, "ratio_to_median": round(ratio, 4),
                               "ceilings_below": len(found)}
    if within:
        listed = "; ".join(f"{h} {n} {r:.2f} (spread {sp:.0%})" for h, n, r, sp in within[:4])
        warnings.append(warn("noisy-level", f"{len(within)} host ceiling(s) below {1 - threshold:.2f} of the median "
                             f"of {len(hosts)} hosts only within their scatter, no host named slow for them: "
                             f"{listed}" + ("; ..." if len(within) > 4 else "")))
    return sections, warnings
