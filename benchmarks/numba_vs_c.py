#!/usr/bin/env python3
"""Numba backend versus a C/OpenMP build of the same ERT kernel: prints Numba/C ratios.

Measures four points with both implementations, interleaved in one run:

  L1        FP64 rw add (1 FLOP/element), 32 KiB total working set     GB/s
  L2        FP64 rw add,                   1 MiB total                  GB/s
  DRAM      FP64 rw add,                 512 MiB total                  GB/s
  FMA peak  FP64 rw, 64 FLOPs/element (32 FMAs), 32 KiB total        GFLOP/s

The Numba side is ert's own backend and driver (``numba-cpu``, ``measure``);
the C side is benchmarks/ert_c_kernel.c, built here with
``gcc -O3 -march=native -fopenmp -fno-loop-unroll-and-jam`` into
benchmarks/build/ (without the last flag GCC fuses consecutive trials, see
BASE_CFLAGS).  Both use the same
recurrence, data layout, thread count, OpenMP runtime (Numba's ``omp``
threading layer is libgomp), thread binding, calibration rule (double the
trials until one timed region lasts >= --min-seconds), repeat count and
bytes/FLOPs accounting (ert.spec.KernelSpec).  Every result is checked against
a host replay of the recurrence.

The host is shared and noisy, so each round measures every point with both
implementations back to back (alternating which goes first), and the reported
ratio is the median over rounds of the per-round Numba/C ratio.  This is a
benchmark that prints numbers, not a test: the target is a ratio >= 1.0 for
every point, but nothing here fails on a low ratio.  The exit status is
non-zero only if a build failed or a result did not match its replay.

Usage:  python benchmarks/numba_vs_c.py [--rounds N] [--quick] [--with-nofma] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ert_c_kernel.c"
BUILD = HERE / "build"
# -fno-loop-unroll-and-jam: GCC's -O3 otherwise jams consecutive trials of the
# loop nest (trials outside, elements inside) into one pass, so one load and
# one store serve two trials and the C "bandwidth" in L1/L2 reads up to 2x what
# the hardware moves -- a yardstick that removed work, as the original ERT built
# with g++ -O3 does.  The rated-ceiling check in ert flags exactly that.
BASE_CFLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-loop-unroll-and-jam"]
# Whether the multiply and add fuse is decided by contraction, as in the Numba
# kernels (fastmath={'contract'} versus False).
FMA_CFLAGS = ["-ffp-contract=fast"]
NOFMA_CFLAGS = ["-ffp-contract=off", "-DERT_NO_FMA"]

KIB, MIB = 1 << 10, 1 << 20

# The CPU affinity before anything in this process is bound by OpenMP: the C
# program runs with it (a child inherits the binding of the thread that forks).
_ORIGINAL_AFFINITY = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


@dataclass(frozen=True)
class Point:
    label: str
    precision: str
    flops: int
    fma: bool
    wss_bytes: int

    @property
    def unit(self) -> str:
        return "GFLOP/s" if self.flops > 1 else "GB/s"


@dataclass
class Result:
    impl: str
    value: float          # GB/s or GFLOP/s, from the median of the repeats
    trials: int
    samples: list[float]  # seconds per timed region
    spread: float         # (max - min) / min of samples
    check_ok: bool
    check: str
    extra: dict = field(default_factory=dict)

    @property
    def best(self) -> float:
        """The value from the fastest repeat rather than the median one."""
        return self.value * statistics.median(self.samples) / min(self.samples)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; 2 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="2 rounds, 3 repeats of >= 0.05 s each: a fast, rougher look")
    p.add_argument("--min-seconds", type=float, default=None,
                   help="a timed region lasts at least this (default 0.1; 0.05 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="timed regions per measurement (default 5; 3 with --quick)")
    p.add_argument("--threads", type=int, default=2, help="threads for both implementations (default 2)")
    p.add_argument("--dram-bytes", type=int, default=512 * MIB, help="total working set of the DRAM point")
    p.add_argument("--bind", choices=["close", "none"], default="close",
                   help="thread binding for both sides: close (OMP_PROC_BIND=close OMP_PLACES=cores, "
                        "the numba-cpu backend's default) or none (OMP_PROC_BIND=false)")
    p.add_argument("--variant", choices=["vector", "plain"], default="vector",
                   help="C multiply-add sub-block written with GCC vectors (default) or as a plain scalar array")
    p.add_argument("--with-nofma", action="store_true",
                   help="also compare the no-FMA peak (FP64, 64 FLOPs/element, separate multiply and add)")
    p.add_argument("--extra-cflags", default="", help="more flags for gcc (for experiments)")
    p.add_argument("--cc", default=os.environ.get("CC", "gcc"), help="C compiler (default gcc)")
    p.add_argument("--json", type=Path, help="also write every measurement to this file")
    a = p.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else (2 if a.quick else 5)
    a.min_seconds = a.min_seconds if a.min_seconds is not None else (0.05 if a.quick else 0.1)
    a.repeats = a.repeats if a.repeats is not None else (3 if a.quick else 5)
    if a.rounds < 1 or a.repeats < 1 or a.threads < 1 or a.min_seconds <= 0:
        p.error("--rounds, --repeats and --threads must be >= 1 and --min-seconds > 0")
    return a


# -- the C side ---------------------------------------------------------------

def build(args) -> dict:
    """Compile the FMA and no-FMA binaries and the FMA assembly; return paths and flags."""
    cc = shutil.which(args.cc)
    if cc is None:
        sys.exit(f"error: C compiler {args.cc!r} not found")
    BUILD.mkdir(exist_ok=True)
    common = BASE_CFLAGS + (["-DERT_PLAIN_C"] if args.variant == "plain" else []) + args.extra_cflags.split()
    out = {"cc": cc, "cc_version": subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]}
    for kind, flags in (("fma", FMA_CFLAGS), ("nofma", NOFMA_CFLAGS)):
        exe = BUILD / f"ert_c_kernel_{kind}_{args.variant}"
        asm = exe.with_suffix(".s")
        cflags = common + flags
        for cmd in ([cc, *cflags, "-o", str(exe), str(SOURCE), "-lm"],
                    [cc, *cflags, "-S", "-o", str(asm), str(SOURCE)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                sys.exit(f"error: build failed: {' '.join(cmd)}")
        out[kind] = {"exe": exe, "asm": asm, "cflags": cflags}
    return out


def asm_summary(asm_path: Path) -> dict:
    """Counts of the vector instructions that matter in the timed code of the C program.

    Only the functions the timed region runs are counted: the OpenMP body of
    timed_region() and any out-of-line rw_* kernel it calls (GCC inlines the
    kernels or clones them as rw_*.constprop.N); the replay and check code,
    which GCC vectorises too, is left out.
    """
    functions = set(re.findall(r"^\s*\.type\s+([\w.$]+),\s*@function", asm_path.read_text(), re.M))
    timed = {f for f in functions if f.startswith(("timed_region", "rw_"))}
    ins, current = [], None
    for line in asm_path.read_text().splitlines():
        label = re.match(r"^([\w.$]+):", line)
        if label and label.group(1) in functions:
            current = label.group(1)
        elif current in timed and line.startswith("\t") and not line.startswith("\t."):
            parts = line.split(None, 1)
            ins.append((parts[0], parts[1] if len(parts) > 1 else ""))

    def count(pattern, reg="zmm"):
        rx = re.compile(pattern)
        return sum(1 for op, operands in ins if rx.fullmatch(op) and reg in operands)

    return {
        "functions": sorted(timed),
        "vfmadd_pd_zmm": count(r"vfmadd\d{3}pd"),
        "vfmadd_ps_zmm": count(r"vfmadd\d{3}ps"),
        "vfmadd_any": count(r"vfmadd\w*", reg=""),
        "vmulpd_zmm": count(r"vmulpd"),
        "vaddpd_zmm": count(r"vaddpd"),
        "vaddpd_ymm": count(r"vaddpd", reg="ymm"),
        "zmm_stack_accesses": sum(1 for _, operands in ins if "zmm" in operands and "(%rsp)" in operands),
    }


def binding_env(args) -> dict:
    """The OpenMP binding variables both sides run with (None: unset)."""
    if args.bind == "none":
        return {"OMP_PROC_BIND": "false", "OMP_PLACES": None}
    return {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}


def apply_env(env: dict, changes: dict) -> dict:
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def c_env(args) -> dict:
    return apply_env(dict(os.environ), {**binding_env(args), "OMP_NUM_THREADS": str(args.threads)})


def _reset_affinity():  # runs in the child between fork and exec
    if _ORIGINAL_AFFINITY is not None:
        os.sched_setaffinity(0, _ORIGINAL_AFFINITY)


def run_c(exe: Path, point: Point, args, env) -> Result:
    cmd = [str(exe), point.precision, str(point.flops), str(args.threads), str(point.wss_bytes),
           repr(args.min_seconds), str(args.repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, preexec_fn=_reset_affinity)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
    from ert.spec import KernelSpec

    spec = KernelSpec(point.precision, point.flops, point.fma)
    elements = out["elements_per_thread"] * args.threads
    seconds = out["median_s"]
    value = (spec.gflops_per_s if point.flops > 1 else spec.gbytes_per_s)(
        elements=elements, trials=out["trials"], seconds=seconds)
    samples = out["samples"]
    return Result("c", value, out["trials"], samples, (max(samples) - min(samples)) / min(samples),
                  bool(out["check_ok"]) and r.returncode == 0,
                  f"max rel err {out['max_rel_err']:.2g}", extra=out)


# -- the Numba side -------------------------------------------------------------

class NumbaSide:
    def __init__(self, threads: int):
        from ert.backends import REGISTRY
        from ert.measure.comm import SerialComm

        self.backend = REGISTRY.create("numba-cpu", threads=threads)
        self.comm = SerialComm()
        self.threads = threads

    def elements_per_thread(self, point: Point) -> int:
        from ert.spec import KernelSpec

        spec = KernelSpec(point.precision, point.flops, point.fma)
        g = self.backend.granule_elements(spec)
        return point.wss_bytes // (self.threads * spec.itemsize) // g * g

    def warm_up(self, points) -> None:
        """Compile (or load from Numba's cache) every kernel before anything is timed."""
        from ert.spec import KernelSpec

        for p in points:
            spec = KernelSpec(p.precision, p.flops, p.fma)
            self.backend.prepare(spec, elements_per_thread=self.backend.granule_elements(spec))
            self.backend.run(1)

    def run(self, point: Point, args) -> Result:
        from ert.config.schema import Timing
        from ert.measure.driver import measure
        from ert.spec import KernelSpec

        spec = KernelSpec(point.precision, point.flops, point.fma)
        n = self.elements_per_thread(point)
        self.backend.prepare(spec, elements_per_thread=n)
        timing = Timing(min_seconds=args.min_seconds, repeats=args.repeats, noise_threshold=0.1, max_remeasure=0)
        m = measure(self.backend, self.comm, timing=timing)
        check = self.backend.check()
        seconds = statistics.median(m.samples)
        value = (spec.gflops_per_s if point.flops > 1 else spec.gbytes_per_s)(
            elements=n * self.threads, trials=m.trials, seconds=seconds)
        return Result("numba", value, m.trials, list(m.samples), m.spread, check.ok, check.detail,
                      extra={"elements_per_thread": n})


# -- the run --------------------------------------------------------------------

def points_for(args) -> list[Point]:
    pts = [Point("L1", "fp64", 1, False, 32 * KIB),
           Point("L2", "fp64", 1, False, 1 * MIB),
           Point("DRAM", "fp64", 1, False, args.dram_bytes),
           Point("FMA peak", "fp64", 64, True, 32 * KIB)]
    if args.with_nofma:
        pts.append(Point("no-FMA peak", "fp64", 64, False, 32 * KIB))
    return pts


def fmt_bytes(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB and n % MIB == 0 else f"{n // KIB} KiB"


def describe(args, built, numba_side) -> dict:
    from ert.hardware import hwinfo

    info = numba_side.backend.describe()
    return {
        "cpu": hwinfo.cpu_model(),
        "python": platform.python_version(),
        "numba_threading_layer": info.get("numba_threading_layer"),
        "llvm_cpu": info.get("llvm_cpu"),
        "cc": built["cc_version"],
        "cflags_fma": " ".join(built["fma"]["cflags"]),
        "threads": args.threads,
        "binding (both sides)": " ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in ("OMP_PROC_BIND", "OMP_PLACES")),
        "numba_pinning": info.get("pinning"),
        "rounds": args.rounds, "repeats": args.repeats, "min_seconds": args.min_seconds,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before Numba's OpenMP pool starts: the same binding as the C side (the
    # numba-cpu backend leaves OMP_PROC_BIND and OMP_PLACES alone once set).
    apply_env(os.environ, binding_env(args))

    built = build(args)
    asm_fma = asm_summary(built["fma"]["asm"])
    asm_nofma = asm_summary(built["nofma"]["asm"])
    env = c_env(args)
    points = points_for(args)

    numba_side = NumbaSide(args.threads)
    numba_side.warm_up(points)
    info = describe(args, built, numba_side)

    print("Numba backend vs C (same ERT kernel), one run, interleaved")
    for k, v in info.items():
        print(f"  {k:22s} {v}")
    print(f"  C asm, timed code      FMA build: {asm_fma['vfmadd_pd_zmm']} vfmadd*pd zmm, "
          f"{asm_fma['vfmadd_ps_zmm']} vfmadd*ps zmm, {asm_fma['vaddpd_zmm']} vaddpd zmm, "
          f"{asm_fma['zmm_stack_accesses']} zmm stack accesses; no-FMA build: {asm_nofma['vfmadd_any']} vfmadd, "
          f"{asm_nofma['vmulpd_zmm']} vmulpd zmm")
    for p in points:
        n = numba_side.elements_per_thread(p)
        print(f"  {p.label:10s} FP64 flops/element={p.flops:<3d} {'fma' if p.fma else '   '} "
              f"working set {fmt_bytes(p.wss_bytes)} ({n} elements/thread)")
    print()

    results: dict[str, list[tuple[Result, Result]]] = {p.label: [] for p in points}
    failed = False
    start = time.perf_counter()
    try:
        for r in range(args.rounds):
            for i, p in enumerate(points):
                exe = built["fma" if (p.fma or p.flops == 1) else "nofma"]["exe"]
                order = ("numba", "c") if (r + i) % 2 == 0 else ("c", "numba")
                got = {}
                for impl in order:
                    got[impl] = numba_side.run(p, args) if impl == "numba" else run_c(exe, p, args, env)
                nb, c = got["numba"], got["c"]
                if c.extra["elements_per_thread"] != nb.extra["elements_per_thread"]:
                    raise RuntimeError(f"{p.label}: C used {c.extra['elements_per_thread']} elements/thread, "
                                       f"Numba {nb.extra['elements_per_thread']}")
                results[p.label].append((nb, c))
                bad = [f"{x.impl} check FAILED ({x.check})" for x in (nb, c) if not x.check_ok]
                failed |= bool(bad)
                print(f"round {r + 1}/{args.rounds}  {p.label:11s} numba {nb.value:8.2f} (spread {nb.spread:4.0%})  "
                      f"c {c.value:8.2f} (spread {c.spread:4.0%})  {p.unit:7s} ratio {nb.value / c.value:5.2f}  "
                      f"[{order[0]} first]" + ("  " + "; ".join(bad) if bad else ""), flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: the table covers the rounds completed")
    wall = time.perf_counter() - start

    done = min((len(v) for v in results.values()), default=0)
    print()
    print(f"Numba/C ratio, measured in one run with Numba and C interleaved (order alternating), "
          f"median of {done} round(s); target >= 1.0")
    print("  Numba, C: median over rounds of each measurement's median-of-repeats value")
    print("  ratio:    median over rounds of the per-round Numba/C ratio (the headline number)")
    print("  best:     fastest single repeat of Numba over fastest of C, all rounds (contention only slows)")
    hdr = f"{'level':11s} {'unit':7s} {'Numba':>9s} {'C':>9s} {'ratio':>6s} {'best':>6s}  per-round ratios"
    print(hdr)
    print("-" * len(hdr) + "-" * 20)
    table = []
    for p in points:
        rows = results[p.label]
        if not rows:
            continue
        nb_vals = [nb.value for nb, _ in rows]
        c_vals = [c.value for _, c in rows]
        ratios = [nb / c for nb, c in zip(nb_vals, c_vals)]
        med = statistics.median(ratios)
        best = max(nb.best for nb, _ in rows) / max(c.best for _, c in rows)
        print(f"{p.label:11s} {p.unit:7s} {statistics.median(nb_vals):9.2f} {statistics.median(c_vals):9.2f} "
              f"{med:6.3f} {best:6.3f}  " + " ".join(f"{x:.3f}" for x in ratios))
        table.append({"level": p.label, "unit": p.unit, "numba": statistics.median(nb_vals),
                      "c": statistics.median(c_vals), "ratio": med, "best_ratio": best, "per_round_ratios": ratios,
                      "numba_per_round": nb_vals, "c_per_round": c_vals})
    print(f"\nwall time {wall:.0f} s; all checks {'passed' if not failed else 'did NOT pass'}")

    if args.json:
        def res(x: Result) -> dict:
            return {"impl": x.impl, "value": x.value, "trials": x.trials, "samples": x.samples,
                    "spread": x.spread, "check_ok": x.check_ok, "check": x.check}
        args.json.write_text(json.dumps({
            "info": info, "asm_fma": asm_fma, "asm_nofma": asm_nofma, "table": table,
            "rounds": {label: [[res(nb), res(c)] for nb, c in rows] for label, rows in results.items()},
        }, indent=1, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
