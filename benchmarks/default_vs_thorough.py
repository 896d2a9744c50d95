"""Default (adaptive) run versus the thorough dense sweep: every ceiling's ratio and both wall times.

Runs the two configs alternately (default, thorough, default, ...), ROUNDS
times each, through the installed `ert-run`, so a slow spell of a shared
machine hits both alike.  Prints, per ceiling, the value of each run and the
median of the per-round ratios default/thorough, then the wall times.

    .venv/bin/python benchmarks/default_vs_thorough.py [--rounds 3] [--thorough CONFIG] [--out DIR]

The thorough config takes tens of minutes per run on a 2-core machine; a
lighter dense reference (e.g. the default config with `sweep: dense`) can be
given with --thorough for a quick check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ert_run(config: Path | None, out: Path) -> float:
    """One `ert-run` to completion; its wall seconds as seen from outside (start-up included)."""
    cmd = [str(Path(sys.executable).parent / "ert-run"), *( [str(config)] if config else []), "--out", str(out), "-q"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return wall


def ceilings(run_dir: Path) -> dict[str, float]:
    """Every ceiling of a run by a readable name."""
    doc = json.loads((run_dir / "ceilings.json").read_text())
    out = {}
    for m in doc["ceilings"]["memory"]:
        access = {"rw": "read+write", "ro": "read-only"}[m["access"]]
        out[f"{m['precision']} {access} {m['level']} GB/s"] = m["gbytes_per_s"]
    for c in doc["ceilings"]["compute"]:
        out[f"{c['precision']} {'FMA' if c['fma'] else 'no-FMA'} peak GFLOP/s"] = c["gflops_per_s"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--default", type=Path, default=None, help="default: the packaged default.yaml")
    parser.add_argument("--thorough", type=Path, default=REPO / "configs" / "thorough-cpu.yaml")
    parser.add_argument("--out", type=Path, default=Path("results") / time.strftime("bench-%Y%m%d-%H%M%S"))
    args = parser.parse_args()

    runs: dict[str, list[dict[str, float]]] = {"default": [], "thorough": []}
    walls: dict[str, list[float]] = {"default": [], "thorough": []}
    for k in range(args.rounds):
        for name, config in (("default", args.default), ("thorough", args.thorough)):
            run_dir = args.out / f"{name}-{k + 1}"
            wall = ert_run(config, run_dir)
            walls[name].append(wall)
            runs[name].append(ceilings(run_dir))
            print(f"round {k + 1}: {name} {wall:.1f} s -> {run_dir}", file=sys.stderr, flush=True)

    names = list(dict.fromkeys(n for r in runs["thorough"] + runs["default"] for n in r))
    width = max(len(n) for n in names)
    print(f"{'ceiling':{width}}  {'default (each run)':>26}  {'thorough (each run)':>26}  ratio (median, range)")
    for n in names:
        d = [r.get(n) for r in runs["default"]]
        t = [r.get(n) for r in runs["thorough"]]
        ratios = [a / b for a, b in zip(d, t) if a and b]
        cells = lambda xs: " ".join(f"{x:8.4g}" if x else "       -" for x in xs)
        ratio = (f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios
                 else "missing in one config")
        print(f"{n:{width}}  {cells(d):>26}  {cells(t):>26}  {ratio}")
    for name in ("default", "thorough"):
        w = walls[name]
        print(f"wall {name}: median {statistics.median(w):.1f} s (each: {', '.join(f'{x:.1f}' for x in w)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
