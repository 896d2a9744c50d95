"""The Zen 4 runs of a shared host (tests/data/zen4-noisy, issue 39) analysed: no level that cannot be.

A 2-vCPU guest on an AMD EPYC Zen 4 (L1d 32 KiB and L2 1 MiB per core, one
32 MiB L3), four bare runs of one hour: the newcomer's first run (fp32
read+write "DRAM" at 306 GB/s, borrowed over a range that began inside the
L3; fp64 read+write L1 444 below its L2 449, its own confirmed rate 359), a
run disturbed throughout (every memory level about 10 % low), and two quiet
runs, and a bare run of a busier hour whose read+write curves the fit did not split between L1 and L2
(l1-unseparated: its fp64 read+write "L2" ran from 16 KiB, and the fp64 read-only curve, borrowing that
range, held L1 points at 1.8 x its L2 roof).  The README beside them has the numbers as ert wrote them then.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ert.analysis.ceilings import build
from ert.records.rawio import read_raw
from ert.records.warning_codes import coded_warnings
from ert.spec import rates

DATA = Path(__file__).parent / "data" / "zen4-noisy"
MIB = 1 << 20
L3 = 32 * MIB  # one L3 shared by both threads: its aggregate capacity for the run
THRESHOLD = 0.10  # the runs' noise threshold (the default config's)
RUNS = ["newcomer-first-run", "disturbed-run", "quiet-a", "quiet-b", "l1-unseparated"]
# Aggregate capacity of the cache before each cache level, for the run's two threads (L1d 32 KiB and L2 1 MiB
# per core): no level holds the working sets of the cache before it.
BEFORE = {"L2": 64 << 10, "L3": 2 * MIB}


@pytest.fixture(scope="module")
def docs() -> dict[str, tuple[dict, dict]]:
    out = {}
    for run in RUNS:
        raw = read_raw(DATA / run)
        out[run] = (build(raw), {p["id"]: p for p in raw.points})
    return out


def _memory(doc: dict) -> list[dict]:
    return [c for c in doc["ceilings"]["memory"] if "kind" not in c]


def _label(c: dict) -> str:
    return f"{c['precision']} {'read+write' if c['access'] == 'rw' else 'read-only'}"


def _warned(doc: dict, code: str, *parts: str) -> bool:
    return any(w.code == code and all(p in w.text for p in parts) for w in coded_warnings(doc))


@pytest.mark.parametrize("run", RUNS)
def test_no_memory_roof_from_working_sets_below_twice_the_l3(docs, run):
    doc, points = docs[run]
    for c in _memory(doc):
        if c["level"] != "DRAM":
            continue
        assert c["wss_bytes"][0] >= 2 * L3, c
        assert all(points[i]["wss_bytes"] >= 2 * L3 for i in c["evidence"]["point_ids"])
        if "confirmed" in c:
            assert c["confirmed"]["wss_bytes"] >= 2 * L3


@pytest.mark.parametrize("run", RUNS)
def test_precisions_apart_and_inverted_levels_are_warned_and_a_roof_is_its_confirmed_rate(docs, run):
    doc, _ = docs[run]
    memory = _memory(doc)
    for c in memory:
        if "confirmed" in c:  # no entry carries a roof and a different confirmed rate
            assert c["gbytes_per_s"] == c["confirmed"]["gbytes_per_s"], c
    for a in memory:
        for b in memory:
            same = a["level"] == b["level"] and a["access"] == b["access"] and a["precision"] != b["precision"]
            if same and a["gbytes_per_s"] > b["gbytes_per_s"] * (1 + THRESHOLD):
                assert _warned(doc, "precisions-disagree", f"{a['level']} {_label(a)} {a['gbytes_per_s']:.4g} GB/s",
                               f"{_label(b)} {b['gbytes_per_s']:.4g} GB/s"), (a, b)
    by_curve = {(c["precision"], c["access"], c["level"]): c for c in memory}
    for (precision, access, level), upper in by_curve.items():
        lower = by_curve.get((precision, access, {"L1": "L2", "L2": "L3", "L3": "DRAM"}.get(level, "")))
        if lower and lower["gbytes_per_s"] > upper["gbytes_per_s"] * (1 + THRESHOLD):
            assert _warned(doc, "level-inverted", f"{_label(lower)} {lower['level']} {lower['gbytes_per_s']:.4g}",
                           f"its {level} {upper['gbytes_per_s']:.4g} GB/s")


def test_the_newcomers_invented_and_inverted_levels_are_gone_or_named(docs):
    doc, _ = docs["newcomer-first-run"]
    roofs = {(c["precision"], c["access"], c["level"]): c["gbytes_per_s"] for c in _memory(doc)}
    # fp32 read+write DRAM was 305.6 GB/s (L3-speed points from 13.4 MiB on); now from 64 MiB on only.
    assert roofs[("fp32", "rw", "DRAM")] < 100
    # fp64 read+write L1 is its confirmed 359 GB/s (at 50 KiB), below its L2: a warning names both.
    assert roofs[("fp64", "rw", "L1")] == pytest.approx(359.0, abs=0.1)
    assert _warned(doc, "level-inverted", "fp64 read+write L2 449.2 GB/s reads faster than its L1 359 GB/s")
    # The L3 window (2 x the L2s' 2 MiB to the 32 MiB L3) holds its points up to 32 MiB, where the fp64 read-only
    # curve's break at 11.6 MiB had given them to its "DRAM" (issue 39, item 5: the L3 searched as L2's is).
    (l3,) = [c for c in _memory(doc) if (c["precision"], c["access"], c["level"]) == ("fp64", "ro", "L3")]
    assert l3["wss_bytes"][1] > 24 * MIB and 4 * MIB <= l3["confirmed"]["wss_bytes"] <= L3
    for (precision, access, level), value in roofs.items():  # no L1 below its L2 without a warning
        if level == "L1" and value < roofs[(precision, access, "L2")]:
            assert _warned(doc, "level-inverted", f"{precision} {'read+write' if access == 'rw' else 'read-only'} L2")


@pytest.mark.parametrize("run", ["quiet-a", "quiet-b"])
def test_the_quiet_runs_have_no_level_that_cannot_be(docs, run):
    doc, _ = docs[run]
    codes = {w.code for w in coded_warnings(doc)}
    assert not codes & {"precisions-disagree", "level-inverted"}
    roofs = {(c["precision"], c["access"], c["level"]): c["gbytes_per_s"] for c in _memory(doc)}
    # Every cache roof as the quiet runs read it then, within 3 % (README: 461 / 434-447 / 368 read+write).
    assert roofs[("fp64", "rw", "L2")] == pytest.approx(441, rel=0.03)
    assert roofs[("fp64", "ro", "L3")] == pytest.approx(194, rel=0.03)


@pytest.mark.parametrize("run", RUNS)
def test_no_level_holds_the_working_sets_of_the_cache_before_it(docs, run):
    doc, points = docs[run]
    for c in _memory(doc):
        if c["level"] in BEFORE:
            assert c["wss_bytes"][0] > BEFORE[c["level"]], c
            assert all(points[i]["wss_bytes"] > BEFORE[c["level"]] for i in c["evidence"]["point_ids"]), c


def test_a_plateau_across_l1_and_l2_is_cut_at_the_l1_capacity(docs):
    doc, points = docs["l1-unseparated"]
    roofs = {(c["precision"], c["access"], c["level"]): c for c in _memory(doc)}
    # The fit gave fp64 read+write one plateau from 16 KiB to 1.36 MiB (438 GB/s); cut at the L1s' 64 KiB it is
    # an L1 (463 GB/s) and an L2 from 96 KiB, and a warning says so.
    assert {"L1", "L2", "L3", "DRAM"} <= {level for (p, a, level) in roofs if (p, a) == ("fp64", "rw")}
    assert _warned(doc, "level-cut", "fp64 read+write", "capacity of L1 (64 KiB)")
    # fp64 read-only has its own L1 (about 420 GB/s) and an L2 near 231 GB/s that holds no L1 point: no point of
    # a cache level it holds reads above 1.1 x its roof (it held L1 points at 1.8 x before).
    assert roofs[("fp64", "ro", "L1")]["gbytes_per_s"] > 1.5 * roofs[("fp64", "ro", "L2")]["gbytes_per_s"]
    for c in _memory(doc):
        if c["level"] in BEFORE and c["precision"] == "fp64" and c["access"] == "ro":
            assert max(rates(points[i]).gbytes_per_s for i in c["evidence"]["point_ids"]) < 1.1 * c["gbytes_per_s"], c
