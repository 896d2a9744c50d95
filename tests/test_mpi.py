"""MPI for real: `mpiexec -n 2 ert-run` (MPICH from PyPI), placement, aggregation, failures and kills.

Every test here runs the installed commands under the mpiexec that the `mpich` wheel puts next to the
interpreter (slow); the pure pieces (placement decisions, warning merging, fault parsing) are
tests/test_placement.py's, on plain values.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import TINY, command, first_points, point_records, write_config
from ert.spec import KernelSpec

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def mpiexec(*args, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([command("mpiexec"), "-n", "2", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def ert_run() -> str:
    return command("ert-run")


JOBS = Path(__file__).resolve().parents[1] / "jobs"


# ----------------------------------------------------------------------------- real runs under mpiexec
@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    """tiny.yaml on 2 ranks, started by the plain-mpirun job script (jobs/mpirun.sh: mpiexec -n 2 ert-run)."""
    run_dir = tmp_path_factory.mktemp("mpi") / "run"
    env = {**os.environ, "ERT_VENV": str(Path(command("ert-run")).parent.parent)}
    proc = subprocess.run(["bash", str(JOBS / "mpirun.sh"), str(TINY), "--out", str(run_dir), "-q"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # Only rank 0 prints: one table, one "ceilings:" line.
    assert proc.stdout.count("ceilings:") == 1
    assert proc.stderr.count("ert-run: numba-cpu, 2 rank(s)") == 1
    return run_dir


def test_two_ranks_are_recorded_with_their_placement(two_rank_run):
    meta = json.loads((two_rank_run / "ceilings.json").read_text())["metadata"]
    assert meta["ranks"] == 2
    assert sum(meta["ranks_per_host"].values()) == 2
    assert meta["mpi_library"].startswith("MPICH")
    ranks = meta["placement"]
    assert [p["rank"] for p in ranks] == [0, 1]
    usable = len(os.sched_getaffinity(0))
    if usable >= 2:  # each rank its own cores, pinned, with threads = cores / ranks
        assert not set(ranks[0]["cpus"]) & set(ranks[1]["cpus"])
        assert meta["threads_per_rank"] == min(p["cores"] for p in ranks)
        assert all(p["pinning"]["OMP_PLACES"] for p in ranks)


def test_aggregates_are_all_ranks_work_over_the_slowest_rank(two_rank_run):
    points = point_records(two_rank_run)
    assert points
    for rec in points:
        rs = rec["rank_seconds"]
        assert len(rs["per_rank"]) == 2
        assert rec["elements"] == rec["elements_per_thread"] * rec["threads_per_rank"] * 2
        # Each repeat's sample is its slowest rank: the largest sample is the slowest region of any rank --
        # unless the two ranks took turns (a busy host), when a region is their span on the host's clock.
        if rec.get("serialized_regions"):
            assert max(rec["samples"]) >= rs["max"]
        else:
            assert max(rec["samples"]) == pytest.approx(rs["max"])
        assert max(r["max"] for r in rs["per_rank"]) == pytest.approx(rs["max"])
        assert min(rec["samples"]) >= rs["min"]
    doc = json.loads((two_rank_run / "ceilings.json").read_text())
    by_id = {r["id"]: r for r in points}
    for c in doc["ceilings"]["compute"]:
        rec = by_id[c["evidence"]["point_id"]]
        spec = KernelSpec.from_dict(rec["spec"])
        flops = rec["elements_per_thread"] * rec["threads_per_rank"] * 2 * rec["trials"] * spec.flops_per_element
        assert c["gflops_per_s"] == pytest.approx(flops / rec["seconds"]["median"] / 1e9, rel=1e-3)


def test_an_error_before_the_sweep_is_printed_once(tmp_path):
    proc = mpiexec(ert_run(), tmp_path / "missing.yaml", "--out", tmp_path / "r")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [f"ert-run: error: {tmp_path / 'missing.yaml'}: no such file"]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("variable, value, levels", [("ERT_INJECT_FAULT", "rank=1,pt=3", "memory"),
                                                    ("ERT_TEST_NODE_ID", "a,b,c", "network")])
def test_a_bad_test_override_is_printed_once_not_by_every_rank(tmp_path, variable, value, levels):
    proc = mpiexec(ert_run(), TINY, "--out", tmp_path / "r", "-q", "--levels", levels, env={variable: value},
                   timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(f"ert-run: error: {variable}: expected "), proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_a_failure_on_one_rank_aborts_the_job_with_one_message(tmp_path):
    run_dir = tmp_path / "run"
    start = time.monotonic()
    proc = mpiexec(ert_run(), TINY, "--out", run_dir, "-q", env={"ERT_INJECT_FAULT": "rank=1,point=3"},
                   timeout=60)
    assert time.monotonic() - start < 30
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("ert-run: error")]
    assert ours == ["ert-run: error: rank 1: InjectedFault: injected fault (ERT_INJECT_FAULT) in point 3; the points "
                    f"measured are kept: resume with: ert-run --resume {run_dir}"], proc.stderr
    assert "Traceback" not in proc.stderr
    # The two points finished before the fault are on disk; no ceilings were written.
    assert len(first_points(point_records(run_dir))) == 2
    assert not (run_dir / "ceilings.json").exists()


def _rank_pid(tag: str, rank: int) -> int | None:
    """The pid of the ert-run process of ``rank`` in the job whose environment carries ``tag``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"ERT_TEST_TAG={tag}".encode() in env and f"PMI_RANK={rank}".encode() in env:
            return int(entry.name)
    return None


def test_killing_one_rank_ends_the_job_within_seconds_and_the_run_resumes(tmp_path):
    # SLOW_SMALL at every other working set (5 of 9): 3 points before the kill, the rest resumed.
    cfg = write_config(tmp_path / "slow.yaml", threads=1,
                       working_set={"min_bytes": 16384, "max_bytes": 4194304, "growth": 4.0})
    run_dir = tmp_path / "run"
    tag = uuid.uuid4().hex
    job = subprocess.Popen([command("mpiexec"), "-n", "2", ert_run(), cfg, "--out", run_dir, "-q"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "ERT_TEST_TAG": tag})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (run_dir / "raw.jsonl").exists() and len(point_records(run_dir)) >= 3:
                break
            assert job.poll() is None, job.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("no progress within 120 s")
        victim = _rank_pid(tag, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        job.wait(timeout=30)
        assert time.monotonic() - killed_at < 10
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode != 0
    before = first_points(point_records(run_dir))
    assert len(before) >= 3
    proc = mpiexec(ert_run(), "--resume", run_dir, "-q")
    assert proc.returncode == 0, proc.stderr
    after = first_points(point_records(run_dir))
    ids = [r["id"] for r in after]
    assert len(ids) == len(set(ids))
    assert after[:len(before)] == before
    doc = json.loads((run_dir / "ceilings.json").read_text())
    assert doc["metadata"]["points"]["measured"] == doc["metadata"]["points"]["planned"]


# ----------------------------------------------------------------------------- job scripts
JOB_SCRIPTS = ("slurm-cpu.sh", "slurm-gpu.sh", "pbs.sh", "mpirun.sh")


@pytest.mark.parametrize("name", JOB_SCRIPTS)
def test_job_script_parses_and_is_documented(name):
    script = JOBS / name
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert "ert-run" in script.read_text()
    readme = (JOBS.parent / "README.md").read_text()
    assert f"jobs/{name}" in readme


def test_srun_without_a_pmi_mpi_understands_is_an_error_not_n_rank_zeros(tmp_path):
    # srun --mpi=none starts N copies that each find MPI with one rank: they would all write one directory.
    env = dict(os.environ, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID="0")
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "PALS_SIZE", "PMI_FD",
                "PMI_PORT"):
        env.pop(var, None)
    out = tmp_path / "run"
    proc = subprocess.run([command("ert-run"), str(TINY), "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "launched as 2 ranks, but MPI sees 1" in lines[0] and "--mpi=pmi2" in lines[0]
    assert not out.exists()
