"""The CUDA backend's host logic without a GPU: device facts, rated peaks, geometry, rank-to-GPU, accounting, replay, checks, calibration.

No GPU can run here, so ``EmulatedGpu`` stands in for ``CupyDevice`` (the
only layer that needs one): it runs the kernel's arithmetic in numpy, element
by element as ert_rw / ert_ro define it, and its timer is a formula.
Everything above that layer, ``CudaBackend`` and the driver included, is the
real code.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ert.backends import cuda as cuda_mod
from ert.backends import cuda_host as host
from ert.comm import SerialComm
from ert.config import RunConfig, Timing, from_dict
from ert.driver import calibrate, measure
from ert.errors import ErtError
from ert.spec import KernelSpec

# Device properties as CuPy returns them, with NVIDIA's published figures:
# V100 SXM2 16 GB (Volta whitepaper; deviceQuery): 80 SMs, 1530 MHz boost,
# 877 MHz HBM2 on a 4096-bit bus (900 GB/s), 6 MiB L2.
V100 = {"name": b"Tesla V100-SXM2-16GB", "major": 7, "minor": 0, "multiProcessorCount": 80,
        "clockRate": 1530000, "memoryClockRate": 877000, "memoryBusWidth": 4096, "l2CacheSize": 6 << 20,
        "totalGlobalMem": 16945512448, "maxThreadsPerMultiProcessor": 2048, "sharedMemPerMultiprocessor": 98304}
# A100 SXM4 40 GB (Ampere whitepaper): 108 SMs, 1410 MHz, 1215 MHz HBM2 on
# 5120 bits (1555 GB/s), 40 MiB L2.  Recorded the CUDA 13 way: no clocks in
# the properties, they come from cudaDeviceGetAttribute.
A100 = {"name": "NVIDIA A100-SXM4-40GB", "major": 8, "minor": 0, "multiProcessorCount": 108,
        "memoryBusWidth": 5120, "l2CacheSize": 40 << 20, "totalGlobalMem": 42298834944,
        "maxThreadsPerMultiProcessor": 2048, "sharedMemPerMultiprocessor": 167936}
A100_ATTRIBUTES = {"clock_rate_khz": 1410000, "memory_clock_rate_khz": 1215000}
# H100 SXM5 80 GB (Hopper whitepaper): 132 SMs, 1980 MHz, HBM3 2619 MHz on
# 5120 bits (3.35 TB/s), 50 MiB L2.
H100 = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "multiProcessorCount": 132,
        "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 5120, "l2CacheSize": 50 << 20,
        "totalGlobalMem": 85045870592, "maxThreadsPerMultiProcessor": 2048, "sharedMemPerMultiprocessor": 233472}


def _rated(info, precision, fma=True):
    return next(c for c in host.rated_peaks(info)["compute"] if c["precision"] == precision and c["fma"] == fma)


# ----------------------------------------------------------------------------- device facts
def test_host_logic_no_gpu_properties_give_the_published_rated_peaks():
    v100 = host.device_info(V100)
    a100 = host.device_info(A100, attributes=A100_ATTRIBUTES)
    h100 = host.device_info(H100)
    # NVIDIA's non-tensor peaks, TFLOP/s: V100 7.8 / 15.7 / 31.4, A100 9.7 / 19.5 / 78, H100 33.5 / 66.9 / 133.8.
    for info, peaks in ((v100, (7.8, 15.7, 31.4)), (a100, (9.7, 19.5, 78.0)), (h100, (33.5, 66.9, 133.8))):
        for precision, tflops in zip(("fp64", "fp32", "fp16"), peaks):
            got = _rated(info, precision)["gflops_per_s"] / 1e3
            assert got == pytest.approx(tflops, rel=0.01), (info.name, precision)
            assert _rated(info, precision, fma=False)["gflops_per_s"] == pytest.approx(got * 1e3 / 2, abs=0.1)
    # HBM: 900, 1555 and 3352 GB/s.
    for info, gbs in ((v100, 898.0), (a100, 1555.2), (h100, 3352.3)):
        memory = host.rated_peaks(info)["memory"][0]
        assert memory["level"] == "HBM" and memory["gbytes_per_s"] == pytest.approx(gbs, abs=0.1)
        assert "bus" in memory["derivation"]
    assert "80 SMs x 1530 MHz x 64 FP64 FLOP/cycle/SM" in _rated(v100, "fp64")["derivation"]


def test_host_logic_no_gpu_clock_sources_cuda13_attributes_and_nvml():
    a100 = host.device_info(A100, attributes=A100_ATTRIBUTES)
    assert a100.sm_clock_khz == 1410000 and a100.sources["clockRate"] == "device attribute"
    from_nvml = host.device_info(A100, nvml={"max_sm_clock_mhz": 1410, "max_memory_clock_mhz": 1215})
    assert from_nvml.sm_clock_khz == 1410000 and from_nvml.memory_clock_khz == 1215000
    assert from_nvml.sources["memoryClockRate"] == "NVML maximum clock"
    unknown = host.device_info(A100)
    assert unknown.sm_clock_khz == 0 and _rated(unknown, "fp64")["gflops_per_s"] is None
    assert host.rated_peaks(unknown)["memory"][0]["gbytes_per_s"] is None


def test_host_logic_no_gpu_caches_memory_name_and_unknown_architectures():
    v100 = host.device_info(V100)
    assert v100.name == "Tesla V100-SXM2-16GB" and v100.arch == "sm_70"
    assert host.caches(v100) == [
        {"level": 1, "kind": "Data", "size_bytes": 80 * (128 << 10), "shared_cpu_count": 1},
        {"level": 2, "kind": "Unified", "size_bytes": 6 << 20, "shared_cpu_count": 1}]
    # An RTX 4090 (sm_89, GDDR6X on 384 bits) is DRAM; a future sm_120 has no recorded FLOP rate.
    gddr = host.device_info({**H100, "major": 8, "minor": 9, "memoryBusWidth": 384})
    assert gddr.memory_name == "DRAM"
    future = host.device_info({**H100, "major": 12, "minor": 0})
    assert _rated(future, "fp32")["gflops_per_s"] is None and "sm_120" in _rated(future, "fp32")["derivation"]
    assert future.l1_per_sm_bytes == H100["sharedMemPerMultiprocessor"]


# ----------------------------------------------------------------------------- geometry and ranks
def test_host_logic_no_gpu_default_geometry_is_erts_v100_set_scaled_to_the_sm_count():
    blocks, threads, allowed = host.default_geometry(host.device_info(V100))
    assert blocks == [80, 160, 320, 640, 1280, 2560] and threads == [64, 128, 256, 512, 1024]
    assert allowed == [163840]  # ERT_BLOCKS_THREADS of ERT's V100 config
    got = host.launches(n_units=1 << 20, blocks=blocks, threads_per_block=threads, blocks_threads=allowed)
    assert got == [{"blocks": 160, "threads": 1024}, {"blocks": 320, "threads": 512}, {"blocks": 640, "threads": 256},
                   {"blocks": 1280, "threads": 128}, {"blocks": 2560, "threads": 64}]
    h_blocks, _, h_allowed = host.default_geometry(host.device_info(H100))
    assert h_blocks[0] == 132 and h_allowed == [132 * 2048]


def test_host_logic_no_gpu_launches_skip_geometries_larger_than_the_working_set():
    blocks, threads = [80, 160, 320], [64, 128, 256]
    every = host.launches(n_units=30000, blocks=blocks, threads_per_block=threads, blocks_threads=None)
    assert all(g["blocks"] * g["threads"] <= 30000 for g in every)
    assert {"blocks": 80, "threads": 256} in every and {"blocks": 160, "threads": 256} not in every
    # Smaller than every geometry: one unit per thread, for each block size that fits.
    small = host.launches(n_units=1000, blocks=blocks, threads_per_block=threads, blocks_threads=[163840])
    assert small == [{"blocks": 15, "threads": 64}, {"blocks": 7, "threads": 128}, {"blocks": 3, "threads": 256}]
    assert host.launches(n_units=10, blocks=blocks, threads_per_block=threads, blocks_threads=None) == \
        [{"blocks": 1, "threads": 10}]


def test_host_logic_no_gpu_backend_geometry_from_config_and_fp16_units():
    dev = EmulatedGpu(V100)
    backend = cuda_mod.CudaBackend(config=RunConfig(), device=dev)
    # FP16 runs half2 units: 2**21 halves are 2**20 units, the same geometries as 2**20 floats.
    assert backend.launches(KernelSpec("fp16", 2, True), 1 << 21) == backend.launches(KernelSpec("fp32", 2, True), 1 << 20)
    assert backend.granule_elements(KernelSpec("fp16", 2, True)) == 2
    assert backend.granule_elements(KernelSpec("fp64", 2, True)) == 1
    with pytest.raises(ValueError):
        backend.launches(KernelSpec("fp16", 2, True), 1001)
    cfg = from_dict({"cuda": {"blocks": [80, 160], "threads_per_block": [256, 512], "blocks_threads": 81920}})
    custom = cuda_mod.CudaBackend(config=cfg, device=dev)
    assert custom.launches(KernelSpec("fp64", 1, False), 1 << 20) == [{"blocks": 160, "threads": 512}]
    listed = cuda_mod.CudaBackend(config=from_dict({"cuda": {"blocks": [80, 160]}}), device=dev)
    assert len(listed.launches(KernelSpec("fp64", 1, False), 1 << 20)) == 10  # no product constraint


@pytest.mark.parametrize("local_rank, local_size, visible, configured, want", [
    (0, 4, 4, None, 0), (3, 4, 4, None, 3),  # mpirun on a 4-GPU node: rank i -> GPU i
    (2, 4, 1, None, 0),                       # srun --gpus-per-task=1: each rank sees only its GPU
    (5, 8, 4, None, 1),                       # oversubscribed: ranks share GPUs (with a caveat)
    (1, 2, 4, 3, 3),                          # cuda.device fixes the GPU (with a caveat)
])
def test_host_logic_no_gpu_device_for_rank(local_rank, local_size, visible, configured, want):
    index, caveats = host.device_for_rank(local_rank=local_rank, local_size=local_size, visible=visible,
                                          configured=configured)
    assert index == want
    assert bool(caveats) == (local_size > visible or (configured is not None and local_size > 1))


def test_host_logic_no_gpu_device_for_rank_refuses_a_missing_gpu():
    with pytest.raises(ErtError, match="device 4 does not exist"):
        host.device_for_rank(local_rank=0, local_size=1, visible=4, configured=4)
    with pytest.raises(ErtError):
        host.device_for_rank(local_rank=0, local_size=1, visible=0, configured=None)


# ----------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("precision", ["fp64", "fp32", "fp16"])
@pytest.mark.parametrize("flops", [1, 2, 64, 1024])
def test_host_logic_no_gpu_flops_and_bytes_match_the_kernel_instructions(precision, flops):
    """KernelSpec's per-element counts equal what the kernel issues per unit (FP16: half2 units of 2 elements)."""
    spec = KernelSpec(precision, flops, flops > 1)
    elements, trials = 4096, 3
    units = host.units_of(spec, elements)
    lanes = host.UNIT_ELEMENTS[precision]              # elements one instruction works on
    if flops == 1:
        flops_by_instructions = units * trials * 1 * lanes            # one add (__hadd2_rn: 2 adds)
    else:
        flops_by_instructions = units * trials * (flops // 2) * 2 * lanes  # K fmas (__hfma2: 4 FLOPs)
    assert spec.flops_done(elements=elements, trials=trials) == flops_by_instructions
    unit_bytes = spec.itemsize * lanes                  # 8, 4, or 4 (one half2)
    assert spec.bytes_moved(elements=elements, trials=trials) == units * trials * 2 * unit_bytes
    assert host.compile_defines(spec)[:2] == (f"-DERT_PRECISION={host.PRECISION_BITS[precision]}",
                                              f"-DERT_FLOPS={flops}")


# ----------------------------------------------------------------------------- the emulated GPU
class EmulatedGpu:
    """CupyDevice's interface over numpy: the kernels' arithmetic as the .cu file defines it, a formula for time."""

    def __init__(self, props, *, launch_seconds=5e-6, bytes_per_second=1e12, index=0):
        self.info = host.device_info(props)
        self.index = index
        self.nvml = {}
        self.versions = {"cupy": "emulated"}
        self.launch_seconds, self.bytes_per_second = launch_seconds, bytes_per_second
        self.launched: list[dict] = []

    def functions(self, spec):
        return ("ro" if spec.access == "ro" else "rw", spec), ("init", spec)

    def buffer(self, nbytes):
        return np.zeros(nbytes, dtype=np.uint8)

    def zeroed_sums(self, count):
        return np.zeros(count, dtype=np.float64)

    def launch(self, function, *, blocks, threads, args):
        kind, spec = function
        dtype = host.NUMPY_DTYPE[spec.precision]
        lanes = host.UNIT_ELEMENTS[spec.precision]
        data, n_units = args[0], int(args[1])
        values = data[:n_units * lanes * spec.itemsize].view(dtype)  # element view; half2 ops are lane-wise
        if kind == "init":
            values[:] = 0.5 + (np.arange(values.size) % 16) * 0.0625
            return
        trials = int(args[2])
        self.launched.append({"blocks": blocks, "threads": threads, "trials": trials})
        if kind == "ro":
            stride = blocks * threads
            units = values.astype(np.float64).reshape(n_units, lanes).sum(axis=1)
            per_thread = np.bincount(np.arange(n_units) % stride, weights=units, minlength=stride)
            args[3][:stride] += per_thread * trials
            return
        offset, a, c = int(args[3]), dtype(args[4]), dtype(args[5])
        k_ops = spec.fma_ops_per_element
        for t in range(trials):
            ct = c if (offset + t) % 2 == 0 else -c
            if k_ops == 0:
                values[:] = values + ct
            for _ in range(k_ops):
                if spec.fma:
                    wide = np.longdouble if spec.precision == "fp64" else np.float64
                    values[:] = (values.astype(wide) * wide(a) + wide(ct)).astype(dtype)
                else:
                    values[:] = (values * a).astype(dtype) + ct

    def timed_launch(self, function, *, blocks, threads, args):
        self.launch(function, blocks=blocks, threads=threads, args=args)
        spec = function[1]
        bytes_per_trial = int(args[1]) * host.UNIT_ELEMENTS[spec.precision] * spec.bytes_per_element
        return self.launch_seconds + int(args[2]) * bytes_per_trial / self.bytes_per_second

    def read(self, array, lo, hi):
        return np.array(array[lo:hi])

    def close(self):
        pass


def _prepared(spec, elements, props=V100, **kw):
    backend = cuda_mod.CudaBackend(config=RunConfig(), device=EmulatedGpu(props, **kw))
    launch = backend.launches(spec, elements)[-1]
    backend.prepare(spec, elements_per_thread=elements, launch=launch)
    return backend


ALL_KINDS = [KernelSpec(p, f, fma, "rw") for p in ("fp64", "fp32", "fp16")
             for f, fma in ((1, False), (2, True), (2, False), (16, True), (16, False))] + \
            [KernelSpec(p, 1, False, "ro") for p in ("fp64", "fp32", "fp16")]


@pytest.mark.parametrize("spec", ALL_KINDS, ids=lambda s: s.key)
def test_host_logic_no_gpu_replay_matches_the_kernel_arithmetic_bit_for_bit(spec):
    # 1000 elements (FP16: 500 half2), trials split over launches so trial_offset carries the parity.
    backend = _prepared(spec, 1000)
    for trials in (1, 6, 40):
        backend.run(trials)
    result = backend.check()
    assert result.ok, result.detail
    if spec.access == "rw":
        got = backend._dev.read(backend._data, 0, 32 * spec.itemsize).view(host.NUMPY_DTYPE[spec.precision])
        want = host.replay_rw(precision=spec.precision, flops_per_element=spec.flops_per_element, fma=spec.fma,
                              trials=48)  # 1 warm-up + 47
        assert np.array_equal(got[:16], want) and np.array_equal(got[16:32], want)
        assert result.detail == "max rel err 0"


def test_host_logic_no_gpu_replay_parity_and_long_runs():
    odd = host.replay_rw(precision="fp32", flops_per_element=2, fma=False, trials=1001)
    even = host.replay_rw(precision="fp32", flops_per_element=2, fma=False, trials=1002)
    assert not np.array_equal(odd, even)
    # The cycle jump: 10**12 trials agree with the same parity a few thousand trials in.
    assert np.array_equal(host.replay_rw(precision="fp32", flops_per_element=2, fma=False, trials=10**12 + 2), even)


@pytest.mark.parametrize("spec", [KernelSpec("fp64", 8, True), KernelSpec("fp16", 1, False),
                                  KernelSpec("fp32", 1, False, "ro")], ids=lambda s: s.key)
def test_host_logic_no_gpu_check_catches_a_wrong_element_nan_and_a_lost_trial(spec):
    backend = _prepared(spec, 2048)
    backend.run(5)
    assert backend.check().ok
    dtype = host.NUMPY_DTYPE[spec.precision]
    if spec.access == "ro":
        backend._sums[7] += 1.0
        result = backend.check()
        assert not result.ok and "thread 7" in result.detail
        return
    values = backend._data.view(dtype)
    saved = values[1234]
    values[1234] = np.nan
    assert not backend.check().ok and "element 1234" in backend.check().detail
    values[1234] = saved
    assert backend.check().ok
    backend._trials_done += 1  # the device ran one trial fewer than the host counted
    assert not backend.check().ok


def test_host_logic_no_gpu_ro_expected_sums_any_stride():
    values = host.unit_values("fp32")
    for n_units, stride in ((1000, 64), (1000, 100), (37, 64)):
        u = np.arange(n_units)
        want = np.bincount(u % stride, weights=values[u % 16], minlength=stride) * 3
        got = host.ro_expected_sums(precision="fp32", n_units=n_units, stride=stride, trials=3)
        assert np.array_equal(got, want)
    # FP16 units hold two halves: 0.5 + 0.5625, 0.625 + 0.6875, ...
    assert host.unit_values("fp16")[0] == 1.0625 and host.unit_values("fp16")[8] == 1.0625


# ----------------------------------------------------------------------------- calibration and timing
def test_host_logic_no_gpu_trials_inside_one_launch_keep_launch_overhead_out_of_small_points():
    """A 16 KiB point whose trials take 164 ns each, with a 5 us launch.

    The driver doubles trials until one timed region (one launch) lasts
    min_seconds, so the launch is paid once per region: 0.1 % of it, where
    a launch per trial would be 97 % launch.
    """
    spec = KernelSpec("fp64", 1, False)
    backend = _prepared(spec, 1024, bytes_per_second=1e11, launch_seconds=5e-6)
    trials, seconds = calibrate(backend, SerialComm(), min_seconds=0.005)
    assert seconds >= 0.005 and trials >= 2 ** 14
    assert 5e-6 / seconds < 1e-3
    m = measure(backend, SerialComm(), timing=Timing(min_seconds=0.005, repeats=3, max_remeasure=0))
    assert min(m.samples) >= 0.0025 and not m.noisy
    # Every timed region was one launch of all its trials, and the output is still right.
    assert [launch["trials"] for launch in backend._dev.launched[-3:]] == [m.trials] * 3
    assert backend.check().ok


def test_host_logic_no_gpu_describe_feeds_the_analysis():
    backend = cuda_mod.CudaBackend(config=RunConfig(), device=EmulatedGpu(H100), local_rank=1, local_size=2)
    info = backend.describe()
    assert info["backend"] == "cuda" and info["device"].startswith("NVIDIA H100")
    assert info["memory_name"] == "HBM" and [c["level"] for c in info["caches"]] == [1, 2]
    assert info["rated"]["memory"][0]["gbytes_per_s"] == pytest.approx(3352.3, abs=0.1)
    assert info["local_rank"] == 1 and info["threads"] == 1
    assert any("write-through" in c for c in info["caveats"])


def test_host_logic_no_gpu_probe_without_a_gpu_is_one_line_and_never_raises():
    ok, reason, detail = cuda_mod.probe()
    if ok:
        pytest.skip("a GPU is present: the unavailable path cannot be seen here")
    assert reason and "\n" not in reason and "Traceback" not in reason
    assert detail.get("accelerators", 0) == 0


def test_host_logic_no_gpu_ert_backends_shows_cuda_unavailable_in_one_line():
    from conftest import run_cmd

    proc = run_cmd("ert", "backends")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("cuda "))
    if "unavailable" not in line:
        pytest.skip("a GPU is present")
    assert line.split()[1] == "unavailable" and len(line.split("unavailable", 1)[1].strip()) > 10
    assert "Traceback" not in proc.stdout + proc.stderr


def test_host_logic_no_gpu_report_puts_each_ceiling_beside_its_rated_peak():
    from ert.report import format_ceilings

    backend = cuda_mod.CudaBackend(config=RunConfig(), device=EmulatedGpu(V100))
    doc = {"metadata": {"backend_info": backend.describe()},
           "ceilings": {"memory": [{"level": "L2", "gbytes_per_s": 2100.0, "precision": "fp64", "access": "rw"},
                                   {"level": "HBM", "gbytes_per_s": 810.0, "precision": "fp64", "access": "rw"}],
                        "compute": [{"precision": "fp64", "fma": True, "gflops_per_s": 7400.0}]}}
    text = format_ceilings(doc)
    fp64 = next(line for line in text.splitlines() if line.strip().startswith("fp64 FMA GFLOP/s"))
    assert "7400" in fp64 and "7834" in fp64 and "94%" in fp64 and "80 SMs x 1530 MHz" in fp64
    hbm = next(line for line in text.splitlines() if line.strip().startswith("HBM GB/s"))
    assert "810.0" in hbm and "898.0" in hbm and "90%" in hbm
    assert "no-FMA GFLOP/s" not in text  # no measured no-FMA ceiling: no row
