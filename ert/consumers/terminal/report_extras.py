"""The report's sections beside the sweep's tables: links and network, sustained versus burst, thread scaling."""

from __future__ import annotations

from typing import Any

from ert.consumers.terminal.report_cells import (MISSING, aligned_table, compute_name, format_count, format_rate, format_spread,
                                        format_wss_range, memory_name, unit_of)


def transfer_section(entries: list[dict], *, derivations: bool = True) -> list[str]:
    """Links and network: one row per (level, variant) with its plateau, latency, sizes, rated ratio and pairs.

    ``derivations`` False leaves the rated values' derivations to the rated table's footnotes.
    """
    if not entries:
        return []
    rows = []
    for e in entries:
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        ratio = rated.get("ratio")
        latency = e.get("latency_us")
        pairs = e.get("pairs") or []
        rows.append([
            str(e.get("level", MISSING)),
            str(e.get("kind", MISSING)),
            str(e.get("variant", MISSING)),
            format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else MISSING,
            format_spread(e.get("spread")),
            f"{latency:.2f}" if isinstance(latency, (int, float)) else MISSING,
            format_wss_range(e.get("wss_bytes")),
            format_count(e.get("n_points")),
            f"{ratio:.0%}" if isinstance(ratio, (int, float)) else MISSING,
            ",".join(f"{a}-{b}" for a, b in pairs[:4]) + (" ..." if len(pairs) > 4 else "") or MISSING,
        ])
    lines = ["Links and network (plateau of the largest transfers; latency at the smallest)"]
    lines += aligned_table(["level", "kind", "variant", "GB/s", "spread", "latency us", "sizes", "points", "of rated",
                     "pairs"], rows, [False, False, False, True, True, True, False, True, True, False])
    # Notes (what carried the bytes, the rated value's derivation, a peer matrix), each text once with the
    # levels it applies to.
    grouped: dict[str, list[str]] = {}
    for e in entries:
        notes = [str(e[k]) for k in ("transport",) if e.get(k)]
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        if rated.get("derivation") and derivations:
            notes.append(f"rated: {rated['derivation']}" if rated.get("ratio") is not None
                         else str(rated["derivation"]))
        if e.get("cuda_aware"):
            notes.append("CUDA-aware MPI (device buffers)")
        matrix = e.get("matrix")
        if isinstance(matrix, dict) and matrix.get("devices"):
            grid = matrix.get("gbytes_per_s") or []
            cells = "; ".join(f"{matrix['devices'][i]}->{matrix['devices'][j]} {format_rate(v)}"
                              for i, row in enumerate(grid) for j, v in enumerate(row)
                              if isinstance(v, (int, float)))
            notes.append(f"pairs GB/s: {cells}")
        for note in notes:
            grouped.setdefault(note, []).append(f"{e.get('level')} {e.get('variant', '')}".strip())
    for note, names in grouped.items():
        lines.append(f"  {', '.join(names)}: {note}")
    return lines


def scaling_section(scaling: Any) -> list[str]:
    """One row per ceiling, one column per thread count, and the largest count's ratio to the smallest."""
    counts = scaling.get("by_threads") if isinstance(scaling, dict) else None
    counts = [c for c in counts or [] if isinstance(c, dict)]
    if not counts:
        return []
    rows: dict[tuple, list] = {}
    for k, entry in enumerate(counts):
        ceilings = entry.get("ceilings", {})
        for e in ceilings.get("memory", []):
            rows.setdefault((0, memory_name(e), "GB/s"), [None] * len(counts))[k] = e.get("gbytes_per_s")
        for e in ceilings.get("compute", []):
            rows.setdefault((1, compute_name(e), unit_of(e)), [None] * len(counts))[k] = e.get("gflops_per_s")
    first, last = counts[0].get("threads_per_rank"), counts[-1].get("threads_per_rank")
    headers = ["ceiling", "unit"] + [f"{c.get('threads_per_rank', MISSING)} thr" for c in counts]
    headers.append(f"{last}/{first}")
    table = []
    for (_, name, unit), values in rows.items():
        cells = [format_rate(v) if isinstance(v, (int, float)) else MISSING for v in values]
        ratio = (f"{values[-1] / values[0]:.2f}x" if isinstance(values[0], (int, float)) and values[0]
                 and isinstance(values[-1], (int, float)) else MISSING)
        table.append([name, unit] + cells + [ratio])
    return ["Thread scaling (threads per rank)"] + aligned_table(
        headers, table, [False, False] + [True] * (len(counts) + 1))


def sustained_section(ceilings: dict) -> list[str]:
    """Burst (sweep) value beside the sustained one for every ceiling that was held."""
    rows = []
    for kind, unit, key, name in (("compute", "GFLOP/s", "gflops_per_s", compute_name),
                                  ("memory", "GB/s", "gbytes_per_s", memory_name)):
        for e in ceilings.get(kind, []):
            held = e.get("sustained")
            if not isinstance(held, dict):
                continue
            cells = [held.get(key), held.get(f"first_{key}"), held.get(f"last_{key}"),
                     held.get(f"min_region_{key}")]
            rows.append([name(e), unit_of(e) if kind == "compute" else unit, format_rate(e[key])]
                        + [format_rate(v) if isinstance(v, (int, float)) else MISSING for v in cells]
                        + [f"{held.get('hold_seconds', 0):.0f} s", f"{held.get('ratio_to_burst', 0):.3f}"])
    if not rows:
        return []
    return ["Sustained versus burst"] + aligned_table(
        ["ceiling", "unit", "burst", "sustained", "first 10%", "last 10%", "slowest", "held", "sustained/burst"],
        rows, [False, False] + [True] * 7)
