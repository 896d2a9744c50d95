"""A slow node on the local cluster, named by ert and caught by ert's ReFrame test (issue 32, items 4 and 5).

On the two-host rig of jobs/local-cluster.sh (root, Slurm; skipped with the
reason otherwise, as tests/test_cluster.py): node2 is throttled by
``local-cluster.sh throttle node2``, a real-time process pinned to node2's
core that takes half of every millisecond.  Four runs in all, shared by the
tests through module fixtures: an unthrottled sbatch run (the reference), the
throttled sbatch run of the issue, and ReFrame (jobs/reframe/ert_check.py on
jobs/reframe/local-cluster.py) unthrottled and throttled.

The unthrottled runs use one rank per host and a slow_host_threshold of 0.25
(the default 0.10 named a host at 0.82 once, on a busy machine), and ReFrame checks the compute peaks with TOLERANCE: the machine these
tests run on is shared, and there two ranks taking turns on a host's one core
scattered a host's memory ceilings to 0.55-0.72 of the median, enough to be
named slow in one unthrottled run of two; one rank per host named none in
eight (ert's scatter test; docs/cluster.md, "A slow node"), while the
throttle takes node2 to 0.3-0.7.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY, run_cmd
from test_cluster import MPI_INIT_FAILED, SCRIPT, STATE, VENV, _env, _rig, _why_not

from ert.records.warning_codes import coded_warnings

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REFRAME = VENV / "bin" / "reframe"
CHECK = REPO / "jobs" / "reframe" / "ert_check.py"
SITE = REPO / "jobs" / "reframe" / "local-cluster.py"
TOLERANCE = 0.30   # how far below the reference ReFrame lets a peak fall
SLOW = re.compile(r"node2: (.+?) (0\.\d\d) of the median of 2 hosts")


@pytest.fixture(scope="module")
def rig():
    why = _why_not() or (None if REFRAME.exists() else "needs ReFrame (pip install -e '.[reframe]')")
    if why:
        pytest.skip(why)
    _rig("down", timeout=60)
    up = _rig("up")
    if up.returncode != 0:
        _rig("down", timeout=60)
        pytest.fail(f"local-cluster.sh up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    yield STATE
    _rig("unthrottle", "node2", timeout=60)
    down = _rig("down", timeout=60)
    assert down.returncode == 0, down.stderr


class _Throttled:
    """node2 throttled inside the block (busy BUSY_US of every BUSY_US + IDLE_US), unthrottled however it ends."""

    def __init__(self, busy_us: int = 500, idle_us: int = 500):
        self.args = (str(busy_us), str(idle_us))

    def __enter__(self):
        proc = _rig("throttle", "node2", *self.args, timeout=30)
        assert proc.returncode == 0, proc.stderr

    def __exit__(self, *exc):
        _rig("unthrottle", "node2", timeout=30)


def _sbatch(out: Path, config: Path, *, wait: bool = True, **env) -> str:
    """jobs/slurm-cpu.sh on both hosts; ``wait=False`` polls Slurm instead of ``sbatch --wait``, whose polls
    are 32 s apart (a 10 s job takes 42 s).  A job whose MPI failed to start is submitted once more."""
    try:
        return _sbatch_once(out, config, wait=wait, **env)
    except AssertionError as exc:
        if MPI_INIT_FAILED not in str(exc) or (out / "raw.jsonl").exists():
            raise
        return _sbatch_once(out, config, wait=wait, **env)


def _sbatch_once(out: Path, config: Path, *, wait: bool = True, **env) -> str:
    log = out.parent / f"{out.name}.out"
    cmd = ["sbatch", "--parsable"] + (["--wait"] if wait else []) + ["--nodes=2", "-o", str(log), "jobs/slurm-cpu.sh",
                                                                      str(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(OUT=out, **env), cwd=REPO)
    if proc.returncode == 0 and not wait:
        job = proc.stdout.strip().split(";")[0]
        state = ""
        for _ in range(1200):
            state = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                                   env=_env()).stdout
            if re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)", state):
                break
            time.sleep(0.25)
        proc.returncode = 0 if "JobState=COMPLETED" in state else 1
        proc.stderr += state
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, f"sbatch failed: {proc.stderr}\n{text}"
    return text


def _reframe(workdir: Path, config: Path, reference: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """ReFrame's run of ert_check; a job whose MPI failed to start (its stage's rfm_job.err says so) runs once more,
    in WORKDIR-retry."""
    try:
        return _reframe_once(workdir, config, reference)
    except AssertionError:
        errs = "".join(p.read_text(errors="replace") for p in workdir.glob("stage/**/rfm_job.err"))
        if MPI_INIT_FAILED not in errs:
            raise
        return _reframe_once(workdir.with_name(workdir.name + "-retry"), config, reference)


def _reframe_once(workdir: Path, config: Path, reference: Path) -> tuple[subprocess.CompletedProcess, Path]:
    workdir.mkdir()
    proc = subprocess.run([str(REFRAME), "-C", str(SITE), "-c", str(CHECK), "-r", "--keep-stage-files",
                           "-S", f"config={config}", "-S", "nodes=2", "-S", "ranks_per_node=1",
                           "-S", f"reference_file={reference}", "-S", f"tolerance={TOLERANCE}",
                           "-S", "select=peak"],
                          capture_output=True, text=True, timeout=400, env=_env(ERT_VENV=VENV), cwd=workdir)
    runs = list(workdir.glob("stage/**/run/ceilings.json"))
    assert len(runs) == 1, proc.stdout + proc.stderr
    return proc, runs[0].parent


# The unthrottled runs' slow_host_threshold: on this shared machine one host's tiny-run L2 read 0.82 of the
# median in an unthrottled CI run (a neighbour's load, not the rig); the throttled node2 reads 0.3-0.7.
UNTHROTTLED_THRESHOLD = 0.25


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """tiny.yaml's fp64 read+write curve alone (27 of its 108 points, no network): the runs that ReFrame compares."""
    path = tmp_path_factory.mktemp("config") / "tiny-hosts.yaml"
    path.write_text(yaml.safe_dump(dict(yaml.safe_load(TINY.read_text()), precisions=["fp64"], access=["rw"],
                                        levels=["memory"], slow_host_threshold=UNTHROTTLED_THRESHOLD)))
    return path


def _names_a_slow_host(run: Path) -> bool:
    doc = json.loads((run / "ceilings.json").read_text())
    return any(w.code == "slow-host" for w in coded_warnings(doc))


# Outside ert: both hosts' cores timed at the same moment (numpy's multiply and add over 256 KiB, the median of
# ~0.3 ms windows over 1 s), node2's rate over node1's.  It tells a core that a co-tenant of this shared machine
# slowed (CI once read node2's fp64 peaks at 0.70-0.75 of node1's in three unthrottled runs in a row, over a minute)
# from ert naming a host that was not slow.  Here it read node2 at 0.9-1.1 of node1 unthrottled, 0.36 throttled
# 500/500 and 0.17 throttled 750/250.
_CORE_PROBE = """import numpy as np, time
a = np.ones(32768); b = np.ones(32768); c = np.empty(32768); rates = []; end = time.perf_counter() + 1.0
while time.perf_counter() < end:
    t = time.perf_counter()
    for _ in range(20):
        np.multiply(a, b, out=c); np.add(c, a, out=c)
    rates.append(20 / (time.perf_counter() - t))
print(float(np.median(rates)))"""
CALM_CORES = (0.85, 1 / 0.85)   # node2 / node1 in the probe: the cores agree
_PROBED: dict[Path, float] = {}  # a run that named a host -> the probe's node2 / node1 just after it


def _core_ratio() -> float:
    procs = [subprocess.Popen(["bash", str(SCRIPT), "exec", node, str(VENV / "bin" / "python"), "-c", _CORE_PROBE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
             for node in ("node1", "node2")]
    outs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outs
    node1, node2 = (float(out.split()[-1]) for out, _ in outs)
    return node2 / node1


def _calm_cores(wait_s: float = 30.0) -> float:
    """The probe's node2 / node1, probed again until the cores agree (CALM_CORES) or ``wait_s`` has passed."""
    end = time.monotonic() + wait_s
    ratio = _core_ratio()
    while not CALM_CORES[0] <= ratio <= CALM_CORES[1] and time.monotonic() < end:
        time.sleep(2)
        ratio = _core_ratio()
    return ratio


def _probe_if_named(run: Path) -> None:
    if _names_a_slow_host(run):
        _PROBED[run] = _core_ratio()


# An unthrottled run measured once more when it names a host: on this shared machine a neighbour once held node1's
# core through a whole 1-s run (0.56 of the median), with no throttle on the rig; two runs in a row so slowed, with
# nothing of ours beside them, are a fault of the rig or of ert.
@pytest.fixture(scope="module")
def unthrottled(rig, config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unthrottled") / "run"
    _sbatch(out, config, wait=False, RANKS=1)
    if _names_a_slow_host(out):
        print(f"unthrottled run named a slow host, measured once more when the cores agree (node2 / node1 "
              f"{_calm_cores():.2f} outside ert): {_host_ratios(out)}")
        out = tmp_path_factory.mktemp("unthrottled-again") / "run"
        _sbatch(out, config, wait=False, RANKS=1)
        _probe_if_named(out)
    return out


@pytest.fixture(scope="module")
def throttled(rig, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("throttled") / "run"
    with _Throttled():
        # The command (configs/tiny.yaml, the script's 2 ranks per node), its end polled from Slurm rather
        # than by `sbatch --wait`, whose 32 s polls made a 25 s job take 44 s.
        log = _sbatch(out, TINY, wait=False)
    return out, log


@pytest.fixture(scope="module")
def reframe_unthrottled(unthrottled, config, tmp_path_factory):
    proc, run = _reframe(tmp_path_factory.mktemp("rfm") / "pass", config, unthrottled / "ceilings.json")
    if proc.returncode != 0 or _names_a_slow_host(run):
        # Once more, against a reference measured just before it: on this shared machine other tenants once halved
        # both hosts' peaks between the reference and the check (0.53 of the reference on node1 and node2 alike).
        print(f"unthrottled ReFrame run failed or named a slow host, measured once more with a new reference "
              f"when the cores agree (node2 / node1 {_calm_cores():.2f} outside ert): {_host_ratios(run)}")
        reference = tmp_path_factory.mktemp("unthrottled-reference") / "run"
        _sbatch(reference, config, wait=False, RANKS=1)
        proc, run = _reframe(tmp_path_factory.mktemp("rfm") / "pass-again", config, reference / "ceilings.json")
        _probe_if_named(run)
    return proc, run


@pytest.fixture(scope="module")
def reframe_throttled(unthrottled, config, tmp_path_factory):
    with _Throttled(750, 250):  # a quarter of node2's core: well below the reference's peaks
        return _reframe(tmp_path_factory.mktemp("rfm") / "fail", config, unthrottled / "ceilings.json")


def _host_ratios(run: Path) -> dict[str, dict[str, float]]:
    doc = json.loads((run / "ceilings.json").read_text())
    def name(c: dict) -> str:
        return f"{c['level']} {c['precision']} {c['access']}" if "level" in c else \
            f"{c['precision']} {'FMA' if c.get('fma') else 'no-FMA'}"

    return {h["host"]: {name(c): round(c["ratio_to_median"], 2) for kind in ("memory", "compute")
                        for c in h["ceilings"][kind]} for h in doc["hosts"]}


def test_throttled_node2_is_named_by_ert_show_with_its_ratio(throttled):
    run, log = throttled
    doc = json.loads((run / "ceilings.json").read_text())
    assert [h["host"] for h in doc["hosts"]] == ["node1", "node2"]
    for host in doc["hosts"]:
        assert host["ceilings"]["memory"] and host["ceilings"]["compute"], host["host"]
    show = run_cmd("ert", "show", run)
    assert show.returncode == 0, show.stderr
    named = SLOW.findall(show.stdout)
    assert named, show.stdout
    assert "node2: " in log  # the job script's own `ert show` says it too
    ratios = _host_ratios(run)
    lower = sum(ratios["node2"][k] < ratios["node1"][k] for k in ratios["node2"])
    # node2 is the slower host on most ceilings, and by far on its slowest: on this shared machine a neighbour's
    # load on node1's core once read node1's fp64 L1 and L2 at 0.98 of the median and node2's at 1.02 (10 of 12
    # lower, the others 0.6 against 1.4), in a CI run of a noisy hour.
    assert lower >= 0.75 * len(ratios["node2"]), ratios
    assert min(ratios["node2"].values()) < 0.8 < max(ratios["node1"].values()), ratios
    print("throttled (2 ranks per host) per-host ratios:", ratios)


def test_compare_hosts_shows_node2s_ratios(throttled):
    run, _ = throttled
    proc = run_cmd("ert", "compare", run, "--hosts")
    assert proc.returncode == 0, proc.stderr
    assert "B: node2" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.strip().startswith("- node2: ")]
    assert rows and all(re.search(r" 0\.\d\d$", row) for row in rows), proc.stdout


def _slow_in_probe(named: list[str], ratio: float) -> bool:
    """Whether every host ``named`` slow read slow in the core probe too (``ratio``: node2 / node1)."""
    slow = {"node2"} if ratio < CALM_CORES[0] else {"node1"} if ratio > CALM_CORES[1] else set()
    return all(text.split(":")[0] in slow for text in named)


def test_unthrottled_runs_name_no_host(unthrottled, reframe_unthrottled):
    _, rfm_run = reframe_unthrottled
    for run in (unthrottled, rfm_run):
        doc = json.loads((run / "ceilings.json").read_text())
        named = [w.text for w in coded_warnings(doc) if w.code == "slow-host"]
        if named and run in _PROBED and _slow_in_probe(named, _PROBED[run]):
            pytest.skip(f"measured twice while this shared machine slowed a host's core outside ert too (node2 / "
                        f"node1 {_PROBED[run]:.2f} in the probe just after): ert named it rightly: {named}")
        assert named == [], run_cmd("ert", "show", run).stdout
        show = run_cmd("ert", "show", run).stdout
        assert not re.search(r"node\d: .+ of the median of 2 hosts", show), show
        print(f"unthrottled {run}: per-host ratios", _host_ratios(run))


def test_reframe_passes_against_an_earlier_run(reframe_unthrottled):
    proc, _ = reframe_unthrottled
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"PASSED .*Ran 1/1 test case", proc.stdout), proc.stdout[-3000:]
    assert "node2/fp64 FMA peak" in proc.stdout  # every host's ceilings are performance variables


def test_reframe_fails_with_node2_throttled_naming_ceiling_and_host(reframe_throttled):
    proc, run = reframe_throttled
    # The same config and threshold (0.25) as the unthrottled runs, which named no host, names node2 here.
    assert SLOW.search(run_cmd("ert", "show", run).stdout), run_cmd("ert", "show", run).stdout
    assert proc.returncode != 0
    assert "failed to meet reference(s)" in proc.stdout, proc.stdout[-4000:]
    failed = re.findall(r"(\S+/[^=\n]*peak)=[\d.]+ GFLOP/s, expected", proc.stdout)
    assert failed and any(name.startswith("node2/") for name in failed), proc.stdout[-4000:]
    assert not any(name.startswith("node1/") for name in failed), failed
    print("ReFrame with node2 throttled:", *[line.strip() for line in proc.stdout.splitlines() if " expected " in line],
          sep="\n  ")
