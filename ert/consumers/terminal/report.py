"""Plain-text report of a ceilings document, as printed by `ert show` and at the end of a run.

It lays out the tables of the report model (``ert.consumers.report_model``) as aligned columns: a screen by
default, everything with ``verbose``; the rows and their cells are the model's, the same the HTML page shows.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ert.consumers.cells import MISSING
from ert.consumers.report_model import Header, Report
from ert.consumers.report_rows import DISTURBED_NOTE, Table
from ert.consumers.terminal.hosts_table import hosts_lines
from ert.consumers.terminal.notes import Notes, report_width, warnings_section


def aligned_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Aligned columns, two spaces apart, indented by two; numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return ("  " + "  ".join(padded)).rstrip()

    return [line(headers)] + [line(row) for row in rows]


def table_lines(table: Table | None, ref: Callable[[str], str] = lambda how: "", *, notes: bool = True) -> list[str]:
    """A model table on the screen: its title, its columns aligned (a derivation as its note's number, ``ref``),
    and its notes indented under it. A table without columns is its title alone; None is nothing."""
    if table is None:
        return []
    if not table.columns:
        return [table.title]
    rows = [[ref(cell) if column.footnote else cell for column, cell in zip(table.columns, row)]
            for row in table.cells()]
    return ([table.title] + aligned_table(table.headers, rows, [c.numeric for c in table.columns])
            + ([f"  {note}" for note in table.notes] if notes else []))


def header_lines(h: Header, *, width: int | None = None) -> list[str]:
    """The run's header: host(s), machine, backend, ranks x threads, date; points and wall time under it."""
    host, distinct = h.host, list(h.hosts)
    if len(distinct) > 1:
        # A few hosts by name (the reader checks the run spanned the nodes it meant to); many, counted.
        host = (", ".join(distinct) if len(distinct) <= 4 else f"{host} (+{len(distinct) - 1} more hosts)")
    ranks, threads = h.ranks, h.threads
    parts = [
        f"{'hosts' if len(distinct) > 1 else 'host'} {host}",
        h.machine,
        f"backend {h.backend}",
        f"{ranks} rank{'s' if ranks != 1 else ''} x {threads} thread{'s' if threads != 1 else ''}",
    ]
    extra = []
    points = h.points
    if points:
        names = ("planned", "measured", "noisy", "invalid")
        if width and all(k in points for k in names):  # the same counts, in fewer columns
            extra.append(f"{points['measured']} of {points['planned']} points measured, {points['noisy']} noisy, "
                         f"{points['invalid']} invalid")
        else:
            extra.append("points: " + ", ".join(f"{points[k]} {k}" for k in names if k in points))
    if h.wall_seconds is not None:
        extra.append(f"wall time {h.wall_seconds:.1f} s")
    if not width:
        return [f"{h.tool}: " + " | ".join(parts + [h.date])] + ([" | ".join(extra)] if extra else [])
    # The screen: the date leads the second line, and a part that would pass ``width`` starts a line of its own.
    lines = _packed([f"{h.tool}: " + parts[0]] + parts[1:], width)
    return lines + _packed([h.date] + extra, width)


def _packed(parts: list[str], width: int) -> list[str]:
    """``parts`` joined by " | ", a new (indented) line where the next would pass ``width``; none is split."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines.append("  " + part)
        else:
            lines[-1] += " | " + part
    return lines


def _memory_section(report: Report, notes: Notes, *, verbose: bool) -> list[str]:
    """The screen: every curve's levels in one table beside their rated values (a cache level's regimes are in
    its warning); ``verbose``: a table per curve, with its confirmations and regimes under it."""
    if not verbose:  # its notes are --verbose's, but a level marked '*' is explained on the screen too
        flagged = [f"  {DISTURBED_NOTE}"] if any(r.disturbed for r in report.memory) else []
        return table_lines(report.memory_table(), notes.ref, notes=False) + flagged
    lines: list[str] = []
    for table in report.curve_tables():
        lines += ([""] if lines else []) + table_lines(table)
    return lines


def _compute_section(report: Report, notes: Notes | None = None) -> list[str]:
    """The floating-point peaks (with ``notes``, the screen: each beside its rated value), tensor, integer, mixes."""
    lines: list[str] = []
    for table in report.compute_tables(rated=notes is not None):
        lines += ([""] if lines else []) + table_lines(table, notes.ref if notes else lambda how: "")
    return lines


def _rated_section(report: Report, notes: Notes, *, screen: bool = False) -> list[str]:
    """Every ceiling as a percentage of its rated value, each row referring to the footnote of its derivation
    (the screen: the ceilings its own tables do not show). A file from before 1.2: its legacy rated peaks."""
    if report.rated_legacy:
        return table_lines(report.legacy_rated_table())
    table = report.rated_table(screen=screen)
    if screen and not table.rows:
        return ["Rated values (what the hardware can physically do), as derived"] + notes.lines() if notes.texts else []
    if not any(r.cells["rated"] != MISSING for r in table.rows):
        # Say why there is nothing to compare with (a CPU not in the table, say): no table, so no numbers.
        return ([table.title] + (notes.lines() if screen else [f"  {why}" for why in notes.texts])
                if notes.texts else [])
    return table_lines(table, notes.ref) + notes.lines()


def weather_lines(report: Report, *, width: int = 100) -> list[str]:
    """The host's weather (``--verbose``): the model's table and notes, and a timeline, '#' where disturbed."""
    lines = table_lines(report.weather)
    weather = report.doc.get("weather")
    total = weather.get("seconds") if isinstance(weather, dict) else None
    if not lines or not isinstance(total, (int, float)) or total <= 0:
        return lines
    spans = [(s["start_s"], s["end_s"]) for s in weather.get("stretches", []) if isinstance(s, dict)
             and isinstance(s.get("start_s"), (int, float)) and isinstance(s.get("end_s"), (int, float))]
    n = max(10, min(60, width - 20))
    bar = "".join("#" if any(a < total * (k + 1) / n and b > total * k / n for a, b in spans) else "-"
                  for k in range(n))
    return lines + [f"  0 s |{bar}| {total:.0f} s  (# disturbed)" if total >= 10 else
                    f"  0 s |{bar}| {total:.1f} s  (# disturbed)"]


def format_ceilings(doc: dict, *, verbose: bool = False, width: int | None = None) -> str:
    """The readable report of a (validated) ceilings document; no trailing newline.

    The default fits a screen of ``width`` columns (the terminal's, 100 when
    not a terminal): tables, the rated table with numbered footnotes (each
    derivation once, wrapped), warnings one line each under their groups.
    ``verbose`` prints everything: every warning in full, every derivation whole.
    """
    width = max(40, width or report_width())
    report = Report(doc)
    notes = Notes(doc, verbose=verbose, width=width)
    lines = header_lines(report.header, width=None if verbose else width)
    lines.append("")
    lines += _memory_section(report, notes, verbose=verbose)
    transfers = table_lines(report.links_table(derivations=verbose))
    if transfers:
        lines += [""] + transfers
    lines.append("")
    lines += _compute_section(report, None if verbose else notes)
    for extra in (_rated_section(report, notes, screen=not verbose), table_lines(report.sustained),
                  table_lines(report.scaling), hosts_lines(report.hosts, width=width, verbose=verbose),
                  weather_lines(report, width=width) if verbose else [],
                  warnings_section(report, notes, verbose=verbose, width=width)):
        if extra:
            lines += [""] + extra
    return "\n".join(lines)


__all__ = ["aligned_table", "format_ceilings", "header_lines", "table_lines"]
