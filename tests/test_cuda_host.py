"""The CUDA backend's host logic without a GPU: device facts, rated peaks, geometry, rank-to-GPU, accounting, replay, checks, calibration.

No GPU can run here, so ``EmulatedGpu`` stands in for ``CupyDevice`` (the
only layer that needs one): it runs the kernel's arithmetic in numpy, element
by element as ert_rw / ert_ro define it, and its timer is a formula.
Everything above that layer, ``CudaBackend`` and the driver included, is the
real code.
"""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import numpy as np
import pytest

from ert.backends import cuda as cuda_mod
from ert.backends import cuda_device
from ert.backends import cuda_host as host
from ert.hardware import nvidia
from ert.backends.check import NUMPY_DTYPE, replay_rw
from ert.measure.comm import SerialComm
from ert.config.schema import RunConfig, Timing, from_dict
from ert.measure.driver import calibrate, measure
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
    return next(c for c in nvidia.rated_peaks(info)["compute"] if c["precision"] == precision and c["fma"] == fma)


# ----------------------------------------------------------------------------- device facts
def test_properties_give_the_published_rated_peaks():
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
        memory = nvidia.rated_peaks(info)["memory"][0]
        assert memory["level"] == "HBM" and memory["gbytes_per_s"] == pytest.approx(gbs, abs=0.1)
        assert "bus" in memory["derivation"]
    assert "80 SMs x 1530 MHz x 64 FP64 FLOP/cycle/SM" in _rated(v100, "fp64")["derivation"]


def test_clock_sources_cuda13_attributes_and_nvml():
    a100 = host.device_info(A100, attributes=A100_ATTRIBUTES)
    assert a100.sm_clock_khz == 1410000 and a100.sources["clockRate"] == "device attribute"
    from_nvml = host.device_info(A100, nvml={"max_sm_clock_mhz": 1410, "max_memory_clock_mhz": 1215})
    assert from_nvml.sm_clock_khz == 1410000 and from_nvml.memory_clock_khz == 1215000
    assert from_nvml.sources["memoryClockRate"] == "NVML maximum clock"
    unknown = host.device_info(A100)
    assert unknown.sm_clock_khz == 0 and _rated(unknown, "fp64")["gflops_per_s"] is None
    assert nvidia.rated_peaks(unknown)["memory"][0]["gbytes_per_s"] is None


def test_caches_memory_name_and_unknown_architectures():
    v100 = host.device_info(V100)
    assert v100.name == "Tesla V100-SXM2-16GB" and v100.arch == "sm_70"
    assert host.caches(v100) == [
        {"level": 1, "kind": "Data", "size_bytes": 80 * (128 << 10), "shared_cpu_count": 1, "access": ["ro"]},
        {"level": 2, "kind": "Unified", "size_bytes": 6 << 20, "shared_cpu_count": 1}]
    # An RTX 4090 (sm_89, GDDR6X on 384 bits) is DRAM; a future sm_120 has no recorded FLOP rate.
    gddr = host.device_info({**H100, "major": 8, "minor": 9, "memoryBusWidth": 384})
    assert gddr.memory_name == "DRAM"
    future = host.device_info({**H100, "major": 12, "minor": 0})
    assert _rated(future, "fp32")["gflops_per_s"] is None and "sm_120" in _rated(future, "fp32")["derivation"]
    assert future.l1_per_sm_bytes == H100["sharedMemPerMultiprocessor"]


# ----------------------------------------------------------------------------- geometry and ranks
# A10 (GA102, sm_86): 72 SMs of 1536 threads and 16 resident blocks, 6 MiB L2, GDDR6 on 384 bits.
A10 = {"name": "NVIDIA A10", "major": 8, "minor": 6, "multiProcessorCount": 72, "clockRate": 1695000,
       "memoryClockRate": 6251000, "memoryBusWidth": 384, "l2CacheSize": 6 << 20, "totalGlobalMem": 23673509888,
       "maxThreadsPerMultiProcessor": 1536, "sharedMemPerMultiprocessor": 102400, "maxBlocksPerMultiProcessor": 16}


def _units_per_thread(n_units, launch):
    stride = launch["blocks"] * launch["threads"]
    work = (n_units - np.arange(stride) + stride - 1) // stride
    return work


def test_default_geometry_is_erts_v100_set_scaled_to_the_sm_count():
    pairs = host.default_geometry(host.device_info(V100))
    # ERT's V100 set: ERT_BLOCKS_THREADS 163840 = 80 SMs x 2048 at every block size.
    assert pairs == [(2560, 64), (1280, 128), (640, 256), (320, 512), (160, 1024)]
    h100 = host.default_geometry(host.device_info(H100))
    assert {b * t for b, t in h100} == {132 * 2048}


@pytest.mark.parametrize("props", [A10, {**A10, "major": 8, "minor": 9, "maxBlocksPerMultiProcessor": 24},
                                   {**A10, "major": 12, "minor": 0}], ids=["sm_86", "sm_89", "sm_120"])
def test_1536_thread_gpus_get_a_full_wave_at_every_block_size(props):
    info = host.device_info(props)
    pairs = host.default_geometry(info)
    assert [t for _, t in pairs] == [64, 128, 256, 512, 1024]
    for blocks, threads in pairs:
        per_sm = blocks // info.sm_count
        assert blocks % info.sm_count == 0 and per_sm <= info.resident_blocks_per_sm
        assert per_sm * threads <= 1536 and (per_sm * threads == 1536 or per_sm == info.resident_blocks_per_sm
                                             or threads == 1024)
    # A 1 GiB FP64 set: never the one-unit-per-thread fallback (a float64 per unit on the device).
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(props))
    for launch in backend.launches(KernelSpec("fp64", 1, False), 1 << 27):
        assert launch["blocks"] * launch["threads"] <= info.sm_count * 1536


def test_launches_balance_the_work_and_never_exceed_the_geometry():
    pairs = host.default_geometry(host.device_info(V100))
    for n_units in (1000, 163840, 163841, 200000, 327679, 1 << 20, 12345677):
        got = host.launches(n_units=n_units, pairs=pairs)
        assert len(got) == (5 if n_units >= 1024 else 4)
        for launch in got:
            work = _units_per_thread(n_units, launch)
            m = work.max()
            assert launch["blocks"] * launch["threads"] <= 163840
            assert m == -(-n_units // 163840)           # no more units per thread than the full wave needs
            assert (work == m).sum() >= work.size - m * launch["threads"]  # all but a block's worth do m
    # Smaller than every geometry: one unit per thread, block sizes above the set skipped.
    small = host.launches(n_units=1000, blocks=[80, 160, 320], threads_per_block=[64, 128, 256, 2048],
                          blocks_threads=[163840])
    assert small == [{"blocks": 1, "threads": 1000}]  # no pair has the product: nothing but the fallback
    every = host.launches(n_units=1000, blocks=[80, 160], threads_per_block=[64, 128, 256], blocks_threads=None)
    assert every == [{"blocks": 16, "threads": 64}, {"blocks": 8, "threads": 128}, {"blocks": 4, "threads": 256}]
    assert host.launches(n_units=10, blocks=[80], threads_per_block=[64], blocks_threads=None) == \
        [{"blocks": 1, "threads": 10}]


def test_backend_geometry_from_config_and_fp16_units():
    dev = EmulatedGpu(V100)
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=dev)
    # FP16 runs half2 units: 2**21 halves are 2**20 units, the same geometries as 2**20 floats.
    assert backend.launches(KernelSpec("fp16", 2, True), 1 << 21) == backend.launches(KernelSpec("fp32", 2, True), 1 << 20)
    assert backend.granule_elements(KernelSpec("fp16", 2, True)) == 2
    assert backend.granule_elements(KernelSpec("fp64", 2, True)) == 1
    with pytest.raises(ValueError):
        backend.launches(KernelSpec("fp16", 2, True), 1001)
    cfg = from_dict({"cuda": {"blocks": [80, 160], "threads_per_block": [256, 512], "blocks_threads": 81920}})
    custom = cuda_mod.CudaBackend(options=cfg.cuda, device=dev)
    # 160 x 512 is the one pair; 2**20 units take 13 rounds, so 158 blocks do them evenly.
    assert custom.launches(KernelSpec("fp64", 1, False), 1 << 20) == [{"blocks": 158, "threads": 512}]
    listed = cuda_mod.CudaBackend(options=from_dict({"cuda": {"blocks": [80, 160]}}).cuda, device=dev)
    assert len(listed.launches(KernelSpec("fp64", 1, False), 1 << 20)) == 10  # no product constraint


def _sweep_gbytes(backend, spec, units):
    """GB/s per working set at its best geometry (as the analysis keeps it), one trial per point."""
    out = []
    for n in units:
        best = 0.0
        for launch in backend.launches(spec, n):
            backend.prepare(spec, elements_per_thread=n, launch=launch)
            seconds = backend.run(1) - backend._dev.launch_seconds
            best = max(best, spec.bytes_moved(elements=n, trials=1) / seconds / 1e9)
        out.append(best)
    return np.array(out)


@pytest.mark.slow
def test_no_saw_tooth_along_the_low_end_of_the_l2_plateau():
    """FP64 read+write from one to four full waves at growth 1.05, on a GPU whose rounds are latency bound.

    With the grid fixed at one wave, the first n mod S threads did one unit
    more: just past S units, half the threads idled through a second round
    (down to 67 % here, 50 % on a GPU that needs every thread to saturate).
    Balanced launches keep every working set within a few percent of the
    plateau.
    """
    dev = EmulatedGpu(V100, latency_bound=True, launch_seconds=0.0, bytes_per_second=2e12)
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=dev)
    wave = 80 * 2048
    units = sorted({int(wave * 1.05 ** k) for k in range(0, 29)})
    gbytes = _sweep_gbytes(backend, KernelSpec("fp64", 1, False), units)
    assert gbytes.min() / gbytes.max() > 0.97, dict(zip(units, gbytes.round(0)))


def test_occupancy_is_recorded_per_point_and_defaults_are_one_wave():
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(H100, registers=32))
    spec = KernelSpec("fp64", 1, False)  # 2**20 units: more than a wave of 132 x 2048 threads
    for launch in backend.launches(spec, 1 << 20):
        backend.prepare(spec, elements_per_thread=1 << 20, launch=launch)
        occ = backend.point_info()["occupancy"]
        assert occ == {"resident_blocks_per_sm": 2048 // launch["threads"], "resident_threads_per_sm": 2048,
                       "waves": 1}
    # At 40 registers (the kernels before their launch bounds) the same geometry needs two waves.
    forty = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(H100, registers=40))
    launch = forty.launches(spec, 1 << 20)[0]
    forty.prepare(spec, elements_per_thread=1 << 20, launch=launch)
    assert forty.point_info()["occupancy"]["waves"] == 2


@pytest.mark.parametrize("local_rank, visible, configured, want", [
    (0, 4, None, 0), (3, 4, None, 3),  # mpirun on a 4-GPU node: rank i -> GPU i
    (2, 1, None, 0),                   # srun --gpus-per-task=1: each rank sees only its GPU
    (5, 4, None, 1),                   # oversubscribed
    (1, 4, 3, 3),                      # cuda.device fixes the GPU
])
def test_device_for_rank(local_rank, visible, configured, want):
    assert host.device_for_rank(local_rank=local_rank, visible=visible, configured=configured) == want


def test_device_for_rank_refuses_a_missing_gpu():
    with pytest.raises(ErtError, match="device 4 does not exist"):
        host.device_for_rank(local_rank=0, visible=4, configured=4)
    with pytest.raises(ErtError):
        host.device_for_rank(local_rank=0, visible=0, configured=None)


def test_sharing_is_decided_from_the_devices_the_ranks_hold():
    from ert.measure.comm import shared_device_warnings

    # srun --gpus-per-task=1: four ranks, each sees one GPU as index 0, all different.
    srun = [("n1", f"GPU-{k}") for k in range(4)]
    assert all(shared_device_warnings(srun, r) == [] for r in range(4))
    # Eight ranks on a 4-GPU node: each GPU driven by two ranks.
    over = [("n1", f"GPU-{r % 4}") for r in range(8)]
    assert shared_device_warnings(over, 5) == ["2 ranks on n1 share device GPU-1: each measures a share of it"]
    # The same ids on another node are other GPUs; no device (numba-cpu): nothing to share.
    assert shared_device_warnings([("n1", "GPU-0"), ("n2", "GPU-0")], 0) == []
    assert shared_device_warnings([("n1", None), ("n1", None)], 0) == []
    # The backend reports the id its device has (a UUID on a real GPU).
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(H100, device_id="GPU-1234"),
                                   local_rank=2, local_size=4)
    assert backend.device_id == "GPU-1234" and backend.warnings[-1].startswith("NVIDIA L1")
    assert host.device_info({**H100, "uuid": bytes(range(16))}).uuid == "GPU-000102030405060708090a0b0c0d0e0f"


# ----------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("precision", ["fp64", "fp32", "fp16"])
@pytest.mark.parametrize("flops", [1, 2, 64, 1024])
def test_flops_and_bytes_match_the_kernel_instructions(precision, flops):
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
    """CupyDevice's interface over numpy: the kernels' arithmetic as the .cu file defines it, a formula for time.

    Time: ``launch_seconds`` plus, per trial, the bytes over ``bytes_per_second``;
    with ``latency_bound`` a trial instead runs as the GPU does, in rounds: every
    resident thread loads its next unit each round, a round lasts at least the
    memory latency (one in which half the resident threads load one unit each
    just reaches full bandwidth), and threads beyond one wave run in later waves.
    """

    def __init__(self, props, *, launch_seconds=5e-6, bytes_per_second=1e12, index=0, registers=32,
                 latency_bound=False, clock_mhz=None, device_id=None):
        self.info = host.device_info(props)
        self.index = index
        self.nvml = {}
        self.versions = {"cupy": "emulated"}
        self.device_id = device_id or f"GPU-emulated-{index}"
        self.launch_seconds, self.bytes_per_second = launch_seconds, bytes_per_second
        self.registers, self.latency_bound = registers, latency_bound
        self.sm_clock_mhz = (lambda: clock_mhz) if clock_mhz else None
        self.launched: list[dict] = []
        self.bytes_read = 0
        self._old_buffer = None

    def functions(self, spec):
        return {"kernel": ("ro" if spec.access == "ro" else "rw", spec), "init": ("init", spec),
                "check": ("check", spec), "spin": ("spin", spec)}

    def buffer(self, nbytes):
        # As CupyDevice: the old buffer must be freeable before the new one is
        # allocated, so nobody else may still hold it.
        # A full collection only where reference counting has not freed it already (each costs ~0.1 s late in
        # a suite holding every test's objects).
        if self._old_buffer is not None and self._old_buffer() is not None:
            gc.collect()
            assert self._old_buffer() is None, "the previous buffer is still referenced during the allocation"
        array = np.zeros(nbytes, dtype=np.uint8)
        self._old_buffer = weakref.ref(array)
        return array

    def zeroed_sums(self, count):
        return np.zeros(count, dtype=np.float64)

    def occupancy(self, function, threads):
        by_registers = nvidia.REGISTERS_PER_SM // (self.registers * threads)
        return min(self.info.resident_blocks_per_sm, self.info.max_threads_per_sm // threads, by_registers)

    def spin(self, function, *, seconds):
        self.launched.append({"kind": "spin", "seconds": seconds})

    def check_rw(self, function, data, *, n_units, expected16, tolerance, blocks, threads):
        spec = function[1]
        values = data[:n_units * host.UNIT_ELEMENTS[spec.precision] * spec.itemsize].view(
            NUMPY_DTYPE[spec.precision]).astype(np.float64)
        want = np.asarray(expected16, dtype=np.float64)[np.arange(values.size) % 16]
        err = np.abs(values - want) / np.maximum(np.abs(want), 1.0)
        bad = ~(err <= tolerance)
        return int(bad.sum()), (int(np.argmax(bad)) if bad.any() else int(np.iinfo(np.uint64).max))

    def launch(self, function, *, blocks, threads, args):
        kind, spec = function
        dtype = NUMPY_DTYPE[spec.precision]
        lanes = host.UNIT_ELEMENTS[spec.precision]
        data, n_units = args[0], int(args[1])
        values = data[:n_units * lanes * spec.itemsize].view(dtype)  # element view; half2 ops are lane-wise
        if kind == "init":
            values[:] = 0.5 + (np.arange(values.size) % 16) * 0.0625
            return
        trials = int(args[2])
        self.launched.append({"kind": kind, "blocks": blocks, "threads": threads, "trials": trials})
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

    def trial_seconds(self, spec, *, n_units, blocks, threads):
        unit_bytes = host.UNIT_ELEMENTS[spec.precision] * spec.bytes_per_element
        if not self.latency_bound:
            return n_units * unit_bytes / self.bytes_per_second
        resident = self.occupancy(None, threads) * self.info.sm_count  # blocks per wave
        full = self.info.max_threads_per_sm * self.info.sm_count
        round_seconds = 0.5 * full * unit_bytes / self.bytes_per_second  # the memory latency
        stride = blocks * threads
        work = (n_units - np.arange(stride) + stride - 1) // stride       # units of each thread
        seconds = 0.0
        for first in range(0, blocks, resident):                          # wave by wave
            wave = work[first * threads:(first + resident) * threads]
            active = np.bincount(wave, minlength=int(wave.max()) + 1)[::-1].cumsum()[::-1][1:]  # per round
            seconds += float(np.maximum(round_seconds, active * unit_bytes / self.bytes_per_second).sum())
        return seconds

    def timed_launch(self, function, *, blocks, threads, args):
        self.launch(function, blocks=blocks, threads=threads, args=args)
        spec = function[1]
        return self.launch_seconds + int(args[2]) * self.trial_seconds(spec, n_units=int(args[1]), blocks=blocks,
                                                                       threads=threads)

    def read(self, array, lo, hi):
        self.bytes_read += (hi - lo) * array.itemsize
        return np.array(array[lo:hi])

    def write(self, array, lo, values):
        array[lo:lo + values.size] = values.astype(array.dtype)

    def close(self):
        pass


def _prepared(spec, elements, props=V100, **kw):
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(props, **kw))
    launch = backend.launches(spec, elements)[-1]
    backend.prepare(spec, elements_per_thread=elements, launch=launch)
    return backend


ALL_KINDS = [KernelSpec(p, f, fma, "rw") for p in ("fp64", "fp32", "fp16")
             for f, fma in ((1, False), (2, True), (2, False), (16, True), (16, False))] + \
            [KernelSpec(p, 1, False, "ro") for p in ("fp64", "fp32", "fp16")]


@pytest.mark.parametrize("spec", ALL_KINDS, ids=lambda s: s.key)
def test_replay_matches_the_kernel_arithmetic_bit_for_bit(spec):
    # 1000 elements (FP16: 500 half2), trials split over launches so trial_offset carries the parity.
    backend = _prepared(spec, 1000)
    for trials in (1, 6, 40):
        backend.run(trials)
    result = backend.check()
    assert result.ok, result.detail
    if spec.access == "rw":
        got = backend._dev.read(backend._data, 0, 32 * spec.itemsize).view(NUMPY_DTYPE[spec.precision])
        want = replay_rw(spec, trials=48)  # 1 warm-up + 47
        assert np.array_equal(got[:16], want) and np.array_equal(got[16:32], want)
        assert result.detail == "every element within 0 of the replay"


@pytest.mark.parametrize("spec", [KernelSpec("fp64", 8, True), KernelSpec("fp16", 1, False),
                                  KernelSpec("fp32", 1, False, "ro")], ids=lambda s: s.key)
def test_check_catches_a_wrong_element_nan_and_a_lost_trial(spec):
    backend = _prepared(spec, 2048)
    backend.run(5)
    assert backend.check().ok
    dtype = NUMPY_DTYPE[spec.precision]
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


def test_ro_expected_sums_any_stride():
    values = host.unit_values("fp32")
    for n_units, stride in ((1000, 64), (1000, 100), (37, 64)):
        u = np.arange(n_units)
        want = np.bincount(u % stride, weights=values[u % 16], minlength=stride) * 3
        got = host.ro_expected_sums(precision="fp32", n_units=n_units, stride=stride, trials=3)
        assert np.array_equal(got, want)
    # FP16 units hold two halves: 0.5 + 0.5625, 0.625 + 0.6875, ...
    assert host.unit_values("fp16")[0] == 1.0625 and host.unit_values("fp16")[8] == 1.0625


# ----------------------------------------------------------------------------- calibration and timing
def test_trials_inside_one_launch_keep_launch_overhead_out_of_small_points():
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


def test_describe_feeds_the_analysis():
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(H100), local_rank=1, local_size=2)
    info = backend.describe()
    assert info["backend"] == "cuda" and info["device"].startswith("NVIDIA H100")
    assert info["memory_name"] == "HBM" and [c["level"] for c in info["caches"]] == [1, 2]
    assert info["rated"]["memory"][0]["gbytes_per_s"] == pytest.approx(3352.3, abs=0.1)
    assert info["local_rank"] == 1 and info["threads"] == 1
    # Warnings are not metadata: the CLI gathers every rank's backend.warnings into rank_warnings.
    assert "caveats" not in info and any("write-through" in w for w in backend.warnings)


def test_probe_without_a_gpu_is_one_line_and_never_raises():
    ok, reason, detail = cuda_mod.probe()
    if ok:
        pytest.skip("a GPU is present: the unavailable path cannot be seen here")
    assert reason and "\n" not in reason and "Traceback" not in reason
    assert detail.get("accelerators", 0) == 0


def test_ert_backends_shows_cuda_unavailable_in_one_line():
    from conftest import run_cmd

    proc = run_cmd("ert", "backends")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("cuda "))
    if "unavailable" not in line:
        pytest.skip("a GPU is present")
    assert line.split()[1] == "unavailable" and len(line.split("unavailable", 1)[1].strip()) > 10
    assert "Traceback" not in proc.stdout + proc.stderr


def test_report_puts_each_ceiling_beside_its_rated_peak():
    from ert.consumers.terminal.report import format_ceilings

    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(V100))
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


# ----------------------------------------------------------------------------- the issue-13 review findings
def test_the_old_buffer_is_released_before_a_larger_one_is_allocated():
    # EmulatedGpu.buffer asserts that nobody (the backend's _data) still holds the previous buffer.
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(V100))
    spec = KernelSpec("fp64", 1, False)
    for elements in (1 << 12, 1 << 14, 1 << 16):
        backend.prepare(spec, elements_per_thread=elements)
        backend.run(1)
        assert backend.check().ok


class _Stream:
    """A stand-in for cupy.cuda.Stream (no GPU here): records which stream is current."""

    current = "legacy default stream"

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self._saved, _Stream.current = _Stream.current, self.name

    def __exit__(self, *exc):
        _Stream.current = self._saved

    def synchronize(self):
        pass


class _Array:
    def __init__(self, size, log):
        self.size, self.log = size, log
        log.append(("allocate", _Stream.current))

    def __getitem__(self, _):
        return self

    def fill(self, value):
        self.log.append(("fill", _Stream.current))


def test_read_only_sums_are_zeroed_on_the_kernels_stream():
    """CupyDevice.zeroed_sums must write on the non-blocking stream the kernels run on.

    The legacy default stream is not ordered with a non-blocking stream, so a
    zeroing there could land after a launch.  CuPy cannot run without a GPU;
    this stand-in records the current stream of each allocation and fill.
    """
    log: list = []
    fake = type("cupy", (), {"zeros": staticmethod(lambda count, dtype: _Array(count, log)), "float64": "f8"})
    dev = object.__new__(cuda_device.CupyDevice)
    dev._cp, dev._stream, dev._sums = fake, _Stream("kernel stream"), None
    dev.zeroed_sums(100)   # allocates zeros
    dev.zeroed_sums(50)    # reuses: fill(0)
    assert log == [("allocate", "kernel stream"), ("fill", "kernel stream")]


def test_install_names_the_cuda_headers():
    # A wheel-only CuPy needs the CUDA headers to compile (cupy-cuda13x[ctk], or a system toolkit).
    import tomllib
    from pathlib import Path

    assert "cupy-cuda13x[ctk]" in cuda_device.INSTALL_HINT and "toolkit" in cuda_device.INSTALL_HINT
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert any(dep.startswith("cupy-cuda13x[ctk]") for dep in project["project"]["optional-dependencies"]["cuda"])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "cupy-cuda13x[ctk]" in readme


def test_a_busy_launch_raises_the_clocks_before_timing_and_clocks_are_recorded(tmp_path):
    from ert.measure.comm import SerialComm
    from ert.measure.driver import run_sweep
    from ert.records.rawio import read_raw
    from ert.records.rawlog import RawLog
    from ert.measure.plan import plan

    dev = EmulatedGpu(V100, clock_mhz=1530)
    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=dev)
    cfg = from_dict({"backend": "cuda", "precisions": ["fp32"], "flops_per_element": [1], "access": ["rw", "ro"],
                     "working_set": {"min_bytes": 1 << 16, "max_bytes": 1 << 17, "growth": 2.0},
                     "timing": {"min_seconds": 1e-4, "repeats": 2, "max_remeasure": 0}, "threads": 1,
                     "weather": {"enabled": False}})  # the launches counted are the points' alone
    points = plan(cfg, workers=1, granule_elements_of=backend.granule_elements, launches_of=backend.launches)
    meta = {"ranks": 1, "threads_per_rank": 1, "config": cfg.to_dict()}  # the keys every reader of a header uses
    log = RawLog.open(tmp_path, header={"metadata": meta, "planned_points": 3}, writes=True)
    run_sweep(config=cfg, points=points[:3], log=log, backend=backend, comm=SerialComm())
    log.close()
    # Each point: warm-up launch (1 trial), then the busy launch, then the timed ones.
    kinds = [launch["kind"] if launch["kind"] == "spin" else launch["trials"] == 1 for launch in dev.launched]
    spins = [i for i, k in enumerate(kinds) if k == "spin"]
    assert len(spins) == 3 and all(kinds[i - 1] is True for i in spins)
    assert all(dev.launched[i]["seconds"] == cuda_mod.WARMUP_SECONDS > 0 for i in spins)
    for record in read_raw(tmp_path / "raw.jsonl").points:
        assert record["device"]["sm_clock_mhz"]["min"] == 1530 and record["device"]["sm_clock_mhz"]["samples"] >= 2
        assert record["device"]["occupancy"]["waves"] == 1


@pytest.mark.parametrize("spec", [KernelSpec("fp64", 1, False), KernelSpec("fp16", 8, True),
                                  KernelSpec("fp32", 2, False)], ids=lambda s: s.key)
def test_read_write_points_are_checked_on_the_device(spec):
    backend = _prepared(spec, 1 << 16)
    backend.run(3)
    result = backend.check()
    assert result.ok and backend._dev.bytes_read == 0  # nothing copied back for a passing point
    dtype = NUMPY_DTYPE[spec.precision]
    values = backend._data.view(dtype)
    values[777] = 3.0
    values[40000] = np.nan
    result = backend.check()
    assert not result.ok and "2 element(s)" in result.detail and "element 777: 3.0" in result.detail
    assert backend._dev.bytes_read == spec.itemsize  # only the first bad element came back


def _curve(access, plateaus):
    """Records of one fp64 bandwidth curve: (up to bytes, GB/s) steps over 1 MiB - 1 GiB at growth 1.1."""
    spec = KernelSpec("fp64", 1, False, access)
    out, wss = [], float(1 << 20)
    while wss <= 1 << 30:
        w = int(wss) // 8 * 8
        gbs = next(g for limit, g in plateaus if w <= limit)
        seconds = spec.bytes_moved(elements=w // 8, trials=1) / (gbs * 1e9)
        out.append({"id": f"{spec.key}-w{w}", "spec": spec.to_dict(), "wss_bytes": w, "elements": w // 8,
                    "trials": 1, "seconds": {"min": seconds, "median": seconds, "max": seconds},
                    "noisy": False, "valid": True})
        wss *= 1.1
    return out


def test_read_write_curves_are_never_named_against_the_l1():
    """An A100 (20 MiB of L1 summed over 108 SMs, 40 MiB L2): read+write runs at L2 speed to ~24 MiB.

    Against the summed L1 (nearer in log than the L2) that break was named
    "L1"; read+write never shows an L1 (write-through), so it is the L2.
    The read-only curve keeps its L1.
    """
    from ert.analysis.memory import caches_by_access, memory_ceilings

    backend = cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedGpu(A100))
    info = backend.describe()
    caches = caches_by_access(info["caches"])
    rw = _curve("rw", [(24 << 20, 4000.0), (1 << 40, 1500.0)])
    ro = _curve("ro", [(16 << 20, 9000.0), (1 << 40, 1600.0)])
    ceilings, _ = memory_ceilings(rw + ro, caches, workers=1, memory_name=info["memory_name"])
    names = {access: [c["level"] for c in ceilings if c["access"] == access] for access in ("rw", "ro")}
    assert names == {"rw": ["L2", "HBM"], "ro": ["L1", "HBM"]}, names
    assert [c["gbytes_per_s"] for c in ceilings if c["access"] == "rw"] == [4000.0, 1500.0]


# The kernel's own accounting lines, e.g. "ert_rw, ERT_FLOPS = 2K:  K x  b = b * a + c_t   2K FLOPs, sizeof(T) loaded + ..."
_ACCOUNTING = re.compile(r"^//\s+(ert_rw, ERT_FLOPS = (?:1|2K)|ert_ro):.*?\s(1|2K) FLOPs?,\s+(.+?)\s*$", re.M)


def test_the_spec_accounting_is_the_kernels_documented_one():
    """KernelSpec's FLOPs and bytes per element are what kernels/ert_cuda.cu states for every variant."""
    source = (Path(host.__file__).parents[2] / "kernels" / host.KERNEL_FILE).read_text()
    documented = {m.group(1): (m.group(2), m.group(3)) for m in _ACCOUNTING.finditer(source)}
    assert set(documented) == {"ert_rw, ERT_FLOPS = 1", "ert_rw, ERT_FLOPS = 2K", "ert_ro"}, documented
    for spec in [KernelSpec(p, f, fma) for p in ("fp64", "fp32", "fp16") for f in (1, 2, 16, 1024)
                 for fma in (True, False) if not (f == 1 and fma)] + [KernelSpec(p, 1, False, "ro")
                                                                      for p in ("fp64", "fp32", "fp16")]:
        key = "ert_ro" if spec.access == "ro" else f"ert_rw, ERT_FLOPS = {'1' if spec.flops_per_element == 1 else '2K'}"
        flops, traffic = documented[key]
        assert (1 if flops == "1" else 2 * spec.fma_ops_per_element) == spec.flops_per_element, spec.key
        assert traffic.count("sizeof(T)") * spec.itemsize == spec.bytes_per_element, spec.key
