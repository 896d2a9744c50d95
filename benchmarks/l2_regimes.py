"""Where do the regimes inside L2 come from?  Fixed working sets across L2, three ways, best of interleaved rounds.

    .venv/bin/python benchmarks/l2_regimes.py [--rounds 3] [--per-octave 4]

For fp64 FLOPs=1, read+write (b[i] += c) and read-only (a sum), at working
sets from 2 x L1d to L2 per thread (this host's caches), 2 threads (or
--threads), it measures:

* ``numba-4k``: ert's numba-cpu kernel on a buffer allocated for that size
  alone (under NumPy's 4 MiB huge-page threshold: 4 KiB pages, placed by
  the kernel wherever it likes in physical memory);
* ``numba-thp``: the same kernel on the first bytes of one 1 GiB buffer,
  which NumPy advises into transparent huge pages (2 MiB pages: physically
  contiguous, so the L2's sets are filled evenly and the TLB covers the set);
* ``c``: benchmarks/ert_c_kernel.c (read+write FLOPS 1; read-only FLOPS 0),
  timed inside one OpenMP region per repeat, as the original ERT does.

Each point is timed as ert times it (doubling to >= 10 ms, median of 5);
every round visits every size and method in turn, and the fastest round is
kept (contention only slows a run).  The last lines compare the lower and
upper halves of the window per method: a ratio near 1 means one regime.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from level_check import build, run_c  # noqa: E402


def numba_rate(backend, spec, *, elements_per_thread: int, fresh: bool, min_seconds: float = 0.01) -> float:
    """GB/s of ert's numba-cpu kernel at one size, as ert times a point (ert.measure.timing; median of 5)."""
    from ert.measure import timing

    if fresh:
        backend._buf = None  # a buffer of exactly this size: 4 KiB pages
    backend.prepare(spec, elements_per_thread=elements_per_thread)
    trials, _ = timing.calibrate(backend.run, min_seconds=min_seconds, jump=False)
    seconds = statistics.median(backend.run(trials) for _ in range(5))
    return spec.gbytes_per_s(elements=elements_per_thread * backend.threads, trials=trials, seconds=seconds)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--per-octave", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cc", default="gcc")
    args = p.parse_args()

    from ert.hardware import hwinfo
    from ert.backends import REGISTRY
    from ert.spec import KernelSpec

    caches = {c.level: c for c in hwinfo.read_cpu_caches() if c.kind != "Instruction"}
    l1, l2 = caches[1].size_bytes, caches[2].size_bytes
    n = int(math.log2(l2 / (2 * l1)) * args.per_octave) + 1
    per_thread = sorted({int(2 * l1 * (l2 / (2 * l1)) ** (k / (n - 1))) // 4096 * 4096 for k in range(n)})
    exe = build(args.cc)
    fresh = REGISTRY.create("numba-cpu", threads=args.threads)
    huge = REGISTRY.create("numba-cpu", threads=args.threads)
    specs = {"rw": KernelSpec("fp64", 1, False, "rw"), "ro": KernelSpec("fp64", 1, False, "ro")}
    huge.prepare(specs["rw"], elements_per_thread=(512 << 20) // 8)  # grow its buffer to 1 GiB first
    best: dict[tuple, float] = {}
    for _ in range(args.rounds):
        for access, spec in specs.items():
            for size in per_thread:
                elements = size // 8
                for method, rate in (
                        ("numba-4k", lambda: numba_rate(fresh, spec, elements_per_thread=elements, fresh=True)),
                        ("numba-thp", lambda: numba_rate(huge, spec, elements_per_thread=elements, fresh=False)),
                        ("c", lambda: run_c(exe, threads=args.threads, wss_bytes=size * args.threads,
                                            min_seconds=0.01, flops=1 if access == "rw" else 0))):
                    key = (access, size, method)
                    best[key] = max(best.get(key, 0.0), rate())
    methods = ("numba-4k", "numba-thp", "c")
    print(f"{hwinfo.cpu_model()}: L1d {l1 >> 10} KiB, L2 {l2 >> 10} KiB per core; {args.threads} threads; "
          f"fp64 FLOPs=1, GB/s, best of {args.rounds} rounds")
    for access in specs:
        print(f"\n{'read+write' if access == 'rw' else 'read-only'}\n{'KiB/thread':>10} {'x L2':>5} "
              + " ".join(f"{m:>10}" for m in methods))
        for size in per_thread:
            print(f"{size >> 10:10d} {size / l2:5.2f} " + " ".join(f"{best[(access, size, m)]:10.1f}" for m in methods))
        half = len(per_thread) // 2
        for m in methods:
            low = statistics.median(best[(access, s, m)] for s in per_thread[:half])
            high = statistics.median(best[(access, s, m)] for s in per_thread[half:])
            print(f"  {m:10} median {low:7.1f} below {per_thread[half] >> 10} KiB/thread, {high:7.1f} from there: "
                  f"upper/lower half {high / low:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
