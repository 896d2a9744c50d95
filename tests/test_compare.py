"""ert compare: two real runs side by side, ratios, and what cannot be paired."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, TINY, run_cmd

DATA = REPO / "tests" / "data"


@pytest.fixture(scope="module")
def one_thread_run(tmp_path_factory):
    """A second real tiny run, on one thread: a machine layout to compare with the shared tiny run."""
    run_dir = tmp_path_factory.mktemp("tiny1") / "run"
    proc = run_cmd("ert-run", TINY, "--threads", "1", "--out", run_dir, "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_two_real_runs(tiny_run, one_thread_run, tmp_path):
    chart = tmp_path / "cmp.png"
    proc = run_cmd("ert", "compare", tiny_run, one_thread_run, "--labels", "2threads,1thread", "--plot", chart)
    assert proc.returncode == 0, proc.stderr
    assert "B/A" in proc.stdout and "fp64 FMA peak" in proc.stdout
    assert chart.read_bytes()[:4] == b"\x89PNG"
    proc = run_cmd("ert", "compare", tiny_run, one_thread_run, "--json")
    out = json.loads(proc.stdout)
    a = json.loads((tiny_run / "ceilings.json").read_text())
    b = json.loads((one_thread_run / "ceilings.json").read_text())
    row = next(r for r in out["ceilings"] if r["ceiling"] == "fp64 FMA peak")
    peak = {d: next(e["gflops_per_s"] for e in doc["ceilings"]["compute"] if e["precision"] == "fp64" and e["fma"])
            for d, doc in (("a", a), ("b", b))}
    assert row["values"] == [peak["a"], peak["b"]]
    assert row["ratios_to_first"][1] == pytest.approx(peak["b"] / peak["a"])


def test_unpaired_levels_and_precisions_are_reported(tiny_run):
    # The tiny run reaches L1 and L2 only, fp64 and fp32; the hand-made file has L3 and DRAM and no fp32 memory.
    proc = run_cmd("ert", "compare", tiny_run, DATA / "ceilings-handworked-cpu.json")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("Not compared")[1]
    assert "L3 fp64 read+write: only in B (missing in A)" in notes
    assert "DRAM fp64 read+write: only in B" in notes
    assert "L1 fp32 read+write: only in A" in notes
    assert "fp32 no-FMA peak: only in A" in notes


def test_compare_needs_two_files(tiny_run):
    proc = run_cmd("ert", "compare", tiny_run)
    assert proc.returncode == 2 and "at least two" in proc.stderr and "Traceback" not in proc.stderr
