"""benchmarks/gpu_summary.py on a real CPU run (recorded, its ceilings made by this code's analysis): one line per
ceiling, its measured/rated as ceilings.json says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_summary.py"


def summary(*args) -> subprocess.CompletedProcess:
    # PYTHONPATH: the ert of this checkout, as the script would import it where the project is installed.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of every table row printed (the header row excluded)."""
    rows, inside = [], False
    for line in stdout.splitlines():
        if line.startswith("  ceiling "):
            inside = True
            continue
        if inside and line.startswith("  ") and not re.match(r"  \d+ ceilings", line):
            rows.append(re.split(r"\s{2,}", line.strip()))
        else:
            inside = False
    return rows


def _close(printed: str, value: float) -> bool:
    """A value printed with four significant digits (ert's format_rate) against the file's."""
    return abs(float(printed) - value) <= 5e-4 * abs(value) + 1e-9


def test_every_ceiling_of_a_real_run_is_printed_with_the_ratio_its_file_holds(recorded_run, tmp_path):
    proc = summary(recorded_run, "--json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads((recorded_run / "ceilings.json").read_text())
    entries = [(e, "gflops_per_s") for e in doc["ceilings"]["compute"]] + \
              [(e, "gbytes_per_s") for e in doc["ceilings"]["memory"]]
    rows = table_rows(proc.stdout)
    assert len(rows) == len(entries) > 0, proc.stdout
    rated_seen = 0
    for cells, (entry, key) in zip(rows, entries):
        name, unit, measured, rated, ratio, spread, warnings = cells
        assert unit == ("GFLOP/s" if key == "gflops_per_s" else "GB/s"), cells
        assert _close(measured, entry[key]), (cells, entry[key])
        assert spread == f"{entry['spread']:.1%}", cells
        if entry["rated"][key] is None:
            assert rated == ratio == "-", cells
            continue
        rated_seen += 1
        assert _close(rated, entry["rated"][key]), (cells, entry["rated"])
        # The ratio printed is the file's, and the file's is measured over rated.
        assert ratio == f"{entry['rated']['ratio']:.4f}", (cells, entry["rated"])
        assert abs(float(ratio) - entry[key] / entry["rated"][key]) <= 1e-3 * float(ratio), cells
    assert rated_seen > 0, "the recorded Zen 4 run carries rated compute and cache values"
    # The JSON rows say the same, unrounded.
    record, = json.loads((tmp_path / "s.json").read_text())
    assert [r["ratio"] for r in record["ceilings"]] == [e["rated"]["ratio"] for e, _ in entries]
    assert record["points"] == doc["metadata"]["points"] and record["backend"] == "numba-cpu"
    # Each warning that names a ceiling is counted once, against that ceiling.
    counted = sum(int(c[-1]) for c in rows)
    assert counted <= len(doc["warnings"])
    assert f"{len(doc['warnings'])} warning" in proc.stdout
    # The run's header is the one `ert show` prints.
    assert "backend numba-cpu" in proc.stdout and f"== {recorded_run}" in proc.stdout


def test_a_run_without_ceilings_is_one_line_and_the_others_are_still_summarised(recorded_run, tmp_path):
    cut = tmp_path / "cut"
    cut.mkdir()
    shutil.copy(recorded_run / "raw.jsonl", cut / "raw.jsonl")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "ceilings.json").write_text('{"schema_version": "1.8", "ceilings": ')
    proc = summary(cut, recorded_run, broken, tmp_path / "missing")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    raw_lines = len((recorded_run / "raw.jsonl").read_text().splitlines())
    assert f"  no ceilings.json: the run failed or was cut short (raw.jsonl has {raw_lines} lines)" in lines
    assert "  no ceilings.json: the run failed or was cut short (no raw.jsonl)" in lines
    assert any(line.startswith("  unreadable: ") and "ceilings.json" in line for line in lines), proc.stdout
    ceilings = json.loads((recorded_run / "ceilings.json").read_text())["ceilings"]
    assert len(table_rows(proc.stdout)) == len(ceilings["compute"]) + len(ceilings["memory"])


def test_a_ceilings_file_without_rated_values_prints_dashes():
    """The hand-made GPU ceilings (HBM level, no rated block): every ceiling, no ratio invented."""
    path = REPO / "tests" / "data" / "ceilings-handworked-gpu.json"
    proc = summary(path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(path.read_text())
    rows = table_rows(proc.stdout)
    assert len(rows) == len(doc["ceilings"]["compute"]) + len(doc["ceilings"]["memory"])
    assert all(r[3] == r[4] == "-" for r in rows), rows
    assert any(r[0].endswith("HBM") for r in rows), rows
    assert "none with a rated value" in proc.stdout


def test_a_killed_run_is_summarised_from_ert_analyze_of_its_raw_data_and_marked_partial(recorded_run, tmp_path):
    """What gpu_acceptance.sh leaves for a run killed before its ceilings.json: `ert analyze` of raw.jsonl."""
    from conftest import run_cmd

    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(recorded_run / "raw.jsonl", killed / "raw.jsonl")
    made = run_cmd("ert", "analyze", killed, "-o", killed / "ceilings-partial.json")
    assert made.returncode == 0, made.stderr
    proc = summary(killed, "--json", tmp_path / "s.json")
    assert proc.returncode == 1  # a run that did not finish is not a pass
    assert ("  no ceilings.json: the run was killed; these ceilings are `ert analyze` of its raw.jsonl"
            in proc.stdout.splitlines())
    doc = json.loads((killed / "ceilings-partial.json").read_text())
    rows = table_rows(proc.stdout)
    entries = doc["ceilings"]["compute"] + doc["ceilings"]["memory"]
    assert len(rows) == len(entries) > 0
    assert [r[4] for r in rows] == [f"{e['rated']['ratio']:.4f}" if e["rated"]["ratio"] is not None else "-"
                                    for e in entries]
    record, = json.loads((tmp_path / "s.json").read_text())
    assert record["ceilings_file"] == "ceilings-partial.json"


@pytest.mark.slow  # an ert-run sweep, stopped
def test_a_run_interrupted_at_its_cap_is_shown_partial_and_fails(tmp_path):
    """ert-run stopped by SIGINT (what gpu_acceptance.sh's time cap sends) writes partial ceilings: shown as such."""
    import signal
    import time

    from conftest import command, write_config

    config = write_config(tmp_path / "slow.yaml")
    out = tmp_path / "run"
    proc = subprocess.Popen([command("ert-run"), str(config), "--out", str(out), "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a few points in, then the cap's signal
        raw = out / "raw.jsonl"
        if raw.exists() and raw.read_text().count('"type":"point"') >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    doc = json.loads((out / "ceilings.json").read_text())
    cut = [w for w in doc["warnings"] if w.startswith("partial run:")]
    assert cut, doc["warnings"]
    shown = summary(out, "--json", tmp_path / "s.json")
    assert shown.returncode == 1
    assert f"  {cut[0]}" in shown.stdout.splitlines()
    record, = json.loads((tmp_path / "s.json").read_text())
    assert record["partial"] is True and record["ceilings_file"] == "ceilings.json"
