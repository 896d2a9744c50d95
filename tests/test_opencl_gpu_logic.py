"""The OpenCL backend's GPU decisions that need no GPU: cache hints and memory name by vendor, device
preference, the FP_CONTRACT OFF check on real PTX, and local sizes against the kernel's own limit; and its
host logic that needs no device at all (the --device selector text, the kernel source shipped)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ert.backends import cuda_host
from ert.hardware import nvidia
from ert.backends.opencl import contract_warning, usable_local_sizes
from ert.backends.opencl_devices import fused_multiply_adds, gpu_cache_hints, preferred_order

H100 = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "multiProcessorCount": 132,
        "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 5120, "l2CacheSize": 50 << 20,
        "totalGlobalMem": 85045870592, "maxThreadsPerMultiProcessor": 2048}
# What NVIDIA's OpenCL reports as CL_DEVICE_GLOBAL_MEM_CACHE_SIZE on an H100: every SM's L1 summed.
NVIDIA_REPORTED = 132 * 256 * 1024


def test_nvidia_global_mem_cache_is_the_summed_l1_not_the_l2():
    info = cuda_host.device_info(H100)
    caches, memory = gpu_cache_hints(vendor="NVIDIA Corporation", global_mem_cache_bytes=NVIDIA_REPORTED,
                                     host_unified=False,
                                     cuda_facts={"l2_bytes": info.l2_bytes, "memory_bus_bits": info.memory_bus_bits})
    # The same hints and memory name as the cuda backend gives the same card.
    assert caches == cuda_host.caches(info)
    assert memory == info.memory_name == "HBM"
    # Without CuPy to ask: the L1 only (read-only curves), the memory's kind unknown.
    caches, memory = gpu_cache_hints(vendor="NVIDIA Corporation", global_mem_cache_bytes=NVIDIA_REPORTED,
                                     host_unified=False)
    assert caches == [{"level": 1, "kind": "Data", "size_bytes": NVIDIA_REPORTED, "shared_cpu_count": 1,
                       "access": ["ro"]}]
    assert memory == "DRAM"


def test_other_vendors_report_their_last_level_cache_and_memory_is_named_as_on_cuda():
    caches, memory = gpu_cache_hints(vendor="Advanced Micro Devices, Inc.", global_mem_cache_bytes=8 << 20,
                                     host_unified=False)
    assert caches == [{"level": 2, "kind": "Unified", "size_bytes": 8 << 20, "shared_cpu_count": 1}]
    assert memory == "DRAM" == nvidia.memory_name(None)
    assert gpu_cache_hints(vendor="Intel(R) Corporation", global_mem_cache_bytes=0, host_unified=True) == ([], "DRAM")
    assert nvidia.memory_name(384) == "DRAM" and nvidia.memory_name(4096) == "HBM"
    assert nvidia.memory_name(4096, host_unified=True) == "DRAM"


class _Device:
    """A device for the ordering rule only: a name and the type bits (no GPU can run here)."""

    def __init__(self, name, kind):
        import pyopencl as cl

        self.name = name
        self.type = {"cpu": cl.device_type.CPU, "gpu": cl.device_type.GPU,
                     "accelerator": cl.device_type.ACCELERATOR}[kind]


def test_gpus_and_accelerators_are_preferred_over_cpu_devices():
    pytest.importorskip("pyopencl")
    found = [(0, 0, _Device("pthread-EPYC", "cpu")), (1, 0, _Device("NVIDIA H100", "gpu")),
             (1, 1, _Device("NVIDIA H100", "gpu")), (2, 0, _Device("FPGA", "accelerator"))]
    order = preferred_order(found)
    assert [(p, d) for p, d, _ in order] == [(1, 0), (1, 1), (2, 0), (0, 0)]
    assert preferred_order(found[:1]) == found[:1]


def test_ranks_spread_over_the_gpus_only_and_share_one_cpu_driver():
    pytest.importorskip("pyopencl")
    from ert.backends.opencl_devices import spread_over

    cpu_debian, cpu_pip = _Device("pthread-EPYC", "cpu"), _Device("pthread-EPYC", "cpu")
    gpu0, gpu1 = _Device("NVIDIA H100", "gpu"), _Device("NVIDIA H100", "gpu")
    node = [(0, 0, cpu_debian), (1, 0, gpu0), (1, 1, gpu1), (2, 0, cpu_pip)]
    # 4 ranks on a 2-GPU node: two per GPU, none on PoCL's CPU device listed after them.
    picked = [spread_over(node, rank)[0][2] for rank in range(4)]
    assert picked == [gpu0, gpu1, gpu0, gpu1]
    assert "modulo 2 matching gpu" in spread_over(node, 3)[1]
    # A CPU listed by two drivers is one CPU: every rank takes the first driver's device.
    cpus = [(0, 0, cpu_debian), (2, 0, cpu_pip)]
    assert {id(spread_over(cpus, rank)[0][2]) for rank in range(3)} == {id(cpu_debian)}
    assert "2 CPU driver(s)" in spread_over(cpus, 1)[1]


NVCC = shutil.which("nvcc")
KERNEL = Path(__file__).resolve().parents[1] / "kernels" / cuda_host.KERNEL_FILE


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: no PTX to read")
def test_fused_multiply_adds_are_counted_in_real_ptx(tmp_path):
    """PTX is what NVIDIA's OpenCL hands out as the program binary; nvcc writes the same language."""
    counts = {}
    for fma in (0, 1):
        out = tmp_path / f"{fma}.ptx"
        subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-std=c++17", "-DERT_PRECISION=32", "-DERT_FLOPS=8",
                        f"-DERT_FMA={fma}", str(KERNEL), "-o", str(out)], check=True, capture_output=True)
        counts[fma] = fused_multiply_adds(out.read_bytes())
    assert counts[0] == 0 and counts[1] >= 4
    assert fused_multiply_adds(b"\x7fELF not a readable binary") is None
    assert fused_multiply_adds(b"BC\xc0\xde....llvm.fmuladd.v8f64....") == 1
    assert "fp32 no-FMA ceiling is not one" in contract_warning("fp32", 12)


def test_local_sizes_are_limited_by_the_kernel_not_the_device():
    # A device allowing 1024 work-items per group, a kernel whose registers allow 256.
    assert usable_local_sizes([64, 256, 512, 1024], 256) == [64, 256]
    assert usable_local_sizes([1024], 256) == []


class _Platform:
    def __init__(self, name, vendor):
        self.name, self.vendor = name, vendor


class _BuildDevice:
    """A device as build_failure reads it: its platform's name and vendor."""

    def __init__(self, platform, vendor):
        self.platform = _Platform(platform, vendor)


# PyOpenCL's exception text for a failed build, as PoCL 3.0 on AMD Zen 5 and NVIDIA's driver give it.
POCL_ZEN5 = """clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE

Build on <pyopencl.Device 'pthread-AMD EPYC' on 'Portable Computing Language' at 0x5651>:

error: unknown target CPU 'generic'
Device pthread-AMD EPYC failed to build the program

(options: -DERT_BITS=64 -I /venv/pyopencl/cl)"""
NVIDIA_LOG = """clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE

Build on <pyopencl.Device 'NVIDIA H100 80GB HBM3' on 'NVIDIA CUDA' at 0x1>:

<kernel>:1:47: error: use of undeclared identifier 'y'
__kernel void k(__global float *x) { x[0] = y; }

(options: -I /venv/pyopencl/cl)"""


def test_build_failures_are_read_down_to_their_first_error_line():
    from ert.backends.opencl_devices import build_failure, first_error_line

    assert first_error_line(POCL_ZEN5) == "error: unknown target CPU 'generic'"
    assert build_failure(_BuildDevice("Portable Computing Language", "The pocl project"), POCL_ZEN5) == \
        "PoCL: unknown target CPU 'generic'; its LLVM does not know this CPU"
    assert first_error_line(NVIDIA_LOG) == "<kernel>:1:47: error: use of undeclared identifier 'y'"
    assert build_failure(_BuildDevice("NVIDIA CUDA", "NVIDIA Corporation"), NVIDIA_LOG) == \
        "NVIDIA CUDA: <kernel>:1:47: error: use of undeclared identifier 'y'"
    # A log without an error line: its first line after PyOpenCL's header; no log: the message itself.
    assert first_error_line("clBuildProgram failed\n\nBuild on <dev>:\n\nsomething broke\n") == "something broke"
    assert first_error_line("clBuildProgram failed: OUT_OF_HOST_MEMORY") == "clBuildProgram failed: OUT_OF_HOST_MEMORY"
    assert first_error_line("") == "no build log"


def test_selector_text_for_the_command_line():
    from ert.backends.opencl_devices import parse_selector

    assert parse_selector("gpu") == {"device_type": "gpu"}
    assert parse_selector("1") == {"device": 1}
    assert parse_selector("pocl:EPYC") == {"platform": "pocl", "device": "EPYC"}
    assert parse_selector("0:") == {"platform": 0, "device": None}


def test_kernel_source_ships_in_the_package():
    from ert.backends.opencl import kernel_source

    text = kernel_source()
    assert "#pragma OPENCL FP_CONTRACT OFF" in text and "__kernel void ert_rw" in text
