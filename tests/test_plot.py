"""ert plot: roofline (with application kernels) and sweep charts from a real run, written headless."""

from __future__ import annotations

import copy
import json
import re

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.consumers.compare.compare import comparison_rows
from ert.consumers.plots.compare_chart import plot_comparison
from ert.consumers.plots.plot import _fmt_rate
from ert.consumers.plots.plot_sweep import plot_sweep
from ert.records.ceilings_io import load_ceilings
from ert.records.rawio import read_raw

DATA = REPO / "tests" / "data"
# A real bare run of ert (2 threads on a busy 2-core host), recorded: charted in process by the fast tests.
BUSY_RAW, BUSY = DATA / "bare-2core-busy.raw.jsonl", DATA / "bare-2core-busy.ceilings.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.slow  # ert-run's tiny run and ert plot, as processes
def test_roofline_png_and_svg_from_a_real_run(tiny_run, tmp_path):
    png, svg = tmp_path / "roof.png", tmp_path / "roof.svg"
    proc = run_cmd("ert", "plot", tiny_run, "--app", DATA / "app-handworked.yaml", "-o", png)
    assert proc.returncode == 0, proc.stderr
    width, height = _png_size(png)
    assert width > 1000 and height > 700  # 150 dpi: readable in a report
    proc = run_cmd("ert", "plot", tiny_run / "ceilings.json", "--app", DATA / "app-handworked.yaml", "-o", svg)
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    # Roofs carry values and units, ridge points are explained, every kernel is named, and the title says where.
    import json

    doc = json.loads((tiny_run / "ceilings.json").read_text())
    # The roofs are fp64 read+write; which levels a tiny run separates depends on the machine's noise.
    roofs = [e for e in doc["ceilings"]["memory"] if e["precision"] == "fp64" and e["access"] == "rw"]
    assert roofs
    for roof in roofs:
        assert f"{roof['level']} {_fmt_rate(roof['gbytes_per_s'])}" in text  # the plot's own number format
    assert "GB/s" in text and "GFLOP/s" in text
    assert "ridge points" in text
    for name in ("stencil", "dgemm-block", "stream-sum"):
        assert name in text
    assert doc["metadata"]["host"] in text and "numba-cpu" in text


@pytest.mark.slow  # ert-run's tiny run and ert plot, as processes
def test_sweep_plot(tiny_run, tmp_path):
    out = tmp_path / "sweep.svg"
    proc = run_cmd("ert", "plot", tiny_run, "--sweep", "-o", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "working set" in text and "FLOPs per element" in text
    # Every shaded plateau is labelled with its level and its value (the cache hints carry sizes, never rates).
    _assert_plateaus_labelled(text, json.loads((tiny_run / "ceilings.json").read_text()))


def _assert_plateaus_labelled(text: str, doc: dict) -> None:
    """Every shaded fp64 plateau of ``doc`` is labelled in the chart's SVG with its level and its value."""
    labels = [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", text)]
    shaded = [e for e in doc["ceilings"]["memory"] if e["precision"] == "fp64"]
    assert shaded
    for e in shaded:
        rate = _fmt_rate(e["gbytes_per_s"])
        at = [i for i, label in enumerate(labels) if label == rate]
        assert any(e["level"] in labels[max(0, i - 2):i] for i in at), (e["level"], rate)


def test_the_sweep_chart_of_a_recorded_run_labels_every_plateau(tmp_path):
    """The chart of `ert plot --sweep`, drawn in process from a recorded run's raw.jsonl and ceilings."""
    out = tmp_path / "sweep.svg"
    plot_sweep(read_raw(BUSY_RAW), load_ceilings(BUSY), out)
    text = out.read_text()
    assert "working set" in text and "FLOPs per element" in text
    _assert_plateaus_labelled(text, load_ceilings(BUSY))


def test_the_comparison_chart_has_a_bar_per_paired_ceiling(tmp_path):
    """`ert compare --plot`'s chart, in process: the recorded run against itself at half its every rate."""
    a = load_ceilings(BUSY)
    b = copy.deepcopy(a)
    for entry in b["ceilings"]["memory"] + b["ceilings"]["compute"]:
        for key in ("gbytes_per_s", "gflops_per_s"):
            if entry.get(key):
                entry[key] = entry[key] / 2
    out = tmp_path / "compare.svg"
    plot_comparison([a, b], ["busy", "half"], out)
    labels = [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", out.read_text())]
    bars = [r for r in comparison_rows([a, b]) if r.paired and r.kind != "transfer-latency"]
    assert bars and sum(label.startswith("0.50x (") for label in labels) == len(bars), labels


@pytest.mark.slow  # ert plot, as a process
@pytest.mark.parametrize("args, fragment", [
    (["-o", "{tmp}/roof.jpg"], "unknown image format 'jpg'"),
    (["--app", "{tmp}/missing.yaml", "-o", "{tmp}/roof.png"], "no such file"),
])
def test_plot_errors_leave_no_file(tiny_run, tmp_path, args, fragment):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_cmd("ert", "plot", tiny_run, *args)
    lines = stderr_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_roof_measured_again_shows_its_evidence_on_both_sweep_charts(tmp_path):
    """A recorded run disturbed throughout (tests/data/zen4-noisy/disturbed-run): roofs confirmed by a later
    re-measurement, which on a disturbed run may read above every point of the first pass (a bare run here: an
    fp64 read+write L2 roof of 437 GB/s over points of 260-316, its two re-measurements 437 and 436); both sweep
    charts draw them (the HTML one: a diamond per ``confirm`` record of a bandwidth point, its id and which point
    it measured again)."""
    from ert.analysis.ceilings import build
    from ert.consumers.html.sweep import sweep_charts

    raw = read_raw(DATA / "zen4-noisy" / "disturbed-run")
    doc = build(raw)
    again = {r["id"]: r for r in raw.confirms if r["spec"]["flops_per_element"] == 1 and r["valid"]}
    by_again = [e for e in doc["ceilings"]["memory"] if (e.get("confirmed") or {}).get("by") == "measured again"]
    assert again and by_again
    html = "".join(sweep_charts(raw, doc, chart_id="s"))
    drawn = dict(re.findall(r'<g class="again" data-tags="[^"]*" data-tip="([^"]*)" data-id="([^"]*)"', html))
    drawn = {rid: tip for tip, rid in drawn.items()}
    assert set(drawn) == set(again)
    for rid, tip in drawn.items():
        assert f"re-measurement {again[rid]['again']} of {again[rid]['point_id']}" in tip, tip
    for e in by_again:  # what confirmed the roof is on the chart
        assert any(again[rid]["point_id"] == e["confirmed"]["point_id"] for rid in drawn), e["level"]
    out = tmp_path / "sweep.svg"
    plot_sweep(raw, doc, out)
    assert "measured again (confirms)" in out.read_text()
