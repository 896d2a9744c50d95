#!/usr/bin/env python3
"""Measure ERT-style bandwidth curves with the C kernel and store them as a raw.jsonl that `ert analyze` reads.

The curves are test data for the level analysis (tests/test_levels_real.py):
bandwidth versus working set measured by another program than ert's own
backend, the way the original ERT measures it: the read+write kernel with 1
FLOP per element, working sets in ascending order from 1 KiB (512 bytes per
thread, where the per-trial loop overhead dominates) to --max-bytes, one
process per working set, trials doubled until a timed region lasts
--min-seconds, --repeats timed regions per point.  Every point is checked
against a host replay by the C program itself.

The kernel is benchmarks/ert_c_kernel.c, built here with
``gcc -O3 -march=native -fopenmp -ffp-contract=fast -fno-loop-unroll-and-jam``:
without the last flag GCC fuses two trials into one pass over the array and
reports up to twice the real L1/L2 bandwidth (see ../shared/MACHINE-NOTES.md).

The output holds one header (with this machine's cache sizes as the OS
reports them, its CPU model and the settings below), one point record per
working set in ert's raw format, and one end record.  Run it under
``flock /tmp/ert-measure.lock`` on a shared machine.

Usage:  python benchmarks/ert_c_curves.py -o tests/data/FILE.jsonl [--precision fp64] [--threads 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from ert.hardware import hwinfo  # noqa: E402
from ert.measure.metadata import caches_reported, now_iso  # noqa: E402
from ert.records.rawio import RAW_VERSION  # noqa: E402
from ert.spec import KernelSpec  # noqa: E402

SOURCE = HERE / "ert_c_kernel.c"
BUILD = HERE / "build"
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast", "-fno-loop-unroll-and-jam"]
GRANULE_BYTES = 512  # the C kernel's smallest block per thread
NOISE_THRESHOLD = 0.10  # a point whose repeats spread more than this is flagged noisy, as in ert


def build(cc: str) -> Path:
    BUILD.mkdir(exist_ok=True)
    exe = BUILD / "ert_c_kernel_curves"
    cmd = [cc, *CFLAGS, "-o", str(exe), str(SOURCE), "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def working_sets(*, min_bytes: int, max_bytes: int, growth: float, threads: int) -> list[int]:
    """Geometric sizes, each rounded down to whole 512-byte blocks per thread, distinct."""
    step = GRANULE_BYTES * threads
    sizes, wss = [], float(min_bytes)
    while wss <= max_bytes * (1 + 1e-9):
        size = max(step, int(wss) // step * step)
        if not sizes or size != sizes[-1]:
            sizes.append(size)
        wss *= growth
    return sizes


def point_record(result: dict, *, spec: KernelSpec, threads: int) -> dict:
    samples = sorted(result["samples"])
    spread = (samples[-1] - samples[0]) / samples[0]
    elements = result["elements_per_thread"] * threads
    return {
        "type": "point",
        "id": f"{spec.key}-w{result['wss_bytes']}",
        "spec": spec.to_dict(),
        "wss_bytes": result["wss_bytes"],
        "elements": elements,
        "trials": result["trials"],
        "seconds": {"min": samples[0], "median": result["median_s"], "max": samples[-1]},
        "samples": result["samples"],
        "spread": round(spread, 6),
        "noisy": spread > NOISE_THRESHOLD,
        "valid": bool(result["check_ok"]),
        "check": "ok" if result["check_ok"] else f"max relative error {result['max_rel_err']}",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True, help="raw.jsonl to write (refused if it exists)")
    p.add_argument("--precision", default="fp64", choices=["fp64", "fp32"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=1 << 10)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--growth", type=float, default=1.2)
    p.add_argument("--min-seconds", type=float, default=0.01)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--note", default="", help="a line on the conditions (quiet, other work running, ...)")
    p.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    args = p.parse_args()

    out = Path(args.output)
    if out.exists():
        print(f"{out}: exists; not overwritten", file=sys.stderr)
        return 2
    cc = shutil.which(args.cc)
    if cc is None:
        print(f"no C compiler {args.cc!r}", file=sys.stderr)
        return 2
    exe = build(cc)
    spec = KernelSpec(args.precision, 1, False, "rw")
    sizes = working_sets(min_bytes=args.min_bytes, max_bytes=args.max_bytes, growth=args.growth,
                         threads=args.threads)
    settings = {"precision": args.precision, "threads": args.threads, "min_bytes": args.min_bytes,
                "max_bytes": args.max_bytes, "growth": args.growth, "min_seconds": args.min_seconds,
                "repeats": args.repeats, "cflags": CFLAGS, "order": "ascending working set (as ERT)"}
    config = {"timing": {"noise_threshold": NOISE_THRESHOLD, "min_seconds": args.min_seconds,
                         "repeats": args.repeats}, "c_kernel": settings}
    config_text = json.dumps(config, sort_keys=True)
    cc_version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    header = {
        "type": "header",
        "raw_version": RAW_VERSION,
        "planned_points": len(sizes),
        "metadata": {
            "tool": "benchmarks/ert_c_curves.py",
            "tool_version": "ert_c_kernel.c",
            "host": socket.gethostname(),
            "cpu_model": hwinfo.cpu_model(),
            "machine": platform.machine(),
            "backend": "c-openmp (benchmarks/ert_c_kernel.c)",
            "caches_reported": caches_reported(),
            "libraries": {"python": platform.python_version(), "cc": cc_version},
            "ranks": 1,
            "threads_per_rank": args.threads,
            "date": now_iso(),
            "config": config,
            "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
            "note": args.note,
        },
    }
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_PROC_BIND="spread", OMP_PLACES="cores")
    started = time.monotonic()
    lines = [header]
    for wss in sizes:
        run = subprocess.run([str(exe), args.precision, "1", str(args.threads), str(wss),
                              str(args.min_seconds), str(args.repeats)], capture_output=True, text=True, env=env)
        if not run.stdout.strip():
            print(f"{wss} bytes: no result: {run.stderr.strip()}", file=sys.stderr)
            return 1
        rec = point_record(json.loads(run.stdout), spec=spec, threads=args.threads)
        lines.append(rec)
        gbs = spec.gbytes_per_s(elements=rec["elements"], trials=rec["trials"], seconds=rec["seconds"]["median"])
        print(f"{wss:>12d} B  {gbs:9.1f} GB/s  spread {rec['spread']:.3f}{'  NOISY' if rec['noisy'] else ''}",
              flush=True)
    lines.append({"type": "end", "wall_seconds": round(time.monotonic() - started, 3)})
    out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    print(f"{len(sizes)} points in {time.monotonic() - started:.0f} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
