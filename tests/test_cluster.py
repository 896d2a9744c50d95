"""The job scripts on a real Slurm, and MPI across two hosts that really are separate (jobs/local-cluster.sh).

Two hosts, node1 and node2, each in its own network, host-name and mount
namespaces on a veth bridge, with a real slurmctld, one real slurmd each,
munge, and MPICH's PMI-2 through srun.  Needs root (namespaces, daemons) and
Slurm (installed by the script with apt where missing): skipped with the
reason otherwise.  .ci/run runs it as root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TINY

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SCRIPT = REPO / "jobs" / "local-cluster.sh"
SSH = REPO / "jobs" / "local-cluster-ssh"
STATE = Path("/run/ert-cluster-test")
VENV = Path(sys.executable).parent.parent
# Network levels only, 7 sizes up to 16 MiB per level (21 transfers of ~1 s on the rig): long enough to be cut in
# the middle (after 4), short enough to resume (growth 4 made 36: a 45 s resume).
NETWORK_ONLY = {"backend": "numba-cpu", "levels": ["network"],
                "transfer": {"min_bytes": 8, "max_bytes": 16 << 20, "network_max_bytes": 16 << 20, "growth": 16.0,
                             "min_seconds": 0.02, "samples": 3}}


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmd, munge)"
    for tool in ("ip", "unshare", "nsenter", "taskset"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if shutil.which("slurmd") is None or shutil.which("sbatch") is None:
        return "Slurm is not installed (.ci/run installs slurmd, slurmctld, slurm-client and munge with apt as root)"
    if not (VENV / "bin" / "mpiexec").exists():
        return "needs the venv's mpiexec (pip install -e '.[mpi]')"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if "ert-node1" in netns and not (STATE / "up").exists():
        return "a local cluster of jobs/local-cluster.sh is up already: 'jobs/local-cluster.sh down' first"
    return None


def _env(**extra) -> dict:
    env = dict(os.environ, ERT_CLUSTER_DIR=str(STATE), SLURM_CONF=str(STATE / "slurm.conf"), ERT_VENV=str(VENV))
    env.pop("UCX_TLS", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _rig(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(), cwd=REPO)


@pytest.fixture(scope="module")
def cluster():
    why = _why_not()
    if why:
        pytest.skip(why)
    _rig("down", timeout=60)  # a rig left by an interrupted run
    up = _rig("up")
    if up.returncode != 0:
        _rig("down", timeout=60)
        if "could not start its cgroup plugin" in up.stderr:
            pytest.skip(up.stderr.strip().splitlines()[-1])  # this machine, not the rig: say what it lacks
        pytest.fail(f"local-cluster.sh up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    yield STATE
    down = _rig("down", timeout=60)
    assert down.returncode == 0, down.stderr


_ENDED = re.compile(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)")


# MPICH's wheel (UCX) under Slurm's pmi2 once failed in MPI_Init on both rig hosts, before ert's first line:
# slurmstepd read a business-card put split in two ("mpi/pmi2: value not properly terminated in client request",
# as in ufs-community/ufs-weather-model#1732) and UCX could not unpack the peer's address.  Not ert's: such a job
# is submitted once more (here and in tests/test_reframe.py).  Once, in CI, UCX on node2 found node1's address
# refused ("MPIDI_UCX_comm_addr_exchange ... Destination is unreachable") in the same MPI_Init: the same retry.
MPI_INIT_FAILED = "internal_Init_thread"


def _sbatch(*args, wait=True, **env) -> subprocess.CompletedProcess:
    """sbatch; ``wait``: until the job ends, its exit status as the return code (as ``sbatch --wait``, whose polls
    are 32 s apart on this Slurm: a 20 s job took 50 s; scontrol is asked every 0.25 s instead).  A job whose MPI
    failed to start (its ``-o`` log says so) is submitted once more."""
    proc = _sbatch_once(*args, wait=wait, **env)
    log = Path(args[list(args).index("-o") + 1]) if "-o" in args else None
    if wait and proc.returncode != 0 and log is not None and log.exists() and MPI_INIT_FAILED in log.read_text():
        proc = _sbatch_once(*args, wait=wait, **env)
    return proc


def _sbatch_once(*args, wait=True, **env) -> subprocess.CompletedProcess:
    cmd = ["sbatch", "--parsable"] + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(**env), cwd=REPO)
    if proc.returncode != 0 or not wait:
        return proc
    job, state, deadline = proc.stdout.strip().split(";")[0], "", time.monotonic() + 300
    while time.monotonic() < deadline:
        state = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                               env=_env()).stdout
        if _ENDED.search(state):
            break
        time.sleep(0.25)
    proc.returncode = 0 if "JobState=COMPLETED" in state else 1
    proc.stderr += state
    return proc


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines() if line.strip()]


def _wait_for(predicate, seconds: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def _job_gone(job: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=_env())
    return not out.stdout.strip()


def _ranks_on(node: str) -> list[int]:
    """Pids of ert-run processes inside host ``node``'s network namespace."""
    pids = subprocess.run(["ip", "netns", "pids", f"ert-{node}"], capture_output=True, text=True).stdout.split()
    out = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(b"ert-run") for part in cmdline):
            out.append(int(pid))
    return out


def test_sbatch_slurm_cpu_runs_unchanged_on_two_hosts(cluster, tmp_path):
    out = tmp_path / "run"
    proc = _sbatch("--nodes=2", "-o", str(tmp_path / "job.out"), "jobs/slurm-cpu.sh", str(TINY), OUT=out)
    log = (tmp_path / "job.out").read_text()
    assert proc.returncode == 0, f"sbatch failed: {proc.stderr}\n{log}"
    assert "Traceback" not in log
    doc = json.loads((out / "ceilings.json").read_text())
    meta = doc["metadata"]
    assert sorted(set(meta["hosts"])) == ["node1", "node2"]
    assert sorted({p["host"] for p in meta["placement"]}) == ["node1", "node2"]
    assert "hosts node1, node2 |" in log  # the script's `ert show` names both
    network = {m["level"]: m for m in doc["ceilings"]["memory"] if m.get("kind") == "network"}
    assert {"net-intra-node", "net-inter-node", "net-injection"} <= set(network)
    inter = network["net-inter-node"]
    assert inter["gbytes_per_s"] > 0 and inter["latency_us"] > 0
    # Over the veth link, which has no line rate, and the messages really crossed it.
    assert inter["rated"]["gbytes_per_s"] is None
    assert "veth has no line rate" in inter["rated"]["derivation"]
    assert inter["interface_bytes"]["interface"] == "eth0"
    assert inter["interface_bytes"]["share"] >= 0.5, inter["interface_bytes"]
    # Shared memory between the ranks of one host is faster than TCP over the veth link between hosts.
    assert network["net-intra-node"]["gbytes_per_s"] > inter["gbytes_per_s"]
    # The ranks of one host share its single core here: aggregates are timed over their turns, and rated for
    # the cores (2), not the ranks (4): no memory ceiling above its rated value.
    for entry in doc["ceilings"]["memory"]:
        rated = (entry.get("rated") or {}).get("gbytes_per_s")
        if rated and entry.get("kind") is None:
            assert entry["gbytes_per_s"] <= 1.05 * rated, entry
    # Its HTML report (ert report) names both hosts and draws the network roofs, checked in Chromium.
    from test_html_report import check_two_host_report

    check_two_host_report(out, tmp_path)


def test_a_killed_host_rank_ends_the_job_in_seconds_and_resume_finishes_it(cluster, tmp_path):
    config = tmp_path / "network.yaml"
    config.write_text(yaml.safe_dump(NETWORK_ONLY))
    out = tmp_path / "run"
    submitted = _sbatch("--nodes=2", "-o", str(tmp_path / "job.out"), "jobs/slurm-cpu.sh", str(config), wait=False,
                        OUT=out)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    raw = out / "raw.jsonl"
    assert _wait_for(lambda: raw.exists() and raw.read_text().count('"type":"transfer"') >= 4, 120), \
        (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else "no job output"
    victims = _ranks_on("node2")
    assert victims, "no ert-run rank found on node2"
    before = len(_records(out))
    t0 = time.monotonic()
    os.kill(victims[0], signal.SIGKILL)
    assert _wait_for(lambda: _job_gone(job), 10), "the job still runs 10 s after a rank on node2 died"
    elapsed = time.monotonic() - t0
    log = (tmp_path / "job.out").read_text()
    assert "node2" in log and "Traceback" not in log, log
    # Nothing lost: every line is whole, and every record written before the kill is still there.
    kept = _records(out)
    assert len(kept) >= before
    done = {r["id"] for r in kept if r["type"] == "transfer"}
    # --resume on the cluster measures only what is missing.
    resumed = _sbatch("--nodes=2", "-o", str(tmp_path / "resume.out"), "jobs/slurm-cpu.sh", "--resume", str(out))
    rlog = (tmp_path / "resume.out").read_text()
    assert resumed.returncode == 0, rlog
    final = _records(out)
    ids = [r["id"] for r in final if r["type"] == "transfer"]
    assert len(ids) == len(set(ids)), "a transfer was measured twice"
    assert done < set(ids)
    assert any(r["type"] == "end" for r in final)
    assert (out / "ceilings.json").exists()
    print(f"job ended {elapsed:.1f} s after the kill; {len(done)} transfers kept, {len(ids) - len(done)} resumed")


def test_mpiexec_across_the_hosts_without_slurm_and_a_cut_link(cluster, tmp_path):
    config = tmp_path / "network.yaml"
    config.write_text(yaml.safe_dump(NETWORK_ONLY))
    out = tmp_path / "run"
    cmd = ["bash", str(SCRIPT), "exec", "node1", str(VENV / "bin" / "mpiexec"), "-launcher", "ssh",
           "-launcher-exec", str(SSH), "-hosts", "node1:2,node2:2", "-n", "4", str(VENV / "bin" / "ert-run"),
           str(config), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=REPO)
    raw = out / "raw.jsonl"
    try:
        assert _wait_for(lambda: raw.exists() and raw.read_text().count('"type":"transfer"') >= 4, 120)
        before = len(_records(out))
        header = _records(out)[0]
        assert sorted(set(header["metadata"]["network"]["nodes"])) == ["node1", "node2"]
        subprocess.run(["ip", "link", "set", "ert-node2", "down"], check=True)
        t0 = time.monotonic()
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("mpiexec still runs 10 s after node2's link went down")
        elapsed = time.monotonic() - t0
    finally:
        subprocess.run(["ip", "link", "set", "ert-node2", "up"], check=False)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    lines = [line for line in output.splitlines() if line.startswith("ert-run: error:")]
    assert lines and "node2" in lines[0] and "--resume" in lines[0], output
    assert len(_records(out)) >= before
    assert not _ranks_on("node1") and not _ranks_on("node2"), "ranks outlived the job"
    print(f"mpiexec ended {elapsed:.1f} s after the link went down: {lines[0]}")


def test_slurm_gpu_script_on_a_real_sbatch(cluster, tmp_path):
    # The documented way to change the GPU count is sbatch's own option; GPUS=N that disagrees says so.
    wrong = _sbatch("-o", str(tmp_path / "wrong.out"), "jobs/slurm-gpu.sh", str(TINY), GPUS=8)
    text = (tmp_path / "wrong.out").read_text()
    assert wrong.returncode != 0
    assert "sbatch --gpus-per-node=8" in text and "Traceback" not in text
    # One rank per GPU asked for (the hosts' stand-in GPUs; numba-cpu measures, nothing touches a GPU): tiny.yaml's
    # fp64 read+write memory curve is enough to count the ranks.
    out, config = tmp_path / "run", tmp_path / "tiny-fp64.yaml"
    config.write_text(yaml.safe_dump(dict(yaml.safe_load(TINY.read_text()), precisions=["fp64"], access=["rw"],
                                          levels=["memory"])))
    ok = _sbatch("--gpus-per-node=2", "-o", str(tmp_path / "ok.out"), "jobs/slurm-gpu.sh", str(config),
                 BACKEND="numba-cpu", OUT=out)
    assert ok.returncode == 0, (tmp_path / "ok.out").read_text()
    meta = json.loads((out / "ceilings.json").read_text())["metadata"]
    assert meta["ranks"] == 2


def test_without_root_it_says_so():
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root to run the script as another user")
    proc = subprocess.run(["runuser", "-u", "nobody", "--", "bash", str(SCRIPT), "up"], capture_output=True,
                          text=True, timeout=30, cwd="/tmp")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "jobs/local-cluster.sh: error: needs root (network namespaces, slurmd, munge); " \
                                  "run it with sudo"


def test_a_bad_watchdog_setting_is_one_line_before_anything_runs(cluster, tmp_path):
    cmd = ["bash", str(SCRIPT), "exec", "node1", str(VENV / "bin" / "mpiexec"), "-launcher", "ssh",
           "-launcher-exec", str(SSH), "-hosts", "node1:1,node2:1", "-n", "2", "-genv", "ERT_WATCHDOG_SECONDS",
           "soon", str(VENV / "bin" / "ert-run"), str(TINY), "--out", str(tmp_path / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert proc.returncode != 0
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ert-run: error:")]
    assert errors == ["ert-run: error: ERT_WATCHDOG_SECONDS: expected a number of seconds, got 'soon'"], \
        proc.stdout + proc.stderr
    assert not (tmp_path / "run" / "raw.jsonl").exists()


def test_each_host_has_its_own_dev_shm(cluster):
    # MPICH leaves its segments in /dev/shm when a job is killed; real hosts do not share them (issue 35).
    name = f"mpich_shm_ert_test_{os.getpid()}"
    try:
        made = subprocess.run(["bash", str(SCRIPT), "exec", "node1", "touch", f"/dev/shm/{name}"], env=_env(),
                              cwd=REPO, capture_output=True, text=True, timeout=30)
        assert made.returncode == 0, made.stderr
        seen = {node: subprocess.run(["bash", str(SCRIPT), "exec", node, "ls", "/dev/shm"], env=_env(), cwd=REPO,
                                     capture_output=True, text=True, timeout=30).stdout.split()
                for node in ("node1", "node2")}
        assert name in seen["node1"] and name not in seen["node2"]
        assert not Path(f"/dev/shm/{name}").exists()  # nor this machine's
    finally:
        Path(f"/dev/shm/{name}").unlink(missing_ok=True)


def test_down_removes_everything_and_is_idempotent(cluster):
    # Last in this module: the rig goes down here (and again, harmlessly, in the fixture's teardown).
    # What a killed hydra leaves in /tmp while the rig is up goes with it; older files are not the rig's.
    left = Path(f"/tmp/hydra_hwloc_xmlfile_erttest{os.getpid()}")
    older = Path(f"/tmp/hydra_hwloc_xmlfile_ertold{os.getpid()}")
    left.write_text("<topology/>")
    older.write_text("<topology/>")
    since = (STATE / "up").stat().st_mtime
    time.sleep(max(0.0, since + 7 - time.time()))  # made while the rig was up, and by now 5 s old
    os.utime(left, (since + 1, since + 1))
    os.utime(older, (since - 60, since - 60))
    first = _rig("down", timeout=60)
    assert not left.exists() and older.exists()
    older.unlink()
    second = _rig("down", timeout=60)
    assert first.returncode == 0 and second.returncode == 0
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ert-node" not in netns
    assert subprocess.run(["ip", "link", "show", "ertbr0"], capture_output=True).returncode != 0
    assert not STATE.exists()
    assert "ert local-cluster" not in Path("/etc/hosts").read_text()
    status = _rig("status")
    assert status.returncode == 3 and "down" in status.stdout


def _munged_running() -> bool:
    """A munged process that is not a zombie (one that ended and waits for init to reap it is gone)."""
    states = subprocess.run(["ps", "-C", "munged", "-o", "stat="], capture_output=True, text=True).stdout.split()
    return any(not state.startswith("Z") for state in states)


def test_a_failed_up_leaves_no_bridge_or_munged_behind():
    why = _why_not()
    if why:
        pytest.skip(why)
    if subprocess.run(["ip", "link", "show", "ertbr0"], capture_output=True).returncode == 0:
        pytest.skip("a local cluster is up")
    munge_before = _munged_running()
    env = _env(ERT_CLUSTER_NET="10.77.999")  # no such network: up fails after the bridge and munged started
    proc = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=REPO)
    try:
        assert proc.returncode != 0
        assert "up failed: undid what it made" in proc.stderr
        assert subprocess.run(["ip", "link", "show", "ertbr0"], capture_output=True).returncode != 0
        assert "ert-node" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        munge_after = _munged_running()
        assert munge_after == munge_before
        assert "ert local-cluster" not in Path("/etc/hosts").read_text()
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, timeout=60, env=env, cwd=REPO)
