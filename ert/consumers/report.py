"""Plain-text report of a ceilings document, as printed by `ert show` and at the end of a run."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ert.consumers.hosts_table import format_hosts_section
from ert.consumers.notes import Notes, report_width, warnings_section
from ert.units import human_bytes
from ert.hardware import NO_RATED

_MISSING = "-"


def format_rate(value: float) -> str:
    """A GB/s or GFLOP/s value, 4 significant digits but every integer digit: 712.9, 43.26, 12346."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    # Round to 4 significant digits first so that 999.96 becomes 1000, not 1000.0.
    rounded = float(f"{value:.4g}")
    if abs(rounded) >= 1000:
        # Large values keep every integer digit: 12346, not 12350.
        return f"{value:.0f}"
    magnitude = math.floor(math.log10(abs(rounded))) + 1
    decimals = min(max(0, 4 - magnitude), 8)
    return f"{rounded:.{decimals}f}"


def _format_spread(spread: Any) -> str:
    if not isinstance(spread, (int, float)) or isinstance(spread, bool):
        return _MISSING
    percent = spread * 100
    if 0 < percent < 0.1:
        return "<0.1%"
    return f"{percent:.1f}%"


def _format_bytes(n: Any) -> str:
    return human_bytes(n) if isinstance(n, int) and not isinstance(n, bool) else _MISSING


def _format_wss_range(wss: Any) -> str:
    if not (isinstance(wss, (list, tuple)) and len(wss) == 2):
        return _MISSING
    low, high = (_format_bytes(v) for v in wss)
    return low if low == high else f"{low} - {high}"


def _format_count(n: Any) -> str:
    return str(n) if isinstance(n, int) and not isinstance(n, bool) else _MISSING


def _format_flag(flag: Any) -> str:
    return _MISSING if flag is None else ("yes" if flag else "no")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Aligned columns, two spaces apart, indented by two; numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return ("  " + "  ".join(padded)).rstrip()

    return [line(headers)] + [line(row) for row in rows]


def _header(meta: dict, *, width: int | None = None) -> list[str]:
    host = meta.get("host", _MISSING)
    hosts = meta.get("hosts") or []
    distinct = list(dict.fromkeys(hosts))
    if len(distinct) > 1:
        # A few hosts by name (the reader checks the run spanned the nodes it meant to); many, counted.
        host = (", ".join(distinct) if len(distinct) <= 4 else f"{host} (+{len(distinct) - 1} more hosts)")
    cpu = meta.get("cpu_model") or ""
    device = meta.get("device") or ""
    # The CPU backends describe the device as the CPU plus a thread count, so
    # printing both would repeat the model name.
    if device and cpu and cpu not in device:
        machine = f"{cpu} / {device}"
    else:
        machine = device or cpu or _MISSING
    ranks = meta.get("ranks", _MISSING)
    threads = meta.get("threads_per_rank", _MISSING)
    parts = [
        f"{'hosts' if len(distinct) > 1 else 'host'} {host}",
        machine,
        f"backend {meta.get('backend', _MISSING)}",
        f"{ranks} rank{'s' if ranks != 1 else ''} x {threads} thread{'s' if threads != 1 else ''}",
    ]
    date = str(meta.get("date", _MISSING))
    tool = f"{meta.get('tool', 'ert')} {meta.get('tool_version', '')}".strip()
    extra = []
    points = meta.get("points")
    if isinstance(points, dict) and points:
        names = ("planned", "measured", "noisy", "invalid")
        if width and all(k in points for k in names):  # the same counts, in fewer columns
            extra.append(f"{points['measured']} of {points['planned']} points measured, {points['noisy']} noisy, "
                         f"{points['invalid']} invalid")
        else:
            extra.append("points: " + ", ".join(f"{points[k]} {k}" for k in names if k in points))
    wall_seconds = meta.get("wall_seconds")
    if isinstance(wall_seconds, (int, float)) and not isinstance(wall_seconds, bool):
        extra.append(f"wall time {wall_seconds:.1f} s")
    if not width:
        return [f"{tool}: " + " | ".join(parts + [date])] + ([" | ".join(extra)] if extra else [])
    # The screen: the date leads the second line, and a part that would pass ``width`` starts a line of its own.
    lines = _packed([f"{tool}: " + parts[0]] + parts[1:], width)
    return lines + _packed([date] + extra, width)


def _packed(parts: list[str], width: int) -> list[str]:
    """``parts`` joined by " | ", a new (indented) line where the next would pass ``width``; none is split."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines.append("  " + part)
        else:
            lines[-1] += " | " + part
    return lines


def is_transfer_entry(e: dict) -> bool:
    """A link, peer or network level (an entry with a ``kind``), not a memory level."""
    return isinstance(e, dict) and e.get("kind") is not None


def _transfer_section(entries: list[dict], *, derivations: bool = True) -> list[str]:
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
            str(e.get("level", _MISSING)),
            str(e.get("kind", _MISSING)),
            str(e.get("variant", _MISSING)),
            format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else _MISSING,
            _format_spread(e.get("spread")),
            f"{latency:.2f}" if isinstance(latency, (int, float)) else _MISSING,
            _format_wss_range(e.get("wss_bytes")),
            _format_count(e.get("n_points")),
            f"{ratio:.0%}" if isinstance(ratio, (int, float)) else _MISSING,
            ",".join(f"{a}-{b}" for a, b in pairs[:4]) + (" ..." if len(pairs) > 4 else "") or _MISSING,
        ])
    lines = ["Links and network (plateau of the largest transfers; latency at the smallest)"]
    lines += _table(["level", "kind", "variant", "GB/s", "spread", "latency us", "sizes", "points", "of rated",
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


def _confirmed_note(entries: list[dict]) -> list[str]:
    """Per level: the roof the run confirmed (schema 1.10 ``confirmed``), how many times, and the slower stretches."""
    lines = []
    for e in entries:
        c = e.get("confirmed")
        if not isinstance(c, dict) or not isinstance(c.get("gbytes_per_s"), (int, float)):
            continue
        text = (f"  {e.get('level', _MISSING)}: confirmed {format_rate(c['gbytes_per_s'])} GB/s at "
                f"{_format_bytes(c.get('wss_bytes'))} ({c.get('by', _MISSING)}), "
                f"{_format_count(c.get('times'))} time(s)")
        roof = e.get("gbytes_per_s")
        slower = [r for r in e.get("regimes") or [] if isinstance(r, dict) and isinstance(r.get("gbytes_per_s"),
                  (int, float)) and isinstance(roof, (int, float)) and r["gbytes_per_s"] < 0.95 * roof]
        span = e.get("range_gbytes_per_s")
        if slower:
            text += "; slower: " + "; ".join(f"{format_rate(r['gbytes_per_s'])} GB/s at "
                                             f"{_format_wss_range(r.get('wss_bytes'))} "
                                             f"({_format_count(r.get('n_points'))} points)" for r in slower)
        elif isinstance(span, list) and len(span) == 2 and isinstance(roof, (int, float)) and span[0] < 0.95 * roof:
            text += f"; its points read {format_rate(span[0])} - {format_rate(span[1])} GB/s"
        if isinstance(roof, (int, float)) and roof > c["gbytes_per_s"] * 1.0001:
            text += f"; the roof, {format_rate(roof)} GB/s, is its fast mode"
        lines.append(text)
    return lines


def _confirmed_cell(confirmed) -> str:
    """How often, and how, a level's roof was confirmed (``2 re``: measured again, ``3 nb``: by its neighbours)."""
    if not isinstance(confirmed, dict) or not isinstance(confirmed.get("gbytes_per_s"), (int, float)):
        return "-"
    how = "re" if confirmed.get("by") == "measured again" else "nb"
    return f"{_format_count(confirmed.get('times'))} {how}"


def _regimes_note(entries: list[dict]) -> list[str]:
    """A cache level with several regimes inside its cache (rule 6): its range and each regime."""
    lines = []
    for e in entries:
        if isinstance(e.get("confirmed"), dict):
            continue  # _confirmed_note names its slower stretches
        regimes, span = e.get("regimes"), e.get("range_gbytes_per_s")
        if not isinstance(regimes, list) or len(regimes) < 2 or not isinstance(span, list) or len(span) != 2:
            continue
        parts = [f"{format_rate(r.get('gbytes_per_s'))} at {_format_wss_range(r.get('wss_bytes'))} "
                 f"({_format_count(r.get('n_points'))} points)" for r in regimes if isinstance(r, dict)]
        lines.append(f"  {e.get('level', _MISSING)}: {format_rate(span[0])} - {format_rate(span[1])} GB/s over its "
                     f"points; regimes " + "; ".join(parts) + "; the roof is the fastest")
    return lines


def _memory_sections(entries: list[dict]) -> list[str]:
    entries = [e for e in entries if not is_transfer_entry(e)]
    if not entries:
        return ["Memory bandwidth: none measured"]
    # Read+write first (the ERT kernel, the usual roofline), then read-only;
    # within a group keep the document order, which runs from L1 outwards.
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in entries:
        key = (entry.get("access", "rw"), entry.get("precision", ""))
        groups.setdefault(key, []).append(entry)
    order = sorted(groups, key=lambda k: (k[0] != "rw", k[0]))
    lines: list[str] = []
    for access, precision in order:
        label = {"rw": "read+write", "ro": "read-only"}.get(access, access)
        title = f"Memory bandwidth, {label}" + (f", {precision}" if precision else "")
        rows = [
            [
                str(e.get("level", _MISSING)),
                format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else _MISSING,
                _format_spread(e.get("spread")),
                _format_wss_range(e.get("wss_bytes")),
                _format_count(e.get("n_points")),
                _format_count(e.get("noisy_points")),
            ]
            for e in groups[(access, precision)]
        ]
        if lines:
            lines.append("")
        lines.append(title)
        lines += _table(
            ["level", "GB/s", "spread", "working set", "points", "noisy"],
            rows,
            [False, True, True, False, True, True],
        )
        lines += _confirmed_note(groups[(access, precision)])
        lines += _regimes_note(groups[(access, precision)])
    return lines


def _memory_table(entries: list[dict], notes: "Notes") -> list[str]:
    """The screen's memory section: every curve's levels in one table, each beside its rated value.

    Rows run as the verbose tables do (read+write first, then read-only;
    within each, the document's order from L1 outwards).
    """
    entries = [e for e in entries if not is_transfer_entry(e)]
    if not entries:
        return ["Memory bandwidth: none measured"]
    order = {"rw": 0, "ro": 1}
    ranked = sorted(range(len(entries)), key=lambda i: order.get(entries[i].get("access", "rw"), 2))
    curves = list(dict.fromkeys((e.get("precision", ""), e.get("access", "rw")) for e in (entries[i] for i in ranked)))
    rows = []
    for curve in curves:
        for e in (entries[i] for i in ranked):
            if (e.get("precision", ""), e.get("access", "rw")) != curve:
                continue
            rows.append([str(e.get("level", _MISSING)), " ".join(x for x in curve if x),
                         format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else _MISSING,
                         _format_spread(e.get("spread")), _format_wss_range(e.get("wss_bytes")),
                         _format_count(e.get("n_points")), _format_count(e.get("noisy_points")),
                         _confirmed_cell(e.get("confirmed"))]
                        + _rated_cells(e, "gbytes_per_s", notes))
    # Columns with nothing in them are left out (no rated value for any level: a CPU not in the table, say; no
    # `confirmed` in a file before 1.10).
    headers, rows, right = _with_rated(
        ["level", "curve", "GB/s", "spread", "working set", "points", "noisy", "conf", "rated", "of rated",
         "from"], rows, [False, False, True, True, False, True, True, False, True, True, False], 7)
    # A cache level's regimes are in its warning (ert show --verbose prints them here as well).
    title = "Memory bandwidth (rw read+write, ro read-only"
    title += "; conf: N times confirmed, re again or nb neighbours)" if "conf" in headers else ")"
    return [title] + _table(headers, rows, right)


def _is_int_entry(e: dict) -> bool:
    """An integer-operation roof: its gflops_per_s is GIOP/s."""
    return e.get("unit") == "GIOP/s" or e.get("precision") in ("int32", "int64")


def _unit(e: dict) -> str:
    if e.get("unit") == "GOP/s":
        return "GOP/s"
    return "GIOP/s" if _is_int_entry(e) else "GFLOP/s"


def _rated_cells(e: dict, key: str, notes: "Notes") -> list[str]:
    """The rated value, the ratio to it and its footnote, as the screen's tables show them beside a ceiling."""
    rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
    value, ratio = rated.get(key), rated.get("ratio")
    return [format_rate(value) if isinstance(value, (int, float)) else _MISSING,
            f"{ratio:.0%}" if isinstance(ratio, (int, float)) else _MISSING,
            notes.ref(str(rated.get("derivation", "")))]


def _with_rated(headers: list, rows: list, right: list, first_rated: int) -> tuple[list, list, list]:
    """The columns from ``first_rated`` on (rated, of rated, from) left out where no row fills them."""
    keep = [i for i in range(len(headers)) if i < first_rated or any(r[i] not in (_MISSING, "") for r in rows)]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows], [right[i] for i in keep]


def _in_screen_tables(e: dict) -> bool:
    """A ceiling whose rated value the screen's own tables show: a memory level or a floating-point peak."""
    if "gbytes_per_s" in e or "level" in e:
        return not is_transfer_entry(e)
    return not (_is_int_entry(e) or e.get("mix") or e.get("pipe") == "tensor")


def _compute_section(entries: list[dict], notes: "Notes | None" = None) -> list[str]:
    if not entries:
        return ["Compute: none measured"]
    mixes = [e for e in entries if e.get("mix")]
    tensor = [e for e in entries if e.get("pipe") == "tensor"]
    ints = [e for e in entries if _is_int_entry(e) and not e.get("mix") and e.get("pipe") != "tensor"]
    entries = [e for e in entries if not _is_int_entry(e) and not e.get("mix") and e.get("pipe") != "tensor"]
    lines = _float_compute_section(entries, notes) if entries else []
    if tensor:
        rows = [[str(e.get("precision", _MISSING)), str(e.get("input_type", _MISSING)),
                 str(e.get("accumulate", _MISSING)),
                 str(e.get("mma_shape", _MISSING)) + (" wgmma" if e.get("instruction") == "wgmma" else ""),
                 format_rate(e.get("gflops_per_s")), _format_spread(e.get("spread")),
                 _format_count(e.get("flops_per_mma", e.get("flops_per_element"))), _format_flag(e.get("noisy"))]
                for e in tensor]
        wgmma = any(e.get("instruction") == "wgmma" for e in tensor)
        integer = [e for e in tensor if _is_int_entry(e)]
        lines += ([""] if lines else []) + [
            "Tensor-core compute (warp-level MMA" + (", warpgroup wgmma on Hopper" if wgmma else "") +
            "; a multiply-add is 2 FLOPs" + ("; int8: 2 integer ops, GIOP/s" if integer else "") + ")"]
        if integer:  # int8 (s32 accumulate) rates are integer operations: one unit column says which
            for row, e in zip(rows, tensor):
                row.insert(5, _unit(e))
            lines += _table(["precision", "input", "accumulate", "shape", "rate", "unit", "spread", "ops/MMA",
                             "noisy"], rows, [False, False, False, False, True, False, True, True, False])
        else:
            lines += _table(["precision", "input", "accumulate", "shape", "GFLOP/s", "spread", "FLOPs/MMA", "noisy"],
                            rows, [False, False, False, False, True, True, True, False])
        lines += [f"  {e.get('precision', _MISSING)} {e.get('mma_shape', '')}: {e['note']}" for e in tensor
                  if e.get("note")]
    if ints:
        rows = [[f"{e.get('precision', _MISSING)} {'add' if e.get('op') == 'add' else 'multiply-add'}", format_rate(e.get("gflops_per_s")), _format_spread(e.get("spread")),
                 _format_count(e.get("flops_per_element")), _format_bytes(e.get("wss_bytes")),
                 _format_flag(e.get("noisy"))] for e in ints]
        lines += ([""] if lines else []) + ["Integer compute (wrapping; a multiply and an add are 2 ops, an add 1)"]
        lines += _table(["kernel", "GIOP/s", "spread", "ops/element", "working set", "noisy"], rows,
                        [False, True, True, True, False, False])
    if mixes:
        rows = [[f"{e.get('precision', _MISSING)} {e.get('mix')}", str(e.get("mix_ratio", _MISSING)),
                 format_rate(e.get("gflops_per_s")), _unit(e), _format_spread(e.get("spread")),
                 _format_bytes(e.get("wss_bytes")), _format_flag(e.get("noisy"))] for e in mixes]
        lines += ([""] if lines else []) + ["Measured mixes (every operation of both halves counted)"]
        lines += _table(["mix", "ratio", "rate", "unit", "spread", "working set", "noisy"], rows,
                        [False, False, True, False, True, False, False])
    return lines


def _float_compute_section(entries: list[dict], notes: "Notes | None" = None) -> list[str]:
    """The floating-point peaks; with ``notes`` (the screen) each beside its rated value and footnote."""
    rows = [
        [
            str(e.get("precision", _MISSING)),
            _format_flag(e.get("fma")),
            format_rate(e["gflops_per_s"]) if "gflops_per_s" in e else _MISSING,
            _format_spread(e.get("spread")),
            _format_count(e.get("flops_per_element")),
            _format_bytes(e.get("wss_bytes")),
            _format_flag(e.get("noisy")),
        ]
        for e in entries
    ]
    headers = ["precision", "FMA", "GFLOP/s", "spread", "FLOPs/element", "working set", "noisy"]
    right = [False, False, True, True, True, False, False]
    if notes is None:
        return ["Compute"] + _table(headers, rows, right)
    for row, e in zip(rows, entries):
        row += _rated_cells(e, "gflops_per_s", notes)
    headers, rows, right = _with_rated(headers + ["rated", "of rated", "from"], rows, right + [True, True, False],
                                       len(headers))
    return ["Compute"] + _table(headers, rows, right)


def _memory_name(e: dict) -> str:
    if is_transfer_entry(e):
        return f"{e.get('level', _MISSING)} {e.get('variant', '')}".strip()
    access = {"rw": "read+write", "ro": "read-only"}.get(e.get("access", ""), e.get("access", ""))
    return " ".join(str(x) for x in (e.get("precision", ""), access, e.get("level", _MISSING)) if x)


def _compute_name(e: dict) -> str:
    if e.get("pipe") == "tensor":
        return f"{e.get('precision', _MISSING)} tensor peak"
    if e.get("mix"):
        return f"{e.get('precision', _MISSING)} {e['mix']} mix peak"
    if _is_int_entry(e):
        return f"{e.get('precision', _MISSING)} {'add' if e.get('op') == 'add' else 'multiply-add'} peak"
    return f"{e.get('precision', _MISSING)} {'FMA' if e.get('fma') else 'no-FMA'} peak"


def _scaling_section(scaling: Any) -> list[str]:
    """One row per ceiling, one column per thread count, and the largest count's ratio to the smallest."""
    counts = scaling.get("by_threads") if isinstance(scaling, dict) else None
    counts = [c for c in counts or [] if isinstance(c, dict)]
    if not counts:
        return []
    rows: dict[tuple, list] = {}
    for k, entry in enumerate(counts):
        ceilings = entry.get("ceilings", {})
        for e in ceilings.get("memory", []):
            rows.setdefault((0, _memory_name(e), "GB/s"), [None] * len(counts))[k] = e.get("gbytes_per_s")
        for e in ceilings.get("compute", []):
            rows.setdefault((1, _compute_name(e), _unit(e)), [None] * len(counts))[k] = e.get("gflops_per_s")
    first, last = counts[0].get("threads_per_rank"), counts[-1].get("threads_per_rank")
    headers = ["ceiling", "unit"] + [f"{c.get('threads_per_rank', _MISSING)} thr" for c in counts]
    headers.append(f"{last}/{first}")
    table = []
    for (_, name, unit), values in rows.items():
        cells = [format_rate(v) if isinstance(v, (int, float)) else _MISSING for v in values]
        ratio = (f"{values[-1] / values[0]:.2f}x" if isinstance(values[0], (int, float)) and values[0]
                 and isinstance(values[-1], (int, float)) else _MISSING)
        table.append([name, unit] + cells + [ratio])
    return ["Thread scaling (threads per rank)"] + _table(
        headers, table, [False, False] + [True] * (len(counts) + 1))


def _sustained_section(ceilings: dict) -> list[str]:
    """Burst (sweep) value beside the sustained one for every ceiling that was held."""
    rows = []
    for kind, unit, key, name in (("compute", "GFLOP/s", "gflops_per_s", _compute_name),
                                  ("memory", "GB/s", "gbytes_per_s", _memory_name)):
        for e in ceilings.get(kind, []):
            held = e.get("sustained")
            if not isinstance(held, dict):
                continue
            cells = [held.get(key), held.get(f"first_{key}"), held.get(f"last_{key}"),
                     held.get(f"min_region_{key}")]
            rows.append([name(e), _unit(e) if kind == "compute" else unit, format_rate(e[key])]
                        + [format_rate(v) if isinstance(v, (int, float)) else _MISSING for v in cells]
                        + [f"{held.get('hold_seconds', 0):.0f} s", f"{held.get('ratio_to_burst', 0):.3f}"])
    if not rows:
        return []
    return ["Sustained versus burst"] + _table(
        ["ceiling", "unit", "burst", "sustained", "first 10%", "last 10%", "slowest", "held", "sustained/burst"],
        rows, [False, False] + [True] * 7)


def _rated_section(doc: dict, notes: "Notes", *, screen: bool = False) -> list[str]:
    """Every ceiling as a percentage of its rated value, each row referring to the footnote of its derivation.

    Files from before 1.2 carry rated peaks only in ``metadata.backend_info.rated``;
    those are matched to the ceilings here as they always were.
    """
    ceilings = doc.get("ceilings", {})
    entries = [(_unit(e), "gflops_per_s", _compute_name(e), e) for e in ceilings.get("compute", [])]
    entries += [("GB/s", "gbytes_per_s", _memory_name(e), e) for e in ceilings.get("memory", [])]
    if not any(isinstance(e.get("rated"), dict) for *_, e in entries):
        return _legacy_rated_section(doc)
    if screen:  # the screen's memory and compute tables show these beside each ceiling
        entries = [(u, k, n, e) for u, k, n, e in entries if not _in_screen_tables(e)]
    rows = []
    for unit, key, name, e in entries:
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        value, ratio, how = rated.get(key), rated.get("ratio"), str(rated.get("derivation", ""))
        if value is None:
            rows.append([f"{name} {unit}", format_rate(e.get(key)), _MISSING, _MISSING,
                         notes.ref(how) if how.startswith(NO_RATED) else ""])
            continue
        rows.append([f"{name} {unit}", format_rate(e.get(key)), format_rate(value),
                     f"{ratio:.0%}" if isinstance(ratio, (int, float)) else _MISSING, notes.ref(how)])
    title = "Measured against rated (what the hardware can physically do)"
    if screen and not rows:
        return ["Rated values (what the hardware can physically do), as derived"] + notes.lines() if notes.texts else []
    if not any(row[2] != _MISSING for row in rows):
        # Say why there is nothing to compare with (a CPU not in the table, say): no table, so no numbers.
        return [title] + (notes.lines() if screen else [f"  {why}" for why in notes.texts]) if notes.texts else []
    return [title] + _table(["ceiling", "measured", "rated", "of rated", "from"], rows,
                            [False, True, True, True, False]) + notes.lines()


def _legacy_rated_section(doc: dict) -> list[str]:
    """Rated peaks of a pre-1.2 file (metadata.backend_info.rated) beside the measured ceilings."""
    rated = (doc.get("metadata", {}).get("backend_info") or {}).get("rated")
    if not isinstance(rated, dict):
        return []
    ceilings = doc.get("ceilings", {})
    rows = []
    for r in rated.get("compute", []):
        measured = [c["gflops_per_s"] for c in ceilings.get("compute", [])
                    if c.get("precision") == r.get("precision") and c.get("fma") == r.get("fma")]
        if measured and r.get("gflops_per_s"):
            name = f"{r['precision']} {'FMA' if r['fma'] else 'no-FMA'} GFLOP/s"
            rows.append([name, format_rate(measured[0]), format_rate(r["gflops_per_s"]),
                         f"{measured[0] / r['gflops_per_s']:.0%}", str(r.get("derivation", ""))])
    for r in rated.get("memory", []):
        levels = [m for m in ceilings.get("memory", []) if m.get("level") == r.get("level")]
        if levels and r.get("gbytes_per_s"):
            best = max(levels, key=lambda m: m["gbytes_per_s"])
            name = f"{r['level']} GB/s ({best.get('access', '')} {best.get('precision', '')})"
            rows.append([name, format_rate(best["gbytes_per_s"]), format_rate(r["gbytes_per_s"]),
                         f"{best['gbytes_per_s'] / r['gbytes_per_s']:.0%}", str(r.get("derivation", ""))])
    if not rows:
        return []
    return ["Measured against rated peaks (derived from the device's properties)"] + _table(
        ["ceiling", "measured", "rated", "of rated", "rated from"], rows, [False, True, True, True, False])


def format_ceilings(doc: dict, *, verbose: bool = False, width: int | None = None) -> str:
    """The readable report of a (validated) ceilings document; no trailing newline.

    The default fits a screen of ``width`` columns (the terminal's, 100 when
    not a terminal): tables, the rated table with numbered footnotes (each
    derivation once, wrapped), warnings one line each under their groups.
    ``verbose`` prints everything: every warning in full, every derivation whole.
    """
    width = max(40, width or report_width())
    notes = Notes(doc, verbose=verbose, width=width)
    ceilings = doc.get("ceilings", {})
    lines = _header(doc.get("metadata", {}), width=None if verbose else width)
    lines.append("")
    lines += (_memory_sections(ceilings.get("memory", [])) if verbose
              else _memory_table(ceilings.get("memory", []), notes))
    transfers = _transfer_section([e for e in ceilings.get("memory", []) if is_transfer_entry(e)],
                                  derivations=verbose)
    if transfers:
        lines += [""] + transfers
    lines.append("")
    lines += _compute_section(ceilings.get("compute", []), None if verbose else notes)
    for extra in (_rated_section(doc, notes, screen=not verbose), _sustained_section(ceilings),
                  _scaling_section(doc.get("scaling")),
                  format_hosts_section(doc, width=width, verbose=verbose),
                  warnings_section(doc, notes, verbose=verbose, width=width)):
        if extra:
            lines += [""] + extra
    return "\n".join(lines)


__all__ = ["format_ceilings", "human_bytes", "format_rate", "is_transfer_entry"]
