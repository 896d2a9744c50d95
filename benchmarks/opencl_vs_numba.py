#!/usr/bin/env python3
"""The OpenCL backend against the numba-cpu backend on this machine's CPU: prints OpenCL/Numba ratios.

Measures, with both of ert's backends through ert's own driver (``measure``):

  L1            FP64 read+write add (1 FLOP/element),  32 KiB total working set   GB/s
  L2            same,                                    1 MiB total               GB/s
  L3            same,                                    8 MiB total               GB/s
  DRAM          same,                                  256 MiB total (--dram-bytes) GB/s
  FMA peak      FP64, 64 FLOPs/element (32 fused multiply-adds), 32 KiB           GFLOP/s
  no-FMA peak   FP64, 64 FLOPs/element (separate multiply and add), 32 KiB        GFLOP/s

Only meaningful where the OpenCL device is a CPU (PoCL here): then both
backends drive the same cores.  The host is shared and noisy, so each round
measures every point with both backends back to back, alternating which goes
first, and the reported ratio is the median over rounds of the per-round
OpenCL/Numba ratio.  Every measurement is checked against its host replay; a
failed check makes the exit status 1.  This prints numbers; it is not a test.

Usage:  python benchmarks/opencl_vs_numba.py [--rounds N] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Point:
    label: str
    flops: int
    fma: bool
    wss_bytes: int


def points_for(args) -> list[Point]:
    return [Point("L1", 1, False, 32 * KIB), Point("L2", 1, False, 1 * MIB), Point("L3", 1, False, 8 * MIB),
            Point("DRAM", 1, False, args.dram_bytes), Point("FMA peak", 64, True, 32 * KIB),
            Point("no-FMA peak", 64, False, 32 * KIB)]


class Side:
    """One backend, measured exactly as ert-run measures a point."""

    def __init__(self, name: str, *, threads: int, config):
        from ert.backends import REGISTRY
        from ert.measure.comm import SerialComm

        self.name = name
        self.backend = REGISTRY.create(name, threads=threads, options=config.backend_options(name), local_rank=0,
                                       local_size=1)
        self.comm = SerialComm()

    def measure(self, point: Point, timing) -> dict:
        from ert.measure.driver import measure
        from ert.spec import KernelSpec

        spec = KernelSpec("fp64", point.flops, point.fma)
        b = self.backend
        granule = b.granule_elements(spec)
        n = max(granule, point.wss_bytes // spec.itemsize // b.threads // granule * granule)
        launches = getattr(b, "launches", None)
        if launches:
            b.prepare(spec, elements_per_thread=n, launch=launches(spec, n)[0])
        else:
            b.prepare(spec, elements_per_thread=n)
        m = measure(b, self.comm, timing=timing)
        check = b.check()
        rate = spec.gflops_per_s if point.flops > 1 else spec.gbytes_per_s
        value = rate(elements=n * b.threads, trials=m.trials, seconds=statistics.median(m.samples))
        best = rate(elements=n * b.threads, trials=m.trials, seconds=min(m.samples))
        return {"value": value, "best": best, "spread": m.spread, "trials": m.trials, "ok": check.ok,
                "check": check.detail}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    parser.add_argument("--quick", action="store_true", help="2 rounds, shorter regions")
    parser.add_argument("--min-seconds", type=float, default=0.05, help="shortest timed region")
    parser.add_argument("--repeats", type=int, default=5, help="timed regions per measurement")
    parser.add_argument("--dram-bytes", type=int, default=256 * MIB, help="working set of the DRAM point")
    parser.add_argument("--threads", type=int, default=None, help="numba-cpu threads (default: usable cpus)")
    parser.add_argument("--json", metavar="FILE", help="write every measurement here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.min_seconds, args.repeats = 2, 0.02, 3

    from ert.hardware import hwinfo
    from ert.config.schema import Timing, from_dict

    threads = args.threads or hwinfo.usable_cpus()
    config = from_dict({"precisions": ["fp64"], "opencl": {"cpu_reference": False}})
    # OpenCL first: PoCL starts its worker threads before Numba's OpenMP
    # runtime binds this process's main thread to one CPU.
    sides = [Side("opencl", threads=1, config=config), Side("numba-cpu", threads=threads, config=config)]
    info = sides[0].backend.describe()
    print(f"OpenCL device: {info['device']} ({info['device_type']}, {info['compute_units']} compute units, "
          f"driver {info['driver_version']}); numba-cpu: {threads} threads")
    if info["device_type"] != "cpu":
        print("note: the OpenCL device is not a CPU; the ratios compare different hardware")
    timing = Timing(min_seconds=args.min_seconds, repeats=args.repeats, noise_threshold=0.1, max_remeasure=0)
    points = points_for(args)
    results: dict[str, dict[str, list[dict]]] = {p.label: {s.name: [] for s in sides} for p in points}
    # One untimed pass: JIT/driver builds, thread pools and first touch of
    # memory happen here, not in the first round.
    warm = Timing(min_seconds=0.005, repeats=1, noise_threshold=10.0, max_remeasure=0)
    for point in points:
        for side in sides:
            side.measure(point, warm)
    for r in range(args.rounds):
        for point in points:
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                results[point.label][side.name].append(side.measure(point, timing))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    failed = False
    print(f"\n{'point':12s} {'unit':8s} {'OpenCL':>9s} {'Numba':>9s} {'ratio':>6s}  per-round ratios (median first)")
    for point in points:
        ocl, nb = results[point.label]["opencl"], results[point.label]["numba-cpu"]
        failed |= not all(x["ok"] for x in ocl + nb)
        ratios = [o["value"] / n["value"] for o, n in zip(ocl, nb)]
        unit = "GFLOP/s" if point.flops > 1 else "GB/s"
        print(f"{point.label:12s} {unit:8s} {statistics.median(x['value'] for x in ocl):9.1f} "
              f"{statistics.median(x['value'] for x in nb):9.1f} {statistics.median(ratios):6.3f}  "
              f"{' '.join(f'{x:.2f}' for x in ratios)}")
    print("\nvalue: median over rounds of each measurement's median region; ratio: median of per-round ratios")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"opencl": info, "threads": threads, "results": results}, fh, indent=1)
    if failed:
        print("a measurement failed its check against the host replay", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
