"""The report model (ert.consumers.report_model): `ert show` and `ert report` show the same rows and cells.

Each run's page is parsed (its tables by ``data-table``, their notes) and its `ert show` screen is parsed
(each table under its title); every row of every table must read the same in both and as the model holds it,
so a renderer that built a row of its own, dropped a column or formatted a value its own way fails here.
"""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ert.analysis.ceilings import build
from ert.consumers.html.page import Machine, render
from ert.consumers.report_model import Report
from ert.consumers.terminal.notes import Notes
from ert.consumers.terminal.report import format_ceilings
from ert.records.rawio import read_raw

DATA = Path(__file__).parent / "data"
WIDTH = 400  # one line per table row on the screen, every host a column


class PageTables(HTMLParser):
    """The page's tables: key (data-table), headers, rows of cell texts, and the notes list under each."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: list[dict] = []
        self.cell: str | None = None
        self.row: list[str] | None = None
        self.in_notes = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"key": attrs.get("data-table", ""), "headers": [], "rows": [], "notes": []})
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th") or (tag == "li" and self.in_notes):
            self.cell = ""
        elif tag == "ul" and attrs.get("class") == "notes":
            self.in_notes = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.row.append(self.cell)
            self.cell = None
        elif tag == "tr":
            table = self.tables[-1]
            if table["headers"]:
                table["rows"].append(self.row)
            else:
                table["headers"] = self.row
        elif tag == "li" and self.in_notes:
            self.tables[-1]["notes"].append(self.cell)
            self.cell = None
        elif tag == "ul":
            self.in_notes = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data

    def keyed(self, key: str) -> list[dict]:
        return [t for t in self.tables if t["key"] == key]


def _split(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def screen_table(text: str, title: str, n_rows: int, n_columns: int) -> tuple[list[str], list[list[str]]]:
    """The headers and rows of the table under ``title`` on the screen (an empty last cell is padded back)."""
    lines = text.splitlines()
    at = lines.index(title)
    rows = [_split(line) for line in lines[at + 2:at + 2 + n_rows]]
    return _split(lines[at + 1]), [row + [""] * (n_columns - len(row)) for row in rows]


def _with_every_section(doc: dict) -> dict:
    """A real run's document with a link, tensor, integer and mix peaks, a held level, two thread counts and two
    hosts added by hand, so that every table of the model is on both outputs."""
    doc = copy.deepcopy(doc)
    memory, compute = doc["ceilings"]["memory"], doc["ceilings"]["compute"]
    one = {"memory": copy.deepcopy(memory[:3]), "compute": copy.deepcopy(compute[:2])}
    memory[0]["sustained"] = {"gbytes_per_s": 90.5, "first_gbytes_per_s": 100.25, "last_gbytes_per_s": 88.0,
                              "min_region_gbytes_per_s": 80.0, "hold_seconds": 1.0, "ratio_to_burst": 0.971}
    memory.append({"level": "link-h2d", "kind": "link", "variant": "pinned", "gbytes_per_s": 24.5, "spread": 0.041,
                   "latency_us": 8.08, "wss_bytes": [1 << 20, 1 << 24], "n_points": 2, "pairs": [[0, 1]],
                   "transport": "pinned host memory",
                   "rated": {"gbytes_per_s": 63.0, "ratio": 0.3889, "derivation": "PCIe Gen5 x16: 63.0 GB/s"}})
    compute += [
        {"precision": "fp16", "pipe": "tensor", "input_type": "fp16", "accumulate": "fp32", "mma_shape": "m16n8k16",
         "gflops_per_s": 512000.0, "spread": 0.01, "flops_per_mma": 4096, "noisy": False, "note": "mma.sync"},
        {"precision": "int8", "pipe": "tensor", "unit": "GIOP/s", "input_type": "int8", "accumulate": "s32",
         "mma_shape": "m64n256k32", "instruction": "wgmma", "gflops_per_s": 1024000.0, "spread": 0.02,
         "flops_per_mma": 1048576, "noisy": False},
        {"precision": "int32", "op": "add", "unit": "GIOP/s", "gflops_per_s": 50.25, "spread": 0.02,
         "flops_per_element": 8, "wss_bytes": 1 << 21, "noisy": True},
        {"precision": "fp64", "mix": "fma+add", "mix_ratio": "1 FMA : 1 add", "gflops_per_s": 82.67,
         "spread": 0.05, "wss_bytes": 1 << 16, "noisy": False,
         "rated": {"gflops_per_s": 177.3, "ratio": 0.466, "derivation": "24 FP64 FLOP/cycle"}}]
    doc["scaling"] = {"by_threads": [{"threads_per_rank": 1, "ceilings": one},
                                     {"threads_per_rank": 2, "ceilings": copy.deepcopy(doc["ceilings"])}]}
    slow = copy.deepcopy(one)
    for e in slow["memory"]:
        e["gbytes_per_s"] *= 0.8
    doc["hosts"] = [{"host": "node1", "ranks": [0], "ceilings": one}, {"host": "node2", "ranks": [1], "ceilings": slow},
                    {"host": "node3", "ranks": [2], "ceilings": one}]
    doc["metadata"]["hosts"] = ["node1", "node2", "node3"]
    doc["metadata"]["ranks_per_host"] = {"node1": 1, "node2": 1, "node3": 1}
    return doc


@pytest.fixture(scope="module", params=["bare-zen4-fp64", "bare-zen4-full", "bare-2core-busy", "every-section"])
def doc(request) -> dict:
    if request.param == "bare-2core-busy":
        import json

        return json.loads((DATA / "bare-2core-busy.ceilings.json").read_text())
    if request.param == "every-section":
        return _with_every_section(build(read_raw(DATA / "bare-zen4-full.raw.jsonl")))
    return build(read_raw(DATA / f"{request.param}.raw.jsonl"))


def _screen_tables(report: Report) -> list:
    """The model's tables as the screen shows them (its memory table, links without derivations, the
    compute tables with their rated columns, the rated rows no other table shows, held values, thread counts)."""
    rated = report.rated_table(screen=True)
    return ([report.memory_table(), report.links_table(derivations=False)] + report.compute_tables()
            + [rated if rated.rows else None, report.sustained, report.scaling])


def test_the_page_and_the_screen_show_the_same_cells_for_every_row(doc):
    report = Report(doc)
    page = PageTables(render([Machine(doc, "run")]))
    screen = format_ceilings(doc, width=WIDTH)
    notes = Notes(doc, verbose=False, width=WIDTH)
    tables = [t for t in _screen_tables(report) if t is not None and t.columns]
    assert "memory" in {t.key for t in tables}
    if "hosts" in doc:  # the run with every section: every table is on both
        assert {t.key for t in tables} == {"memory", "links", "compute", "tensor", "integer", "mix", "rated",
                                           "sustained", "scaling"}
    for table in tables:
        model = table.cells()
        headers, rows = screen_table(screen, table.title, len(model), len(table.columns))
        assert headers == table.headers, table.title
        (html_table,) = [t for t in page.keyed(table.key) if t["headers"][:1] == table.headers[:1]]
        by_first = {tuple(row[:2]): row for row in html_table["rows"]}
        for model_row, screen_row in zip(model, rows):
            page_row = by_first[tuple(model_row[:2])]  # the page's rated table holds every ceiling
            page_headers = html_table["headers"]
            for column, cell, shown in zip(table.columns, model_row, screen_row):
                on_page = page_row[page_headers.index(column.header)]
                if column.footnote:  # each its own numbering: the derivation is the same note
                    assert shown == notes.ref(cell)
                    assert on_page == (f"[{report.derivations.index(cell) + 1}]" if cell else "")
                else:
                    assert shown == on_page == cell, (table.title, column.header)


def test_the_page_shows_each_levels_confirmation_as_ert_show_does(doc):
    report = Report(doc)
    (memory,) = PageTables(render([Machine(doc, "run")])).keyed("memory")
    confirmed = [r for r in report.memory if r.confirmation]
    assert ("conf" in memory["headers"]) == bool(confirmed)
    if not confirmed:
        pytest.skip("no level of this run carries `confirmed` (a file before 1.10)")
    conf = memory["headers"].index("conf")
    assert [row[conf] for row in memory["rows"]] == [r.cells["conf"] for r in report.memory]
    assert any(re.fullmatch(r"\d+ (re|nb)", row[conf]) for row in memory["rows"])
    # The confirmations and regimes `ert show --verbose` prints under each curve's table, the page under its one
    # table, each led by its curve.
    verbose = format_ceilings(doc, verbose=True, width=WIDTH)
    under = []
    for table in report.curve_tables():
        block = verbose[verbose.index(f"{table.title}\n"):].split("\n\n")[0].splitlines()
        under += [f"{table.rows[0].cells['curve']} {line.strip()}" for line in block[len(table.rows) + 2:]]
    assert memory["notes"] == list(report.memory_table().notes)
    assert sorted(memory["notes"]) == sorted(under) and len(under) >= len(confirmed)


def test_warnings_and_hosts_read_the_same(doc):
    report = Report(doc)
    page_text = render([Machine(doc, "run")])
    screen = format_ceilings(doc, width=WIDTH, verbose=True)
    for group in report.warnings:
        assert f" {group.heading} ({len(group.warnings)})" in screen
        assert f"<h5>{group.heading} ({len(group.warnings)})</h5>" in page_text
    assert page_text.count('<span class="code">') == report.warning_count == len(doc.get("warnings", []))
    grid = report.hosts
    if grid is None:
        return
    (hosts,) = PageTables(page_text).keyed("hosts")
    lines = screen.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Hosts: each ceiling"))
    rows = [_split(line) for line in lines[at + 2:at + 2 + len(grid.names)]]
    for row, page_row in zip(rows, hosts["rows"]):
        assert row[:2] == page_row[:2]  # ceiling, median
        assert row[2:] == [re.search(r"\((.*)\)", cell).group(1) for cell in page_row[2:]]  # ratio to the median
    assert any(cell.endswith("*") for row in rows for cell in row[2:])  # node2's memory is 20 % below
