"""ert on aarch64 for real, under the arm64 rig (jobs/arm64-rig.sh: an arm64 Debian root run by qemu-user): one
small sweep (tests/data/arm/rig.yaml) shared by the module, its result read back, the consumers run on it inside
the root, and the fp64 FMA kernel's code as Numba compiles it on aarch64.  The processes inside the root run in
the background from the session's start (tests/background.py); the tests read what they left.

Marked ``arm``: skipped with the reason where the rig cannot run (not root, no binfmt_misc) or is not built
(`sudo bash jobs/arm64-rig.sh up`, about 12 minutes once; .ci/run builds it before the tests).  Under qemu every
rate is the emulator's: these tests read the code, the checks and the files, never a number's size.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import background
import pytest

from test_arm_codegen import a64_hot_loop, a64_loop_facts

pytestmark = [pytest.mark.arm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
RIG = REPO / "jobs" / "arm64-rig.sh"
CONFIG = REPO / "tests" / "data" / "arm" / "rig.yaml"


def rig(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RIG), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


CONSUMERS = textwrap.dedent("""
    set -e
    ert show {out} > show.txt
    ert report -o report.html {out}
    ert export --format csv -o roofs.csv {out}
    ert export --format ert -o roofline.json {out}
    ert export --format kerncraft -o machine.yml {out} 2> kerncraft.err && exit 9 || test $? -eq 2
""")


@background.job("arm.rig", fixture="rig_ready")
def _rig_session() -> dict:
    """Everything the module runs inside the root, in order: {"skip": why} where the rig cannot run, else
    {"workdir", "run", "consumers", "asm"} (the processes, each judged by its own test)."""
    if os.geteuid() != 0:
        return {"skip": "the arm64 rig needs root (debootstrap, chroot, mounts): run the arm tests as root"}
    # A folder under /tmp, which the rig mounts at the same path (pytest's own may be elsewhere).
    workdir = Path(tempfile.mkdtemp(prefix="ert-arm-", dir="/tmp"))
    status = rig("status", cwd=workdir)
    if "root: built" not in status.stdout or "venv: /opt" not in status.stdout:
        return {"workdir": workdir, "skip": "the arm64 rig is not built: run `sudo bash jobs/arm64-rig.sh up` once "
                                            "(about 12 minutes; .ci/run does)"}
    up = rig("up", cwd=workdir, timeout=900)  # quick when built; re-points the root's ert at this checkout
    if up.returncode != 0:
        return {"workdir": workdir,
                "skip": f"the arm64 rig cannot run here: {(up.stderr.strip().splitlines() or ['?'])[-1]}"}
    out = workdir / "run"
    steps = {"workdir": workdir, "run": rig("run", "ert-run", str(CONFIG), "--out", str(out), "-q", cwd=workdir,
                                            timeout=900)}
    if steps["run"].returncode == 0:
        steps["consumers"] = rig("run", "bash", "-c", CONSUMERS.format(out=out), cwd=workdir, timeout=600)
    (workdir / "asm.py").write_text(ASM_SCRIPT)
    cache = workdir / "numba-cache"  # empty: a kernel loaded from a cache has no assembly to show
    steps["asm"] = rig("run", "env", f"NUMBA_CACHE_DIR={cache}", "python", "asm.py", cwd=workdir, timeout=600)
    return steps


@pytest.fixture(scope="module")
def session():
    """The module's processes inside the root, run in the background (tests/background.py) from the session's
    start: one sweep, the consumers on its result, the FMA kernel's assembly."""
    steps = background.result("arm.rig")
    yield steps
    if "workdir" in steps:
        shutil.rmtree(steps["workdir"], ignore_errors=True)


@pytest.fixture(scope="module")
def rig_ready(session):
    if "skip" in session:
        pytest.skip(session["skip"])
    return session


@pytest.fixture(scope="module")
def workdir(rig_ready) -> Path:
    return rig_ready["workdir"]


@pytest.fixture(scope="module")
def arm_run(rig_ready, workdir):
    """The one sweep on aarch64: (ert-run's stderr, ceilings.json, run directory)."""
    proc = rig_ready["run"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = workdir / "run"
    return proc.stderr, json.loads((out / "ceilings.json").read_text()), out


def test_the_run_is_aarch64_names_its_vector_extensions_and_every_point_checks(arm_run):
    _, doc, _ = arm_run
    meta = doc["metadata"]
    assert "aarch64" in meta["platform"]
    assert meta["points"]["invalid"] == 0 and meta["points"]["measured"] == meta["points"]["planned"] > 0
    isa = meta["backend_info"]["cpu_isa"]
    assert isa["machine"] == "aarch64" and "NEON (ASIMD)" in isa["vector_extensions"]
    # qemu's default CPU ("max") has SVE; its vector length is read with prctl(PR_SVE_GET_VL).
    assert "SVE" in isa["vector_extensions"] and isa["sve_vector_bits"] in range(128, 2049, 128)
    assert isa["kernels_use"].startswith("NEON, 128-bit registers")
    assert meta["backend_info"]["numba_effective"]["vector_bits"] == 128
    assert {c["precision"] for c in doc["ceilings"]["compute"]} == {"fp64"}


def test_an_emulated_cpu_is_warned_about_and_gets_no_rated_value(arm_run):
    stderr, doc, _ = arm_run
    assert "ert-run: warning: the CPU is emulated (an aarch64 process on a kernel whose /proc/cpuinfo" in stderr
    meta = doc["metadata"]
    codes = [w["code"] for w in meta["warning_codes"]]
    assert "emulated-cpu" in codes
    assert meta["warning_codes"][codes.index("emulated-cpu")]["group"] == "act"
    assert "qemu-user" in meta["backend_info"]["emulated"]
    rated = meta["backend_info"]["rated"]
    assert rated["emulated"] is True and rated["clock_ghz"] is None
    for entry in rated["compute"] + rated["memory"]:
        assert entry["gflops_per_s" if "gflops_per_s" in entry else "gbytes_per_s"] is None
        assert entry["derivation"].startswith("no rated value: the CPU is emulated")
    # Every ceiling says why it has no rated value, and no ratio to one.
    for ceiling in doc["ceilings"]["compute"] + doc["ceilings"]["memory"]:
        beside = ceiling["rated"]
        assert beside["ratio"] is None and beside.get("gflops_per_s", beside.get("gbytes_per_s")) is None, ceiling
        assert "the CPU is emulated" in beside["derivation"]


def test_show_report_and_export_work_on_the_result_inside_the_root(arm_run, rig_ready, workdir):
    proc = rig_ready["consumers"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    show = (workdir / "show.txt").read_text()
    assert "emulated aarch64 CPU" in show and "0 invalid" in show and "no rated value: the CPU is emulated" in show
    assert "<svg" in (workdir / "report.html").read_text()
    assert "fp64" in (workdir / "roofs.csv").read_text()
    assert json.loads((workdir / "roofline.json").read_text())
    # kerncraft's machine file needs a clock; an emulated run has none, and says so in one line.
    assert "has no clock" in (workdir / "kerncraft.err").read_text()


ASM_SCRIPT = textwrap.dedent("""
    import json
    from numba import types
    from ert.backends.numba_codegen import Geometry, configure_numba_env, effective_codegen, vector_isa
    from ert.spec import KernelSpec
    configure_numba_env(2)
    from ert.kernels import numba_cpu as k
    geo = Geometry(*vector_isa(effective_codegen()["cpu_features"]))
    sig = (types.float64[::1],) + (types.int64,) * 5 + (types.float64, types.float64)
    out = {"chains": list(geo.chains)}
    for chains, width in geo.widths(KernelSpec("fp64", 8, True, "rw")).items():
        kernel = k.make_rw_madd(width, True)
        kernel.compile(sig)
        out[f"fma-c{chains}"] = kernel.inspect_asm(sig)
    print(json.dumps(out))
""")


def test_fp64_fma_kernel_compiled_on_aarch64_is_vector_fmla_chains(rig_ready):
    """Numba on (emulated) aarch64 compiles the FMA kernel itself: its inner loop is that many 2 x fp64 fmla
    chains in registers, as the cross-compiled code read on x86 (tests/test_arm_codegen.py)."""
    proc = rig_ready["asm"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    listings = json.loads(proc.stdout.strip().splitlines()[-1])
    assert listings.pop("chains") == [8, 16]
    for key, text in listings.items():
        facts = a64_loop_facts(a64_hot_loop(text, "fmla"), "fmla")
        chains = int(key.rsplit("c", 1)[1])
        assert facts["arrangements"] == {"2d"} and facts["memory_ops"] == 0, (key, facts)
        assert facts["chains"] >= chains and facts["ops"] >= chains, (key, facts)
