"""Every script in benchmarks/ still runs: each answers --help, and each one a few seconds can run is run at
its smallest setting (issue 31: two scripts had called functions that no longer existed, and nothing ran them).

The numbers they print are not checked here (they are measurements on a shared host); a script passes when it
exits 0, says nothing of a traceback, and prints its table's header.  A new script must be added to a table
below, or `test_every_script_is_smoke_tested` fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"

# script -> (arguments of its smallest setting, a line its output must hold); {tmp} is a fresh directory.
# Run for real (slow: Numba JIT, C compiles, PoCL builds), about 35 s together on 2 shared cores.
SMALLEST = {
    "links.py": (["--min-bytes", "4096", "--max-bytes", "65536", "--min-seconds", "0.001", "--repeats", "1",
                  "--plateau", "1"], "plateau GB/s"),
    "opencl_vs_numba.py": (["--rounds", "1", "--min-seconds", "0.001", "--repeats", "1", "--dram-bytes", "1048576",
                            "--threads", "1"], "per-round ratios"),
    "numba_vs_c.py": (["--quick", "--rounds", "1", "--min-seconds", "0.001", "--repeats", "1",
                       "--dram-bytes", "4194304", "--threads", "1"], "all checks passed"),
    "ert_c_curves.py": (["-o", "{tmp}/c.jsonl", "--threads", "1", "--min-bytes", "4096", "--max-bytes", "65536",
                         "--growth", "4", "--min-seconds", "0.001", "--repeats", "1"], "3 points"),
    "level_check.py": ([str(REPO / "tests" / "data" / "ceilings-handworked-cpu.json"), "--rounds", "1",
                        "--min-seconds", "0.001"], "C/roof"),
    "l2_states.py": (["--threads", "1", "--reps", "1"], "after-dram"),
    "l2_regimes.py": (["--rounds", "1", "--per-octave", "1", "--threads", "1"], "upper/lower half"),
    # One rank (no mpiexec): no message is sent, but every import and interface read runs.
    "cluster_pingpong.py": ([], "interfaces counted"),
    # 4 hosts x 2 ranks (the bound is for 512 x 8: about 10 s and 400 MiB, too long for the suite).
    "hosts_analysis.py": (["--hosts", "4", "--ranks-per-host", "2"], "within bounds, the slow hosts named"),
    # tests/data's own ERT configs (ERT's real configs are a third party's, not shipped): converted and validated.
    "ert_configs.py": ([str(REPO / "tests" / "data" / f"ert-config-{name}.txt") for name in ("cpu", "knl", "gpu", "ocl")],
                       "4 config(s): 4 converted and valid, 0 refused in one line, 0 failed"),
    # A recorded Zen 5 run (issue 30; tests/data/zen5-l2-window): every roof against its window's best clean point.
    "roof_vs_window.py": ([str(REPO / "tests" / "data" / "zen5-l2-window" / "bare-r1")], "L2"),
}
# Scripts whose smallest setting is a whole ert-run sweep or more (tests/test_run.py and the MPI tests run
# those paths), or needs a GPU: --help only here.
HELP_ONLY = {"default_vs_thorough.py", "rated_ratios.py", "mpi_l1_scaling.py", "gpu_summary.py",
             "disturbed_runs.py"}
# No GPU here: the driver must say so and exit 2 (on a GPU, benchmarks/gpu_acceptance.sh runs it under ncu).
NEEDS_GPU = {"gpu_ncu_driver.py": "the cuda backend is not available"}
# Shell scripts: --help here; gpu_acceptance.sh's --dry-run (every step it would run) is
# tests/test_gpu_acceptance.py's; gpu_wheels.sh downloads (network), so --help only.
SHELL = {"gpu_acceptance.sh", "gpu_wheels.sh"}
# Not scripts: the C kernel ert_c_curves.py, numba_vs_c.py and level_check.py build; the folder's README.
NOT_SCRIPTS = {"ert_c_kernel.c", "README.md"}
PYTHON_SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def _run(argv: list[str], *, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def test_every_script_is_smoke_tested():
    listed = set(SMALLEST) | HELP_ONLY | set(NEEDS_GPU) | SHELL | NOT_SCRIPTS
    tracked = subprocess.run(["git", "ls-files", "benchmarks"], capture_output=True, text=True, cwd=REPO)
    if tracked.returncode != 0:
        pytest.skip(f"not a git checkout: {tracked.stderr.strip()}")
    assert {Path(p).name for p in tracked.stdout.split()} | {p.name for p in BENCH.glob("*.py")} == listed


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_every_python_script_answers_help(script):
    """Without its hardware too (issue 41: gpu_ncu_driver.py needed a GPU, cluster_pingpong.py mpi4py)."""
    proc = _run([sys.executable, str(BENCH / script), "--help"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("script", sorted(SHELL))
def test_every_shell_script_answers_help(script):
    proc = _run(["bash", str(BENCH / script), "--help"], timeout=60)
    assert proc.returncode == 0 and f"bash benchmarks/{script}" in proc.stdout, proc.stdout + proc.stderr
    proc = _run(["bash", str(BENCH / script), "--no-such-option"], timeout=60)
    assert proc.returncode == 2 and "unknown option" in proc.stderr


@pytest.mark.parametrize("script", sorted(NEEDS_GPU))
def test_a_gpu_script_without_a_gpu_says_so(script):
    from ert.backends import REGISTRY

    if REGISTRY.status("cuda").available:
        pytest.skip("a GPU is here: benchmarks/gpu_acceptance.sh runs this script")
    proc = _run([sys.executable, str(BENCH / script)], timeout=60)
    assert proc.returncode == 2 and NEEDS_GPU[script] in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_every_quick_script_runs_at_its_smallest_setting(script, tmp_path):
    args, expected = SMALLEST[script]
    if script in ("numba_vs_c.py", "ert_c_curves.py", "level_check.py", "l2_regimes.py") and not shutil.which("gcc"):
        pytest.skip("needs gcc (the C reference kernel)")
    if script in ("opencl_vs_numba.py", "links.py"):
        from ert.backends import REGISTRY

        status = REGISTRY.status("opencl")
        if not status.available:
            pytest.skip(f"opencl: {status.reason}")
    if script == "cluster_pingpong.py" and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpi4py (pip install -e '.[mpi]')")
    proc = _run([sys.executable, str(BENCH / script), *(a.format(tmp=tmp_path) for a in args)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and expected in proc.stdout, proc.stdout[-2000:]


@pytest.mark.slow  # three `ert analyze` processes and the script
def test_disturbed_runs_reports_recorded_runs(tmp_path):
    """disturbed_runs.py --report over three recorded Zen 4 runs (two quiet, one disturbed by other tenants): the
    table of each ceiling's share of the median, its flags and the unflagged values' max/min, from ceilings.json."""
    import json

    data = REPO / "tests" / "data" / "zen4-noisy"
    saved = []
    for name in ("quiet-a", "quiet-b", "disturbed-run"):
        run = tmp_path / name
        run.mkdir()
        shutil.copy(data / name / "raw.jsonl", run / "raw.jsonl")
        proc = _run([sys.executable, "-m", "ert", "analyze", str(run), "-o", str(run / "ceilings.json")])
        assert proc.returncode == 0, proc.stderr
        # The timings the script would have measured (seconds as the user feels them): given, not measured here.
        saved.append({"dir": str(run), "code": 0, "first_line_s": 0.8, "shell_s": 40.0, "disturbance": None,
                      "stderr": ""})
    (tmp_path / "runs.json").write_text(json.dumps(saved))
    proc = _run([sys.executable, str(BENCH / "disturbed_runs.py"), "--report", str(tmp_path)])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rows = {" ".join(line.split()[:3]): line.split() for line in proc.stdout.splitlines()
            if line.startswith(("L1 ", "L2 ", "L3 ", "DRAM "))}
    docs = [json.loads((tmp_path / n / "ceilings.json").read_text()) for n in ("quiet-a", "quiet-b", "disturbed-run")]
    values = [{(e["level"], e["precision"], e["access"]): e for e in d["ceilings"]["memory"]} for d in docs]
    key = ("L2", "fp64", "rw")
    row = rows[" ".join(key)]
    kept = [v[key]["gbytes_per_s"] for v in values if not v[key].get("disturbed")]
    assert row[-3:] == [f"{max(kept) / min(kept):.3f}", f"({len(kept)}", "runs)"]
    flagged = [bool(v[key].get("disturbed")) for v in values]
    assert [c.endswith("*") for c in row[4:7]] == flagged
    assert "unflagged max/min" in proc.stdout
