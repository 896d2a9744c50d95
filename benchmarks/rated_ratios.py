#!/usr/bin/env python3
"""Measured / rated for every ceiling of a bare run, at 1 thread and at all threads: prints ratios.

Runs the installed ``ert-run`` with the packaged default config and
``--threads 1,N`` (N = the cores this process may use), then prints, per thread
count, each ceiling beside its rated value (what the cores can physically do,
``ert.hardware.cpu``) and the ratio, plus the 1 -> N scaling of every
ceiling.  The targets of issue 11: FMA and no-FMA peaks >= 0.90 x rated, L1
read+write and read-only >= 0.85 x rated, L1 and peaks scaling >= 1.9x from
1 to 2 threads.  A benchmark, not a test: nothing fails on a low ratio; the exit
status is non-zero only if the run itself failed.

Usage:  python benchmarks/rated_ratios.py [--rounds N] [--config FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = {"compute": 0.90, "L1": 0.85}


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _ert_run() -> str:
    beside = Path(sys.executable).parent / "ert-run"
    return str(beside) if beside.exists() else "ert-run"


def one_round(config: str | None, out: Path, threads: str) -> tuple[dict, float]:
    cmd = [_ert_run()] + ([config] if config else []) + ["--threads", threads, "--out", str(out), "-q"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"rated_ratios: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads((out / "ceilings.json").read_text()), wall


def _name(kind: str, e: dict) -> str:
    if kind == "compute":
        if e.get("mix"):  # schema 1.4: configs/mixes-cpu.yaml
            return f"{e['precision']} {e['mix']} mix peak"
        if e.get("unit") == "GIOP/s":  # schema 1.3/1.4 integer roofs: configs/integer-cpu.yaml
            return f"{e['precision']} {'add' if e.get('op') == 'add' else 'multiply-add'} peak"
        return f"{e['precision']} {'FMA' if e['fma'] else 'no-FMA'} peak"
    return f"{e.get('precision', '')} {e.get('access', '')} {e['level']}"


def ratios(doc: dict) -> dict[int, dict[str, tuple[float, float | None, float | None]]]:
    """{threads: {ceiling: (measured, rated, ratio)}} over the run's thread counts."""
    counts = doc.get("scaling", {}).get("by_threads") or [
        {"threads_per_rank": doc["metadata"]["threads_per_rank"], "ceilings": doc["ceilings"]}]
    out = {}
    for entry in counts:
        rows = {}
        for kind, key in (("compute", "gflops_per_s"), ("memory", "gbytes_per_s")):
            for e in entry["ceilings"][kind]:
                rated = e.get("rated") or {}
                rows[_name(kind, e)] = (e[key], rated.get(key), rated.get("ratio"))
        out[entry["threads_per_rank"]] = rows
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=1, help="bare runs (medians over them are printed)")
    p.add_argument("--config", help="a config instead of the packaged default")
    p.add_argument("--keep", type=Path, help="keep the run directories here")
    args = p.parse_args(argv)
    cores = _cores()
    threads = "1" if cores == 1 else f"1,{cores}"
    base = args.keep or Path(tempfile.mkdtemp(prefix="ert-rated-"))
    rounds, walls, cpu = [], [], ""
    for r in range(args.rounds):
        doc, wall = one_round(args.config, base / f"round{r}", threads)
        rounds.append(ratios(doc))
        walls.append(wall)
        rated = doc["metadata"]["backend_info"].get("rated", {})
        cpu = (f"{doc['metadata'].get('cpu_model', '')} | {rated.get('microarchitecture') or 'not in the table'} "
               f"| clock {rated.get('clock_ghz')} GHz ({(rated.get('clock') or {}).get('how', '')})")
    print(f"CPU: {cpu}")
    print(f"wall time of ert-run --threads {threads}: " + ", ".join(f"{w:.1f} s" for w in walls))
    counts = sorted(rounds[0])
    for t in counts:
        print(f"\n{t} thread(s): measured / rated (median of {len(rounds)} round(s))")
        print(f"  {'ceiling':28} {'measured':>9} {'rated':>9} {'ratio':>6}  target")
        for name in rounds[0][t]:
            vals = [rd[t][name] for rd in rounds if name in rd.get(t, {})]
            measured = statistics.median(v[0] for v in vals)
            rated = vals[0][1]
            ratio = statistics.median(v[2] for v in vals) if rated else None
            level = "compute" if "peak" in name else ("L1" if name.endswith(" L1") else None)
            target = TARGET.get(level)
            mark = "" if target is None or ratio is None else ("ok" if ratio >= target else f"BELOW {target:.2f}")
            print(f"  {name:28} {measured:9.4g} {rated if rated else '-':>9} "
                  f"{(f'{ratio:.3f}' if ratio is not None else '-'):>6}  {mark}")
    if len(counts) > 1:
        lo, hi = counts[0], counts[-1]
        print(f"\nscaling {lo} -> {hi} threads (median of rounds; target >= 1.9 for L1 and peaks)")
        for name in rounds[0][hi]:
            pairs = [rd[hi][name][0] / rd[lo][name][0] for rd in rounds if name in rd[lo] and name in rd[hi]]
            if pairs:
                print(f"  {name:28} {statistics.median(pairs):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
