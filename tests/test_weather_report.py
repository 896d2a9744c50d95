"""The host's weather in the reports: the report model's weather table (consumers.report_sections), ``ert show
--verbose`` with its timeline, ``ert report``'s chart (consumers.html.weather), and the '*' of a flagged level."""

from __future__ import annotations

import re

from test_analysis_weather import _run, _sentinels, _timed_sweep

from ert.consumers.html.page import _tables
from ert.consumers.report_model import Report
from ert.consumers.html.weather import weather_timeline
from ert.consumers.terminal.report import format_ceilings
from ert.records.rawio import RawData


def _disturbed():
    points = _timed_sweep()
    return points, _run(points, _sentinels(len(points), low=(0.4, 1.1)))


def test_ert_show_verbose_prints_the_weather_and_the_screen_marks_the_flagged_level():
    _, doc = _disturbed()
    text = format_ceilings(doc, verbose=True, width=100)
    section = text.split("Host weather")[1].split("Warnings")[0]
    assert "disturbed 1.5 of 5.5 s; 0 point(s) measured again, 15 left suspect" in section
    assert re.search(r"L1\s+12\s+400\.0\s+1\.00\s+0\.80", section)
    assert "disturbed from 0.0 s to 1.5 s: L1 low, L1 down to 0.80 of its best" in section
    bar = re.search(r"0 s \|([#-]+)\| 5\.5 s", section).group(1)
    assert bar.startswith("#" * 10) and bar.endswith("-" * 30)  # the first 1.5 of 5.5 s
    assert "measured while disturbed (flagged): fp64 read-only L1" in section
    screen = format_ceilings(doc, width=100)
    assert re.search(r"^\s+L1\*\s+fp64 ro", screen, re.M) and "* measured while the host was disturbed" in screen
    assert "Host weather" not in screen  # the screen keeps the warning; the weather is --verbose's
    calm = _run(_timed_sweep(), [])
    assert "Host weather" not in format_ceilings(calm, verbose=True) and "*" not in format_ceilings(calm)


def test_ert_report_draws_the_weather_as_a_timeline_under_the_sweep():
    points, doc = _disturbed()
    html = weather_timeline(doc, RawData(path=None, header={}, points=points))
    assert html.startswith('<figure class="chart" data-chart="weather">')
    (stretch,) = re.findall(r'<g class="stretch" data-tip="([^"]+)"', html)
    assert stretch == "disturbed 0.0 - 1.5 s: L1 low, L1 down to 0.80 of its best"
    ticks = re.findall(r'<g class="ptick" data-tip="[^"]+"><line [^>]*stroke="(#[0-9a-f]+)"', html)
    assert len(ticks) == len(points) and ticks.count("#c00") == doc["weather"]["points"]["suspect"] == 15
    assert html.count('<circle') == doc["weather"]["levels"]["L1"]["readings"]
    assert weather_timeline(_run(points, []), None) == ""
    tables = _tables(doc, Report(doc))  # the page's tables: the flagged level marked, the weather's table
    assert re.search(r"<td>L1\*</td>", tables) and "measured while the host was disturbed" in tables
    assert "<h4>Host weather (sentinels between the points" in tables


def test_a_flagged_compute_peak_is_named_once_as_a_peak():
    from ert.consumers.report_sections import flagged_names

    ceilings = {"memory": [], "compute": [{"precision": "fp64", "fma": True, "gflops_per_s": 40.0, "disturbed": True},
                                          {"precision": "fp32", "fma": False, "gflops_per_s": 200.0}]}
    assert flagged_names(ceilings) == ["fp64 FMA peak"]
