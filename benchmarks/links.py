#!/usr/bin/env python3
"""Host<->device link levels measured as ert-run measures them (the backend's ``link_transfers``, timed by
ert.measure.transfers): plateaus and a memcpy ratio.

For each (level, variant) it prints the rate at every size, the plateau (the
median of the rates at the largest ``--plateau`` sizes), the latency at the
smallest size, and the ratio of the plateau to numpy's copy of the same bytes
on this host measured just before (on PoCL's CPU device a "link" is a memory
copy, so the ratio should be near 1; bidirectional moves two copies at once).
Every record's data check must pass, else the exit status is 1.  With
``--rounds N`` the sweep is repeated and medians are taken over rounds.
This prints numbers; it is not a test.

Usage:  python benchmarks/links.py [--backend opencl|cuda] [--min-bytes N] [--max-bytes N] [--rounds N] [--json FILE]
Smallest setting (the smoke test's): --min-bytes 4096 --max-bytes 65536 --min-seconds 0.001 --repeats 1 --plateau 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="opencl", choices=["opencl", "cuda"])
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--min-seconds", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5, help="timed samples per size")
    parser.add_argument("--plateau", type=int, default=3, help="largest sizes whose median is the plateau")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", help="write every record and the summary here")
    args = parser.parse_args(argv)

    from ert.backends import REGISTRY
    from ert.config.schema import TransferOptions, from_dict
    from ert.measure import transfers as stage
    from ert.records.rawio import transfer_gbytes_per_s, transfer_latency_us

    # The sizes ert-run would sweep (config key transfer), here one per octave.
    sizes = TransferOptions(min_bytes=args.min_bytes, max_bytes=args.max_bytes, growth=2).sizes(args.max_bytes)
    plateau_sizes = sizes[-args.plateau:]
    config = from_dict({"backend": args.backend, "opencl": {"cpu_reference": False}})
    backend = REGISTRY.create(args.backend, options=config.backend_options())
    describe = backend.describe()
    print(f"backend {args.backend}: {describe.get('device')}; sizes {sizes[0]}..{sizes[-1]} bytes, "
          f"{args.repeats} samples of >= {args.min_seconds * 1e3:g} ms, {args.rounds} round(s)")
    all_records, rounds = [], []
    try:
        transfers = backend.link_transfers(max(sizes))
        for _ in range(args.rounds):
            reference = {n: stage.host_copy_reference(n)["gbytes_per_s"] for n in plateau_sizes}
            records: list[dict] = []
            stage.measure_transfers(transfers, sizes, min_seconds=args.min_seconds, samples=args.repeats,
                                    noise_threshold=config.timing.noise_threshold,
                                    max_remeasure=config.timing.max_remeasure, emit=records.append)
            rounds.append((reference, records))
            all_records += records
        rated = backend.link_rated(lambda: stage.host_copy_reference(min(args.max_bytes, 256 << 20)))
    finally:
        backend.close()

    failed = [r for r in all_records if not r["valid"]]
    summary = {}
    by_key = defaultdict(list)
    for reference, records in rounds:
        grouped = defaultdict(dict)
        for r in records:
            grouped[(r["level"], r["variant"])][r["bytes"]] = r
        for key, per_size in grouped.items():
            rates = [transfer_gbytes_per_s(per_size[n]) for n in plateau_sizes if n in per_size]
            plateau = statistics.median(rates)
            ref = statistics.median(reference[n] for n in plateau_sizes)
            by_key[key].append({"plateau": plateau, "ratio": plateau / ref, "reference": ref,
                                "latency_us": transfer_latency_us(per_size[min(per_size)]),
                                "curve": {n: transfer_gbytes_per_s(r) for n, r in sorted(per_size.items())}})
    print(f"\n{'level':<11} {'variant':<9} {'plateau GB/s':>12} {'memcpy GB/s':>11} {'ratio':>6} "
          f"{'latency us':>10}  rated")
    for (level, variant), rows in sorted(by_key.items()):
        med = {k: statistics.median(row[k] for row in rows) for k in ("plateau", "ratio", "reference", "latency_us")}
        summary[f"{level}:{variant}"] = {**med, "rounds": [row["plateau"] for row in rows]}
        rate = rated.get(level, {})
        shown = f"{rate['gbytes_per_s']:.1f}" if rate.get("gbytes_per_s") else "-"
        print(f"{level:<11} {variant:<9} {med['plateau']:>12.2f} {med['reference']:>11.2f} {med['ratio']:>6.2f} "
              f"{med['latency_us']:>10.2f}  {shown}")
    print("\ncurves (GB/s by size, last round):")
    for (level, variant), rows in sorted(by_key.items()):
        curve = " ".join(f"{n >> 10}K:{v:.1f}" for n, v in rows[-1]["curve"].items())
        print(f"  {level}:{variant}  {curve}")
    print("\nrated:", "; ".join(f"{k}: {v['derivation']}" for k, v in sorted(rated.items())))
    if failed:
        print(f"\n{len(failed)} record(s) failed their check: " + "; ".join(r["check"] for r in failed[:3]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"summary": summary, "rated": rated, "records": all_records, "device": describe.get("device")},
                      fh, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
