"""ert import-ert-config: ERT 1.1 CPU, GPU and OpenCL configs become ert YAML that `ert validate` accepts."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO, run_cmd, stderr_lines
from ert.errors import ErtError
from ert.interop.import_ert import parse_int_set

DATA = REPO / "tests" / "data"


def _convert(name, tmp_path):
    out = tmp_path / f"{name}.yaml"
    proc = run_cmd("ert", "import-ert-config", DATA / f"ert-config-{name}.txt", "-o", out)
    assert proc.returncode == 0, proc.stderr
    valid = run_cmd("ert", "validate", out)
    assert valid.returncode == 0 and "valid" in valid.stdout, valid.stderr
    return yaml.safe_load(out.read_text()), stderr_lines(proc)


def test_cpu_config(tmp_path):
    cfg, notes = _convert("cpu", tmp_path)
    assert cfg["backend"] == "numba-cpu" and cfg["precisions"] == ["fp64"]
    assert cfg["flops_per_element"] == [1, 2, 4, 8, 16]
    # ERT_OPENMP_THREADS 1-24 with ERT_MPI_PROCS 2,4,6,8,12 and ERT_PROCS_THREADS 24: ERT runs the layouts 2x12,
    # 4x6, 6x4, 8x3 and 12x2; their thread counts in one thread-scaling run, threads the largest.
    assert cfg["thread_counts"] == [2, 3, 4, 6, 12] and cfg["threads"] == 12
    assert cfg["working_set"] == {"max_bytes": 1073741824, "min_bytes": 1 * 8 * 12, "growth": 1.1}
    assert cfg["timing"] == {"repeats": 3} and cfg["access"] == ["rw"]
    text = "\n".join(notes)
    for key in ("ERT_MPI ", "ERT_PROCS_THREADS", "ERT_TRIALS_MIN", "ERT_CC", "ERT_RUN", "ERT_SPEC_GBYTES_L1",
                "ERT_OPENMP_THREADS"):
        assert key in text, key
    assert all(line.startswith("import-ert-config: ert-config-cpu.txt: ERT_") for line in notes)


def test_a_many_core_config_plans_the_layouts_ert_ran_not_every_thread_count(tmp_path):
    """Issue 41: two real Cori KNL configs (ERT_OPENMP_THREADS 1-256) stopped at the point cap ("plans up to
    1003520 points"): ERT runs only the layouts whose ranks x threads is in ERT_PROCS_THREADS (1x256, 4x64, 16x16,
    64x4), so the thread scaling sweeps those 4 counts, not 256."""
    cfg, notes = _convert("knl", tmp_path)
    assert cfg["thread_counts"] == [4, 16, 64, 256] and cfg["threads"] == 256
    assert cfg["precisions"] == ["fp32", "fp64"] and cfg["flops_per_element"] == [1, 2, 4, 8, 16, 32, 64]
    layouts = next(n for n in notes if "ERT_OPENMP_THREADS" in n)
    assert "(1x256, 4x64, 16x16, 64x4)" in layouts and "mpirun -n P ert-run CONFIG --threads T" in layouts
    assert not any("ERT_PROCS_THREADS" in n and "no equivalent" in n for n in notes)


def test_the_point_cap_still_refuses_a_grid_of_a_needless_growth(tmp_path):
    """The cap that stopped the KNL configs still guards the planner: ERT_WSS_MULT 1.0000001 is refused in one
    line (the schema's growth bound), and so is a plan past the cap (a single-node scaling over 1-256 threads)."""
    text = (DATA / "ert-config-knl.txt").read_text()
    for name, edited, words in (("growth", text + "ERT_WSS_MULT 1.0000001\n", "working_set.growth"),
                                ("cap", text.replace("ERT_MPI         True", "ERT_MPI         False"),
                                 "more than 200000")):
        src = tmp_path / f"{name}.ert"
        src.write_text(edited)
        proc = run_cmd("ert", "import-ert-config", src, "-o", tmp_path / f"{name}.yaml")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        errors = [line for line in stderr_lines(proc) if ": error: " in line]
        assert len(errors) == 1 and words in errors[0], proc.stderr


def test_gpu_config(tmp_path):
    cfg, notes = _convert("gpu", tmp_path)
    assert cfg["backend"] == "cuda" and cfg["precisions"] == ["fp16", "fp32", "fp64"]
    assert cfg["flops_per_element"] == [2 ** k for k in range(11)]
    assert cfg["cuda"] == {"blocks": [80, 160, 320, 640, 1280, 2560], "threads_per_block": [64, 128, 256, 512, 1024],
                           "blocks_threads": 163840}
    assert cfg["working_set"]["min_bytes"] == 128 * 8 and cfg["timing"]["repeats"] == 5
    assert any("ERT_BLOCKS_THREADS" in n and "equal to 163840" in n for n in notes)
    assert any("ERT_GPU_CFLAGS" in n and "sm_70" in n for n in notes)


def test_opencl_config(tmp_path):
    cfg, notes = _convert("ocl", tmp_path)
    assert cfg["backend"] == "opencl" and cfg["precisions"] == ["fp32", "fp64"]
    assert cfg["opencl"] == {"global_sizes": [81920, 163840, 327680], "local_sizes": [512, 1024]}
    assert cfg["working_set"]["growth"] == 1.3
    assert any("ERT_OCL_SIZES" in n and "3 listed global:local pairs" in n for n in notes)


def test_stdout_unknown_key_and_bad_set(tmp_path):
    src = tmp_path / "config.ert"
    src.write_text("# test\nERT_FLOPS 1,2,3,6-8\nERT_FROBNICATE yes\n")
    proc = run_cmd("ert", "import-ert-config", src)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["flops_per_element"] == [1, 2, 8]
    assert "ERT_FROBNICATE (line 3): unknown ERT key" in proc.stderr
    assert "3, 6, 7 dropped" in proc.stderr
    src.write_text("ERT_FLOPS 1,x\n")
    out = tmp_path / "out.yaml"
    proc = run_cmd("ert", "import-ert-config", src, "-o", out)
    lines = stderr_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and "line 1: not an integer set" in lines[0]
    assert not out.exists()


def test_integer_sets():
    assert parse_int_set("8", path="f", key="k") == [8]
    assert parse_int_set("1,2,6-8", path="f", key="k") == [1, 2, 6, 7, 8]
    with pytest.raises(ErtError):
        parse_int_set("8-1", path="f", key="k")


@pytest.mark.parametrize("lines, key", [
    (["ERT_GPU True", "ERT_HIP True", "ERT_GPU_BLOCKS 128", "ERT_GPU_THREADS 256"], "ERT_HIP (line 2)"),
    (["ERT_SYCL True", "ERT_SYCL_SIZES 131072:128", "ERT_OPENMP_THREADS 1"], "ERT_SYCL (line 1)"),
])
def test_hip_and_sycl_configs_refused_never_a_cpu_run(tmp_path, lines, key):
    """ERT's HIP/SYCL GPU configs: one-line refusal, never backend auto or a 1-thread numba-cpu sweep."""
    from ert.interop import import_ert as _ie
    from ert.errors import ErtError as _Err

    path = tmp_path / "config.gpu"
    path.write_text("\n".join(["ERT_RESULTS Results.x", "ERT_PRECISION FP64"][:0] + lines) + "\n")
    with pytest.raises(_Err, match="targets a GPU that ert drives through CUDA/OpenCL only") as info:
        _ie.convert(path.read_text(), path=path)
    assert info.value.key == key
