"""GH200 in one view: a Grace Hopper pair of ceilings files, the Grace CPU's from its recorded description
(tests/data/arm/grace) and an H100 behind NVLink-C2C (tests/data/arm/gh200), each rated by ert's own tables and
the C2C link through the CUDA backend's link rating and the transfer analysis; `ert report` puts the CPU's roofs,
the GPU's roofs and the link on one chart (the browser test is tests/test_html_report.py).

The measured values are synthetic (a stated fraction of each rated value; no Grace Hopper has run ert): the
pair gives the first real GH200 run a place to land, and checks the chart, not a machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from conftest import run_cmd
from ert.analysis.transfers import transfer_ceilings
from ert.backends import cuda_links
from ert.hardware import arm, hwinfo, nvidia
from ert.records import ceilings_io, rawio

DATA = Path(__file__).parent / "data" / "arm"
SYNTHETIC = ("synthetic: each 'measured' value is a stated fraction of ert's rated value (compute 0.9, caches "
             "0.8, memory 0.85, C2C 0.83); no Grace Hopper has run ert")
LINK_LEVELS = ("link-h2d", "link-d2h", "link-bidir")


def _doc(*, host: str, cpu_model: str, backend: str, device: str, backend_info: dict, memory: list,
         compute: list, threads: int) -> dict:
    doc = {"schema_version": ceilings_io.SCHEMA_VERSION,
           "metadata": {"tool": "ert", "tool_version": "0.1.0", "host": host, "cpu_model": cpu_model,
                        "platform": "Linux-aarch64", "backend": backend, "device": device,
                        "backend_info": backend_info, "caches_reported": [], "libraries": {}, "ranks": 1,
                        "threads_per_rank": threads, "date": "2026-11-28T12:00:00+00:00", "config": {},
                        "config_sha256": "0" * 64},
           "raw": "raw.jsonl", "ceilings": {"memory": memory, "compute": compute}, "warnings": [SYNTHETIC]}
    ceilings_io.validate(doc)
    return doc


def _rated_beside(measured: float, entry: dict, key: str) -> dict:
    value = entry.get(key)
    return {key: value, "ratio": round(measured / value, 4) if value else None, "derivation": entry["derivation"]}


def _level(level: str, rate: float, wss: tuple[int, int], rated: dict | None) -> dict:
    entry = {"level": level, "gbytes_per_s": rate, "spread": 0.02, "wss_bytes": list(wss), "n_points": 4,
             "precision": "fp64", "access": "rw"}
    if rated:
        entry["rated"] = _rated_beside(rate, rated, "gbytes_per_s")
    return entry


def _peak(precision: str, fma: bool, rate: float, rated: dict) -> dict:
    return {"precision": precision, "fma": fma, "gflops_per_s": rate, "spread": 0.01, "flops_per_element": 64,
            "wss_bytes": 65536, "rated": _rated_beside(rate, rated, "gflops_per_s")}


def grace_doc() -> dict:
    """The Grace CPU of a GH200 (72 Neoverse V2 cores), rated from its recorded description at 3.1 GHz."""
    desc = hwinfo.describe_arm(DATA / "grace")
    rated = arm.rated_from_description(desc, clock_ghz=3.1, clock_how="stated: NVIDIA's FP64 peak implies 3.1 GHz")
    compute = [_peak(p, fma, round(0.9 * arm.rated_value(rated, precision=p, fma=fma)["gflops_per_s"], 1),
                     arm.rated_value(rated, precision=p, fma=fma)) for p in ("fp64", "fp32") for fma in (True, False)]
    l1 = arm.rated_value(rated, level="L1")
    lpddr = {"gbytes_per_s": 512.0, "derivation": "NVIDIA Grace: LPDDR5X up to 512 GB/s per Grace CPU"}
    memory = [_level("L1", round(0.8 * l1["gbytes_per_s"], 1), (65536, 4718592), l1),
              _level("L2", 9000.0, (8388608, 75497472), None),
              _level("L3", 2500.0, (100663296, 119537664), None),
              _level("DRAM", round(0.85 * lpddr["gbytes_per_s"], 1), (1 << 30, 4 << 30), lpddr)]
    memory[1]["rated"] = memory[2]["rated"] = {"gbytes_per_s": None, "ratio": None,
                                               "derivation": arm.rated_value(rated, level="L2")["derivation"]}
    return _doc(host="gh200-grace", cpu_model=desc.cpu.core, backend="numba-cpu", device=f"{desc.cpu.core} "
                f"(72 threads)", backend_info={"rated": rated}, memory=memory, compute=compute, threads=72)


def h100_doc() -> dict:
    """The GH200's H100 (132 SMs at 1980 MHz, 96 GB HBM3 on a 6144-bit bus), its C2C link through the CUDA backend's
    link rating and the analysis of synthetic transfer records."""
    gpu = json.loads((DATA / "gh200" / "gpu.json").read_text())
    info = SimpleNamespace(sm_clock_khz=gpu["sm_clock_mhz"] * 1000, compute_capability=tuple(gpu["compute_capability"]),
                           sm_count=gpu["sm_count"], arch="Hopper (sm_90)", memory_clock_khz=gpu["memory_clock_mhz"] * 1000,
                           memory_bus_bits=gpu["memory_bus_bits"], memory_name="HBM", sources={"clockRate": "gpu.json"})
    rated = nvidia.rated_peaks(info)
    compute = [_peak(c["precision"], c["fma"], round(0.9 * c["gflops_per_s"], 1), c) for c in rated["compute"]
               if c["precision"] in ("fp64", "fp32") and c.get("gflops_per_s") and "unit" not in c]
    hbm = rated["memory"][0]
    memory = [_level("L1", 30000.0, (65536, 16777216), None), _level("L2", 9000.0, (33554432, 50331648), None),
              _level("HBM", round(0.85 * hbm["gbytes_per_s"], 1), (1 << 30, 8 << 30), hbm)]
    for m in memory[:2]:
        m["rated"] = {"gbytes_per_s": None, "ratio": None, "derivation": "no rated value: synthetic level"}
    link_rated = cuda_links.link_rated_of(name=gpu["name"], nvml_link={"c2c_enabled": gpu["c2c_enabled"]},
                                          pci_bus_id=gpu["pci_bus_id"])
    records = []
    for level in LINK_LEVELS:
        rate = 0.83 * link_rated[level]["gbytes_per_s"]  # GB/s at the plateau; small copies latency-bound
        for nbytes in (1 << 20, 1 << 24, 1 << 26, 1 << 28):
            seconds = nbytes / (rate * 1e9 * (0.5 if nbytes == 1 << 20 else 1.0))
            records.append(rawio.transfer_record(level=level, kind="link", variant="pinned", method="cudaMemcpyAsync",
                                                 nbytes=nbytes, moved_bytes=nbytes, repeats=1,
                                                 samples=[seconds] * 3, valid=True, check="", noise_threshold=0.1))
    links, _ = transfer_ceilings(records, {"backend_info": {"link_rated": link_rated}})
    return _doc(host="gh200-hopper", cpu_model="Neoverse V2", backend="cuda", device=gpu["name"],
                backend_info={"memory_name": "HBM", "link_rated": link_rated}, memory=memory + links,
                compute=compute, threads=1)


def write_gh200_pair(folder: Path) -> tuple[Path, Path]:
    """grace.ceilings.json and h100.ceilings.json in ``folder``, each valid ceilings.json."""
    paths = folder / "grace.ceilings.json", folder / "h100.ceilings.json"
    for path, doc in zip(paths, (grace_doc(), h100_doc())):
        path.write_text(json.dumps(doc, indent=1))
    return paths


# --------------------------------------------------------------------------- tests
def test_the_gh200s_gpu_link_is_rated_as_nvlink_c2c_by_the_cuda_backend():
    gpu = json.loads((DATA / "gh200" / "gpu.json").read_text())
    for nvml in ({"c2c_enabled": True}, {}):  # NVML's C2C mode, or the device name alone
        rated = cuda_links.link_rated_of(name=gpu["name"], nvml_link=nvml, pci_bus_id=gpu["pci_bus_id"])
        assert [rated[level]["gbytes_per_s"] for level in LINK_LEVELS] == [450.0, 450.0, 900.0]
        assert "NVLink-C2C: 450 GB/s per direction, 900 GB/s in total" in rated["link-h2d"]["derivation"]


def test_the_pair_holds_both_machines_rated_and_the_c2c_link(tmp_path):
    grace_path, h100_path = write_gh200_pair(tmp_path)
    grace, h100 = ceilings_io.load_ceilings(grace_path), ceilings_io.load_ceilings(h100_path)
    fma = next(c for c in grace["ceilings"]["compute"] if c["precision"] == "fp64" and c["fma"])
    assert fma["rated"]["gflops_per_s"] == 3571.2 and fma["rated"]["ratio"] == 0.9
    gpu_fma = next(c for c in h100["ceilings"]["compute"] if c["precision"] == "fp64" and c["fma"])
    assert gpu_fma["rated"]["gflops_per_s"] == 33454.1  # 132 SMs x 1980 MHz x 128: the H100 whitepaper's 33.5
    links = {e["level"]: e for e in h100["ceilings"]["memory"] if e.get("kind") == "link"}
    assert set(links) == set(LINK_LEVELS)
    assert links["link-h2d"]["gbytes_per_s"] == 373.5 and links["link-h2d"]["rated"]["ratio"] == 0.83
    assert links["link-bidir"]["rated"]["gbytes_per_s"] == 900.0


def test_ert_report_draws_cpu_gpu_and_c2c_on_one_chart(tmp_path):
    inputs = write_gh200_pair(tmp_path)
    out = tmp_path / "gh200.html"
    proc = run_cmd("ert", "report", *inputs, "--labels", "Grace CPU,H100 behind NVLink-C2C", "-o", out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    charts = page.count('data-chart="roofline"')
    assert charts == 1
    assert page.count('data-roof="transfer"') == 3 and 'data-level="link-h2d"' in page
    for i, path in enumerate(inputs):
        doc = json.loads(path.read_text())
        roofs = len(doc["ceilings"]["memory"]) + len(doc["ceilings"]["compute"])
        assert page.count(f'data-machine="{i}"') >= roofs
    assert "NVLink-C2C: 450 GB/s per direction" in page
