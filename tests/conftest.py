"""Shared fixtures: the installed commands, small configs, and one real tiny run reused by many tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import background

# Numba is configured exactly as ert-run configures it, before anything imports
# it, so in-process kernels compile for (and load from the cache of) the same
# CPU features as the commands the tests run.
from ert.backends.numba_codegen import configure_numba_env

configure_numba_env()

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
TINY = CONFIGS / "tiny.yaml"

# A bandwidth-only sweep of two precisions x 9 working sets whose points each
# last ~0.2 s: long enough to interrupt in the middle, short enough to finish.
SLOW_SMALL = {
    "backend": "numba-cpu",
    "precisions": ["fp64", "fp32"],
    "flops_per_element": [1],
    "fma": "both",
    "access": ["rw"],
    "working_set": {"min_bytes": 16384, "max_bytes": 4194304, "growth": 2.0},
    "timing": {"min_seconds": 0.04, "repeats": 3, "noise_threshold": 100.0, "max_remeasure": 0},
    "threads": "auto",
}


_OPENCL_STATUS = []


def opencl_status():
    """The opencl backend's registry status, probed once per test session (it builds a trivial kernel)."""
    if not _OPENCL_STATUS:
        from ert.backends import REGISTRY

        _OPENCL_STATUS.append(REGISTRY.status("opencl"))
    return _OPENCL_STATUS[0]


def pyopencl_importable() -> bool:
    try:
        import pyopencl  # noqa: F401
    except Exception:
        return False
    return True


_CACHE_BASE = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test's own ert cache (ERT_CACHE_DIR: the sentinels' history of earlier runs, ert.measure.history), so
    that no run of one test is held against another's, nor against the user's own runs."""
    global _CACHE_BASE
    if _CACHE_BASE is None:
        import tempfile

        _CACHE_BASE = tempfile.mkdtemp(prefix="ert-test-cache-")
    os.environ["ERT_CACHE_DIR"] = os.path.join(_CACHE_BASE, re.sub(r"[^\w.-]+", "_", item.nodeid)[-150:])
    _skip_without_opencl(item)


def _skip_without_opencl(item):
    """``@pytest.mark.opencl_device``: skip, with the probe's reason, where no OpenCL device builds kernels
    (PoCL 3.0 on AMD Zen 5: its LLVM does not know the CPU).  Before any fixture of the test runs."""
    if item.get_closest_marker("opencl_device") is not None:
        status = opencl_status()
        if not status.available:
            pytest.skip(f"no usable OpenCL device: {status.reason}")


def command(name: str) -> str:
    """The installed console script ``name`` of this interpreter's environment."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"the console script {name!r} is not installed next to {sys.executable} nor on PATH")
    return found


def run_cmd(name: str, *args, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an installed command to completion; text output captured."""
    return subprocess.run([command(name), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def numba_plan(cfg, threads: int):
    """The dense plan ert-run makes for ``cfg`` on the Numba backend with ``threads`` threads.

    The backend's own granule and swept chain counts (its launches), as the
    driver uses them; nothing is compiled or measured.
    """
    from ert.backends.numba_cpu import NumbaCpuBackend
    from ert.measure.plan import plan

    backend = NumbaCpuBackend(threads=threads)
    return plan(cfg, workers=threads, granule_elements_of=backend.granule_elements, launches_of=backend.launches)


def write_config(path: Path, data=None, **overrides) -> Path:
    """Write a YAML config: ``data`` (default: SLOW_SMALL) updated with ``overrides``."""
    doc = dict(SLOW_SMALL if data is None else data)
    doc.update(overrides)
    path = Path(path)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def raw_lines(run_dir: Path) -> list[str]:
    """The complete (newline-terminated) lines of RUN_DIR/raw.jsonl."""
    text = (Path(run_dir) / "raw.jsonl").read_text()
    lines = text.split("\n")
    return [line for line in lines[:-1] if line.strip()]


def raw_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in raw_lines(run_dir)]


def point_records(run_dir: Path) -> list[dict]:
    return [r for r in raw_records(run_dir) if r["type"] == "point"]


def first_points(points: list[dict]) -> list[dict]:
    """Of ``points`` (point records), each point's first measurement: not the host weather's re-measurement of a
    point measured in a disturbed stretch (``remeasured_for``, same id), which a busy host may add to any run."""
    return [r for r in points if not r.get("remeasured_for")]


def sass_by_function(cuobjdump: str, cubin: Path, env: dict) -> dict[str, str]:
    """{kernel: its SASS listing} from one `cuobjdump -sass` of the whole cubin (one call per kernel with -fun
    costs ~0.3 s each and lists the same instructions)."""
    proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {m.group(1): m.group(0) for m in
            re.finditer(r"^[ \t]*Function : (\S+)\n.*?^[ \t]*\.{10}[ \t]*$", proc.stdout, re.S | re.M)}


def stderr_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One real `ert-run configs/tiny.yaml` (Numba), shared by the tests that only read it."""
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    proc = run_cmd("ert-run", TINY, "--out", run_dir, "-q", timeout=300)
    assert proc.returncode == 0, f"ert-run tiny.yaml failed ({proc.returncode}):\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return run_dir


@pytest.fixture
def tiny_copy(tiny_run, tmp_path) -> Path:
    """A private copy of the tiny run a test may change."""
    return _private_copy(tiny_run, tmp_path)


def _private_copy(run_dir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run-copy"
    shutil.copytree(run_dir, dest)
    return dest


# A real bare run of ert (the packaged default, 2 threads, on a busy 2-core Zen 4 guest), recorded.
RECORDED_RAW = REPO / "tests" / "data" / "bare-2core-busy.raw.jsonl"


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory) -> Path:
    """A run directory made without measuring, for the fast tests that read a run or break a copy of one: the
    recorded run's raw.jsonl and the ceilings.json this code's analysis makes of it (tiny_run measures: slow)."""
    from ert.analysis.ceilings import build
    from ert.records.ceilings_io import write_ceilings
    from ert.records.rawio import read_raw

    run_dir = tmp_path_factory.mktemp("recorded") / "run"
    run_dir.mkdir()
    shutil.copy(RECORDED_RAW, run_dir / "raw.jsonl")
    write_ceilings(build(read_raw(run_dir)), run_dir / "ceilings.json")
    return run_dir


@pytest.fixture
def recorded_copy(recorded_run, tmp_path) -> Path:
    """A private copy of the recorded run a test may change."""
    return _private_copy(recorded_run, tmp_path)


# ----------------------------------------------------------------------------- the `slow` marker
# `slow` = runs real processes: ert-run sweeps, mpiexec, compilers (nvcc, Numba's JIT and its assembly for other
# targets), packaging, the external tools the exports are tested with, processes that wait out timeouts. It marks
# tests, not files: a test says `@pytest.mark.slow`, a file whose every test does says `pytestmark =
# pytest.mark.slow`, and the tests marked `nvcc`, `gpu`, `mpi`, `cluster` or `arm` are slow by what those markers
# mean (below). `pytest -m "not slow"` is the fast tier: at most 90 s on 2 cores, and every module of ert/ touched
# (a fast test reads recorded_run, not tiny_run); the default suite (CI) runs everything (about 7 minutes).
SLOW_MARKERS = ("nvcc", "gpu", "mpi", "cluster", "arm")
# Modules whose tests hold measured rates against each other (a host named slow, or not; a disturbance seen against
# a calm run): they run last, when the background setups (tests/background.py) are done.
QUIET_MODULES = ("test_cluster", "test_reframe", "test_weather_run")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
    background.run_last(items, QUIET_MODULES)  # the modules that use a background setup run late, the quiet last


# ----------------------------------------------------------------------------- background setups (tests/background.py)
def pytest_collection_finish(session):
    if not session.config.option.collectonly:
        background.start(session.items)  # the jobs the selected tests need (-m and -k applied)


def pytest_sessionfinish(session, exitstatus):
    if _CACHE_BASE is not None:
        shutil.rmtree(_CACHE_BASE, ignore_errors=True)
