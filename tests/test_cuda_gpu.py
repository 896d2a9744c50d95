"""The CUDA backend on a real GPU: kernels compiled by CuPy, checked points, and a full sweep whose ceilings are sane."""

from __future__ import annotations

import json

import pytest

from conftest import CONFIGS, run_cmd
from ert.backends import cuda as cuda_mod
from ert.backends import cuda_host as host
from ert.spec import KernelSpec

_OK, _REASON, _ = cuda_mod.probe()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _OK, reason=f"needs an NVIDIA GPU; the cuda backend says: {_REASON}")]


@pytest.mark.parametrize("spec", [KernelSpec("fp64", 8, True), KernelSpec("fp32", 8, False),
                                  KernelSpec("fp16", 16, True), KernelSpec("fp16", 1, False),
                                  KernelSpec("fp16", 1, False, "ro"), KernelSpec("fp64", 1, False, "ro")],
                         ids=lambda s: s.key)
def test_every_kind_of_kernel_runs_and_passes_its_check(spec):
    import cupy

    backend = cuda_mod.create()
    try:
        elements = 1 << 22
        info = backend._dev.info
        for launch in backend.launches(spec, elements)[:2]:
            backend.prepare(spec, elements_per_thread=elements, launch=launch)
            seconds = backend.run(3) + backend.run(4)
            assert seconds > 0
            result = backend.check()
            assert result.ok, result.detail
            # The register cap holds under NVRTC too: a default geometry is one resident wave.
            assert backend._kernel.num_regs <= host.max_registers(info.max_threads_per_sm), backend._kernel.num_regs
            assert backend.point_info()["occupancy"]["waves"] == 1, backend.point_info()
            if backend._dev.sm_clock_mhz is not None:
                assert backend.point_info()["sm_clock_mhz"]["min"] > 0
        # A corrupted element is found by the on-device check.
        if spec.access == "rw":
            backend._data[100:104].fill(255)  # NaN in every precision
            # The fill ran on CuPy's current (legacy default) stream, which nothing orders with the backend's
            # non-blocking kernel stream: wait for it, or the check kernel could read the buffer before it.
            cupy.cuda.runtime.deviceSynchronize()
            result = backend.check()
            assert not result.ok and f"the first, element {100 // spec.itemsize}:" in result.detail, result.detail
    finally:
        backend.close()


def test_full_sweep_gives_sane_ceilings(tmp_path):
    out = tmp_path / "run"
    proc = run_cmd("ert-run", CONFIGS / "tiny-gpu.yaml", "--backend", "cuda", "--out", out, "-q", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "ceilings.json").read_text())
    meta = doc["metadata"]
    assert meta["points"]["invalid"] == 0, doc["warnings"]
    info = meta["backend_info"]
    memory_name = info["memory_name"]
    rated_memory = info["rated"]["memory"][0]["gbytes_per_s"]

    levels = {(m["precision"], m["access"], m["level"]): m["gbytes_per_s"] for m in doc["ceilings"]["memory"]}
    dram = {k: v for k, v in levels.items() if k[2] == memory_name}
    assert dram, f"no {memory_name} level among {sorted(levels)}"
    for (precision, access, _), gbytes in dram.items():
        if rated_memory:
            assert gbytes < rated_memory, (precision, access, gbytes, rated_memory)
        l2 = levels.get((precision, access, "L2"))
        if l2 is not None:
            assert l2 > gbytes, (precision, access, l2, gbytes)
    assert any(k[2] == "L2" for k in levels), f"no L2 level among {sorted(levels)}"
    # Read+write never shows the write-through L1.
    assert not any(k[1] == "rw" and k[2].startswith("L1") for k in levels), sorted(levels)
    points = [json.loads(line) for line in (out / "raw.jsonl").read_text().splitlines()]
    points = [p for p in points if p.get("type") == "point"]
    assert all(p["device"]["occupancy"]["waves"] == 1 for p in points), "a default geometry ran in two waves"

    compute = {(c["precision"], c["fma"]): c["gflops_per_s"] for c in doc["ceilings"]["compute"]}
    ratio = compute[("fp32", True)] / compute[("fp32", False)]
    assert 1.6 <= ratio <= 2.4, f"FP32 FMA / no-FMA = {ratio:.2f}"
    for c in info["rated"]["compute"]:
        measured = compute.get((c["precision"], c["fma"]))
        if c["gflops_per_s"] and measured:
            assert measured < 1.1 * c["gflops_per_s"], (c, measured)
