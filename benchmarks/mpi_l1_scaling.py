"""Per-core caches must scale with ranks: L1 ceiling of 2 ranks x 1 thread over 1 rank x 1 thread.

Runs `ert-run` (serial, 1 thread) and `mpiexec -n 2 ert-run` (1 thread each)
alternately on a bandwidth-only sweep of small working sets, and prints the
L1 (and L2) ceilings of each and their ratio, per round and as medians.
Timings on a shared host are noisy: compare the ratios, not the absolutes.

    .venv/bin/python benchmarks/mpi_l1_scaling.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent
CONFIG = {
    "backend": "numba-cpu",
    "precisions": ["fp64"],
    "flops_per_element": [1],
    "access": ["rw", "ro"],
    # Per rank: 8 KiB (L1) to 4 MiB (past L2) when the total is split over 2 ranks.
    "working_set": {"min_bytes": 16384, "max_bytes": 8 << 20, "growth": 1.25},
    "timing": {"min_seconds": 0.02, "repeats": 5},
    "threads": 1,
}


def level(doc: dict, name: str, access: str) -> float | None:
    for c in doc["ceilings"]["memory"]:
        if c["level"] == name and c["access"] == access and c["precision"] == "fp64":
            return c["gbytes_per_s"]
    return None


def run(ranks: int, cfg: Path, out: Path) -> dict:
    cmd = [str(BIN / "ert-run"), str(cfg), "--out", str(out), "-q"]
    if ranks > 1:
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] + cmd
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads((out / "ceilings.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "l1.yaml"
        cfg.write_text(yaml.safe_dump(CONFIG))
        for r in range(args.rounds):
            one = run(1, cfg, Path(tmp) / f"one-{r}")
            two = run(2, cfg, Path(tmp) / f"two-{r}")
            for access in ("rw", "ro"):
                for name in ("L1", "L2"):
                    a, b = level(one, name, access), level(two, name, access)
                    if a and b:
                        ratios.setdefault(f"{name} {access}", []).append(b / a)
                        print(f"round {r + 1}: {name} {access}: 1 rank {a:8.1f} GB/s, 2 ranks {b:8.1f} GB/s, "
                              f"ratio {b / a:.2f}", flush=True)
    print("\nmedian ratio (2 ranks x 1 thread) / (1 rank x 1 thread):")
    for key, values in ratios.items():
        print(f"  {key:7s} {statistics.median(values):.2f}   (rounds: {', '.join(f'{v:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
