"""The installed commands, run as a user runs them: faults are one line on stderr and leave nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import TINY, command, numba_plan, run_cmd, stderr_lines


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def assert_one_line_error(proc: subprocess.CompletedProcess, prog: str, *words: str) -> str:
    lines = stderr_lines(proc)
    assert proc.returncode != 0, f"exit 0 for a bad input; stdout:\n{proc.stdout}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{proc.stderr}"
    line = lines[0]
    assert line.startswith(f"{prog}: error: "), line
    for word in words:
        assert str(word) in line, f"{word!r} not in {line!r}"
    return line


# --------------------------------------------------------------------------- ert-run: bad configs

BAD_CONFIGS = {
    "bad-yaml": ("backend: numba-cpu\nprecisions: [fp64, fp32]\nworking_set:\n  min_bytes: 4096\n"
                 "  max_bytes: [8192\nthreads: 1\n", ["line ", "invalid YAML"]),
    "wrong-type": ("timing:\n  repeats: many\n", ["timing.repeats", "'many'"]),
    "unknown-key": ("backend: numba-cpu\nprecision: [fp64]\n", ["precision", "unknown key"]),
    "unknown-nested-key": ("working_set:\n  min_bytes: 4096\n  maxbytes: 8192\n", ["working_set.maxbytes", "unknown key"]),
    "negative-size": ("working_set:\n  min_bytes: -16384\n", ["working_set.min_bytes", "-16384"]),
    "inverted-size": ("working_set:\n  min_bytes: 1048576\n  max_bytes: 16384\n", ["working_set", "max_bytes"]),
    "flops": ("flops_per_element: [1, 3]\n", ["flops_per_element", "power of two"]),
    "precision": ("precisions: [fp8]\n", ["precisions[0]", "fp8"]),
    "threads-zero": ("threads: 0\n", ["threads"]),
    "top-level-list": ("- backend\n- numba-cpu\n", ["top level"]),
    "unknown-backend-in-file": ("backend: nosuch\n", ["backend", "nosuch"]),
    # Empty or comments only: once silently the built-in 918-point dense sweep.
    "empty": ("", ["config is empty"]),
    "comments-only": ("# backend: numba-cpu\n\n   # threads: 1\n", ["config is empty"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
# `ert run` takes the same path as `ert-run` past argument parsing: the fast tier runs `ert-run`'s 13 processes.
@pytest.mark.parametrize("prog", ["ert-run", pytest.param("ert run", marks=pytest.mark.slow)])
def test_bad_config_is_one_line_and_creates_nothing(tmp_path, case, prog):
    text, words = BAD_CONFIGS[case]
    cfg = tmp_path / f"{case}.yaml"
    cfg.write_text(text)
    out = tmp_path / "run"
    before = files_under(tmp_path)
    name, *sub = prog.split()
    proc = run_cmd(name, *sub, cfg, "--out", out, "-q", cwd=tmp_path)
    assert_one_line_error(proc, name, str(cfg), *words)
    assert proc.returncode == 2
    assert not out.exists(), "a failed start must not create the run directory"
    assert files_under(tmp_path) == before, "no partial file anywhere (nor results/ in the working directory)"


def test_unknown_backend_flag(tmp_path):
    out = tmp_path / "run"
    proc = run_cmd("ert-run", TINY, "--backend", "nosuch", "--out", out, cwd=tmp_path)
    line = assert_one_line_error(proc, "ert-run", "nosuch", "--backend", "numba-cpu")
    assert "unknown backend" in line
    assert not out.exists() and files_under(tmp_path) == set()


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = run_cmd("ert-run", missing, "--out", tmp_path / "run", cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", str(missing), "no such file")
    assert files_under(tmp_path) == set()


def test_config_that_is_a_directory(tmp_path):
    proc = run_cmd("ert-run", tmp_path, "--out", tmp_path / "run", cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", str(tmp_path), "directory")
    assert files_under(tmp_path) == set()


def test_out_holding_a_run_is_refused(recorded_run, tmp_path):
    before = {p.name: p.read_bytes() for p in recorded_run.iterdir()}
    proc = run_cmd("ert-run", TINY, "--out", recorded_run, cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", str(recorded_run), "--out", "already holds a run")
    assert {p.name: p.read_bytes() for p in recorded_run.iterdir()} == before, "the existing run is untouched"


@pytest.mark.parametrize("leftover", ["raw.jsonl", "config.yaml", "ceilings.json"])
def test_out_holding_any_part_of_a_run_is_refused(tmp_path, leftover):
    out = tmp_path / "run"
    out.mkdir()
    (out / leftover).write_text("x\n")
    proc = run_cmd("ert-run", TINY, "--out", out, cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", "--out")
    assert files_under(out) == {leftover} and (out / leftover).read_text() == "x\n"


def test_out_that_is_a_file_is_refused(tmp_path):
    out = tmp_path / "file"
    out.write_text("keep\n")
    proc = run_cmd("ert-run", TINY, "--out", out, cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", str(out), "--out")
    assert out.read_text() == "keep\n"


def test_resume_of_a_directory_that_is_not_a_run(tmp_path):
    proc = run_cmd("ert-run", "--resume", tmp_path, cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", str(tmp_path), "--resume")
    assert files_under(tmp_path) == set()


def test_resume_with_a_config_is_refused(recorded_copy, tmp_path):
    proc = run_cmd("ert-run", TINY, "--resume", recorded_copy, cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", "--resume")


# --------------------------------------------------------------------------- ert show / analyze


def test_show_missing_file(tmp_path):
    missing = tmp_path / "ceilings.json"
    assert_one_line_error(run_cmd("ert", "show", missing), "ert", str(missing), "no such file")


def test_show_corrupt_json(tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text('{\n  "schema_version": "1.0",\n  "metadata": {,\n}\n')
    assert_one_line_error(run_cmd("ert", "show", path), "ert", str(path), "line 3", "invalid JSON")


def test_show_wrong_schema_version(recorded_run, tmp_path):
    doc = json.loads((recorded_run / "ceilings.json").read_text())
    doc["schema_version"] = "2.0"
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps(doc))
    assert_one_line_error(run_cmd("ert", "show", path), "ert", str(path), "schema_version", "2.0")


def test_show_invalid_document_names_the_key(recorded_run, tmp_path):
    doc = json.loads((recorded_run / "ceilings.json").read_text())
    doc["ceilings"]["memory"][0]["gbytes_per_s"] = "fast"
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps(doc))
    assert_one_line_error(run_cmd("ert", "show", path), "ert", str(path), "ceilings.memory[0].gbytes_per_s")


def test_analyze_missing_directory(tmp_path):
    missing = tmp_path / "no-run"
    proc = run_cmd("ert", "analyze", missing, "-o", tmp_path / "out.json")
    assert_one_line_error(proc, "ert", str(missing))
    assert files_under(tmp_path) == set()


def test_analyze_garbage_line_in_the_middle(recorded_copy, tmp_path):
    lines = (recorded_copy / "raw.jsonl").read_text().splitlines(keepends=True)
    lines.insert(10, "this is not json {\n")
    (recorded_copy / "raw.jsonl").write_text("".join(lines))
    out = tmp_path / "out.json"
    proc = run_cmd("ert", "analyze", recorded_copy, "-o", out)
    assert_one_line_error(proc, "ert", str(recorded_copy / "raw.jsonl"), "line 11", "corrupt")
    assert not out.exists(), "no partial output"


def test_analyze_raw_without_header(recorded_copy, tmp_path):
    raw = recorded_copy / "raw.jsonl"
    raw.write_text("".join(raw.read_text().splitlines(keepends=True)[1:]))
    out = tmp_path / "out.json"
    proc = run_cmd("ert", "analyze", raw, "-o", out)
    assert_one_line_error(proc, "ert", str(raw), "header")
    assert not out.exists()


def test_analyze_raw_of_another_format(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"type":"header","raw_version":"7.0","metadata":{}}\n')
    assert_one_line_error(run_cmd("ert", "analyze", raw), "ert", str(raw), "raw_version")


def test_analyze_non_record_line(recorded_copy):
    raw = recorded_copy / "raw.jsonl"
    lines = raw.read_text().splitlines(keepends=True)
    lines.insert(3, "[1, 2, 3]\n")
    raw.write_text("".join(lines))
    assert_one_line_error(run_cmd("ert", "analyze", recorded_copy), "ert", "line 4")


# --------------------------------------------------------------------------- good paths


def test_validate_tiny():
    proc = run_cmd("ert", "validate", TINY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert str(TINY) in proc.stdout and "valid" in proc.stdout
    assert "8 kernel variant(s)" in proc.stdout
    # The count is the plan ert-run makes with this CPU's chain counts (made without importing numba).
    from ert.config.schema import load
    from ert.hardware.hwinfo import usable_cpus

    planned = numba_plan(load(TINY), usable_cpus())
    assert f": {len(planned)} points per rank layout" in proc.stdout


def test_validate_bad_config_fails(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("threads: -3\n")
    assert_one_line_error(run_cmd("ert", "validate", cfg), "ert", str(cfg), "threads")


def test_backends_lists_numba_cpu_as_available():
    proc = run_cmd("ert", "backends")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    row = next(r for r in rows if r and r[0] == "numba-cpu")
    assert row[1] == "available"
    assert "numba" in row


def test_backends_prints_device_lines_counts_and_reasons(monkeypatch, capsys):
    """`ert backends` from each probe's detail: a CUDA-style device count, OpenCL-style device lines."""
    from ert import cli
    from ert.backends import REGISTRY, BackendStatus

    statuses = {
        "cuda": BackendStatus("cuda", True, "", {"cupy": "13.0", "devices": 2, "accelerators": 2}),
        "opencl": BackendStatus("opencl", True, "", {"pyopencl": "2026.1", "accelerators": 0, "devices": [
            "[0:0] pthread-X (cpu; PoCL) unusable: the driver cannot build kernels here (PoCL: boom)",
            "[1:0] Some GPU (gpu; Vendor)"]}),
        "numba-cpu": BackendStatus("numba-cpu", False, "numba is missing"),
    }
    monkeypatch.setattr(REGISTRY, "status", lambda name: statuses[name])
    assert cli.main(["backends"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["cuda", "available"] and "devices 2" in lines[0]
    assert lines[1].startswith("opencl") and "devices" not in lines[1]
    assert lines[2].split()[0] == "device" and lines[2].endswith("(PoCL: boom)")
    assert lines[3].split()[0] == "device" and lines[3].endswith("Some GPU (gpu; Vendor)")
    assert lines[4].split()[:2] == ["numba-cpu", "unavailable"] and lines[4].endswith("numba is missing")


def test_python_m_ert_help():
    proc = subprocess.run([sys.executable, "-m", "ert", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ert")
    for sub in ("run", "validate", "backends", "analyze", "show"):
        assert sub in proc.stdout


def test_ert_run_help():
    proc = run_cmd("ert-run", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ert-run")
    assert "--resume" in proc.stdout and "--out" in proc.stdout


def test_version():
    from ert import __version__

    proc = run_cmd("ert", "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"ert {__version__}"


HEAVY = ("numba", "llvmlite", "matplotlib", "mpi4py", "numpy", "jsonschema")

IMPORT_CHECK = textwrap.dedent('''
    import json, sys
    from ert import cli
    for call, argv in ((cli.main, ["--help"]), (cli.run_main, ["--help"]), (cli.main, ["show", "--help"]),
                       (cli.main, ["analyze", "--help"])):
        try:
            call(argv)
        except SystemExit:
            pass
        parser = cli.build_parser()
    print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
''')


def test_help_imports_no_heavy_module():
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not loaded & set(HEAVY), f"--help imported {sorted(loaded & set(HEAVY))}"


@pytest.mark.parametrize("name", ["ert", "ert-run"])
def test_installed_command_help_under_importtime(name):
    """The console script itself, as installed: -X importtime lists every module it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", command(name), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "ert" in imported, "the importtime output was not parsed"
    assert not imported & set(HEAVY), f"{name} --help imported {sorted(imported & set(HEAVY))}"


def test_cli_in_process_returns_2_for_an_ert_error(tmp_path, capsys):
    from ert import cli

    assert cli.main(["show", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ert: error: ")


def test_bare_ert_run_defaults_to_the_packaged_config(tmp_path):
    """No CONFIG: the packaged default is used (checked through --backend nosuch, which stops before any work)."""
    proc = run_cmd("ert-run", "--backend", "nosuch", cwd=tmp_path)
    assert_one_line_error(proc, "ert-run", "nosuch")
    assert files_under(tmp_path) == set()


def test_a_bad_numba_num_threads_is_one_line(tmp_path):
    """Numba itself raises deep inside its import; ert names the variable first (issue 35)."""
    import os
    import subprocess

    from conftest import TINY, command

    proc = subprocess.run([command("ert-run"), str(TINY), "--out", str(tmp_path / "run"), "-q"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, NUMBA_NUM_THREADS="abc"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert stderr_lines(proc) == ["ert-run: error: environment: NUMBA_NUM_THREADS='abc' is not a positive integer: "
                                  "unset it or give a count"]
