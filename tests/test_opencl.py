"""The OpenCL backend on the real OpenCL devices here (PoCL in CI): runs, selection, checks, build cache, code.

Tests marked ``opencl_device`` need a device whose driver builds kernels and
skip, with the driver's reason, where none can (PoCL 3.0 on AMD Zen 5: its
LLVM predates the CPU).  The tests of that refusal run for real either way:
each asserts what is right for the drivers found here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import TINY, opencl_status, pyopencl_importable, run_cmd, write_config
from ert.backends import REGISTRY
from ert.config.schema import from_dict
from ert.errors import ErtError
from ert.spec import KernelSpec

pytestmark = [pytest.mark.skipif(not pyopencl_importable(), reason="pyopencl is not importable here"), pytest.mark.slow]
needs_device = pytest.mark.opencl_device


def _backend(**opencl):
    from ert.backends import opencl as ocl

    config = from_dict({"precisions": ["fp64", "fp32"], "opencl": {"cpu_reference": False, **opencl}})
    return ocl.create(options=config.opencl)


@pytest.fixture(scope="module")
def cl_backend():
    made = _backend()
    yield made
    made.close()


@pytest.fixture(scope="module")
def opencl_run(tmp_path_factory) -> Path:
    """One real `ert-run --backend opencl` of configs/tiny.yaml (with the numba-cpu reference), fp16 asked for
    beside its precisions (a device without fp16 skips it with one warning); its stderr in RUN/../stderr.txt.
    Its memory levels only: the host<->device links (21 of its 28 s on PoCL) are tests/test_opencl_links.py's."""
    base = tmp_path_factory.mktemp("ocl")
    config = base / "tiny-fp16.yaml"
    tiny = yaml.safe_load(TINY.read_text())
    config.write_text(yaml.safe_dump(dict(tiny, precisions=[*tiny["precisions"], "fp16"], levels=["memory"])))
    run_dir = base / "run"
    proc = run_cmd("ert-run", "--backend", "opencl", config, "--out", run_dir, "-q", timeout=300)
    (base / "stderr.txt").write_text(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return run_dir


def _device_names() -> list[str]:
    import pyopencl as cl

    return [d.name.strip() for p in cl.get_platforms() for d in p.get_devices()]


# ----------------------------------------------------------------------------- end to end
@needs_device
def test_tiny_run_writes_valid_ceilings_naming_the_device(opencl_run):
    from ert.records.ceilings_io import load_ceilings

    doc = load_ceilings(opencl_run / "ceilings.json")  # validates against the schema
    meta = doc["metadata"]
    info = meta["backend_info"]
    assert meta["backend"] == "opencl"
    assert info["device_name"] in _device_names()
    assert info["device_name"] in meta["device"]
    for key in ("platform", "platform_version", "driver_version", "device_version", "compute_units",
                "max_clock_mhz", "local_mem_bytes", "global_mem_cache_bytes", "global_mem_cacheline_bytes",
                "global_mem_bytes", "fp64", "fp16", "build_options", "caches", "memory_name"):
        assert key in info, key
    points = [json.loads(line) for line in (opencl_run / "raw.jsonl").read_text().splitlines()]
    points = [p for p in points if p["type"] == "point"]
    fp64 = [p for p in points if p["spec"]["precision"] == "fp64"]
    assert fp64 and all(p["valid"] for p in points), [p["check"] for p in points if not p["valid"]]
    assert all(p["launch"]["global"] % p["launch"]["local"] == 0 for p in points)
    assert doc["ceilings"]["memory"] and doc["ceilings"]["compute"]


@needs_device
def test_cpu_device_numbers_carry_a_caveat(opencl_run):
    doc = json.loads((opencl_run / "ceilings.json").read_text())
    info = doc["metadata"]["backend_info"]
    if info["device_type"] != "cpu":
        pytest.skip("the device is not a CPU")
    caveat = [w for w in doc["warnings"] if w.startswith("OpenCL device is a CPU")]
    assert len(caveat) == 1 and "numba-cpu" in caveat[0]
    ref = info.get("cpu_reference", {})
    assert ref.get("gflops_per_s", 0) > 0 or "error" in ref
    # On a CPU device the levels are named from the host's caches (L1 and more).
    assert {c["level"] for c in info["caches"]} >= {1}
    # ... and its ceilings are rated against the host CPU (the same cores), where ert's table knows it.
    if "gflops_per_s" in ref and (info.get("rated") or {}).get("compute"):
        assert info["rated"]["per_core"] is False and "host CPU" in info["rated"]["source"]
        fma = next(c for c in doc["ceilings"]["compute"] if c["precision"] == "fp64" and c["fma"])
        assert fma["rated"]["gflops_per_s"] > 0 and 0 < fma["rated"]["ratio"] <= 1.05, fma["rated"]
        assert "GHz" in fma["rated"]["derivation"]


@needs_device
def test_fp16_alone_on_a_device_without_it_is_one_clear_error(tmp_path, cl_backend):
    if cl_backend.precisions["fp16"]:
        pytest.skip("this device runs fp16")
    cfg = yaml.safe_load(TINY.read_text())
    cfg.update(backend="opencl", precisions=["fp16"])
    path = tmp_path / "fp16.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    proc = run_cmd("ert-run", path, "--out", out, "-q")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cl_khr_fp16" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())


@needs_device
def test_fp16_beside_fp64_is_skipped_with_one_warning(opencl_run, cl_backend):
    if cl_backend.precisions["fp16"]:
        pytest.skip("this device runs fp16")
    stderr = (opencl_run.parent / "stderr.txt").read_text()
    warnings = [line for line in stderr.splitlines() if "cl_khr_fp16" in line]
    assert len(warnings) == 1, stderr
    points = [json.loads(line) for line in (opencl_run / "raw.jsonl").read_text().splitlines()]
    assert {p["spec"]["precision"] for p in points if p["type"] == "point"} == {"fp64", "fp32"}
    doc = json.loads((opencl_run / "ceilings.json").read_text())
    assert any("cl_khr_fp16" in w for w in doc["warnings"])


# ----------------------------------------------------------------------------- `ert backends`
@needs_device
def test_ert_backends_lists_every_device_with_fp64_and_fp16():
    proc = run_cmd("ert", "backends")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    opencl = next(line for line in lines if line.startswith("opencl"))
    assert "available" in opencl and "unavailable" not in opencl
    following = lines[lines.index(opencl) + 1:]
    device_lines = following[:next((i for i, line in enumerate(following) if " device " not in line),
                                   len(following))]
    assert len(device_lines) == len(_device_names())
    for name, line in zip(_device_names(), device_lines):
        assert name in line and "fp64 " in line and "fp16 " in line


def test_ert_backends_without_any_icd_gives_the_reason(tmp_path):
    # The ICD loader reads OCL_ICD_VENDORS; an empty directory means no driver at all.
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path / "no-vendors"))
    proc = subprocess.run([sys.executable, "-m", "ert", "backends"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("opencl"))
    assert "unavailable" in line and "no OpenCL platform" in line


# ----------------------------------------------------------------------------- device selection
@needs_device
def test_selection_by_name_index_and_type():
    from ert.backends.opencl_devices import all_devices, build_problem, select_device, type_name
    from ert.config.schema import OpenCLOptions

    usable = [c for c in all_devices() if not build_problem(c[2])]
    p_index, d_index, first = usable[0]
    name = first.name.strip()
    device, choice = select_device(OpenCLOptions(device=name[2:8].upper()))
    assert device.name.strip() == name
    device, choice = select_device(OpenCLOptions(platform=p_index, device=d_index))
    assert choice["platform_index"] == p_index and f"index {d_index}" in choice["picked_by"]
    # Under MPI the rank's index within its node picks among the matching devices that build kernels.
    from ert.backends.opencl_devices import spread_over

    count = len(usable)
    device, choice = select_device(OpenCLOptions(), local_rank=count + 1)
    assert choice["picked_by"] == spread_over(usable, count + 1)[1]
    with pytest.raises(ErtError, match="out of range"):
        select_device(OpenCLOptions(device=len(all_devices()) + 5))
    for p, d, other in all_devices():  # a device picked by index whose driver cannot build: why, in one line
        if build_problem(other):
            with pytest.raises(ErtError, match="cannot be used: the driver cannot"):
                select_device(OpenCLOptions(platform=p, device=d))
    with pytest.raises(ErtError, match="no OpenCL device name contains"):
        select_device(OpenCLOptions(device="no-such-device-xyz"))
    with pytest.raises(ErtError, match="no OpenCL platform matches"):
        select_device(OpenCLOptions(platform="no-such-platform-xyz"))
    present = {type_name(d) for _, _, d in all_devices()}
    absent = [t for t in ("gpu", "accelerator", "cpu") if t not in present]
    for kind in absent:
        with pytest.raises(ErtError, match=f"no OpenCL device of type {kind}"):
            select_device(OpenCLOptions(device_type=kind))


# ----------------------------------------------------------------------------- geometry, build, timing
@needs_device
def test_launches_follow_the_config_and_fit_the_working_set():
    backend = _backend(global_sizes=[8, 48, 64, 4096], local_sizes=[16, 1 << 20], layout="interleaved",
                       vector_width=1, chains=2)
    spec = KernelSpec("fp32", 1, False)
    granule = backend.granule_elements(spec)
    assert granule == 16  # lcm(vector width x chains, the 16-value pattern)
    # 64 groups of 2 vectors: 8 is not a multiple of 16, 4096 is too many, 2**20 too big a group.
    assert backend.launches(spec, 128) == [{"global": 48, "local": 16}, {"global": 64, "local": 16}]
    # Nothing fits 16 elements: the smallest geometry that does stands in.
    assert backend.launches(spec, 16) == [{"global": 16, "local": 16}]
    if not backend.precisions["fp16"]:
        assert backend.launches(KernelSpec("fp16", 1, False), 128) == []  # no points: skipped, not failed


@needs_device
def test_default_cpu_geometry_is_one_work_item_per_compute_unit(cl_backend):
    if cl_backend.kind != "cpu":
        pytest.skip("the device is not a CPU")
    spec = KernelSpec("fp64", 1, False)
    units = cl_backend.info["compute_units"]
    assert cl_backend.launches(spec, cl_backend.granule_elements(spec) * 64) == [{"global": units, "local": 1}]


@needs_device
@pytest.mark.parametrize("spec", [KernelSpec("fp64", 4, True), KernelSpec("fp32", 1, False, "ro")],
                         ids=lambda s: s.key)
def test_interleaved_layout_with_a_tail_is_checked(spec):
    # The GPU layout, run here: 48 work-items, 3 chains, sizes that leave a tail.
    backend = _backend(global_sizes=[48], local_sizes=[16], layout="interleaved", vector_width=2, chains=3)
    n = backend.granule_elements(spec) * 37
    backend.prepare(spec, elements_per_thread=n, launch={"global": 48, "local": 16})
    backend.run(3)
    assert backend.check().ok
    backend.corrupt_for_test()
    assert not backend.check().ok
    backend.close()


@needs_device
def test_a_trial_count_off_by_one_fails_the_check(cl_backend):
    spec = KernelSpec("fp64", 2, False)
    cl_backend.prepare(spec, elements_per_thread=cl_backend.granule_elements(spec) * 4)
    cl_backend.run(3)
    cl_backend._trials_done += 1  # what a driver or kernel losing one trial would leave
    assert not cl_backend.check().ok


@needs_device
def test_programs_are_cached_and_never_built_in_a_timed_region(cl_backend):
    from ert.backends import opencl as ocl

    spec = KernelSpec("fp32", 32, True)
    ocl._PROGRAMS.clear()
    cl_backend.prepare(spec, elements_per_thread=cl_backend.granule_elements(spec) * 8)
    assert len(ocl._PROGRAMS) == 1
    first = cl_backend.run(1)
    # A build (or the driver's per-local-size compile) takes >= 0.1 s here.
    assert first < 0.05, first
    cl_backend.prepare(spec, elements_per_thread=cl_backend.granule_elements(spec) * 16)
    assert len(ocl._PROGRAMS) == 1
    cl_backend.prepare(KernelSpec("fp32", 32, False), elements_per_thread=cl_backend.granule_elements(spec) * 8)
    assert len(ocl._PROGRAMS) == 2


_ASM_SCRIPT = textwrap.dedent("""
    import sys
    from ert.backends import opencl as ocl
    from ert.config.schema import from_dict
    from ert.spec import KernelSpec
    backend = ocl.create(options=from_dict({"opencl": {"cpu_reference": False}}).opencl)
    spec = KernelSpec("fp64", 8, sys.argv[1] == "fma")
    backend.prepare(spec, elements_per_thread=backend.granule_elements(spec) * 4)
    backend.run(1)
    assert backend.check().ok
""")


def _fma_count(tmp_path, variant: str) -> int:
    cache = tmp_path / variant
    env = dict(os.environ, POCL_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, "-c", _ASM_SCRIPT, variant], env=env, check=True, timeout=120)
    objects = list(cache.rglob("ert_rw.so"))
    assert objects, f"PoCL left no ert_rw.so under {cache}"
    text = subprocess.run(["objdump", "-d", str(objects[0])], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in text.splitlines() if "vfmadd" in line or "vfmsub" in line or "vfnmadd" in line)


@needs_device
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
def test_pocl_code_fuses_only_the_fma_variant(tmp_path):
    from ert.backends.opencl_devices import all_devices, is_pocl

    if not is_pocl(all_devices()[0][2]):
        pytest.skip("the first OpenCL device (the one the script picks) is not PoCL's")
    assert _fma_count(tmp_path, "fma") > 0
    assert _fma_count(tmp_path, "nofma") == 0


# ----------------------------------------------------------------------------- issue 13 (GPU readiness), on PoCL
@needs_device
def test_local_sizes_never_exceed_the_kernels_own_work_group_limit():
    backend = _backend(global_sizes=[64, 256], local_sizes=[1, 4, 16, 64], layout="interleaved")
    spec = KernelSpec("fp32", 1, False)
    limit = backend.kernel_work_group_size(spec)
    assert 1 <= limit <= backend.info["max_work_group_size"]
    launches = backend.launches(spec, backend.granule_elements(spec) * 64)
    assert launches and all(launch["local"] <= limit for launch in launches)
    backend.close()


@needs_device
def test_no_fma_binaries_are_read_for_fused_multiply_adds():
    backend = _backend()
    spec = KernelSpec("fp64", 8, False)
    backend.prepare(spec, elements_per_thread=backend.granule_elements(spec) * 4)
    info = backend.describe()
    # PoCL hands out LLVM bitcode: FP_CONTRACT OFF held, so no fused intrinsic in the no-FMA module.
    assert info["fp_contract_off_checked"].get("fp64") == 0, info["fp_contract_off_checked"]
    assert not any("no-FMA ceiling is not one" in c for c in backend.warnings)
    backend.close()


# ----------------------------------------------------------------------------- drivers that cannot build kernels
# PoCL 3.0 (the newest on PyPI) cannot build any kernel on AMD Zen 5: its LLVM
# does not know the CPU, falls back to 'generic' and then rejects that.  The
# probe must say so and the backend step aside; where the driver builds, the
# same tests check that nothing is refused.
def _direct_builds() -> list[tuple[object, str | None]]:
    """Every device and PyOpenCL's text of its failed build of the probe's kernel (None where it builds),
    found directly, without the probe."""
    import pyopencl as cl

    from ert.backends.opencl_devices import PROBE_SOURCE

    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        pytest.skip(f"no OpenCL platform here ({exc})")
    found = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for device in devices:
            try:
                cl.Program(cl.Context([device]), PROBE_SOURCE).build(devices=[device])
                found.append((device, None))
            except cl.Error as exc:
                found.append((device, str(exc)))
    if not found:
        pytest.skip("no OpenCL device here")
    return found


def test_probe_reports_each_drivers_own_build_failure():
    from ert.backends.opencl_devices import build_problem, first_error_line, is_pocl, probe, type_name

    builds = _direct_builds()
    for device, failure in builds:
        problem = build_problem(device)
        if failure is None:
            assert problem == "", problem
            continue
        line = first_error_line(failure)
        assert "error" in line.lower(), failure  # the driver's own first error line, from its build log
        assert problem.startswith("the driver cannot build kernels here (") and "\n" not in problem
        assert line.split("error:", 1)[-1].strip() in problem, (line, problem)
        if is_pocl(device) and "unknown target CPU" in failure:  # PoCL 3.0 on AMD Zen 5
            assert "(PoCL: unknown target CPU 'generic'; its LLVM does not know this CPU)" in problem, problem
    available, reason, detail = probe()
    assert available == any(failure is None for _, failure in builds)
    assert len(detail["devices"]) == len(builds)
    for (device, failure), line in zip(builds, detail["devices"]):
        assert device.name.strip() in line
        assert ("unusable: the driver cannot build kernels here" in line) == (failure is not None), line
        if not available:
            assert f"{device.name.strip()}: {build_problem(device)}" in reason
    if available:
        assert reason == "" and detail["accelerators"] == sum(
            1 for device, failure in builds if failure is None and type_name(device) != "cpu")


def test_a_failed_kernel_build_is_one_line_naming_the_device():
    import pyopencl as cl

    from ert.backends.opencl import KERNEL_FILE, kernel_source
    from ert.backends.opencl_devices import build_program, first_error_line

    for device, failure in _direct_builds():
        context = cl.Context([device])
        # Where the driver builds, an undeclared name makes a build fail for real.
        source = kernel_source() if failure else "__kernel void k(__global float *x) { x[0] = ert_no_such; }"
        with pytest.raises(ErtError) as caught:
            build_program(context, device, source, ["-DERT_BITS=32"], what=KERNEL_FILE)
        text = str(caught.value)
        assert "\n" not in text and f"OpenCL device {device.name.strip()!r}" in text and KERNEL_FILE in text
        if failure:
            assert first_error_line(failure).split("error:", 1)[-1].strip() in text, text
        else:
            assert "ert_no_such" in text, text


@needs_device
def test_a_kernel_build_failure_in_a_run_is_an_error_not_a_traceback(monkeypatch):
    import re

    backend = _backend()
    monkeypatch.setattr(backend, "_source", "__kernel void ert_rw(__global float *x) { x[0] = ert_no_such; }")
    spec = KernelSpec("fp32", 1, False)
    with pytest.raises(ErtError, match=rf"OpenCL device {re.escape(repr(backend.info['device']))}.*ert_no_such"):
        backend.launches(spec, backend.granule_elements(spec) * 8)  # where ert-run builds: before the run dir
    backend.close()


def test_ert_run_on_opencl_without_a_usable_device_is_one_line(tmp_path):
    status = opencl_status()
    if status.available:
        pytest.skip("an OpenCL device builds kernels here (the end-to-end tests run it)")
    out = tmp_path / "out"
    proc = run_cmd("ert-run", "--backend", "opencl", TINY, "--out", out, "-q")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("ert-run: error: ") and status.reason in lines[0], lines[0]
    assert "cannot build kernels" in lines[0] or "no OpenCL" in lines[0]
    assert not out.exists()  # no half-written run directory


def test_ert_backends_prints_why_a_device_cannot_be_used():
    from ert.backends.opencl_devices import all_devices, build_problem

    status = opencl_status()
    proc = run_cmd("ert", "backends")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    opencl = next(line for line in lines if line.startswith("opencl"))
    if not status.available:
        assert "unavailable" in opencl and status.reason in opencl, opencl
        return
    assert "unavailable" not in opencl
    following = lines[lines.index(opencl) + 1:]
    device_lines = following[:next((i for i, line in enumerate(following) if " device " not in line),
                                   len(following))]
    assert len(device_lines) == len(all_devices())
    for (_, _, device), line in zip(all_devices(), device_lines):
        problem = build_problem(device)
        assert (f"unusable: {problem}" in line) if problem else ("unusable" not in line), line


def test_auto_backend_falls_back_to_numba_cpu_when_no_opencl_device_builds(tmp_path):
    status = opencl_status()
    cuda = REGISTRY.status("cuda")
    config = write_config(tmp_path / "auto.yaml", backend="auto", precisions=["fp64"], access=["rw"],
                          working_set={"min_bytes": 16384, "max_bytes": 32768, "growth": 2.0},
                          timing={"min_seconds": 0.001, "repeats": 2, "noise_threshold": 10.0, "max_remeasure": 0})
    proc = run_cmd("ert-run", config, "--out", tmp_path / "run", "-q", "--threads", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr
    chosen = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["backend"]
    assert chosen == REGISTRY.best_available()
    if not status.available:
        assert chosen != "opencl"
        if not cuda.available:
            assert chosen == "numba-cpu"
    elif not cuda.available:
        # A usable OpenCL GPU wins; a usable CPU device alone gives way to numba-cpu.
        assert chosen == ("opencl" if status.detail.get("accelerators") else "numba-cpu")


@needs_device
def test_the_cpu_reference_is_handed_in_by_the_measuring_side_and_measured_once():
    """A backend never starts a measurement: without a hook it has no reference; with one, it calls it once."""
    from ert.backends import CpuReferenceBackend, RatedBackend
    from ert.backends.numba_cpu import NumbaCpuBackend

    assert callable(NumbaCpuBackend.rated) and not isinstance(object(), RatedBackend)
    backend = _backend(cpu_reference=True)
    try:
        assert isinstance(backend, CpuReferenceBackend) and not isinstance(backend, RatedBackend)
        if backend.kind != "cpu":
            pytest.skip("the device is not a CPU")
        assert "cpu_reference" not in backend.describe()
        calls = []
        backend.use_cpu_reference(lambda threads: calls.append(threads) or {"gflops_per_s": 12.5, "threads": threads})
        info = backend.describe()
        warning = next(w for w in backend.warnings if w.startswith("OpenCL device is a CPU"))
        assert len(calls) == 1 and calls[0] >= 1
        assert info["cpu_reference"] == {"gflops_per_s": 12.5, "threads": calls[0]} and "12.5 GFLOP/s" in warning
    finally:
        backend.close()
