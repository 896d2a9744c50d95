"""Each cache roof against the best clean point its run measured inside the level's window (issue 30's check).

    .venv/bin/python benchmarks/roof_vs_window.py RUN_DIR [RUN_DIR ...]

For every run directory (or raw.jsonl) it rebuilds the ceilings as `ert
analyze` does and prints, per bandwidth curve (precision x access) and
level, the roof, the median rate of the fastest clean point inside the
level's window (per thread: L1 up to its capacity, each later cache from 2 x
the cache before it to its own, the memory from 2 x the last cache on), and
their ratio; a clean point is one not flagged noisy, after the run's own
re-measurements (a point they did not reproduce is noisy, one a clean
re-measurement reproduced is clean).  Issue 30 asks every cache roof to be at
least 0.95 x that point.  With several runs it also prints each roof's
largest / smallest over the runs (issue 30: within 1.10), and each run's
sweep wall time.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ert.analysis.ceilings import build  # noqa: E402
from ert.analysis.memory import caches_by_access  # noqa: E402
from ert.analysis.roof_confirm import mark_not_reproduced, noise_threshold  # noqa: E402
from ert.analysis.cache_match import cache_hints  # noqa: E402
from ert.measure.window_search import level_windows  # noqa: E402
from ert.records.rawio import read_raw  # noqa: E402
from ert.spec import rates  # noqa: E402


def check(run: Path) -> tuple[dict, float]:
    """{(precision, access, level): (roof, best clean window point, its working set)} and the sweep's wall time."""
    raw = read_raw(run)
    doc = build(raw)
    meta = raw.header["metadata"]
    workers = int(meta["threads_per_rank"]) * int(meta["ranks"])
    points, _ = mark_not_reproduced(raw.points, raw.confirms, threshold=noise_threshold(meta))
    cache_list = meta.get("backend_info", {}).get("caches", meta.get("caches_reported", []))
    out = {}
    for entry in doc["ceilings"]["memory"]:
        if "kind" in entry or entry["level"][-1].islower():
            continue
        caches = caches_by_access(cache_list)
        hints = cache_hints(caches.get(entry["access"], caches.get(None, [])), workers)
        windows = level_windows([h.capacity_bytes for h in hints])
        names = [f"L{h.level}" for h in sorted(hints, key=lambda h: h.level)]
        k = names.index(entry["level"]) if entry["level"] in names else len(windows) - 1
        lo, hi = windows[k]
        curve = [p for p in points if p["valid"] and not p["noisy"] and p["spec"]["precision"] == entry["precision"]
                 and p["spec"]["access"] == entry["access"] and p["spec"].get("pipe", "vector") == "vector"
                 and p["spec"]["flops_per_element"] == entry["flops_per_element"] and lo <= p["wss_bytes"] <= hi]
        best = max(curve, key=lambda p: rates(p).gbytes_per_s, default=None)
        out[(entry["precision"], entry["access"], entry["level"])] = (
            entry["gbytes_per_s"], rates(best).gbytes_per_s if best else math.nan,
            best["wss_bytes"] / workers if best else math.nan)
    return out, sum(e.get("wall_seconds", 0.0) for e in raw.ends)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    results = []
    for run in args.runs:
        table, wall = check(run)
        results.append(table)
        print(f"{run}  (sweep wall {wall:.1f} s)")
        print(f"  {'curve':22s} {'level':5s} {'roof':>8s} {'best clean':>10s} {'KiB/thread':>10s} {'ratio':>6s}")
        for (precision, access, level), (roof, best, where) in table.items():
            label = f"{precision} {'read+write' if access == 'rw' else 'read-only'}"
            print(f"  {label:22s} {level:5s} {roof:8.1f} {best:10.1f} {where / 1024:10.0f} {roof / best:6.3f}"
                  + ("" if roof >= 0.95 * best or level not in ("L1", "L2", "L3") else "  < 0.95"))
    if len(results) > 1:
        print("\nroof, largest / smallest over the runs (issue 30: within 1.10 for the caches)")
        for key in results[0]:
            values = [r[key][0] for r in results if key in r]
            precision, access, level = key
            ratio = max(values) / min(values)
            print(f"  {precision} {access} {level:5s} " + " ".join(f"{v:8.1f}" for v in values)
                  + f"  {ratio:5.3f}" + ("  > 1.10" if ratio > 1.10 and level[1:].isdigit() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
