"""ert compare: two real runs side by side, ratios, and what cannot be paired."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_cmd

pytestmark = pytest.mark.slow  # every test here runs ert-run, pip or a tool as a process

DATA = REPO / "tests" / "data"


# A real bare run of ert (the packaged default, 2 threads, on a busy 2-core host), recorded: the second machine.
BARE = DATA / "bare-2core-busy.ceilings.json"


def test_two_real_runs(tiny_run, tmp_path):
    chart = tmp_path / "cmp.png"
    proc = run_cmd("ert", "compare", tiny_run, BARE, "--labels", "tiny,bare", "--plot", chart)
    assert proc.returncode == 0, proc.stderr
    assert "B/A" in proc.stdout and "fp64 FMA peak" in proc.stdout
    assert chart.read_bytes()[:4] == b"\x89PNG"
    proc = run_cmd("ert", "compare", tiny_run, BARE, "--json")
    out = json.loads(proc.stdout)
    a = json.loads((tiny_run / "ceilings.json").read_text())
    b = json.loads(BARE.read_text())
    row = next(r for r in out["ceilings"] if r["ceiling"] == "fp64 FMA peak")
    peak = {d: next(e["gflops_per_s"] for e in doc["ceilings"]["compute"] if e["precision"] == "fp64" and e["fma"])
            for d, doc in (("a", a), ("b", b))}
    assert row["values"] == [peak["a"], peak["b"]]
    assert row["ratios_to_first"][1] == pytest.approx(peak["b"] / peak["a"])


def test_unpaired_levels_and_precisions_are_reported(tiny_run):
    # The hand-made file has L1-DRAM in fp64 read+write only, and no fp32 memory; which levels the
    # tiny run separates depends on the machine, so the expected notes are derived from both files.
    b_doc = json.loads((DATA / "ceilings-handworked-cpu.json").read_text())
    a_doc = json.loads((tiny_run / "ceilings.json").read_text())
    proc = run_cmd("ert", "compare", tiny_run, DATA / "ceilings-handworked-cpu.json")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("Not compared")[1]

    def memory_keys(doc):
        return {(m["level"], m["precision"], {"rw": "read+write", "ro": "read-only"}[m["access"]])
                for m in doc["ceilings"]["memory"]}

    only_b = memory_keys(b_doc) - memory_keys(a_doc)
    only_a = memory_keys(a_doc) - memory_keys(b_doc)
    assert only_b and only_a  # the files differ both ways (no fp32 memory in B; B reaches DRAM)
    for level, precision, access in only_b:
        assert f"{level} {precision} {access}: only in B (missing in A)" in notes
    for level, precision, access in only_a:
        assert f"{level} {precision} {access}: only in A" in notes
    assert "fp32 no-FMA peak: only in A" in notes


def test_compare_needs_two_files(tiny_run):
    proc = run_cmd("ert", "compare", tiny_run)
    assert proc.returncode == 2 and "at least two" in proc.stderr and "Traceback" not in proc.stderr
