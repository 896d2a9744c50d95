"""Every script in jobs/ answers --help without its scheduler, cluster or ReFrame (issue 41 item 7).

The job scripts read Slurm's or PBS's variables and start srun, qsub's mpiexec
or root-only namespaces; --help must print the script's usage (its header) and
exit 0 before any of that.  The ReFrame files are loaded by `reframe -c`/`-C`;
run as scripts, they say how.  A new file in jobs/ must be added to a table
below, or `test_every_jobs_file_is_listed` fails.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

JOBS = REPO / "jobs"
SHELL = ["arm64-rig.sh", "local-cluster-ssh", "local-cluster.sh", "mpirun.sh", "pbs.sh", "slurm-cpu.sh",
         "slurm-gpu.sh"]
PYTHON = ["reframe/ert_check.py", "reframe/local-cluster.py"]
NOT_SCRIPTS = ["README.md"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    # No scheduler variables, no venv to activate: the help must come first.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)


def test_every_jobs_file_is_listed():
    found = sorted(str(p.relative_to(JOBS)) for p in JOBS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert found == sorted(SHELL + PYTHON + NOT_SCRIPTS)


@pytest.mark.parametrize("script", SHELL)
def test_every_job_script_answers_help(script):
    proc = _run(["bash", str(JOBS / script), "--help"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) >= 3 and script in proc.stdout and not any(line.startswith(("#", "set ")) for line in lines)


@pytest.mark.parametrize("script", PYTHON)
def test_every_reframe_file_run_as_a_script_says_how_it_is_used(script):
    proc = _run([sys.executable, str(JOBS / script), "--help"])
    assert proc.returncode == 0 and "reframe -C jobs/reframe/local-cluster.py" in proc.stdout, proc.stderr
