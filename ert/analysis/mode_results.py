"""Ceilings per thread count (thread scaling), sustained versus burst values, and a run's planned size."""

from __future__ import annotations

from collections import defaultdict

from ert.spec import KernelSpec
from ert.records.warning_codes import codes_of, warn

# A hold whose last tenth runs this much slower than its first tenth throttled
# (or was disturbed): say so.
THROTTLE_DROP = 0.05


def by_thread_count(points: list[dict]) -> dict[int, list[dict]]:
    """Point records grouped by their threads per rank (records of a run without the key: one group)."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for rec in points:
        groups[int(rec.get("threads_per_rank", 0))].append(rec)
    return dict(groups)


def planned_points(header: dict, ends: list[dict], measured: int) -> tuple[int, bool]:
    """(points planned, whether every sweep finished) of a run.

    A dense plan's size is in the header.  An adaptive sweep knows its size
    only at its end, which its end record carries (one per thread count); a
    thread count without such a record was cut short.
    """
    planned = header.get("planned_points", measured)
    if planned is not None:
        return int(planned), True
    counts = header.get("thread_counts") or [header["metadata"]["threads_per_rank"]]
    last: dict[int, int] = {}
    for end in ends:
        if end.get("complete") and isinstance(end.get("planned_points"), int):  # else: that sweep is not known done
            last[int(end.get("threads_per_rank", counts[0]))] = int(end["planned_points"])
    complete = all(c in last for c in counts)
    return max(measured, sum(last.values())), complete


def scaling_section(ceilings_by_count: dict[int, tuple[list, list, list]], *, ranks: int) -> dict:
    """The document's ``scaling``: each thread count's ceilings and warnings, ascending."""
    return {"by_threads": [
        {"threads_per_rank": t, "ranks": ranks, "ceilings": {"memory": memory, "compute": compute},
         "warnings": warnings, "warning_codes": codes_of(warnings)}
        for t, (memory, compute, warnings) in sorted(ceilings_by_count.items())]}


def _rate(spec: KernelSpec, *, elements: int, trials: int, seconds: float, compute: bool) -> float:
    kw = {"elements": elements, "trials": trials, "seconds": seconds}
    return spec.gflops_per_s(**kw) if compute else spec.gbytes_per_s(**kw)


def _summary(rec: dict, *, compute: bool) -> dict:
    """Rates of a hold: over all of it, its first and last tenth, its slowest region."""
    spec = KernelSpec.from_dict(rec["spec"])
    seconds = rec["region_seconds"]
    trials, elements = rec["trials_per_region"], rec["elements"]
    tenth = max(1, len(seconds) // 10)

    def rate(regions: list[float]) -> float:
        return _rate(spec, elements=elements, trials=trials * len(regions), seconds=sum(regions), compute=compute)

    unit = "gflops_per_s" if compute else "gbytes_per_s"
    return {
        unit: round(rate(seconds), 4),
        f"first_{unit}": round(rate(seconds[:tenth]), 4),
        f"last_{unit}": round(rate(seconds[-tenth:]), 4),
        f"min_region_{unit}": round(rate([max(seconds)]), 4),
        "hold_seconds": round(rec["hold_seconds"], 3),
        "regions": len(seconds),
        "point_id": rec["point_id"],
    }


def attach_sustained(memory: list[dict], compute: list[dict], sustained: list[dict]) -> list[str]:
    """Put each hold's rates beside the burst ceiling it repeats (key ``sustained``); return warnings."""
    warnings = []
    for rec in sustained:
        if not rec.get("valid"):
            warnings.append(warn("output-check-failed", f"sustained run of {rec['point_id']} failed its output "
                                 f"check and is not used: {rec.get('check', '')}"))
            continue
        is_compute = rec["target"] == "compute"
        entries = compute if is_compute else memory
        if is_compute:
            match = [e for e in entries if rec["point_id"] == e.get("evidence", {}).get("point_id")]
        else:
            # A memory hold repeats its kernel at a working set of one level: it sits beside the level whose
            # working sets hold it (the held point need not be among the level's confirmed evidence).
            spec = rec["spec"]
            match = [e for e in entries if e.get("precision") == spec.get("precision")
                     and e.get("access") == spec.get("access") and len(e.get("wss_bytes") or []) == 2
                     and e["wss_bytes"][0] <= rec["wss_bytes"] <= e["wss_bytes"][1]]
        if not match:
            continue
        entry = match[0]
        unit = "gflops_per_s" if is_compute else "gbytes_per_s"
        summary = _summary(rec, compute=is_compute)
        summary["ratio_to_burst"] = round(summary[unit] / entry[unit], 4)
        entry["sustained"] = summary
        name = (f"{entry['precision']} {'FMA' if entry['fma'] else 'no-FMA'} peak" if is_compute
                else f"{entry.get('precision', '')} {entry.get('access', '')} {entry['level']}".strip())
        if summary[f"last_{unit}"] < (1 - THROTTLE_DROP) * summary[f"first_{unit}"]:
            warnings.append(warn("throttled",
                            f"{name}: fell from {summary[f'first_{unit}']:.4g} to {summary[f'last_{unit}']:.4g} "
                            f"{'GFLOP/s' if is_compute else 'GB/s'} over a {summary['hold_seconds']:.0f} s hold: "
                            f"throttling, or other work on the machine"))
    return warnings
