"""`ert report`: one self-contained HTML page of a run, or of several machines side by side (the procurement view).

The page carries everything inline: the charts as SVG written here
(``html_charts``, ``html_sweep``), a small stylesheet and a small script
(``html_report.css``, ``html_report.js``, package data) for hover text and
the legend's toggles. Nothing loads from the network, so it opens from a mail
attachment, offline. The tables are the report model's (``ert.consumers.report_model``),
the very rows and cells ``ert show`` prints, and the ratio table is ``ert compare``'s;
the full ``ert show`` text is at the end of each machine.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from importlib import resources

from ert.consumers.compare import compare as compare_mod
from ert.consumers.html import charts as html_charts
from ert.consumers.html import sweep as html_sweep
from ert.consumers.html import weather as html_weather
from ert.consumers import roofs as roofs_mod
from ert.consumers.cells import format_rate
from ert.consumers.html.svg_chart import attr, text
from ert.consumers.report_model import Header, Report
from ert.consumers.report_rows import Table
from ert.consumers.terminal.report import format_ceilings

MISSING = "-"


@dataclass(frozen=True)
class Machine:
    """One input of the report: its ceilings, its raw records when it was a run directory, and where it came from."""

    doc: dict
    source: str
    raw: object = None  # ert.records.rawio.RawData, or None (a ceilings file or ERT's roofline.json: no sweep)


def _asset(name: str) -> str:
    return resources.files("ert.consumers.html").joinpath(name).read_text(encoding="utf-8")


def _page(title: str, body: str) -> str:
    from ert import __version__

    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="ert {attr(__version__)}">'
            f"<title>{text(title)}</title><style>{_asset('html_report.css')}</style></head>"
            f'<body><main>{body}</main><div id="tip" role="tooltip" hidden></div>'
            f"<script>{_asset('html_report.js')}</script></body></html>\n")


def _table(headers: list[str], rows: list[list[str]], *, numeric: set[int] = frozenset(), cls: str = "",
           key: str = "") -> str:
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{text(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{text(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    named = f' data-table="{attr(key)}"' if key else ""
    return f'<table class="{cls}"{named}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ----------------------------------------------------------------------------------------- header
def header_fields(h: Header) -> list[tuple[str, str]]:
    """(name, value) of the header: host, CPU/device, measured clock, backend, ranks x threads, date, version,
    config."""
    hosts = h.hosts
    return [("host" if len(hosts) <= 1 else f"hosts ({len(hosts)})", ", ".join(hosts) if len(hosts) > 1
             else str(h.host)),
            ("CPU / device", h.machine), ("measured clock", h.clock), ("backend", str(h.backend)),
            ("ranks x threads", f"{h.ranks} x {h.threads}"), ("date", h.date), ("tool version", h.tool),
            ("config sha256", h.config_sha[:16] if h.config_sha else MISSING)]


def _header_block(h: Header, source: str) -> str:
    cells = "".join(f"<div><dt>{text(k)}</dt><dd>{text(v)}</dd></div>" for k, v in header_fields(h))
    extra = ", ".join(f"{h.points[k]} {k}" for k in ("planned", "measured", "noisy", "invalid") if k in h.points)
    note = "; ".join(x for x in (f"points: {extra}" if extra else "",
                                 f"wall time {h.wall_seconds:.1f} s" if h.wall_seconds is not None else "",
                                 f"schema {h.schema_version}", f"from {source}") if x)
    return f'<dl class="header">{cells}</dl><p class="note">{text(note)}</p>'


# ----------------------------------------------------------------------------------------- tables
def model_table(table: Table | None, report: Report) -> str:
    """A table of the report model: its title, its columns (numbers class=num; a derivation as its note's number,
    as `ert show --verbose` numbers them), its notes as a list. A table without columns is its title alone."""
    if table is None:
        return ""
    if not table.columns:
        return f"<p>{text(table.title)}.</p>"
    number = {how: f"[{k}]" for k, how in enumerate(report.derivations, 1)}
    rows = [[number.get(cell, "") if c.footnote else cell for c, cell in zip(table.columns, row)]
            for row in table.cells()]
    numeric = {i for i, c in enumerate(table.columns) if c.numeric}
    items = "".join(f"<li>{text(n)}</li>" for n in table.notes)
    return (f"<h4>{text(table.title)}</h4>" + _table(table.headers, rows, numeric=numeric, key=table.key)
            + (f'<ul class="notes">{items}</ul>' if items else ""))


def _derivations(report: Report) -> str:
    items = "".join(f"<li value=\"{i}\">{text(how)}</li>" for i, how in enumerate(report.derivations, 1))
    return f'<ol class="derivations">{items}</ol>' if items else ""


def _rated_tables(report: Report) -> str:
    """Every ceiling beside its rated value, the derivations numbered once (as `ert show --verbose` does); a file
    from before 1.2: its rated peaks; none to compare with: why."""
    if report.rated_legacy:
        return model_table(report.legacy_rated_table(), report)
    table = report.rated_table()
    if not any(r.cells["rated"] != MISSING for r in table.rows):
        return f"<h4>{text(table.title)}</h4>{_derivations(report)}" if report.derivations else ""
    return model_table(table, report) + _derivations(report)


def _warnings(report: Report) -> str:
    """The warnings grouped as `ert show` groups them, each with its stable code."""
    if not report.warning_count:
        return ""
    parts = [f"<h4>Warnings ({report.warning_count})</h4>"]
    for group in report.warnings:
        items = "".join(f'<li><span class="code">{text(w.code)}</span> {text(w.text)}</li>' for w in group.warnings)
        parts.append(f'<h5>{text(group.heading)} ({len(group.warnings)})</h5><ul class="warnings">{items}</ul>')
    return "".join(parts)


def _hosts_table(report: Report) -> str:
    """The hosts of a run over several nodes and the ranks on each, then each host's ceilings."""
    h = report.header
    hosts = list(h.hosts) or list(h.ranks_per_host)
    if len(hosts) < 2:
        return ""
    rows = [[host, str(h.ranks_per_host.get(host, MISSING))] for host in hosts]
    return "<h4>Hosts</h4>" + _table(["host", "ranks"], rows, numeric={1}) + _per_host_table(report)


# Up to this many hosts a column each; more, and each ceiling shows its lowest and highest host.
HOST_COLUMNS = 8


def _per_host_table(report: Report) -> str:
    """Each host's value of every ceiling and its ratio to the median of the hosts (the model's grid, as `ert show`
    and `ert compare RUN --hosts` read it); a ratio below 1 - slow_host_threshold is marked."""
    grid = report.hosts
    if grid is None or len(grid.hosts) < 2:
        return ""
    n = len(grid.hosts)

    def cell(i: int, j: int) -> str:
        r = grid.ratio(i, j)
        return MISSING if r is None else f"{grid.value_cell(grid.values[i][j])} ({grid.ratio_cell(r)})"

    rows = []
    for i, name in enumerate(grid.names):
        if n <= HOST_COLUMNS:
            rows.append([name, grid.value_cell(grid.medians[i])] + [cell(i, j) for j in range(n)])
            continue
        ranked = sorted((j for j in range(n) if grid.ratio(i, j) is not None), key=lambda j: grid.values[i][j])
        ends = [f"{grid.hosts[j]}: {cell(i, j)}" for j in (ranked[0], ranked[-1])] if ranked else [MISSING] * 2
        rows.append([name, grid.value_cell(grid.medians[i])] + ends)
    headers = ["ceiling", "median"] + (grid.hosts if n <= HOST_COLUMNS else ["lowest host", "highest host"])
    return (f"<h4>Per-host ceilings (value and ratio to the median of {n} hosts; * more than "
            f"{grid.threshold:.0%} below it)</h4>" + _table(headers, rows, numeric=set(range(1, len(headers))),
                                                             key="hosts"))


def _show_text(doc: dict) -> str:
    return (f'<details class="show"><summary>The same as <code>ert show</code> (plain text)</summary>'
            f"<pre>{html.escape(format_ceilings(doc))}</pre></details>")


def _tables(doc: dict, report: Report) -> str:
    """Every table of the report model, in `ert show`'s order, then the full `ert show` text."""
    parts = [model_table(report.memory_table(), report), model_table(report.links_table(), report)]
    parts += [model_table(t, report) for t in report.compute_tables()]
    parts += [_rated_tables(report), model_table(report.sustained, report), model_table(report.scaling, report),
              _hosts_table(report), model_table(report.weather, report), _warnings(report), _show_text(doc)]
    return "".join(parts)


# ----------------------------------------------------------------------------------------- pages
def single_report(machine: Machine) -> str:
    """The page of one run: header, roofline, sweep (when its raw records are at hand), tables."""
    doc = machine.doc
    report = Report(doc)
    label = roofs_mod.machine_label(doc)
    parts = [f"<h1>Roofline report</h1><p class=\"sub\">{text(label)}</p>",
             _header_block(report.header, machine.source),
             html_charts.roofline([doc], [str(doc['metadata'].get('host', 'run'))], chart_id="roofline")]
    if machine.raw is not None:
        parts += html_sweep.sweep_charts(machine.raw, doc, chart_id="sweep")
        parts.append(html_weather.weather_timeline(doc, machine.raw, chart_id="weather"))
    else:
        parts.append('<p class="note">No sweep chart: the input holds no raw.jsonl (a ceilings file, or ERT\'s '
                     "roofline.json, which keeps no points); for an ert run give its run directory.</p>")
    parts.append('<section class="tables"><h2>Ceilings</h2>' + _tables(doc, report) + "</section>")
    return _page(f"ert report: {label}", "".join(parts))


def comparison_report(machines: list[Machine], labels: list[str]) -> str:
    """The procurement view: every machine's roofs on one chart, the ratio table, the unpaired ceilings apart."""
    docs = [m.doc for m in machines]
    reports = [Report(d) for d in docs]
    letters = [chr(65 + i) if i < 26 else str(i) for i in range(len(docs))]
    rows = [[letters[i], labels[i]] + [v[:10] if k == "date" else v for k, v in header_fields(r.header)]
            + [Path(m.source).name] for i, (r, m) in enumerate(zip(reports, machines))]
    machines_table = _table(["", "label"] + [k for k, _ in header_fields(reports[0].header)] + ["from"], rows,
                            cls="machines")
    data = compare_mod.to_json(docs, labels)
    paired = [c for c in data["ceilings"] if c["paired"]]
    unpaired = [c for c in data["ceilings"] if not c["paired"]]

    def cells(c: dict) -> list[str]:
        values = [MISSING if v is None else format_rate(v) for v in c["values"]]
        ratios = [MISSING if r is None else f"{r:.2f}x" for r in c["ratios_to_first"][1:]]
        return [c["ceiling"], c["unit"]] + values + ratios

    headers = ["ceiling", "unit"] + letters + [f"{x}/A" for x in letters[1:]]
    numeric = set(range(2, len(headers)))
    parts = [f"<h1>Roofline comparison of {len(docs)} machines</h1>", machines_table,
             html_charts.roofline(docs, labels, chart_id="roofline"),
             f'<section class="tables"><h2>Ceilings side by side (ratios to A: {text(labels[0])})</h2>',
             _table(headers, [cells(c) for c in paired], numeric=numeric, cls="ratios")]
    if unpaired:
        parts += ["<h3>Present in only some machines (not compared)</h3>",
                  _table(headers[:2 + len(letters)], [cells(c)[:2 + len(letters)] for c in unpaired],
                         numeric=numeric, cls="unpaired")]
    notes = [n for n in data["notes"] if "only in" not in n]
    if notes:
        parts.append("<h3>Read with care</h3><ul class=\"warnings\">" + "".join(f"<li>{text(n)}</li>" for n in notes)
                     + "</ul>")
    for letter, label, doc, report, m in zip(letters, labels, docs, reports, machines):
        parts.append(f'<details class="machine"><summary>{letter}: {text(label)}: every table of this machine'
                     f"</summary>{_header_block(report.header, m.source)}{_tables(doc, report)}</details>")
    parts.append("</section>")
    return _page("ert report: " + " vs ".join(labels), "".join(parts))


def render(machines: list[Machine], labels: list[str] | None = None) -> str:
    """The report page of one machine, or the comparison of several (``labels``: one per machine)."""
    if len(machines) == 1:
        return single_report(machines[0])
    labels = labels or compare_mod.default_labels([m.doc for m in machines], [m.source for m in machines])
    return comparison_report(machines, labels)
