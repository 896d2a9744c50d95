"""Is ert's L2/L3 roof an upper bound?  An independent fixed-size C measurement against it.

    .venv/bin/python benchmarks/level_check.py RUN_DIR_OR_CEILINGS [--rounds 3]

Runs benchmarks/ert_c_kernel.c's read-only fp64 kernel (a sum per trial, 8
vector accumulators, built as numba_vs_c.py builds it) on the same number of
threads, bound as ert binds them (OMP_PROC_BIND=close, OMP_PLACES=cores), at
1/4, 1/2 and 3/4 of L2 per thread and of L3 per thread (this host's caches,
ert.hardware.hwinfo), and prints C / ert's read-only fp64 roof of that level.  Target:
no ratio above 1.05 (the roof is an upper bound of what a kernel sustains in
the level).  Each size is run --rounds times, rounds interleaved, and the
fastest is compared (contention on a shared host only slows a run down).
Prints numbers; it is not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from numba_vs_c import BASE_CFLAGS, BUILD, FMA_CFLAGS, SOURCE  # noqa: E402  (same build as the yardstick)

FRACTIONS = (0.25, 0.5, 0.75)
TARGET = 1.05


def build(cc: str) -> Path:
    BUILD.mkdir(exist_ok=True)
    exe = BUILD / "ert_c_kernel_level_check"
    cmd = [cc, *BASE_CFLAGS, *FMA_CFLAGS, "-o", str(exe), str(SOURCE), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: build failed: {' '.join(cmd)}\n{r.stderr}")
    return exe


def run_c(exe: Path, *, threads: int, wss_bytes: int, min_seconds: float, flops: int = 0) -> float:
    """GB/s of the C kernel (FLOPS 0: read-only sum; 1: read+write add), fp64, checked."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    cmd = [str(exe), "fp64", str(flops), str(threads), str(wss_bytes), repr(min_seconds), "5"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    if r.returncode != 0 or not out.get("check_ok"):
        sys.exit(f"error: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip() or out}")
    return float(out["gbytes_per_s"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ceilings", help="a run directory or its ceilings.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=0.05)
    p.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    args = p.parse_args()

    from ert.hardware import hwinfo
    from ert.records.ceilings_io import load_ceilings

    path = Path(args.ceilings)
    doc = load_ceilings(path / "ceilings.json" if path.is_dir() else path)
    meta = doc["metadata"]
    threads = int(meta["threads_per_rank"]) * int(meta["ranks"])
    roofs = {m["level"]: m["gbytes_per_s"] for m in doc["ceilings"]["memory"]
             if m.get("precision") == "fp64" and m.get("access") == "ro" and "kind" not in m}
    caches = {c.level: c for c in hwinfo.read_cpu_caches() if c.kind != "Instruction"}
    exe = build(args.cc)
    sizes = []
    for level in (2, 3):
        if level not in caches or f"L{level}" not in roofs:
            print(f"L{level}: no cache hint or no read-only fp64 roof in {path}; skipped")
            continue
        per_thread = hwinfo.aggregate_capacity_bytes(caches[level], threads) / threads
        sizes += [(f"L{level}", f, int(per_thread * f * threads) // 4096 * 4096) for f in FRACTIONS]
    best: dict[tuple, float] = {}
    for _ in range(args.rounds):
        for key in sizes:
            rate = run_c(exe, threads=threads, wss_bytes=key[2], min_seconds=args.min_seconds)
            best[key] = max(best.get(key, 0.0), rate)
    print(f"{hwinfo.cpu_model()}, {threads} threads; ert roofs from {path}")
    print(f"{'level':6} {'of cache':>8} {'working set':>12} {'C GB/s':>8} {'ert roof':>9} {'C/roof':>7}")
    worst = 0.0
    for key in sizes:
        level, fraction, wss = key
        ratio = best[key] / roofs[level]
        worst = max(worst, ratio)
        print(f"{level:6} {fraction:8.2f} {wss / 2**20:10.2f} MiB {best[key]:8.1f} {roofs[level]:9.1f} {ratio:7.3f}")
    if sizes:
        verdict = "ok" if worst <= TARGET else "ABOVE the roof: the roof is not an upper bound"
        print(f"largest C/roof {worst:.3f} (target <= {TARGET}): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
