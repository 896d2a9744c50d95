#!/usr/bin/env python3
"""Measured against rated for every ceiling of one or more run directories: one line per ceiling.

    python benchmarks/gpu_summary.py RUN_DIR [RUN_DIR ...] [--json FILE]

Each RUN_DIR's ``ceilings.json`` is read with ert's own reader (``ert.records.ceilings_io.load_ceilings``,
which validates it) and each ceiling is printed with the name ``ert show`` gives it, its unit, the
measured value, the rated value, measured/rated (the file's ``rated.ratio``), its spread and how
many of the run's warnings name it. Written for benchmarks/gpu_acceptance.sh (the cuda runs), it
reads any run, CPU runs included. A run directory without a readable ceilings file (a run that
failed or was cut short) is reported in one line and makes the exit status 1; the other
directories are still summarised. A killed run's ``ceilings-partial.json`` (``ert analyze`` of its
raw.jsonl) is summarised in its place, marked as partial, and still makes the exit status 1; so does a
run interrupted before its end (its ceilings.json says "partial run: ...", which is shown).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ert.records.ceilings_io import load_ceilings
from ert.consumers.report_model import Header
from ert.consumers.terminal import report
from ert.consumers import cells
from ert.errors import ErtError
from ert.records.files import CEILINGS_NAME

PARTIAL_NAME = "ceilings-partial.json"
HEADERS = ("ceiling", "unit", "measured", "rated", "measured/rated", "spread", "warnings")


def _tensor_named(name: str, entry: dict) -> str:
    """A tensor roof's name with its instruction and shape ("fp16 tensor peak (wgmma m64n256k16)"): on sm_90 one
    type has a wgmma and an mma.sync roof, and FP64's roof is whichever DMMA shape was faster."""
    if entry.get("pipe") != "tensor":
        return name
    said = " ".join(str(x) for x in (entry.get("instruction"), entry.get("mma_shape")) if x)
    return f"{name} ({said})" if said else name


def ceiling_rows(doc: dict) -> list[dict]:
    """One row per compute and memory ceiling (links and network included), in ``ert show``'s order."""
    ceilings = doc.get("ceilings", {})
    warnings = [str(w) for w in doc.get("warnings", [])]
    entries = [(_tensor_named(cells.compute_name(e), e), cells.unit_of(e), "gflops_per_s", e)
               for e in ceilings.get("compute", [])]
    entries += [(cells.memory_name(e), "GB/s", "gbytes_per_s", e) for e in ceilings.get("memory", [])]
    rows = []
    for name, unit, key, e in entries:
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        measured, rated_value, ratio = e.get(key), rated.get(key), rated.get("ratio")
        if ratio is None and isinstance(measured, (int, float)) and isinstance(rated_value, (int, float)) \
                and rated_value > 0:
            ratio = measured / rated_value  # a file that carries the rated value but not its ratio
        named = [w for w in warnings if w.startswith((f"{name}:", f"{name} "))]
        rows.append({"ceiling": name, "unit": unit, "measured": measured, "rated": rated_value, "ratio": ratio,
                     "spread": e.get("spread"), "warnings": len(named),
                     "rated_derivation": rated.get("derivation")})
    return rows


def _cells(row: dict) -> list[str]:
    def num(v):
        return cells.format_rate(v) if isinstance(v, (int, float)) else "-"

    return [row["ceiling"], row["unit"], num(row["measured"]), num(row["rated"]),
            f"{row['ratio']:.4f}" if isinstance(row["ratio"], (int, float)) else "-",
            f"{row['spread']:.1%}" if isinstance(row["spread"], (int, float)) else "-",
            str(row["warnings"])]


def format_run(run_dir: Path, doc: dict, rows: list[dict]) -> list[str]:
    """The run's header (as ``ert show`` prints it), the table, and one line on the ratios."""
    lines = [f"== {run_dir}"] + report.header_lines(Header.of(doc.get("metadata", {})))
    table = [list(HEADERS)] + [_cells(r) for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(HEADERS))]
    for t in table:
        # Name and unit left-aligned, numbers right-aligned; columns at least two spaces apart.
        padded = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))]
        lines.append("  " + "  ".join(padded).rstrip())
    rated = [r for r in rows if isinstance(r["ratio"], (int, float))]
    n = len(doc.get("warnings", []))
    warnings = f"{n} warning{'' if n == 1 else 's'}"
    if rated:
        low, high = min(rated, key=lambda r: r["ratio"]), max(rated, key=lambda r: r["ratio"])
        lines.append(f"  {len(rows)} ceilings, {len(rated)} with a rated value: measured/rated "
                     f"{low['ratio']:.3f} ({low['ceiling']}) to {high['ratio']:.3f} ({high['ceiling']}); "
                     f"{warnings} in all (`ert show {run_dir}` lists them)")
    else:
        lines.append(f"  {len(rows)} ceilings, none with a rated value; {warnings}")
    return lines


def summarise(run_dir: Path) -> tuple[list[str], dict | None, bool]:
    """(printed lines, JSON record or None where nothing is readable, whether the run left its ceilings.json).

    A run killed before it wrote ceilings.json may have a PARTIAL_NAME beside its raw.jsonl
    (gpu_acceptance.sh runs ``ert analyze RUN_DIR -o RUN_DIR/ceilings-partial.json``): it is
    summarised, said to be partial, and still counts as a failed run.
    """
    path = run_dir / CEILINGS_NAME if run_dir.is_dir() else run_dir
    note = []
    if not path.exists() and (run_dir / PARTIAL_NAME).is_file():
        path = run_dir / PARTIAL_NAME
        note = [f"  no {CEILINGS_NAME}: the run was killed; these ceilings are `ert analyze` of its raw.jsonl"]
    if not path.exists():
        raw = run_dir / "raw.jsonl"
        have = f"raw.jsonl has {sum(1 for _ in raw.open())} lines" if raw.is_file() else "no raw.jsonl"
        return [f"== {run_dir}", f"  no {CEILINGS_NAME}: the run failed or was cut short ({have})"], None, False
    try:
        doc = load_ceilings(path)
    except ErtError as exc:
        return [f"== {run_dir}", f"  unreadable: {exc}"], None, False
    rows = ceiling_rows(doc)
    meta = doc.get("metadata", {})
    record = {"run_dir": str(run_dir), "ceilings_file": path.name, "backend": meta.get("backend"),
              "device": meta.get("device"), "points": meta.get("points"), "wall_seconds": meta.get("wall_seconds"),
              "warnings": len(doc.get("warnings", [])), "ceilings": rows}
    # A run interrupted at its cap writes the ceilings of what it measured, with this warning.
    cut = [str(w) for w in doc.get("warnings", []) if str(w).startswith("partial run:")]
    record["partial"] = bool(note or cut)
    lines = format_run(run_dir, doc, rows)
    return lines[:1] + note + [f"  {w}" for w in cut] + lines[1:], record, not record["partial"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every row as JSON")
    args = parser.parse_args(argv)
    records, failed = [], 0
    for i, run_dir in enumerate(args.run_dirs):
        lines, record, complete = summarise(run_dir)
        print(("\n" if i else "") + "\n".join(lines))
        failed += not complete
        records.append(record if record is not None else {"run_dir": str(run_dir), "ceilings": None})
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
