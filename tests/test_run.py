"""End to end with real Numba: a tiny sweep, its files, analyze/show, and resume after a kill or Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from ert.records.ceilings_io import SCHEMA_VERSION
from ert.records.ceilings_io import load_ceilings
from ert.config.schema import load

from conftest import (command, first_points, numba_plan, point_records, raw_lines, raw_records, run_cmd, stderr_lines,
                      write_config)

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- the tiny run


def test_ceilings_json_validates(tiny_run):
    doc = load_ceilings(tiny_run / "ceilings.json")
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["raw"] == "raw.jsonl"


def test_metadata(tiny_run):
    meta = load_ceilings(tiny_run / "ceilings.json")["metadata"]
    assert meta["ranks"] == 1
    assert type(meta["threads_per_rank"]) is int and meta["threads_per_rank"] >= 1
    assert meta["backend"] == "numba-cpu"
    assert meta["points"]["planned"] == meta["points"]["measured"] == len(numba_plan(load(tiny_run / "config.yaml"),
                                                                                       meta["threads_per_rank"]))
    assert meta["points"]["invalid"] == 0
    saved = load(tiny_run / "config.yaml")  # the resolved config that reproduces the run
    assert saved.backend == "numba-cpu" and saved.threads == meta["threads_per_rank"]
    assert meta["config_sha256"] == saved.sha256()
    assert meta["config"] == saved.to_dict()


def test_memory_ceilings(tiny_run):
    doc = load_ceilings(tiny_run / "ceilings.json")
    memory = doc["ceilings"]["memory"]
    assert memory
    ids = {r["id"] for r in point_records(tiny_run)}
    for entry in memory:
        assert isinstance(entry["level"], str) and entry["level"]
        assert entry["gbytes_per_s"] > 0
        assert entry["spread"] >= 0
        low, high = entry["wss_bytes"]
        assert 16384 <= low <= high <= 4194304
        assert entry["n_points"] >= 1
        assert entry["flops_per_element"] == 1
        assert set(entry["evidence"]["point_ids"]) <= ids
        assert len(entry["evidence"]["point_ids"]) == entry["n_points"]
    # Each (precision, access) swept has a bandwidth ceiling, or a warning saying why not
    # (a very noisy machine can leave a curve without plateaus).
    groups = {(e["precision"], e["access"]) for e in memory}
    for precision, access in [("fp64", "rw"), ("fp32", "rw"), ("fp64", "ro"), ("fp32", "ro")]:
        label = f"{precision} {'read+write' if access == 'rw' else 'read-only'}"
        assert (precision, access) in groups or any(w.startswith(label) for w in doc["warnings"]), label
    assert groups <= {("fp64", "rw"), ("fp32", "rw"), ("fp64", "ro"), ("fp32", "ro")}


def test_compute_ceilings(tiny_run):
    doc = load_ceilings(tiny_run / "ceilings.json")
    compute = doc["ceilings"]["compute"]
    assert {(c["precision"], c["fma"]) for c in compute} == {
        ("fp64", True), ("fp64", False), ("fp32", True), ("fp32", False)}
    by_id = {r["id"]: r for r in point_records(tiny_run)}
    for c in compute:
        rec = by_id[c["evidence"]["point_id"]]
        assert rec["spec"]["precision"] == c["precision"] and rec["spec"]["fma"] == c["fma"]
        assert rec["spec"]["flops_per_element"] == c["flops_per_element"] == 8
        # GFLOP/s = elements x trials x FLOPs per element / median seconds.
        expected = rec["elements"] * rec["trials"] * 8 / rec["seconds"]["median"] / 1e9
        assert c["gflops_per_s"] == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert c["evidence"]["seconds"] == rec["seconds"]


def test_raw_records(tiny_run):
    text = (tiny_run / "raw.jsonl").read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]  # every line is JSON
    assert records[0]["type"] == "header" and records[-1]["type"] == "end"
    assert records[-1]["interrupted"] is False
    header = records[0]
    cfg = load(tiny_run / "config.yaml")
    threads = header["metadata"]["threads_per_rank"]
    planned = numba_plan(cfg, threads)
    assert header["planned_points"] == len(planned)
    points = [r for r in records if r["type"] == "point"]
    assert sorted(r["id"] for r in points) == sorted(p.id for p in planned)
    for r in points:
        s = r["seconds"]
        assert 0 < s["min"] <= s["median"] <= s["max"], r["id"]
        assert len(r["samples"]) == cfg.timing.repeats
        assert min(r["samples"]) == s["min"] and max(r["samples"]) == s["max"]
        assert r["trials"] >= 1
        assert r["elements"] == r["elements_per_thread"] * threads
        assert r["elements_per_thread"] * threads * (8 if r["spec"]["precision"] == "fp64" else 4) == r["wss_bytes"]
        assert r["valid"] is True, r["check"]
        assert r["noisy"] == (r["spread"] > cfg.timing.noise_threshold)
        assert 0 <= r["remeasured"] <= cfg.timing.max_remeasure


def test_analyze_reproduces_the_ceilings(tiny_run):
    proc = run_cmd("ert", "analyze", tiny_run, "--json")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    saved = json.loads((tiny_run / "ceilings.json").read_text())
    assert again["ceilings"] == saved["ceilings"]
    assert again == saved  # the whole document: analysis depends on raw.jsonl alone


def test_analyze_of_a_run_and_of_its_save_raw_copy_gives_the_same_ceilings(tiny_run, tmp_path):
    saved = tmp_path / "saved.jsonl"
    umask = os.umask(0o022)  # the usual umask (ert analyze inherits it): a new file is 0644
    try:
        first = run_cmd("ert", "analyze", tiny_run, "--json", "--save-raw", saved)
    finally:
        os.umask(umask)
    assert first.returncode == 0, first.stderr
    assert saved.stat().st_mode & 0o777 == 0o644  # like every file ert writes (it was 0600)
    second = run_cmd("ert", "analyze", saved, "--json")
    assert second.returncode == 0, second.stderr
    run_doc, copy_doc = json.loads(first.stdout), json.loads(second.stdout)
    assert copy_doc["ceilings"] == run_doc["ceilings"] == json.loads((tiny_run / "ceilings.json").read_text())["ceilings"]
    assert copy_doc["warnings"] == run_doc["warnings"]


def test_analyze_output_file(tiny_run, tmp_path):
    out = tmp_path / "again.json"
    proc = run_cmd("ert", "analyze", tiny_run / "raw.jsonl", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert load_ceilings(out) == load_ceilings(tiny_run / "ceilings.json")
    assert "Compute" in proc.stdout


@pytest.mark.parametrize("target", ["dir", "file"])
def test_show_prints_the_levels(tiny_run, target):
    path = tiny_run if target == "dir" else tiny_run / "ceilings.json"
    proc = run_cmd("ert", "show", "--verbose", path)  # the tables by curve, every warning whole
    assert proc.returncode == 0, proc.stderr
    doc = load_ceilings(tiny_run / "ceilings.json")
    for entry in doc["ceilings"]["memory"]:
        access = "read+write" if entry["access"] == "rw" else "read-only"
        assert f"Memory bandwidth, {access}, {entry['precision']}" in proc.stdout
        # The level's row starts with its name.
        rows = [line.split() for line in proc.stdout.splitlines()]
        assert any(row[:1] == [entry["level"]] for row in rows), entry["level"]
    assert "Compute" in proc.stdout and "fp32" in proc.stdout
    for warning in doc["warnings"]:
        assert warning.splitlines()[0] in proc.stdout


def test_validate_the_saved_config(tiny_run):
    proc = run_cmd("ert", "validate", tiny_run / "config.yaml")
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- interrupting and resuming


def start_run(cfg: Path, out: Path, *, resume: bool = False) -> subprocess.Popen:
    """``ert-run CFG --out OUT`` (or, with ``resume``, ``ert-run --resume OUT``) in the background."""
    # A Python-level SIGINT handler in this process is reset to the default on
    # exec, so the child installs its own KeyboardInterrupt handler even when
    # this process was started with SIGINT ignored (a background job).
    args = ["--resume", str(out)] if resume else [str(cfg), "--out", str(out)]
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([command("ert-run"), *args, "-q"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, old)


def wait_for_points(proc: subprocess.Popen, out: Path, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    raw = out / "raw.jsonl"
    while time.monotonic() < deadline:
        if raw.exists() and sum(1 for line in raw_lines(out) if '"type":"point"' in line) >= count:
            return
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"ert-run ended (exit {proc.returncode}) before {count} points were written:\n{err}")
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    pytest.fail(f"fewer than {count} points after {timeout} s")


def planned_ids(run_dir: Path) -> list[str]:
    header = raw_records(run_dir)[0]
    cfg = load(run_dir / "config.yaml")
    ids = [p.id for p in numba_plan(cfg, header["metadata"]["threads_per_rank"])]
    assert len(ids) == header["planned_points"]
    return ids


def assert_complete_and_unchanged(run_dir: Path, before: dict[str, dict]) -> None:
    records = raw_records(run_dir)
    points = [r for r in records if r["type"] == "point"]
    # Nothing measured twice, but what the host's weather measured again (a point written in a disturbed stretch).
    counts = Counter(r["id"] for r in first_points(points))
    assert max(counts.values()) == 1, f"measured twice: {[k for k, v in counts.items() if v > 1]}"
    assert sorted(counts) == sorted(planned_ids(run_dir)), "total = planned"
    for pid, rec in before.items():
        assert rec in points, f"{pid} changed on resume"
    assert sum(1 for r in records if r["type"] == "header") == 1
    doc = load_ceilings(run_dir / "ceilings.json")
    assert doc["metadata"]["points"]["measured"] == doc["metadata"]["points"]["planned"] == len(counts)
    assert not any("partial run" in w for w in doc["warnings"])


def resume(run_dir: Path) -> subprocess.CompletedProcess:
    proc = run_cmd("ert-run", "--resume", run_dir, "-q", timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_truncated_last_line_is_tolerated_by_analyze_and_resume(tiny_copy):
    raw = tiny_copy / "raw.jsonl"
    lines = raw.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "end"
    kept, dropped = lines[:-6], lines[-6:-1]  # as if killed: 5 points and the end record missing
    raw.write_text("".join(kept) + dropped[0][: len(dropped[0]) // 2])  # half a line, no newline
    before = {r["id"]: r for r in (json.loads(line) for line in kept) if r["type"] == "point"}

    proc = run_cmd("ert", "analyze", tiny_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    planned = len(planned_ids(tiny_copy))
    assert doc["metadata"]["points"]["measured"] == len(before) == planned - 5
    assert any("partial run" in w for w in doc["warnings"])

    resume(tiny_copy)
    text = raw.read_text()
    assert text.endswith("\n")
    for line in text.splitlines():
        json.loads(line)  # the half line was cut, not left in the middle of the file
    assert_complete_and_unchanged(tiny_copy, before)
    assert len(first_points(point_records(tiny_copy))) == planned


def test_kill_9_then_ctrl_c_leave_runs_that_resume_completes(tmp_path):
    """One run interrupted twice: killed (SIGKILL) mid-sweep, resumed, the resume stopped by Ctrl-C, resumed again
    to the end; every record written before either stop is kept unchanged, nothing is measured twice."""
    cfg = write_config(tmp_path / "small.yaml")
    out = tmp_path / "run"
    proc = start_run(cfg, out)
    wait_for_points(proc, out, 5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    killed = {r["id"]: r for r in point_records(out)}
    assert len(killed) >= 5
    assert len(killed) < len(planned_ids(out)), "the kill came too late to test a resume"
    assert not (out / "ceilings.json").exists()
    assert all(r["type"] != "end" for r in raw_records(out))

    # Resumed, then Ctrl-C: a valid partial run.
    proc = start_run(cfg, out, resume=True)
    wait_for_points(proc, out, len(killed) + 4)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "--resume" in stderr

    records = raw_records(out)  # every line is valid JSON
    assert (out / "raw.jsonl").read_text().endswith("\n")
    assert records[-1]["type"] == "end" and records[-1]["interrupted"] is True
    points = [r for r in records if r["type"] == "point"]
    assert all(points[k] == rec for k, rec in enumerate(killed.values()))  # the killed run's, as they were
    # A Ctrl-C landing between a point's write and its count leaves the line complete, the count one short.
    now = len(points) - len(killed)
    assert now >= 4 and now - 1 <= records[-1]["measured"] <= now
    assert len(points) < len(planned_ids(out))

    doc = load_ceilings(out / "ceilings.json")  # written and schema-valid
    assert doc["metadata"]["points"]["measured"] == len(points)
    assert any("partial run" in w for w in doc["warnings"]), doc["warnings"]

    before = {r["id"]: r for r in points}
    result = resume(out)
    assert "ceilings:" in result.stdout
    assert_complete_and_unchanged(out, before)
    ends = [r for r in raw_records(out) if r["type"] == "end"]
    assert [e["interrupted"] for e in ends] == [True, False]


def test_resume_of_a_complete_run_measures_nothing_and_rebuilds_a_deleted_config_yaml(tiny_copy):
    before = (tiny_copy / "raw.jsonl").read_text()
    original = load(tiny_copy / "config.yaml")
    (tiny_copy / "config.yaml").unlink()
    proc = resume(tiny_copy)  # asserts a clean exit
    after = (tiny_copy / "raw.jsonl").read_text()
    assert after.startswith(before)
    added = [json.loads(line) for line in after[len(before):].splitlines()]
    assert all(r["type"] != "point" for r in added)
    assert f"ert-run: {tiny_copy / 'config.yaml'} was missing: rebuilt from raw.jsonl's header" in proc.stderr
    assert load(tiny_copy / "config.yaml") == original


def test_resume_refuses_other_threads(tiny_copy):
    threads = load(tiny_copy / "config.yaml").threads
    proc = run_cmd("ert-run", "--resume", tiny_copy, "--threads", threads + 1)
    lines = stderr_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and "--threads" in lines[0]


# --------------------------------------------------------------------------- one run per directory (issue 35)
# Five points of one kernel: seconds, not a minute, for the tests that run whole sweeps.
MICRO = {"backend": "numba-cpu", "precisions": ["fp64"], "flops_per_element": [1], "fma": "on", "access": ["rw"],
         "working_set": {"min_bytes": 16384, "max_bytes": 262144, "growth": 2.0},
         "timing": {"min_seconds": 0.002, "repeats": 3, "noise_threshold": 0.25, "max_remeasure": 0},
         "threads": "auto"}


def start(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([command("ert-run"), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def test_two_concurrent_resumes_one_runs_the_other_exits_2_and_nothing_is_measured_twice(tiny_copy):
    raw = tiny_copy / "raw.jsonl"
    lines = raw.read_text().splitlines(keepends=True)
    raw.write_text("".join(lines[:-7]))  # as if killed: 6 points and the end missing
    (tiny_copy / "ceilings.json").unlink()
    procs = [start("--resume", tiny_copy, "-q") for _ in range(2)]
    results = [(proc.wait(timeout=240), *proc.communicate()) for proc in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, _, err in results if code == 2)
    winner = next(proc for proc, (code, _, _) in zip(procs, results) if code == 0)
    assert loser.strip().splitlines() == [
        f"ert-run: error: {tiny_copy}: --resume: in use by another ert-run (pid {winner.pid} on host "
        f"{__import__('socket').gethostname()}); wait for it to end, or choose another directory"]
    counts = Counter(r["id"] for r in first_points(point_records(tiny_copy)))
    assert max(counts.values()) == 1 and len(counts) == len(planned_ids(tiny_copy))
    assert sum(1 for r in raw_records(tiny_copy) if r["type"] == "header") == 1
    assert not (tiny_copy / ".ert-run.lock").exists()  # let go at the end


def test_two_runs_into_one_out_one_runs_the_other_exits_2(tmp_path):
    cfg = write_config(tmp_path / "micro.yaml", MICRO)
    out = tmp_path / "run"
    procs = [start(cfg, "--out", out, "-q") for _ in range(2)]
    results = [(proc.wait(timeout=240), proc.communicate()[1]) for proc in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2).strip().splitlines()
    assert len(loser) == 1 and loser[0].startswith(f"ert-run: error: {out}: --out: "), loser
    assert "in use by another ert-run (pid" in loser[0] or "already holds a run" in loser[0]
    records = raw_records(out)
    assert sum(1 for r in records if r["type"] == "header") == 1
    firsts = [r["id"] for r in first_points([r for r in records if r["type"] == "point"])]
    assert len(set(firsts)) == len(firsts)  # one writer: no point measured twice (the weather's re-measurements aside)


def test_resume_with_an_edited_config_yaml_exits_2_naming_the_key(tiny_copy):
    config = tiny_copy / "config.yaml"
    import yaml

    data = yaml.safe_load(config.read_text())
    data["working_set"]["max_bytes"] = 8388608  # a user's edit between the kill and the resume
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    before = (tiny_copy / "raw.jsonl").read_text()
    proc = run_cmd("ert-run", "--resume", tiny_copy, "-q")
    assert proc.returncode == 2
    assert stderr_lines(proc) == [f"ert-run: error: {config}: working_set.max_bytes: 8388608 here, 4194304 in the "
                                  f"run's header (raw.jsonl): resuming would mix two sweeps; restore it, delete it "
                                  f"(rebuilt from the header), or start a new run"]
    assert (tiny_copy / "raw.jsonl").read_text() == before


@pytest.mark.parametrize("how", ["--resume", "--restart"])
def test_a_run_killed_before_its_header_is_no_dead_end(tmp_path, how):
    from ert.config.schema import from_dict
    from ert.measure import rundir

    run = tmp_path / "run"
    rundir.create(run, from_dict({**MICRO, "threads": 2}))  # config.yaml (resolved) written, then killed (or the disk full) mid-header
    (run / "raw.jsonl").write_text('{"type":"header","raw_version":"1.0","meta')
    args = ("--resume", run) if how == "--resume" else (write_config(tmp_path / "micro.yaml", MICRO), "--out", run,
                                                           "--restart")
    proc = run_cmd("ert-run", *args, "-q", timeout=240)
    assert proc.returncode == 0, proc.stderr
    records = raw_records(run)
    assert records[0]["type"] == "header" and records[-1]["type"] == "end"
    assert (run / "ceilings.json").exists()


def test_a_sweep_that_raises_ends_interrupted_with_why_in_one_line_and_resumes(tmp_path):
    cfg = write_config(tmp_path / "micro.yaml", MICRO)
    out = tmp_path / "run"
    proc = run_cmd_env(("ert-run", cfg, "--out", out, "-q"), {"ERT_INJECT_FAULT": "rank=0,point=3"})
    assert proc.returncode == 2
    reason = "InjectedFault: injected fault (ERT_INJECT_FAULT) in point 3"
    assert stderr_lines(proc)[-1] == (f"ert-run: error: {reason}; the points measured are kept: resume with: "
                                      f"ert-run --resume {out}")
    assert "Traceback" not in proc.stderr and sum("error" in line for line in stderr_lines(proc)) == 1
    end = raw_records(out)[-1]
    assert end["type"] == "end" and end["interrupted"] is True and end["reason"] == reason
    before = {r["id"]: r for r in point_records(out)}
    assert len(before) == 2
    resume(out)
    assert_complete_and_unchanged(out, before)


def run_cmd_env(args, env) -> subprocess.CompletedProcess:
    return subprocess.run([command(args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env})


def test_more_threads_than_cpus_is_a_warning_in_the_run_and_in_ceilings_json(tmp_path):
    from ert.records.warning_codes import coded_warnings

    cpus = len(os.sched_getaffinity(0))
    cfg = write_config(tmp_path / "micro.yaml", MICRO)
    proc = run_cmd("ert-run", cfg, "--out", tmp_path / "run", "--threads", 2 * cpus, "-q", timeout=240)
    assert proc.returncode == 0, proc.stderr
    text = f"{2 * cpus} threads on {cpus} cpus: oversubscribed; these are not the machine's ceilings"
    assert f"ert-run: warning: {text}" in stderr_lines(proc)
    doc = load_ceilings(tmp_path / "run" / "ceilings.json")
    assert doc["metadata"]["cpus_usable"] == cpus
    coded = {w.text: w for w in coded_warnings(doc)}
    assert coded[text].code == "threads-oversubscribed" and coded[text].group == "act"
    assert not any("the kernel, not the hardware" in w for w in doc["warnings"]), doc["warnings"]
