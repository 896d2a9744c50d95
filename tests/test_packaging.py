"""A non-editable install ships the kernels, configs and schemas, and runs from them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import background
import pytest
import yaml

pytestmark = pytest.mark.slow  # every test here runs ert-run, pip or a tool as a process

REPO = Path(__file__).resolve().parents[1]


@background.job("packaging.wheel", fixture="wheel")
def _build_wheel() -> Path:
    """The wheel, built in the background (tests/background.py) into a folder of its own."""
    out = Path(tempfile.mkdtemp(prefix="ert-test-wheel-"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
                   check=True, capture_output=True)
    (found,) = out.glob("ert-*.whl")
    return found


@pytest.fixture(scope="module")
def wheel() -> Path:
    found = background.result("packaging.wheel")
    yield found
    shutil.rmtree(found.parent, ignore_errors=True)


def test_wheel_ships_kernels_configs_and_schemas(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("ert/kernels/numba_cpu.py", "ert/configs/default.yaml", "ert/configs/tiny.yaml",
                   "ert/schemas/ceilings-1.schema.json", "ert/schemas/HISTORY.md", "ert/cli/__init__.py",
                   "ert/kernels/ert_opencl.cl", "ert/kernels/ert_cuda.cu", "ert/kernels/ert_cuda_wgmma.cu", "ert/configs/gpu-a100.yaml",
                   "ert/configs/thorough-cpu.yaml", "ert/consumers/html/html_report.js", "ert/consumers/html/html_report.css"):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "ert-run = ert.cli:run_main" in text and "ert = ert.cli:main" in text
    assert "ert-disturb = ert.measure.disturb:main" in text


def test_installed_wheel_runs_from_packaged_files(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    # -S keeps the editable install's path hook out; dependencies come from this venv.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), sysconfig.get_paths()["purelib"],
                                                        sysconfig.get_paths()["platlib"]]))
    probe = ("import ert, ert.config.schema, ert.cli; "
             "p = ert.config.schema.default_path(); assert p.is_file(), p; "
             "assert str(p).startswith(%r), p; "
             "ert.config.schema.load(p); print(ert.__file__)") % str(target)
    done = subprocess.run([sys.executable, "-S", "-c", probe], env=env, capture_output=True, text=True,
                          cwd=tmp_path)  # not the checkout: `-c` puts the cwd first on sys.path
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(target))
    # The packaged tiny config runs end to end from the installed copy (its fp64 read+write FMA curve: every kernel
    # compiles afresh from the installed files, and the full tiny.yaml is the other tests' run).
    tiny = yaml.safe_load((target / "ert" / "configs" / "tiny.yaml").read_text())
    config = tmp_path / "tiny-fp64.yaml"
    config.write_text(yaml.safe_dump(dict(tiny, precisions=["fp64"], access=["rw"], fma="on")))
    run = subprocess.run([sys.executable, "-S", "-c", "import sys, ert.cli; sys.exit(ert.cli.run_main())",
                          str(config), "--out", str(tmp_path / "run"), "-q"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "ceilings.json").is_file()
