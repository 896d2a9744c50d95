"""benchmarks/gpu_acceptance.sh without a GPU: its dry run names real configs, commands and metrics; the
real run refuses clearly where there is no GPU; the ncu driver runs its kernels on an emulated GPU.

The script itself has never run on a GPU: these tests check what can be checked here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.sh"
WHEELS = REPO / "benchmarks" / "gpu_wheels.sh"
STEPS = ["env", "run-tiny-gpu", "run-integer-gpu", "run-gpu-tensor", "run-links-network", "ncu", "pytest-gpu",
         "pytest-nvcc"]
CONFIGS = {"tiny-gpu", "integer-gpu", "gpu-tensor", "links-network"}


def acceptance(*args, env=None, **extra_env) -> subprocess.CompletedProcess:
    full = dict(os.environ if env is None else env, PYTHON=sys.executable, **extra_env)
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=full)


def commands(stdout: str) -> list[tuple[list[str], str | None]]:
    """Each '+ CMD [> FILE]' line of a dry run as (argv, the file its stdout goes to)."""
    out = []
    for line in stdout.splitlines():
        if not line.startswith("+ "):
            continue
        argv = shlex.split(line[2:])
        target = None
        if ">" in argv:
            i = argv.index(">")
            argv, target = argv[:i], argv[i + 1]
        out.append((argv, target))
    return out


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    base = tmp_path_factory.mktemp("accept")
    empty = base / "no-wheels"
    empty.mkdir()
    out = base / "out"
    proc = acceptance("--dry-run", out, ERT_WHEELS=str(empty))
    assert proc.returncode == 0, proc.stderr
    assert not out.exists(), "a dry run writes nothing"
    return out, proc.stdout


def test_the_scripts_are_bash_and_shellcheck_clean():
    for script in (SCRIPT, WHEELS):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    proc = subprocess.run(["shellcheck", str(SCRIPT), str(WHEELS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_the_dry_run_lists_every_step_and_the_env_switch_gives_the_same(dry):
    out, stdout = dry
    assert [m for m in re.findall(r"^\[step ([a-z-]+)\]", stdout, re.M)] == STEPS + ["summary"]
    again = acceptance(out, ERT_ACCEPT_DRY="1", ERT_WHEELS=str(out.parent / "no-wheels"))
    assert again.returncode == 0 and again.stdout == stdout


def test_every_config_it_runs_exists_and_validates_with_the_backend_it_passes(dry, tmp_path, capsys):
    from ert import config as config_mod
    from ert.cli import main

    out, stdout = dry
    runs = [argv for argv, _ in commands(stdout) if argv[1:4] == ["-m", "ert", "run"]]
    assert {Path(a[4]).stem for a in runs} == CONFIGS
    for argv in runs:
        config = REPO / argv[4]
        assert config.is_file(), argv
        backend = argv[argv.index("--backend") + 1]
        assert backend == "cuda"
        assert Path(argv[argv.index("--out") + 1]) == out / "runs" / config.stem
        # The config as ert-run will read it, with --backend applied, is valid (gpu-tensor.yaml sets no backend:
        # without --backend cuda it would be refused: tensor roofs are the cuda backend's).
        doc = yaml.safe_load(config.read_text())
        doc["backend"] = backend
        copy = tmp_path / config.name
        copy.write_text(yaml.safe_dump(doc))
        assert config_mod.load(copy).backend == "cuda"
        if not doc.get("tensor"):  # `ert validate` plans tensor points only with a GPU's backend at hand
            assert main(["validate", str(copy)]) == 0, capsys.readouterr().err
    # Every file a command names inside the repository exists.
    for argv, _ in commands(stdout):
        for arg in argv:
            if arg.endswith((".py", ".yaml", ".json")) and not arg.startswith(str(out)):
                assert (REPO / arg).is_file(), (arg, argv)


def test_every_ert_command_it_names_parses_with_the_cli(dry):
    from ert.cli import build_parser

    out, stdout = dry
    ert_lines = [argv[3:] for argv, _ in commands(stdout) if argv[1:3] == ["-m", "ert"]]
    assert {a[0] for a in ert_lines} == {"backends", "run", "show", "plot", "profile"}
    for args in ert_lines:
        try:
            parsed = build_parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"ert {' '.join(args)}: not a command line the CLI takes")
        assert parsed.command == args[0]


def test_the_pytest_steps_use_declared_markers_and_keep_their_reports(dry):
    out, stdout = dry
    declared = {m.split(":")[0] for m in
                tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    pytests = [argv for argv, _ in commands(stdout) if argv[1:3] == ["-m", "pytest"]]
    assert len(pytests) == 2
    for argv in pytests:
        expression = argv[argv.index("-m", 3) + 1]
        names = set(re.findall(r"[a-z_]+", expression)) - {"and", "or", "not"}
        assert names and names <= declared, expression
        assert argv[-1] == "tests" and (REPO / "tests").is_dir()
        junit = next(a for a in argv if a.startswith("--junitxml="))
        assert Path(junit.split("=", 1)[1]).parent == out


def test_ncu_captures_the_metrics_ert_profile_reads_and_profile_reads_the_exports(dry):
    from ert.consumers import appdata, ncu_csv

    out, stdout = dry
    cmds = commands(stdout)
    captures = [argv for argv, _ in cmds if argv[0] == "ncu" and "--metrics" in argv]
    assert captures
    main = set(captures[0][captures[0].index("--metrics") + 1].split(","))
    wanted = {ncu_csv.TIME_METRIC} | {ncu_csv.LEVEL_METRICS[level][0][0] for level in ("L1", "L2", "DRAM")}
    wanted |= {f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for _, p in appdata.PRECISION_LETTERS
               for op in ("add", "mul", "fma")}
    assert wanted <= main, wanted - main
    # The optional capture asks for the tensor and integer metrics ert profile knows.
    extra = set(captures[1][captures[1].index("--metrics") + 1].split(",")) - main
    assert ncu_csv.INTEGER_METRIC in extra and ncu_csv.TENSOR_TOTAL_METRIC in extra
    assert {name for _, names, _ in ncu_csv.TENSOR_METRICS for name in names} <= extra
    # Each capture runs the driver; ert profile reads the two CSV layouts that the exports write.
    for argv in captures:
        assert argv[-1] == "benchmarks/gpu_ncu_driver.py" and argv[-2] == sys.executable
        assert argv[argv.index("--kernel-name") + 1] == "regex:^ert_(rw|ro|mma)"
    exported = {target for argv, target in cmds if argv[:2] == ["ncu", "--import"]}
    profiled = [argv[4] for argv, _ in cmds if argv[1:4] == ["-m", "ert", "profile"]]
    assert {Path(p).name for p in profiled} == {"ncu-long.csv", "ncu-raw.csv", "ncu-extra-long.csv"}
    assert set(profiled) <= exported


def test_the_step_selection_and_caps_are_checked(tmp_path):
    proc = acceptance("--dry-run", tmp_path / "o", ERT_ACCEPT_STEPS="pytest-gpu,ncu", ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    selected = re.findall(r"^\[step ([a-z-]+)\] cap", proc.stdout, re.M)
    assert selected == ["ncu", "pytest-gpu"]
    assert not any(argv[1:4] == ["-m", "ert", "run"] for argv, _ in commands(proc.stdout))
    capped = acceptance("--dry-run", tmp_path / "o", ERT_ACCEPT_CAPS="pytest-gpu=17", ERT_WHEELS=str(tmp_path))
    assert "[step pytest-gpu] cap 17s" in capped.stdout
    for bad in ({"ERT_ACCEPT_STEPS": "pytest-gpu,warp"}, {"ERT_ACCEPT_CAPS": "pytest-gpu=soon"},
                {"ERT_ACCEPT_CAPS": "warp=10"}, {"ERT_ACCEPT_BUDGET_S": "9m"}):
        proc = acceptance("--dry-run", tmp_path / "o", **bad)
        assert proc.returncode == 2 and proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and "gpu_acceptance.sh: " in proc.stderr, proc.stderr
    for args in ((), ("a", "b"), ("--bring",), ("--fast", "o")):
        proc = acceptance(*args)
        assert proc.returncode == 2 and proc.stderr.startswith("gpu_acceptance.sh: "), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_carried_wheels_go_to_their_own_folder_first_on_the_path(tmp_path):
    wheels = tmp_path / "w"
    wheels.mkdir()
    (wheels / "pydantic-2.0-py3-none-any.whl").write_bytes(b"")
    proc = acceptance("--dry-run", tmp_path / "o", ERT_WHEELS=str(wheels), ERT_SITE=str(tmp_path / "site"),
                      ERT_ACCEPT_STEPS="env")
    assert proc.returncode == 0, proc.stderr
    pips = [argv for argv, _ in commands(proc.stdout) if argv[1:4] == ["-m", "pip", "install"]]
    assert pips[0][-1] == str(wheels / "pydantic-2.0-py3-none-any.whl")
    assert pips[0][pips[0].index("--target") + 1] == str(tmp_path / "site") and "--no-index" in pips[0]
    assert pips[1][-2:] == ["-e", "."] and "--no-deps" in pips[1]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_a_gpu_the_real_run_stops_at_once_and_says_why(tmp_path):
    out = tmp_path / "out"
    proc = acceptance(out)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpu_acceptance.sh: no NVIDIA GPU: nvidia-smi not found"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and not out.exists()


def test_a_driver_that_does_not_answer_is_named_too(tmp_path):
    """An nvidia-smi that fails (no driver loaded) stops the run with its own first line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                    "driver.\"\nexit 9\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    proc = acceptance(out, env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("gpu_acceptance.sh: no NVIDIA GPU: nvidia-smi -L failed: NVIDIA-SMI has failed "
                                   "because it couldn't communicate with the NVIDIA driver.")
    assert not out.exists()


def _fake_gpu(tmp_path) -> dict:
    """An environment whose nvidia-smi answers like a driver with one GPU (and nothing else is a GPU)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-fake)'\n")
    fake.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.skipif(shutil.which("ncu") is not None, reason="ncu is installed here")
def test_a_real_run_records_each_step_writes_the_summary_and_the_tarball_and_fails(tmp_path):
    """The real path past the GPU check, with steps that fail here for want of a GPU (the cuda backend)."""
    import tarfile

    out, bring = tmp_path / "out", tmp_path / "bring"
    proc = acceptance("--bring", bring, out, env=_fake_gpu(tmp_path), ERT_ACCEPT_STEPS="run-links-network,ncu",
                      ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    assert proc.stdout.endswith(summary)
    rows = {line.split()[0]: line for line in summary.splitlines() if line.split()[:1] and line.split()[0] in STEPS}
    assert set(rows) == set(STEPS)
    assert re.match(r"run-links-network\s+2\s+\d+\s+FAILED \(exit 2\)$", rows["run-links-network"])
    assert rows["ncu"].endswith("skipped: ncu not on PATH") and rows["env"].endswith("not selected")
    log = (out / "logs" / "run-links-network.log").read_text()
    assert "ert-run: error:" in log or "ert: error:" in log, log
    assert "--backend cuda" in log and "!! exit 2" in log
    assert "no ceilings.json: the run failed or was cut short (no raw.jsonl)" in summary
    assert "runs/tiny-gpu" not in summary  # not selected, so not summarised
    with tarfile.open(out / "acceptance.tar.gz") as tar:
        names = tar.getnames()
    assert "out/summary.txt" in names and "out/logs/run-links-network.log" in names
    assert sorted(p.name for p in bring.iterdir()) == ["acceptance.tar.gz", "summary.txt"]
    (tmp_path / "again").mkdir()
    again = acceptance(out, env=_fake_gpu(tmp_path / "again"))
    assert again.returncode == 2 and again.stderr == f"gpu_acceptance.sh: {out} is not empty: give a new folder\n"


def test_a_spent_budget_leaves_later_steps_not_run_and_failed(tmp_path):
    out = tmp_path / "out"
    proc = acceptance(out, env=_fake_gpu(tmp_path), ERT_ACCEPT_STEPS="pytest-gpu,pytest-nvcc",
                      ERT_ACCEPT_BUDGET_S="35", ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 1
    summary = (out / "summary.txt").read_text()
    for step in ("pytest-gpu", "pytest-nvcc"):
        assert re.search(rf"^{step}\s+124\s+-\s+FAILED: not run, the 35s budget was spent$", summary, re.M), summary
    assert not (out / "pytest-gpu.xml").exists()


def test_the_wheels_cover_every_dependency_the_device_image_lacks():
    """Each of pyproject's dependencies is fetched by gpu_wheels.sh or listed there as present on the image."""
    text = WHEELS.read_text()
    fetched = {p.split("==")[0].lower() for p in re.search(r"DEFAULT_PACKAGES=\((.*?)\)", text, re.S).group(1).split()}
    present = set(re.search(r"PRESENT_ON_IMAGE=\((.*?)\)", text, re.S).group(1).lower().split())
    assert not fetched & present
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps}
    assert names <= fetched | present, names - fetched - present
    assert "pyopencl" in fetched  # the opencl backend on the NVIDIA driver (GPU-BRINGUP step 9)
    assert "/.whl/" in (REPO / ".gitignore").read_text().splitlines()


# ----------------------------------------------------------------------------- the ncu driver, emulated
def _driver():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import gpu_ncu_driver
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return gpu_ncu_driver


def test_the_ncu_driver_runs_and_checks_every_kernel_on_an_emulated_h100(capsys):
    from test_cuda_host import H100
    from test_cuda_int import EmulatedIntGpu
    from test_cuda_tensor import SMALL_H100, EmulatedTensorGpu

    from ert.backends import cuda as cuda_mod
    from ert.config import RunConfig

    driver = _driver()
    todo = driver.kernels(scale=1 / 256)
    vector = [k for k in todo if not k[0].tensor]
    tensor = [k for k in todo if k[0].tensor]
    assert {s.precision for s, _ in vector} == {"fp64", "fp32", "fp16", "int32"} and {"ro", "rw"} == \
        {s.access for s, _ in vector}
    assert {s.precision for s, _ in tensor} == {"fp16", "fp64"}
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedIntGpu(H100))
    assert driver.run_kernels(backend, vector) == 0
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedTensorGpu(SMALL_H100))
    assert driver.run_kernels(backend, tensor) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(todo) and all(line.endswith("check ok") for line in lines), lines
    # The full-size list: 128 MiB (past every L2) and 8 MiB (inside one) for the bandwidth kernel.
    sizes = [n for s, n in driver.kernels() if s.key == "fp64-add-rw-f1"]
    assert sizes == [128 << 20, 8 << 20]


def test_the_ncu_driver_counts_a_failed_check_and_a_raising_kernel_and_goes_on(capsys):
    from test_cuda_host import H100
    from test_cuda_int import EmulatedIntGpu

    from ert.backends import cuda as cuda_mod
    from ert.backends.check import CheckResult
    from ert.config import RunConfig

    driver = _driver()
    todo = [k for k in driver.kernels(scale=1 / 256) if not k[0].tensor][:3]
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedIntGpu(H100))
    real_check = backend.check
    calls = []

    def check():
        calls.append(1)
        return CheckResult(False, "planted: element 7 off") if len(calls) == 1 else real_check()

    backend.check = check
    # A tensor kernel on a device without tensor support: it raises; the driver reports it and goes on.
    tensor = next(k for k in driver.kernels() if k[0].tensor)
    backend.supports = lambda spec: True
    assert driver.run_kernels(backend, todo[:1] + [tensor] + todo[1:]) == 2
    out = capsys.readouterr().out
    assert "check FAILED: planted: element 7 off" in out
    assert f"{tensor[0].key}: raised" in out
    assert out.count("check ok") == len(todo) - 1


def test_the_ncu_driver_without_a_gpu_says_why_in_one_line(capsys):
    from ert.backends import cuda as cuda_mod

    if cuda_mod.probe()[0]:
        pytest.skip("this machine has a usable GPU")
    assert _driver().main() == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_ncu_driver: the cuda backend is not available: ") and err.count("\n") == 1
