"""`ert report`: one self-contained HTML page of a run, or of several machines side by side (the procurement view).

The page carries everything inline: the charts as SVG written here
(``html_charts``, ``html_sweep``), a small stylesheet and a small script
(``html_report.css``, ``html_report.js``, package data) for hover text and
the legend's toggles. Nothing loads from the network, so it opens from a mail
attachment, offline; the tables hold the same numbers as ``ert show`` and
``ert compare``, and the full ``ert show`` text is at the end of each machine.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from importlib import resources

from ert.consumers.compare import compare as compare_mod
from ert.consumers.html import charts as html_charts
from ert.consumers.html import sweep as html_sweep
from ert.consumers.html import tips
from ert.consumers import roofs as roofs_mod
from ert.consumers.terminal.report import format_ceilings
from ert.consumers.terminal.report_cells import format_rate
from ert.consumers.html.svg_chart import attr, text
from ert.spec import access_name

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


def _table(headers: list[str], rows: list[list[str]], *, numeric: set[int] = frozenset(), cls: str = "") -> str:
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{text(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{text(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ----------------------------------------------------------------------------------------- header
def clock_text(doc: dict) -> str:
    """The clock the run measured (CPU: a dependent FMA chain), else the one it recorded, else '-'."""
    info = doc["metadata"].get("backend_info") or {}
    rated = info.get("rated") if isinstance(info.get("rated"), dict) else {}
    clock = rated.get("clock") if isinstance(rated.get("clock"), dict) else {}
    if isinstance(clock.get("vector_ghz"), (int, float)):
        return f"{clock['vector_ghz']:.2f} GHz (measured: dependent FMA chain)"
    if isinstance(rated.get("clock_ghz"), (int, float)):
        return f"{rated['clock_ghz']:.2f} GHz ({rated.get('clock_source') or 'recorded'})"
    for key, word in (("sm_clock_mhz", "SM clock"), ("max_clock_mhz", "max clock")):
        value = info.get(key)
        if isinstance(value, dict) and isinstance(value.get("max"), (int, float)):
            return f"{value['max']:.0f} MHz ({word}, measured)"
        if isinstance(value, (int, float)):
            return f"{value:.0f} MHz ({word})"
    return MISSING


def header_fields(doc: dict) -> list[tuple[str, str]]:
    """(name, value) of the header: host, CPU/device, measured clock, backend, ranks x threads, date, version, config."""
    meta = doc["metadata"]
    hosts = list(dict.fromkeys(meta.get("hosts") or []))
    cpu, device = meta.get("cpu_model") or "", meta.get("device") or ""
    machine = f"{cpu} / {device}" if cpu and device and cpu not in device else (device or cpu or MISSING)
    ranks, threads = meta.get("ranks", MISSING), meta.get("threads_per_rank", MISSING)
    tool = meta.get("tool", "ert")
    config_hash = meta.get("config_sha256") or meta.get("config_hash")
    return [("host" if len(hosts) <= 1 else f"hosts ({len(hosts)})", ", ".join(hosts) if len(hosts) > 1
             else str(meta.get("host", MISSING))),
            ("CPU / device", machine), ("measured clock", clock_text(doc)),
            ("backend", str(meta.get("backend", MISSING))),
            ("ranks x threads", f"{ranks} x {threads}"), ("date", str(meta.get("date", MISSING))),
            ("tool version", f"{tool} {meta.get('tool_version', '')}".strip()),
            ("config sha256", str(config_hash)[:16] if config_hash else MISSING)]


def _header_block(doc: dict, source: str) -> str:
    cells = "".join(f"<div><dt>{text(k)}</dt><dd>{text(v)}</dd></div>" for k, v in header_fields(doc))
    meta = doc["metadata"]
    points = meta.get("points") if isinstance(meta.get("points"), dict) else {}
    extra = ", ".join(f"{points[k]} {k}" for k in ("planned", "measured", "noisy", "invalid") if k in points)
    wall = meta.get("wall_seconds")
    note = "; ".join(x for x in (f"points: {extra}" if extra else "",
                                 f"wall time {wall:.1f} s" if isinstance(wall, (int, float)) else "",
                                 f"schema {doc.get('schema_version', MISSING)}", f"from {source}") if x)
    return f'<dl class="header">{cells}</dl><p class="note">{text(note)}</p>'


# ----------------------------------------------------------------------------------------- tables
def _memory_tables(doc: dict) -> str:
    entries = [e for e in doc["ceilings"].get("memory", []) if e.get("kind") is None]
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        groups.setdefault((e.get("access") or "rw", e.get("precision") or ""), []).append(e)
    out = []
    for access, precision in sorted(groups, key=lambda k: (k[0] != "rw", k[0])):
        rows = [[e["level"], format_rate(e["gbytes_per_s"]), tips.spread_text(e.get("spread")),
                 tips.wss_text(e.get("wss_bytes")), str(e.get("n_points", MISSING)), str(e.get("noisy_points", MISSING)),
                 ", ".join(f"{format_rate(r.get('gbytes_per_s', 0))} at {tips.wss_text(r.get('wss_bytes'))}"
                           for r in e.get("regimes") or [] if isinstance(r, dict)) if len(e.get("regimes") or []) > 1
                 else ""] for e in groups[(access, precision)]]
        out.append(f"<h4>Memory bandwidth, {text(access_name(access))}"
                   f"{', ' + text(precision) if precision else ''}</h4>"
                   + _table(["level", "GB/s", "spread", "working set", "points", "noisy", "regimes"], rows,
                            numeric={1, 2, 4, 5}))
    transfers = [e for e in doc["ceilings"].get("memory", []) if e.get("kind") is not None]
    if transfers:
        rows = [[e["level"], str(e.get("kind")), str(e.get("variant", "")), format_rate(e["gbytes_per_s"]),
                 tips.spread_text(e.get("spread")),
                 f"{e['latency_us']:.2f}" if isinstance(e.get("latency_us"), (int, float)) else MISSING,
                 tips.wss_text(e.get("wss_bytes"))] for e in transfers]
        out.append("<h4>Links and network</h4>" + _table(["level", "kind", "variant", "GB/s", "spread", "latency us",
                                                          "sizes"], rows, numeric={3, 4, 5}))
    return "".join(out) or "<p>Memory bandwidth: none measured.</p>"


def _compute_table(doc: dict) -> str:
    entries = doc["ceilings"].get("compute", [])
    if not entries:
        return "<p>Compute: none measured.</p>"
    rows = [[f"{tips.compute_name(e)} peak", format_rate(e["gflops_per_s"]), tips.compute_unit(e),
             tips.spread_text(e.get("spread")), str(e.get("flops_per_mma") or e.get("flops_per_element") or MISSING),
             tips.wss_text(e.get("wss_bytes")), "yes" if e.get("noisy") else "no"] for e in entries]
    return "<h4>Compute</h4>" + _table(["ceiling", "rate", "unit", "spread", "FLOPs/element", "working set", "noisy"],
                                       rows, numeric={1, 3, 4})


def _rated_table(doc: dict) -> str:
    """Every ceiling beside its rated value, with the derivations numbered once (as `ert show` does)."""
    rows, notes = [], []
    entries = [(e, "gbytes_per_s", "GB/s", tips.memory_name(e)) for e in doc["ceilings"].get("memory", [])]
    entries += [(e, "gflops_per_s", tips.compute_unit(e), f"{tips.compute_name(e)} peak")
                for e in doc["ceilings"].get("compute", [])]
    for e, key, unit, name in entries:
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else None
        if not rated:
            continue
        how = str(rated.get("derivation", ""))
        if how not in notes:
            notes.append(how)
        ratio = rated.get("ratio")
        rows.append([f"{name} {unit}", format_rate(e[key]),
                     format_rate(rated[key]) if rated.get(key) is not None else MISSING,
                     f"{ratio:.0%}" if isinstance(ratio, (int, float)) else MISSING, f"[{notes.index(how) + 1}]"])
    if not rows:
        return ""
    items = "".join(f"<li value=\"{i}\">{text(how)}</li>" for i, how in enumerate(notes, 1))
    return ("<h4>Measured against rated (what the hardware can physically do)</h4>"
            + _table(["ceiling", "measured", "rated", "of rated", "from"], rows, numeric={1, 2, 3})
            + f'<ol class="derivations">{items}</ol>')


def _warnings(doc: dict) -> str:
    """The warnings grouped as `ert show` groups them, each with its stable code (schema 1.10; older files are
    classified from their text by the same table)."""
    from ert.records.warning_codes import GROUPS, coded_warnings

    warnings = coded_warnings(doc)
    if not warnings:
        return ""
    parts = [f"<h4>Warnings ({len(warnings)})</h4>"]
    for group, heading in GROUPS.items():
        mine = [w for w in warnings if w.group == group]
        if mine:
            items = "".join(f'<li><span class="code">{text(w.code)}</span> {text(w.text)}</li>' for w in mine)
            parts.append(f'<h5>{text(heading)} ({len(mine)})</h5><ul class="warnings">{items}</ul>')
    return "".join(parts)


def _scaling_table(doc: dict) -> str:
    counts = [c for c in ((doc.get("scaling") or {}).get("by_threads") or []) if isinstance(c, dict)]
    if not counts:
        return ""
    rows: dict[tuple, list] = {}
    for k, entry in enumerate(counts):
        ceilings = entry.get("ceilings", {})
        for e in ceilings.get("memory", []):
            rows.setdefault((0, tips.memory_name(e), "GB/s"), [None] * len(counts))[k] = e.get("gbytes_per_s")
        for e in ceilings.get("compute", []):
            rows.setdefault((1, f"{tips.compute_name(e)} peak", tips.compute_unit(e)),
                            [None] * len(counts))[k] = e.get("gflops_per_s")
    table = [[name, unit] + [format_rate(v) if isinstance(v, (int, float)) else MISSING for v in values]
             + [f"{values[-1] / values[0]:.2f}x" if values[0] and values[-1] else MISSING]
             for (_, name, unit), values in rows.items()]
    headers = ["ceiling", "unit"] + [f"{c.get('threads_per_rank')} thr" for c in counts] + ["last/first"]
    return "<h4>Thread scaling (threads per rank)</h4>" + _table(headers, table,
                                                                 numeric=set(range(2, len(headers))))


def _hosts_table(doc: dict) -> str:
    """The hosts of a run over several nodes and the ranks on each (what ceilings.json holds today)."""
    meta = doc["metadata"]
    per_host = meta.get("ranks_per_host") if isinstance(meta.get("ranks_per_host"), dict) else {}
    hosts = list(dict.fromkeys(meta.get("hosts") or [])) or list(per_host)
    if len(hosts) < 2:
        return ""
    rows = [[h, str(per_host.get(h, MISSING))] for h in hosts]
    return "<h4>Hosts</h4>" + _table(["host", "ranks"], rows, numeric={1}) + _per_host_table(doc)


# Up to this many hosts a column each; more, and each ceiling shows its lowest and highest host.
HOST_COLUMNS = 8


def _per_host_table(doc: dict) -> str:
    """Each host's value of every ceiling, as a ratio to the median of the hosts (schema 1.10 ``hosts``); a
    ratio below 1 - slow_host_threshold is marked, as `ert show` marks it."""
    import statistics

    from ert.consumers.compare.ceiling_values import ceiling_values
    from ert.consumers.terminal.hosts_table import threshold as slow_host_threshold

    entries = [h for h in doc.get("hosts") or [] if isinstance(h, dict) and isinstance(h.get("ceilings"), dict)]
    if len(entries) < 2:
        return ""
    threshold = slow_host_threshold(doc)
    values = {str(h.get("host")): ceiling_values(h["ceilings"]) for h in entries}
    names = list(dict.fromkeys(n for v in values.values() for n in v))

    def cell(host: str, name: str, median: float) -> str:
        value = values[host].get(name)
        if value is None or not median:
            return MISSING
        ratio = value / median
        return f"{format_rate(value)} ({ratio:.2f}{'*' if ratio < 1 - threshold else ''})"

    rows, hosts = [], list(values)
    for name in names:
        present = [values[h][name] for h in hosts if name in values[h]]
        median = statistics.median(present) if present else 0.0
        if len(hosts) <= HOST_COLUMNS:
            rows.append([name, format_rate(median)] + [cell(h, name, median) for h in hosts])
        else:
            ranked = sorted((h for h in hosts if name in values[h]), key=lambda h: values[h][name])
            rows.append([name, format_rate(median), f"{ranked[0]}: {cell(ranked[0], name, median)}",
                         f"{ranked[-1]}: {cell(ranked[-1], name, median)}"])
    headers = ["ceiling", "median"] + (hosts if len(hosts) <= HOST_COLUMNS else ["lowest host", "highest host"])
    return (f"<h4>Per-host ceilings (value and ratio to the median of {len(hosts)} hosts; * more than "
            f"{threshold:.0%} below it)</h4>" + _table(headers, rows, numeric=set(range(1, len(headers)))))


def _show_text(doc: dict) -> str:
    return (f'<details class="show"><summary>The same as <code>ert show</code> (plain text)</summary>'
            f"<pre>{html.escape(format_ceilings(doc))}</pre></details>")


def _tables(doc: dict) -> str:
    return "".join([_memory_tables(doc), _compute_table(doc), _rated_table(doc), _scaling_table(doc),
                    _hosts_table(doc), _warnings(doc), _show_text(doc)])


# ----------------------------------------------------------------------------------------- pages
def single_report(machine: Machine) -> str:
    """The page of one run: header, roofline, sweep (when its raw records are at hand), tables."""
    doc = machine.doc
    label = roofs_mod.machine_label(doc)
    parts = [f"<h1>Roofline report</h1><p class=\"sub\">{text(label)}</p>", _header_block(doc, machine.source),
             html_charts.roofline([doc], [str(doc['metadata'].get('host', 'run'))], chart_id="roofline")]
    if machine.raw is not None:
        parts += html_sweep.sweep_charts(machine.raw, doc, chart_id="sweep")
    else:
        parts.append('<p class="note">No sweep chart: the input holds no raw.jsonl (a ceilings file, or ERT\'s '
                     "roofline.json, which keeps no points); for an ert run give its run directory.</p>")
    parts.append('<section class="tables"><h2>Ceilings</h2>' + _tables(doc) + "</section>")
    return _page(f"ert report: {label}", "".join(parts))


def comparison_report(machines: list[Machine], labels: list[str]) -> str:
    """The procurement view: every machine's roofs on one chart, the ratio table, the unpaired ceilings apart."""
    docs = [m.doc for m in machines]
    letters = [chr(65 + i) if i < 26 else str(i) for i in range(len(docs))]
    rows = [[letters[i], labels[i]] + [v[:10] if k == "date" else v for k, v in header_fields(d)]
            + [Path(m.source).name] for i, (d, m) in enumerate(zip(docs, machines))]
    machines_table = _table(["", "label"] + [k for k, _ in header_fields(docs[0])] + ["from"], rows, cls="machines")
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
    for letter, label, doc, m in zip(letters, labels, docs, machines):
        parts.append(f'<details class="machine"><summary>{letter}: {text(label)}: every table of this machine'
                     f"</summary>{_header_block(doc, m.source)}{_tables(doc)}</details>")
    parts.append("</section>")
    return _page("ert report: " + " vs ".join(labels), "".join(parts))


def render(machines: list[Machine], labels: list[str] | None = None) -> str:
    """The report page of one machine, or the comparison of several (``labels``: one per machine)."""
    if len(machines) == 1:
        return single_report(machines[0])
    labels = labels or compare_mod.default_labels([m.doc for m in machines], [m.source for m in machines])
    return comparison_report(machines, labels)
