"""A ceiling measured while the host was disturbed (``disturbed: true``) is marked on every chart that draws it: a
roof that is not the machine's must not look like one."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from ert.consumers import roofs
from ert.consumers.html.charts import roofline
from ert.consumers.plots.plot import plot_roofline
from ert.consumers.report_rows import DISTURBED_NOTE

DOC = json.loads((Path(__file__).parent / "data" / "ceilings-handworked-cpu.json").read_text())


def _disturbed() -> dict:
    """The hand-worked ceilings with L2 (fp64 read+write) and the fp32 FMA peak flagged, as a disturbed run's."""
    doc = copy.deepcopy(DOC)
    for e in doc["ceilings"]["memory"]:
        if e["level"] == "L2":
            e["disturbed"] = True
    for e in doc["ceilings"]["compute"]:
        if e["precision"] == "fp32":
            e["disturbed"] = True
    return doc


def test_the_roofs_carry_the_flag():
    mem, _ = roofs.memory_roofs(_disturbed())
    assert {r.level: r.disturbed for r in mem} == {"L1": False, "L2": True, "L3": False, "DRAM": False}
    assert {(r.precision, r.fma): r.disturbed for r in roofs.compute_roofs(_disturbed())} == {
        ("fp64", True): False, ("fp64", False): False, ("fp32", True): True}


def _svg_text(doc: dict, tmp_path: Path) -> str:
    out = tmp_path / "roof.svg"
    plot_roofline(doc, out)
    return out.read_text()


def test_the_roofline_marks_the_disturbed_roofs_and_says_why(tmp_path):
    text = _svg_text(_disturbed(), tmp_path)
    assert "L2 200* GB/s" in text and "L1 400 GB/s" in text
    assert "FP32 FMA 200* GFLOP/s" in text and "FP64 FMA 100 GFLOP/s" in text
    assert "measured while the host was disturbed" in text


def test_a_calm_run_has_no_mark(tmp_path):
    text = _svg_text(DOC, tmp_path)
    assert not re.search(r"\d\* G", text)
    assert "disturbed" not in text


def test_the_report_chart_marks_them_in_label_tip_and_caption():
    page = roofline([_disturbed()], ["vm"], chart_id="r")
    assert "L2 200.0* GB/s" in page and "L1 400.0 GB/s" in page and "FP32 FMA 200.0* GFLOP/s" in page
    assert page.count("measured while the host was disturbed: not the machine") == 2 + 1  # two tips, the caption
    assert DISTURBED_NOTE.split(":")[0] in page
    calm = roofline([DOC], ["vm"], chart_id="r")
    assert "disturbed" not in calm and "* G" not in calm


def test_a_profile_bound_by_a_disturbed_roof_says_so():
    """Each kernel's binding ceiling decides: with DRAM and the fp64 FMA peak flagged, the stencil (DRAM-bound) and
    the dgemm block (under the FMA-ratio ceiling of that peak) get the note, the L1-bound stream sum does not."""
    from ert.consumers.profile.appdata import load_app
    from ert.consumers.profile.profile import profile_all

    kernels = load_app(Path(__file__).parent / "data" / "app-handworked.yaml")
    doc = copy.deepcopy(DOC)
    for e in doc["ceilings"]["memory"] + doc["ceilings"]["compute"]:
        if e.get("level") == "DRAM" or (e.get("precision"), e.get("fma")) == ("fp64", True):
            e["disturbed"] = True

    def noted(ceilings: dict) -> dict[str, str | None]:
        out = {}
        for prof in profile_all(kernels, ceilings):
            result = prof.results[0]
            hit = [n for n in result.notes if "was measured while the host was disturbed" in n]
            out[prof.name] = result.binding if hit and result.binding in hit[0] else None
        return out

    assert noted(DOC) == {"stencil": None, "dgemm-block": None, "stream-sum": None}
    assert noted(doc) == {"stencil": "DRAM bandwidth", "dgemm-block": "FP64 FMA-ratio ceiling", "stream-sum": None}


def test_the_terminal_tables_mark_a_disturbed_peak_as_a_disturbed_level():
    from ert.consumers.terminal.report import format_ceilings

    lines = format_ceilings(_disturbed()).splitlines()
    compute = lines[lines.index(next(l for l in lines if l.startswith("Compute"))):]
    rows = [l.split() for l in compute[2:5]]
    assert [r[:2] for r in rows] == [["fp64", "yes"], ["fp64", "no"], ["fp32*", "yes"]]
    assert compute[5].strip() == DISTURBED_NOTE
    assert any(l.split()[:1] == ["L2*"] for l in lines)
    calm = format_ceilings(DOC)
    assert DISTURBED_NOTE not in calm


def test_a_comparison_marks_values_and_ratios_that_rest_on_a_disturbed_ceiling():
    from ert.consumers.compare.compare import format_comparison, to_json

    text = format_comparison([DOC, _disturbed()], ["calm", "busy"])
    row = {l.split("  ")[0].strip(): l.split() for l in text.splitlines() if "read+write" in l or "peak" in l}
    assert row["L2 fp64 read+write"][-2:] == ["200*", "1.00x*"]
    assert row["L1 fp64 read+write"][-2:] == ["400", "1.00x"]
    assert row["fp32 FMA peak"][-2:] == ["200*", "1.00x*"]
    assert DISTURBED_NOTE in text
    assert "B: 2 ceiling(s) measured while the host was disturbed (marked *: L2 fp64 read+write, fp32 FMA peak)" in text
    js = to_json([DOC, _disturbed()], ["calm", "busy"])
    assert {c["ceiling"]: c["disturbed"] for c in js["ceilings"]}["L2 fp64 read+write"] == [False, True]
    assert DISTURBED_NOTE not in format_comparison([DOC, DOC], ["a", "b"])


def test_the_comparison_chart_marks_them_too(tmp_path):
    from ert.consumers.plots.compare_chart import plot_comparison

    out = tmp_path / "cmp.svg"
    plot_comparison([DOC, _disturbed()], ["calm", "busy"], out)
    text = out.read_text()
    assert "(200* vs 200 GB/s)" in text and "(400 vs 400 GB/s)" in text
    assert "hatched: a ratio with one" in text
    plot_comparison([DOC, DOC], ["a", "b"], out)
    assert "disturbed" not in out.read_text()


def test_export_carries_the_flag_in_csv_and_warns_for_formats_without_a_field(tmp_path):
    import csv
    import io
    import subprocess
    import sys

    from ert.consumers.export.export import to_csv

    rows = list(csv.DictReader(io.StringIO(to_csv(_disturbed()))))
    assert {r["name"]: r["disturbed"] for r in rows}["L2 fp64 read+write"] == "true"
    assert sum(r["disturbed"] == "true" for r in rows) == 2
    src = tmp_path / "ceilings.json"
    src.write_text(json.dumps(_disturbed()))
    for fmt, warned in (("ert", True), ("csv", False)):
        proc = subprocess.run([sys.executable, "-m", "ert", "export", str(src), "--format", fmt, "-o",
                               str(tmp_path / f"out.{fmt}")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert (proc.stderr.count("2 ceiling(s) measured while the host was disturbed (fp64 read+write L2, "
                                  "fp32 FMA peak)") == 1) == warned, proc.stderr
