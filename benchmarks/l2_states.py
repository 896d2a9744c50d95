"""Does one L2-sized point land in a slow state by itself?  Repeated measurements of ert's kernel, every one kept.

    .venv/bin/python benchmarks/l2_states.py [--threads 2] [--reps 12]

fp64 read+write (FLOPs 1) at working sets per thread from just past L1 to a third of L2, each measured
``--reps`` times as ert measures a point (trials doubled to 5 ms, median of 5 regions):

* ``4k``: a fresh buffer of that size each time (4 KiB pages, wherever the kernel puts them);
* ``thp``: the first bytes of one 1 GiB buffer (transparent huge pages where the kernel gives them);
* ``after-dram``: the 1 GiB buffer, each measurement right after a DRAM-sized point (as a sweep
  interleaves them).

Every value is printed (not the best): a bimodal row would show a slow state that the point itself
produces; rows that agree say the slow L2 points of a sweep came from outside (another tenant).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from l2_regimes import numba_rate  # noqa: E402 - the same measurement of one point


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=12)
    args = p.parse_args()

    from ert.hardware import hwinfo
    from ert.backends import REGISTRY
    from ert.spec import KernelSpec

    caches = {c.level: c for c in hwinfo.read_cpu_caches() if c.kind != "Instruction"}
    l1, l2 = caches[1].size_bytes, caches[2].size_bytes
    spec = KernelSpec("fp64", 1, False, "rw")
    fresh = REGISTRY.create("numba-cpu", threads=args.threads)
    huge = REGISTRY.create("numba-cpu", threads=args.threads)
    huge.prepare(spec, elements_per_thread=(512 << 20) // 8)

    def rate(backend, per_thread: int, new: bool = False) -> float:
        return numba_rate(backend, spec, elements_per_thread=per_thread // 8, fresh=new, min_seconds=0.005)

    sizes = [int(l1 * f) // 4096 * 4096 for f in (1.2, 2.4, 3.0, 4.5)] + [l2 // 3 // 4096 * 4096]
    print(f"{hwinfo.cpu_model()}: L1d {l1 >> 10} KiB, L2 {l2 >> 10} KiB per core; {args.threads} threads; "
          f"fp64 read+write GB/s, every measurement")
    for size in sizes:
        rows = {"4k": [rate(fresh, size, new=True) for _ in range(args.reps)],
                "thp": [rate(huge, size) for _ in range(args.reps)],
                "after-dram": []}
        for _ in range(args.reps):
            rate(huge, 256 << 20)
            rows["after-dram"].append(rate(huge, size))
        for name, values in rows.items():
            print(f"{size >> 10:5d} KiB/thread {name:>10}: " + " ".join(f"{v:.0f}" for v in values)
                  + f"   (min/max {min(values) / max(values):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
