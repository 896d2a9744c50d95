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
# The order (issue 34): the tensor roofs first, the tests that need no GPU (nvcc) left out.
STEPS = ["env", "tensor-first", "tensor-tests", "tiny-gpu", "links-network", "integer-gpu", "ncu", "gpu-tests"]
CAPS = {"env": 45, "tensor-first": 70, "tensor-tests": 30, "tiny-gpu": 80, "links-network": 35, "integer-gpu": 45,
        "ncu": 65, "gpu-tests": 50}
CONFIGS = {"gpu-tensor-first", "tiny-gpu", "integer-gpu", "links-network"}


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


def test_the_dry_run_lists_every_step_in_order_with_caps_that_fit_the_budget(dry):
    out, stdout = dry
    assert re.findall(r"^\[step ([a-z-]+)\] cap (\d+)s$", stdout, re.M) == [(k, str(v)) for k, v in CAPS.items()]
    assert sum(CAPS.values()) == 420  # the whole command is at most 480 s: 60 s for checkpoints and kill grace
    assert stdout.rstrip().endswith("planned caps: 420s of the 420s budget")
    # A checkpoint after every step; nvcc tests and plots are left out.
    assert stdout.count("+ (checkpoint) summary.txt and acceptance.tar.gz") == len(STEPS)
    assert "nvcc and not gpu" not in stdout and " plot " not in stdout
    again = acceptance(out, ERT_ACCEPT_DRY="1", ERT_WHEELS=str(out.parent / "no-wheels"))
    assert again.returncode == 0 and again.stdout == stdout
    over = acceptance("--dry-run", out, ERT_ACCEPT_CAPS="tiny-gpu=200", ERT_WHEELS=str(out.parent / "no-wheels"))
    assert over.stdout.rstrip().endswith("planned caps: 540s of the 420s budget: OVER, the last steps will be cut")


def test_every_config_it_runs_exists_and_validates_with_the_backend_it_passes(dry, tmp_path, capsys):
    from ert.config import schema as config_mod
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
    assert {a[0] for a in ert_lines} == {"backends", "run", "show", "profile"}  # plots afterwards, from the tarball
    for args in ert_lines:
        try:
            parsed = build_parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"ert {' '.join(args)}: not a command line the CLI takes")
        assert parsed.command == args[0]


def test_the_pytest_steps_use_declared_markers_name_real_tests_and_keep_their_reports(dry):
    out, stdout = dry
    declared = {m.split(":")[0] for m in
                tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    pytests = [argv for argv, _ in commands(stdout) if argv[1:3] == ["-m", "pytest"]]
    assert len(pytests) == 2
    names = {}
    for argv in pytests:
        assert argv[argv.index("-m", 3) + 1] == "gpu" and "gpu" in declared
        files = [a for a in argv if a.startswith("tests/")]
        assert files and all((REPO / f).is_file() for f in files)
        # Every test function the -k expression names exists in the files it runs.
        defined = set(re.findall(r"^def (test_\w+)", "".join((REPO / f).read_text() for f in files), re.M))
        expression = argv[argv.index("-k") + 1]
        for word in set(re.findall(r"[a-z_0-9]+", expression)) - {"and", "or", "not"}:
            assert any(word in name for name in defined), (word, files)
        junit = next(a for a in argv if a.startswith("--junitxml="))
        assert Path(junit.split("=", 1)[1]).parent == out
        names[Path(junit.split("=", 1)[1]).stem] = (files, expression)
    # The tensor tests first; then every file holding gpu tests, less those and the sweeps already run as runs.
    assert names["tensor-tests"] == (["tests/test_cuda_tensor.py"], "replayed_values or rated_tensor_peak")
    gpu_files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                       if re.search(r"pytest\.mark\.gpu|needs_gpu", p.read_text()))
    assert sorted(names["gpu-tests"][0]) == gpu_files and "tests/test_cuda_gpu.py" in gpu_files
    assert names["gpu-tests"][1].startswith("not (replayed_values or rated_tensor_peak or full_sweep_gives_sane")


def test_ncu_captures_the_metrics_ert_profile_reads_and_profile_reads_the_exports(dry):
    from ert.interop import kernel_data as appdata
    from ert.interop import ncu_csv

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
        assert argv[argv.index("--kernel-name") + 1] == "regex:^ert_(rw|ro|mma|wgmma)"  # wgmma: issue 34
    exported = {target for argv, target in cmds if argv[:2] == ["ncu", "--import"]}
    profiled = [argv[4] for argv, _ in cmds if argv[1:4] == ["-m", "ert", "profile"]]
    assert {Path(p).name for p in profiled} == {"ncu-long.csv", "ncu-raw.csv", "ncu-extra-long.csv"}
    assert set(profiled) <= exported


def test_the_step_selection_and_caps_are_checked(tmp_path):
    proc = acceptance("--dry-run", tmp_path / "o", ERT_ACCEPT_STEPS="gpu-tests,ncu", ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    selected = re.findall(r"^\[step ([a-z-]+)\] cap", proc.stdout, re.M)
    assert selected == ["ncu", "gpu-tests"] and "planned caps: 115s of the 420s budget" in proc.stdout
    assert not any(argv[1:4] == ["-m", "ert", "run"] for argv, _ in commands(proc.stdout))
    capped = acceptance("--dry-run", tmp_path / "o", ERT_ACCEPT_CAPS="gpu-tests=17", ERT_WHEELS=str(tmp_path))
    assert "[step gpu-tests] cap 17s" in capped.stdout
    for bad in ({"ERT_ACCEPT_STEPS": "gpu-tests,warp"}, {"ERT_ACCEPT_CAPS": "gpu-tests=soon"},
                {"ERT_ACCEPT_CAPS": "warp=10"}, {"ERT_ACCEPT_BUDGET_S": "9m"}, {"ERT_ACCEPT_LIMIT_S": "8m"},
                {"ERT_ACCEPT_LIMIT_S": "400"}):
        proc = acceptance("--dry-run", tmp_path / "o", **bad)
        assert proc.returncode == 2 and proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and "gpu_acceptance.sh: " in proc.stderr, proc.stderr
    for args in ((), ("a", "b"), ("--bring",), ("--fast", "o")):
        proc = acceptance(*args)
        assert proc.returncode == 2 and proc.stderr.startswith("gpu_acceptance.sh: "), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_carried_wheels_go_one_by_one_to_their_own_folder_first_on_the_path(tmp_path):
    wheels = tmp_path / "w"
    wheels.mkdir()
    (wheels / "pydantic-2.0-py3-none-any.whl").write_bytes(b"")
    (wheels / "rpds_py-1.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")
    proc = acceptance("--dry-run", tmp_path / "o", ERT_WHEELS=str(wheels), ERT_SITE=str(tmp_path / "site"),
                      ERT_ACCEPT_STEPS="env")
    assert proc.returncode == 0, proc.stderr
    pips = [argv for argv, _ in commands(proc.stdout) if argv[1:4] == ["-m", "pip", "install"]]
    # Without packages.txt, each wheel file alone; then the project itself.
    assert [p[-1] for p in pips[:2]] == sorted(str(w) for w in wheels.iterdir())
    for pip in pips[:2]:
        assert pip[pip.index("--target") + 1] == str(tmp_path / "site") and "--no-index" in pip
        assert pip[pip.index("--find-links") + 1] == str(wheels)
    assert pips[2][-2:] == ["-e", "."] and "--no-deps" in pips[2]
    # With gpu_wheels.sh's packages.txt: one pip call per pinned package, pip picking the wheel for its Python.
    (wheels / "packages.txt").write_text("pydantic==2.0\nrpds-py==1.0\n")
    proc = acceptance("--dry-run", tmp_path / "o", ERT_WHEELS=str(wheels), ERT_SITE=str(tmp_path / "site"),
                      ERT_ACCEPT_STEPS="env")
    pips = [argv for argv, _ in commands(proc.stdout) if argv[1:4] == ["-m", "pip", "install"]]
    assert [p[-1] for p in pips] == ["pydantic==2.0", "rpds-py==1.0", "."]
    # nvidia-smi section by section, and the PCIe link now and at its maximum.
    smi = [argv for argv, _ in commands(proc.stdout) if argv[0] == "nvidia-smi"]
    assert [a[3] for a in smi if a[1:3] == ["-q", "-d"]] == ["CLOCK", "PCIE", "POWER", "MEMORY", "PERFORMANCE"]
    query = next(a[1] for a in smi if a[1:2] and a[1].startswith("--query-gpu="))
    assert {"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current"} <= set(query[12:].split(","))


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
    fake.write_text("#!/bin/sh\ncase \"$1\" in -L) echo 'GPU 0: Fake GPU (UUID: GPU-fake)';;\n"
                    "*) echo \"fake nvidia-smi $*\";; esac\n")
    fake.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


def _rows(summary: str) -> dict[str, str]:
    """The step table of a summary.txt: {step: its line}."""
    return {line.split()[0]: line for line in summary.splitlines() if line.split()[:1] and line.split()[0] in STEPS}


def _tar_names(path: Path) -> list[str]:
    import tarfile

    with tarfile.open(path) as tar:
        return tar.getnames()


@pytest.mark.slow  # every step for real: ert-run, pytest, tar
@pytest.mark.skipif(shutil.which("ncu") is not None, reason="ncu is installed here")
def test_the_full_sequence_against_a_fake_nvidia_smi_and_a_cupy_without_a_driver(tmp_path):
    """Every step for real past the GPU check: the runs fail (CuPy here finds no driver), every gpu test
    skips, so those steps are "skipped" with pytest's reason, never "ok"; the summary and the tarball are
    brought, two files."""
    from ert.backends import cuda as cuda_mod

    if cuda_mod.probe()[0]:
        pytest.skip("this machine has a usable GPU")
    out, bring = tmp_path / "out", tmp_path / "bring"
    proc = acceptance("--bring", bring, out, env=_fake_gpu(tmp_path), ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    assert proc.stdout.endswith(summary) and "written after step gpu-tests" in summary
    rows = _rows(summary)
    assert list(rows) == STEPS
    assert re.match(r"env\s+0\s+45\s+\d+\s+ok$", rows["env"]), rows["env"]
    for step in ("tensor-first", "tiny-gpu", "links-network", "integer-gpu"):
        assert re.match(rf"{step}\s+2\s+\d+\s+\d+\s+FAILED \(exit 2\)$", rows[step]), rows[step]
        log = (out / "logs" / f"{step}.log").read_text()
        assert "ert: error: backend: backend 'cuda' is not available" in log and "!! exit 2" in log
    for step, n in (("tensor-tests", 24), ("gpu-tests", None)):
        assert re.search(rf"0\s+\d+\s+\d+\s+skipped: all {n or '[0-9]+'} tests skipped \(needs an NVIDIA GPU",
                         rows[step]), rows[step]
        assert (out / f"{step}.xml").is_file()
    assert rows["ncu"].endswith("skipped: ncu not on PATH")
    assert "measured/rated per ceiling, tensor-first" in summary and "no ceilings.json: the run failed" in summary
    # Section by section: every nvidia-smi query kept apart.
    assert sorted(p.name for p in (out / "logs").glob("nvidia-smi-*.txt")) == \
        [f"nvidia-smi-{s}.txt" for s in sorted(("CLOCK", "PCIE", "POWER", "MEMORY", "PERFORMANCE"))]
    assert sorted(p.name for p in bring.iterdir()) == ["acceptance.tar.gz", "summary.txt"]
    assert (bring / "summary.txt").read_text() == summary
    names = _tar_names(bring / "acceptance.tar.gz")
    assert {"out/summary.txt", "out/logs/env.log", "out/logs/gpu-tests.log", "out/tensor-tests.xml"} <= set(names)
    (tmp_path / "again").mkdir()
    again = acceptance(out, env=_fake_gpu(tmp_path / "again"))
    assert again.returncode == 2 and again.stderr == f"gpu_acceptance.sh: {out} is not empty: give a new folder\n"


def _stub(tmp_path, *, sleep: float = 0.0) -> Path:
    """A stand-in for every step's commands (ERT_ACCEPT_STUB): a log line; tensor-first leaves a run whose
    ceilings the summary reads; tensor-tests says it skipped (no test ran)."""
    stub = tmp_path / "stub.sh"
    ceilings = REPO / "tests" / "data" / "ceilings-handworked-gpu.json"
    stub.write_text(f"""#!/bin/sh
echo "stub step $1"
sleep {sleep}
case $1 in
    tensor-first) mkdir -p "$2/runs/gpu-tensor-first" && cp {ceilings} "$2/runs/gpu-tensor-first/ceilings.json" ;;
    tensor-tests) echo "all 3 tests skipped (planted)" > "$2/logs/tensor-tests.skip" ;;
esac
""")
    stub.chmod(0o755)
    return stub


@pytest.mark.slow  # the script run and killed once per step
def test_a_run_killed_at_every_step_boundary_leaves_the_summary_and_the_tarball(tmp_path):
    """The device tool kills a command at its limit: killed (SIGKILL, the whole process group) right after
    each step's checkpoint, the run has left in --bring's folder the summary of every step so far and a
    tarball of all it wrote, two files and nothing half-written; the last cut is the full sequence."""
    import signal

    env = _fake_gpu(tmp_path)
    stub = _stub(tmp_path)
    for k, step in enumerate(STEPS):
        out, bring = tmp_path / f"out{k}", tmp_path / f"bring{k}"
        proc = subprocess.Popen(["bash", str(SCRIPT), "--bring", str(bring), str(out)], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(env, PYTHON=sys.executable, ERT_ACCEPT_STUB=str(stub), ERT_WHEELS=str(tmp_path)))
        try:
            for line in proc.stdout:
                if line.startswith(f"=== checkpoint after {step}:"):
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.stdout.close()
        assert sorted(p.name for p in bring.iterdir()) == ["acceptance.tar.gz", "summary.txt"], k
        summary = (bring / "summary.txt").read_text()
        assert f"written after step {step}" in summary
        rows = _rows(summary)
        for j, name in enumerate(STEPS):
            want = ("skipped: all 3 tests skipped (planted)" if name == "tensor-tests" else "ok") if j <= k else \
                "not run yet"
            assert rows[name].endswith(want), (k, rows[name])
        if k >= 1:  # tensor-first's ceilings, read by gpu_summary.py
            assert "measured/rated per ceiling, tensor-first" in summary and "fp64 FMA peak" in summary
        names = _tar_names(bring / "acceptance.tar.gz")
        assert f"out{k}/summary.txt" in names
        assert {f"out{k}/logs/{s}.log" for s in STEPS[:k + 1]} <= set(names)
        assert not {f"out{k}/logs/{s}.log" for s in STEPS[k + 1:]} & set(names)


@pytest.mark.slow  # the script run with steps that sleep until its budget is spent
def test_a_spent_budget_leaves_later_steps_not_run_and_failed(tmp_path):
    out = tmp_path / "out"
    proc = acceptance(out, env=_fake_gpu(tmp_path), ERT_ACCEPT_STUB=str(_stub(tmp_path, sleep=2)),
                      ERT_ACCEPT_BUDGET_S="6", ERT_WHEELS=str(tmp_path))
    assert proc.returncode == 1
    rows = _rows((out / "summary.txt").read_text())
    assert rows["env"].endswith("ok")
    for step in STEPS[2:]:
        assert re.search(rf"^{step}\s+124\s+\d+\s+-\s+FAILED: not run, the 6s budget was spent$", rows[step]), rows[step]
    assert not (out / "logs" / "gpu-tests.log").exists()


@pytest.mark.slow  # a copy of the checkout, the env step and an ert-run
def test_where_pip_e_fails_ert_runs_from_the_checkout_on_pythonpath(tmp_path):
    """The env step's fallback: pip install -e . refused (planted), ert runs from the checkout on PYTHONPATH
    with kernels/ and configs/ linked into ert/ (as ert.kernels, ert.configs), the console scripts on PATH,
    for the later steps too. Run in a copy of the checkout: the links are made inside it."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".venv", ".git", "results", "__pycache__", "*.egg-info",
                                                              ".whl", "build"))
    wrapper = tmp_path / "python"
    wrapper.write_text(f"""#!/bin/sh
case "$*" in
    *"pip install"*"-e ."*) echo "planted: editable installs refused" >&2; exit 1 ;;
    *"sys.exit(not ert.__file__"*) exit 1 ;;
esac
exec {sys.executable} "$@"
""")
    wrapper.chmod(0o755)
    out, tree = tmp_path / "out", tmp_path / "tree"
    proc = subprocess.run(["bash", str(copy / "benchmarks" / "gpu_acceptance.sh"), str(out)], cwd=copy,
                          capture_output=True, text=True, timeout=120,
                          env=dict(_fake_gpu(tmp_path), PYTHON=str(wrapper), ERT_ACCEPT_STEPS="env,tensor-first",
                                   ERT_SRC_TREE=str(tree), ERT_WHEELS=str(tmp_path)))
    log = (out / "logs" / "env.log").read_text()
    assert "pip install -e . failed: ert from this checkout on PYTHONPATH" in log, log
    assert re.search(rf"ert \S+ {copy}/ert/__init__.py", log), log  # and ert.kernels, ert.configs imported
    assert (copy / "ert" / "kernels" / "ert_cuda.cu").is_file() and (copy / "ert" / "configs" / "tiny.yaml").is_file()
    assert os.access(tree / "bin" / "ert-run", os.X_OK)
    assert f"export PYTHONPATH={copy}" in (out / "logs" / "env.sh").read_text()
    rows = _rows((out / "summary.txt").read_text())
    assert rows["env"].endswith("ok"), proc.stdout
    # The next step ran with it: ert-run found the packaged config, and refused only for want of a GPU.
    assert "backend 'cuda' is not available" in (out / "logs" / "tensor-first.log").read_text()
    # Never committed: git ignores the links.
    assert {"/ert/kernels", "/ert/configs"} <= set((REPO / ".gitignore").read_text().splitlines())


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
    from ert.config.schema import RunConfig

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
    from ert.config.schema import RunConfig

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
