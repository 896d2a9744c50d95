"""Per-host analysis at scale: a synthetic raw.jsonl of 512 hosts x 8 ranks, analysed as `ert analyze` does.

Issue 32 bounds it: at most 30 s and 2 GiB on 2 cores.  The synthetic run
takes the 224 points of a real default sweep (tests/data/bare-zen4-full.raw.jsonl,
adaptive, Zen 4) and gives every rank of every host that point's work: each
host's region seconds are the base run's times x a 1 % lognormal jitter, two
hosts are slow on purpose (one at 0.70 of the others' DRAM bandwidth, one at
0.80 everywhere, a low clock), and each record carries what a real one of that
size would (`rank_seconds.per_rank` for every rank, `host_seconds` for every
host, the limiting host; the header's placement of every rank).  The analysis
runs in a child process pinned to at most 2 cpus, which reports its wall time
and peak memory (ru_maxrss): reading the file, the whole build, and the
per-host part alone (`ert.analysis.hosts.host_ceilings`); the slow hosts must
be the ones named.

    .venv/bin/python benchmarks/hosts_analysis.py [--hosts 512] [--ranks-per-host 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "tests" / "data" / "bare-zen4-full.raw.jsonl"
LIMIT_SECONDS, LIMIT_MIB = 30.0, 2048.0
DRAM_BYTES = 256 << 20  # working sets from here on are DRAM-bound on the base machine (32 MiB L3)


def write_synthetic(path: Path, *, hosts: int, ranks_per_host: int, seed: int = 0) -> dict[str, str]:
    """The synthetic raw.jsonl; returns {slow host: what is slow about it}."""
    from ert.records.rawio import read_raw

    base = read_raw(BASE)
    names = [f"node{i + 1}" for i in range(hosts)]
    ranks = hosts * ranks_per_host
    slow_dram, slow_clock = names[hosts // 3], names[(2 * hosts) // 3 + (1 if hosts > 2 else 0)]
    rng = np.random.default_rng(seed)
    header = json.loads(json.dumps(base.header))
    meta = header["metadata"]
    meta.update(hosts=names, host=names[0], ranks=ranks, ranks_per_host={h: ranks_per_host for h in names},
                placement=[{"host": h, "rank": i * ranks_per_host + k, "local_rank": k, "local_size": ranks_per_host}
                           for i, h in enumerate(names) for k in range(ranks_per_host)])
    dram = np.array([h == slow_dram for h in names])
    clock = np.array([h == slow_clock for h in names])
    with open(path, "w") as out:
        out.write(json.dumps(header) + "\n")
        for rec in base.points:
            samples = np.asarray(rec["samples"], dtype=float)
            per_host = samples[None, :] * np.exp(rng.normal(0.0, 0.01, (hosts, samples.size)))
            per_host[clock] /= 0.80
            if rec["wss_bytes"] >= DRAM_BYTES:
                per_host[dram] /= 0.70
            region = per_host.max(axis=0)
            medians = np.median(per_host, axis=1)
            lo, hi = per_host.min(axis=1), per_host.max(axis=1)
            rec = dict(rec, ranks=ranks, elements=rec["elements"] * ranks,
                       samples=[float(x) for x in region],
                       seconds={"min": float(region.min()), "median": float(np.median(region)),
                                "max": float(region.max())},
                       rank_seconds={"min": float(lo.min()), "max": float(hi.max()),
                                     "per_rank": [{"min": float(lo[j]), "max": float(hi[j])}
                                                  for j in range(hosts) for _ in range(ranks_per_host)]},
                       host_seconds={h: [float(x) for x in per_host[j]] for j, h in enumerate(names)},
                       limiting_host=names[int(np.argmax(medians))])
            out.write(json.dumps(rec) + "\n")
        for end in base.ends:
            out.write(json.dumps(end) + "\n")
    return {slow_dram: "DRAM at 0.70", slow_clock: "everything at 0.80 (clock)"}


def analyse(path: Path) -> None:
    """The child: read, build (per-host part included), then the per-host part alone; prints one JSON line."""
    from ert.analysis.ceilings import build
    from ert.analysis.hosts import host_ceilings
    from ert.records.rawio import read_raw

    t0 = time.perf_counter()
    raw = read_raw(path)
    t1 = time.perf_counter()
    doc = build(raw)
    t2 = time.perf_counter()
    host_ceilings(raw.points, doc["ceilings"]["memory"], doc["ceilings"]["compute"], doc["metadata"])
    t3 = time.perf_counter()
    named = sorted({w.split(":")[0] for w in doc["warnings"] if getattr(w, "code", None) == "slow-host"})
    print(json.dumps({"read_s": t1 - t0, "build_s": t2 - t1, "hosts_s": t3 - t2, "named": named,
                      "hosts": len(doc.get("hosts", [])),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=512)
    ap.add_argument("--ranks-per-host", type=int, default=8)
    ap.add_argument("--keep", metavar="DIR", help="write the synthetic raw.jsonl here and keep it")
    ap.add_argument("--analyse", metavar="RAW", help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.analyse:
        analyse(Path(args.analyse))
        return 0
    if args.hosts < 2 or args.ranks_per_host < 1:
        ap.error("--hosts must be at least 2 and --ranks-per-host at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        raw = folder / "raw.jsonl"
        t = time.perf_counter()
        slow = write_synthetic(raw, hosts=args.hosts, ranks_per_host=args.ranks_per_host)
        made = time.perf_counter() - t
        cpus = sorted(os.sched_getaffinity(0))[:2]  # at most 2 cores, as the bound says
        child = subprocess.run(["taskset", "-c", ",".join(map(str, cpus)), sys.executable, __file__,
                                "--analyse", str(raw)], capture_output=True, text=True)
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return 1
        got = json.loads(child.stdout.strip().splitlines()[-1])
        size = raw.stat().st_size / 2**20
    total = got["read_s"] + got["build_s"]
    print(f"{args.hosts} hosts x {args.ranks_per_host} ranks, 224 points, raw.jsonl {size:.0f} MiB "
          f"(made in {made:.1f} s), analysed on cpus {cpus}")
    print(f"{'read s':>8} {'build s':>8} {'per-host s':>10} {'total s':>8} {'peak MiB':>9}")
    print(f"{got['read_s']:8.2f} {got['build_s']:8.2f} {got['hosts_s']:10.2f} {total:8.2f} {got['peak_mib']:9.0f}")
    print(f"bounds: total {total:.1f} s of {LIMIT_SECONDS:.0f} s ({total / LIMIT_SECONDS:.2f}), "
          f"peak {got['peak_mib']:.0f} MiB of {LIMIT_MIB:.0f} MiB ({got['peak_mib'] / LIMIT_MIB:.2f})")
    print(f"slow hosts made: {', '.join(f'{h} ({why})' for h, why in slow.items())}; "
          f"named: {', '.join(got['named']) or 'none'}; hosts section: {got['hosts']} hosts")
    ok = (total <= LIMIT_SECONDS and got["peak_mib"] <= LIMIT_MIB and sorted(got["named"]) == sorted(slow)
          and got["hosts"] == args.hosts)
    print("within bounds, the slow hosts named" if ok else "NOT within bounds or the slow hosts not named")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
