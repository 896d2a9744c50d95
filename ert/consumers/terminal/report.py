"""Plain-text report of a ceilings document, as printed by `ert show` and at the end of a run."""

from __future__ import annotations

from ert.consumers.terminal.hosts_table import format_hosts_section
from ert.consumers.terminal.notes import Notes, report_width, warnings_section
from ert.consumers.terminal.report_cells import (MISSING, aligned_table, compute_name, format_bytes, format_count, format_flag,
                                        format_rate, format_spread, format_wss_range, is_int_entry, is_transfer_entry,
                                        memory_name, unit_of)
from ert.consumers.terminal.report_extras import scaling_section, sustained_section, transfer_section
from ert.hardware import NO_RATED
from ert.spec import ACCESS_NAMES, access_name


def _header(meta: dict, *, width: int | None = None) -> list[str]:
    host = meta.get("host", MISSING)
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
        machine = device or cpu or MISSING
    ranks = meta.get("ranks", MISSING)
    threads = meta.get("threads_per_rank", MISSING)
    parts = [
        f"{'hosts' if len(distinct) > 1 else 'host'} {host}",
        machine,
        f"backend {meta.get('backend', MISSING)}",
        f"{ranks} rank{'s' if ranks != 1 else ''} x {threads} thread{'s' if threads != 1 else ''}",
    ]
    date = str(meta.get("date", MISSING))
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


def _confirmed_note(entries: list[dict]) -> list[str]:
    """Per level: the roof the run confirmed (schema 1.10 ``confirmed``), how many times, and the slower stretches."""
    lines = []
    for e in entries:
        c = e.get("confirmed")
        if not isinstance(c, dict) or not isinstance(c.get("gbytes_per_s"), (int, float)):
            continue
        text = (f"  {e.get('level', MISSING)}: confirmed {format_rate(c['gbytes_per_s'])} GB/s at "
                f"{format_bytes(c.get('wss_bytes'))} ({c.get('by', MISSING)}), "
                f"{format_count(c.get('times'))} time(s)")
        roof = e.get("gbytes_per_s")
        slower = [r for r in e.get("regimes") or [] if isinstance(r, dict) and isinstance(r.get("gbytes_per_s"),
                  (int, float)) and isinstance(roof, (int, float)) and r["gbytes_per_s"] < 0.95 * roof]
        span = e.get("range_gbytes_per_s")
        if slower:
            text += "; slower: " + "; ".join(f"{format_rate(r['gbytes_per_s'])} GB/s at "
                                             f"{format_wss_range(r.get('wss_bytes'))} "
                                             f"({format_count(r.get('n_points'))} points)" for r in slower)
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
    return f"{format_count(confirmed.get('times'))} {how}"


def _regimes_note(entries: list[dict]) -> list[str]:
    """A cache level with several regimes inside its cache (rule 6): its range and each regime."""
    lines = []
    for e in entries:
        if isinstance(e.get("confirmed"), dict):
            continue  # _confirmed_note names its slower stretches
        regimes, span = e.get("regimes"), e.get("range_gbytes_per_s")
        if not isinstance(regimes, list) or len(regimes) < 2 or not isinstance(span, list) or len(span) != 2:
            continue
        parts = [f"{format_rate(r.get('gbytes_per_s'))} at {format_wss_range(r.get('wss_bytes'))} "
                 f"({format_count(r.get('n_points'))} points)" for r in regimes if isinstance(r, dict)]
        lines.append(f"  {e.get('level', MISSING)}: {format_rate(span[0])} - {format_rate(span[1])} GB/s over its "
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
        label = access_name(access)
        title = f"Memory bandwidth, {label}" + (f", {precision}" if precision else "")
        rows = [
            [
                str(e.get("level", MISSING)),
                format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else MISSING,
                format_spread(e.get("spread")),
                format_wss_range(e.get("wss_bytes")),
                format_count(e.get("n_points")),
                format_count(e.get("noisy_points")),
            ]
            for e in groups[(access, precision)]
        ]
        if lines:
            lines.append("")
        lines.append(title)
        lines += aligned_table(
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
            rows.append([str(e.get("level", MISSING)), " ".join(x for x in curve if x),
                         format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else MISSING,
                         format_spread(e.get("spread")), format_wss_range(e.get("wss_bytes")),
                         format_count(e.get("n_points")), format_count(e.get("noisy_points")),
                         _confirmed_cell(e.get("confirmed"))]
                        + _rated_cells(e, "gbytes_per_s", notes))
    # Columns with nothing in them are left out (no rated value for any level: a CPU not in the table, say; no
    # `confirmed` in a file before 1.10).
    headers, rows, right = _with_rated(
        ["level", "curve", "GB/s", "spread", "working set", "points", "noisy", "conf", "rated", "of rated",
         "from"], rows, [False, False, True, True, False, True, True, False, True, True, False], 7)
    # A cache level's regimes are in its warning (ert show --verbose prints them here as well).
    title = "Memory bandwidth (" + ", ".join(f"{code} {name}" for code, name in ACCESS_NAMES.items())
    title += "; conf: N times confirmed, re again or nb neighbours)" if "conf" in headers else ")"
    return [title] + aligned_table(headers, rows, right)


def _rated_cells(e: dict, key: str, notes: "Notes") -> list[str]:
    """The rated value, the ratio to it and its footnote, as the screen's tables show them beside a ceiling."""
    rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
    value, ratio = rated.get(key), rated.get("ratio")
    return [format_rate(value) if isinstance(value, (int, float)) else MISSING,
            f"{ratio:.0%}" if isinstance(ratio, (int, float)) else MISSING,
            notes.ref(str(rated.get("derivation", "")))]


def _with_rated(headers: list, rows: list, right: list, first_rated: int) -> tuple[list, list, list]:
    """The columns from ``first_rated`` on (rated, of rated, from) left out where no row fills them."""
    keep = [i for i in range(len(headers)) if i < first_rated or any(r[i] not in (MISSING, "") for r in rows)]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows], [right[i] for i in keep]


def _in_screen_tables(e: dict) -> bool:
    """A ceiling whose rated value the screen's own tables show: a memory level or a floating-point peak."""
    if "gbytes_per_s" in e or "level" in e:
        return not is_transfer_entry(e)
    return not (is_int_entry(e) or e.get("mix") or e.get("pipe") == "tensor")


def _compute_section(entries: list[dict], notes: "Notes | None" = None) -> list[str]:
    if not entries:
        return ["Compute: none measured"]
    mixes = [e for e in entries if e.get("mix")]
    tensor = [e for e in entries if e.get("pipe") == "tensor"]
    ints = [e for e in entries if is_int_entry(e) and not e.get("mix") and e.get("pipe") != "tensor"]
    entries = [e for e in entries if not is_int_entry(e) and not e.get("mix") and e.get("pipe") != "tensor"]
    lines = _float_compute_section(entries, notes) if entries else []
    if tensor:
        rows = [[str(e.get("precision", MISSING)), str(e.get("input_type", MISSING)),
                 str(e.get("accumulate", MISSING)),
                 str(e.get("mma_shape", MISSING)) + (" wgmma" if e.get("instruction") == "wgmma" else ""),
                 format_rate(e.get("gflops_per_s")), format_spread(e.get("spread")),
                 format_count(e.get("flops_per_mma", e.get("flops_per_element"))), format_flag(e.get("noisy"))]
                for e in tensor]
        wgmma = any(e.get("instruction") == "wgmma" for e in tensor)
        integer = [e for e in tensor if is_int_entry(e)]
        lines += ([""] if lines else []) + [
            "Tensor-core compute (warp-level MMA" + (", warpgroup wgmma on Hopper" if wgmma else "") +
            "; a multiply-add is 2 FLOPs" + ("; int8: 2 integer ops, GIOP/s" if integer else "") + ")"]
        if integer:  # int8 (s32 accumulate) rates are integer operations: one unit column says which
            for row, e in zip(rows, tensor):
                row.insert(5, unit_of(e))
            lines += aligned_table(["precision", "input", "accumulate", "shape", "rate", "unit", "spread", "ops/MMA",
                             "noisy"], rows, [False, False, False, False, True, False, True, True, False])
        else:
            lines += aligned_table(["precision", "input", "accumulate", "shape", "GFLOP/s", "spread", "FLOPs/MMA", "noisy"],
                            rows, [False, False, False, False, True, True, True, False])
        lines += [f"  {e.get('precision', MISSING)} {e.get('mma_shape', '')}: {e['note']}" for e in tensor
                  if e.get("note")]
    if ints:
        rows = [[f"{e.get('precision', MISSING)} {'add' if e.get('op') == 'add' else 'multiply-add'}", format_rate(e.get("gflops_per_s")), format_spread(e.get("spread")),
                 format_count(e.get("flops_per_element")), format_bytes(e.get("wss_bytes")),
                 format_flag(e.get("noisy"))] for e in ints]
        lines += ([""] if lines else []) + ["Integer compute (wrapping; a multiply and an add are 2 ops, an add 1)"]
        lines += aligned_table(["kernel", "GIOP/s", "spread", "ops/element", "working set", "noisy"], rows,
                        [False, True, True, True, False, False])
    if mixes:
        rows = [[f"{e.get('precision', MISSING)} {e.get('mix')}", str(e.get("mix_ratio", MISSING)),
                 format_rate(e.get("gflops_per_s")), unit_of(e), format_spread(e.get("spread")),
                 format_bytes(e.get("wss_bytes")), format_flag(e.get("noisy"))] for e in mixes]
        lines += ([""] if lines else []) + ["Measured mixes (every operation of both halves counted)"]
        lines += aligned_table(["mix", "ratio", "rate", "unit", "spread", "working set", "noisy"], rows,
                        [False, False, True, False, True, False, False])
    return lines


def _float_compute_section(entries: list[dict], notes: "Notes | None" = None) -> list[str]:
    """The floating-point peaks; with ``notes`` (the screen) each beside its rated value and footnote."""
    rows = [
        [
            str(e.get("precision", MISSING)),
            format_flag(e.get("fma")),
            format_rate(e["gflops_per_s"]) if "gflops_per_s" in e else MISSING,
            format_spread(e.get("spread")),
            format_count(e.get("flops_per_element")),
            format_bytes(e.get("wss_bytes")),
            format_flag(e.get("noisy")),
        ]
        for e in entries
    ]
    headers = ["precision", "FMA", "GFLOP/s", "spread", "FLOPs/element", "working set", "noisy"]
    right = [False, False, True, True, True, False, False]
    if notes is None:
        return ["Compute"] + aligned_table(headers, rows, right)
    for row, e in zip(rows, entries):
        row += _rated_cells(e, "gflops_per_s", notes)
    headers, rows, right = _with_rated(headers + ["rated", "of rated", "from"], rows, right + [True, True, False],
                                       len(headers))
    return ["Compute"] + aligned_table(headers, rows, right)


def _rated_section(doc: dict, notes: "Notes", *, screen: bool = False) -> list[str]:
    """Every ceiling as a percentage of its rated value, each row referring to the footnote of its derivation.

    Files from before 1.2 carry rated peaks only in ``metadata.backend_info.rated``;
    those are matched to the ceilings here as they always were.
    """
    ceilings = doc.get("ceilings", {})
    entries = [(unit_of(e), "gflops_per_s", compute_name(e), e) for e in ceilings.get("compute", [])]
    entries += [("GB/s", "gbytes_per_s", memory_name(e), e) for e in ceilings.get("memory", [])]
    if not any(isinstance(e.get("rated"), dict) for *_, e in entries):
        return _legacy_rated_section(doc)
    if screen:  # the screen's memory and compute tables show these beside each ceiling
        entries = [(u, k, n, e) for u, k, n, e in entries if not _in_screen_tables(e)]
    rows = []
    for unit, key, name, e in entries:
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        value, ratio, how = rated.get(key), rated.get("ratio"), str(rated.get("derivation", ""))
        if value is None:
            rows.append([f"{name} {unit}", format_rate(e.get(key)), MISSING, MISSING,
                         notes.ref(how) if how.startswith(NO_RATED) else ""])
            continue
        rows.append([f"{name} {unit}", format_rate(e.get(key)), format_rate(value),
                     f"{ratio:.0%}" if isinstance(ratio, (int, float)) else MISSING, notes.ref(how)])
    title = "Measured against rated (what the hardware can physically do)"
    if screen and not rows:
        return ["Rated values (what the hardware can physically do), as derived"] + notes.lines() if notes.texts else []
    if not any(row[2] != MISSING for row in rows):
        # Say why there is nothing to compare with (a CPU not in the table, say): no table, so no numbers.
        return [title] + (notes.lines() if screen else [f"  {why}" for why in notes.texts]) if notes.texts else []
    return [title] + aligned_table(["ceiling", "measured", "rated", "of rated", "from"], rows,
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
    return ["Measured against rated peaks (derived from the device's properties)"] + aligned_table(
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
    transfers = transfer_section([e for e in ceilings.get("memory", []) if is_transfer_entry(e)],
                                  derivations=verbose)
    if transfers:
        lines += [""] + transfers
    lines.append("")
    lines += _compute_section(ceilings.get("compute", []), None if verbose else notes)
    for extra in (_rated_section(doc, notes, screen=not verbose), sustained_section(ceilings),
                  scaling_section(doc.get("scaling")),
                  format_hosts_section(doc, width=width, verbose=verbose),
                  warnings_section(doc, notes, verbose=verbose, width=width)):
        if extra:
            lines += [""] + extra
    return "\n".join(lines)


__all__ = ["format_ceilings"]
