"""ert export --format ncu-section | rocprof-compute | kerncraft | carm, loaded by the real tools where they install.

kerncraft and CARM come from PyPI (the test extra) and always run. Nsight
Compute's CLI comes from Debian's non-free archive (.ci/get-ncu unpacks it; no
GPU is needed to load a section file); where it could not be fetched, that test
skips with the reason. rocprof-compute is not on PyPI and needs ROCm: its
reader's documented columns are checked instead.
"""

from __future__ import annotations

import copy
import csv
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import command, run_cmd

pytestmark = pytest.mark.slow  # every test runs `ert analyze`/`ert export` and most the tool itself

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
# A real bare `ert-run` (AMD EPYC Zen 4 KVM guest, 2 threads, 2026-11-25): every level, both precisions and
# access patterns, and the compute peaks.
ZEN4_RAW = DATA / "bare-zen4-full.raw.jsonl"

# Our own STREAM-style triad, in kerncraft's kernel language (declarations, then the loop nest).
TRIAD_C = """double a[N], b[N], c[N], d[N];

for (int i = 0; i < N; ++i)
    a[i] = b[i] + c[i] * d[i];
"""


@pytest.fixture(scope="module")
def zen4(tmp_path_factory) -> Path:
    """The ceilings of a real Zen 4 run, through the installed `ert analyze`."""
    out = tmp_path_factory.mktemp("zen4") / "ceilings.json"
    proc = run_cmd("ert", "analyze", str(ZEN4_RAW), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _bw(doc: dict, level: str, access: str, precision: str = "fp64") -> float:
    return next(e["gbytes_per_s"] for e in doc["ceilings"]["memory"]
                if e["level"] == level and e.get("access") == access and e.get("precision") == precision)


def _export(*args) -> subprocess.CompletedProcess:
    return run_cmd("ert", "export", *map(str, args))


# ----------------------------------------------------------------------------- kerncraft
def _kerncraft(machine: Path, kernel_dir: Path, cores: int) -> str:
    kernel = kernel_dir / "triad.c"
    kernel.write_text(TRIAD_C)
    proc = subprocess.run([command("kerncraft"), "-p", "RooflineFLOP", "-m", str(machine), str(kernel),
                           "-D", "N", "1000000", "-c", str(cores), "-v"],
                          capture_output=True, text=True, timeout=180, cwd=kernel_dir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def _bottlenecks(out: str) -> dict[str, tuple[float, str]]:
    """kerncraft's verbose table: level -> (peak bandwidth GB/s, benchmark kernel)."""
    rows = {}
    for m in re.finditer(r"^\s*(L\d|MEM)\s*\|[^|]*\|[^|]*\|\s*([0-9.]+) GB/s\s*\|\s*(\w+)", out, re.M):
        rows[m.group(1)] = (float(m.group(2)), m.group(3))
    return rows


def test_kerncraft_roofline_on_triad_uses_ert_bandwidths(zen4, tmp_path):
    machine = tmp_path / "zen4.yml"
    proc = _export(zen4, "--format", "kerncraft", "-o", machine)
    assert proc.returncode == 0, proc.stderr
    doc = _doc(zen4)
    rows = _bottlenecks(_kerncraft(machine, tmp_path, cores=2))
    assert set(rows) == {"L1", "L2", "L3", "MEM"}
    # kerncraft's L1 row streams loads (its `load` kernel = ert read-only); below L1, triad's reads and
    # writes pick its `update` kernel (= ert read+write). ert's DRAM is kerncraft's MEM.
    assert rows["L1"] == (pytest.approx(_bw(doc, "L1", "ro"), abs=0.01), "load")
    for level, ert_level in (("L2", "L2"), ("L3", "L3"), ("MEM", "DRAM")):
        assert rows[level] == (pytest.approx(_bw(doc, ert_level, "rw"), abs=0.01), "update")


def test_kerncraft_machine_file_has_the_caches_clock_and_peaks(zen4, tmp_path):
    import yaml

    text = _export(zen4, "--format", "kerncraft").stdout
    doc = _doc(zen4)
    rated = doc["metadata"]["backend_info"]["rated"]
    machine = yaml.safe_load(re.sub(r"!!omap", "", text))
    assert machine["clock"] == f"{rated['clock_ghz']:.2f} GHz"
    fp64_fma = next(e for e in rated["compute"] if e["precision"] == "fp64" and e["fma"] and not e.get("mix"))
    assert machine["FLOPs per cycle"]["DP"]["total"] == fp64_fma["flops_per_cycle_per_core"]
    caches = {c["level"]: c for c in doc["metadata"]["caches_reported"]}
    levels = machine["memory hierarchy"]
    assert [lv["level"] for lv in levels] == ["L1", "L2", "L3", "MEM"]
    for lv in levels[:-1]:
        geometry = lv["cache per group"]
        size = caches[int(lv["level"][1])]["size_bytes"]
        assert geometry["sets"] * geometry["ways"] * geometry["cl_size"] == size  # the simulated cache is the real size
    assert machine["benchmarks"]["measurements"]["L2"][1]["cores"] == [2]  # one thread count: written as that count


def test_kerncraft_thread_series_gives_each_core_count_its_bandwidths(zen4, tmp_path):
    """A --threads 1,2 run: the machine file lists each count's measured bandwidths, and kerncraft -c 1 takes the
    one-thread series (-c 2 reading a 2-thread file: test_kerncraft_roofline_on_triad_uses_ert_bandwidths)."""
    import yaml

    doc = _doc(zen4)
    one = copy.deepcopy(doc["ceilings"])
    for e in one["memory"]:
        e["gbytes_per_s"] = round(e["gbytes_per_s"] * 0.55, 4)  # a different series for one thread
    doc["scaling"] = {"by_threads": [
        {"threads_per_rank": 1, "ranks": 1, "ceilings": one, "warnings": []},
        {"threads_per_rank": 2, "ranks": 1, "ceilings": doc["ceilings"], "warnings": []}]}
    src = tmp_path / "scaling.json"
    src.write_text(json.dumps(doc))
    machine = tmp_path / "m.yml"
    assert _export(src, "--format", "kerncraft", "-o", machine).returncode == 0
    l2 = next(iter(yaml.safe_load(re.sub(r"!!omap", "", machine.read_text()))["benchmarks"]["measurements"]["L2"]
                   .values()))
    assert l2["cores"] == [1, 2]
    assert l2["results"]["update"] == [f"{_bw({'ceilings': c}, 'L2', 'rw'):.2f} GB/s" for c in (one, doc["ceilings"])]
    rows = _bottlenecks(_kerncraft(machine, tmp_path, cores=1))
    assert rows["L2"][0] == pytest.approx(_bw({"ceilings": one}, "L2", "rw"), abs=0.01)
    assert rows["L2"][0] < 0.6 * _bw(doc, "L2", "rw")  # the one-thread series, not the top level's


def test_kerncraft_refuses_a_gpu_run(tmp_path):
    proc = _export(DATA / "ceilings-handworked-gpu.json", "--format", "kerncraft", "-o", tmp_path / "m.yml")
    assert proc.returncode != 0 and "kerncraft models CPUs" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "m.yml").exists()


# ----------------------------------------------------------------------------- CARM
def test_carm_loader_assembles_ert_roofs(zen4, tmp_path):
    from carm_roofline.roofline_assembly import (RooflineFilter, _compute_valid_tuples, assemble_roofline,
                                                 load_all_benchmarks)

    results = tmp_path / "carm"
    proc = _export(zen4, "--format", "carm", "-o", results, "--label", "zen4 vm")
    assert proc.returncode == 0, proc.stderr
    records = load_all_benchmarks(results)
    doc = _doc(zen4)
    tuples = _compute_valid_tuples(records)
    assert ("zen4_vm", "x86_avx512", 2, "f64", "1:1", 0) in tuples  # CARM pairs the memory and arithmetic records
    for ratio, access in (("1:1", "rw"), ("1:0", "ro")):
        roof = assemble_roofline(records, RooflineFilter(machine="zen4_vm", isa="x86_avx512", num_threads=2,
                                                         data_type="f64", load_store_ratio=ratio))
        assert {k: v.value / 1e9 for k, v in roof.bandwidth_by_level.items()} == pytest.approx(
            {lv: _bw(doc, lv, access) for lv in ("L1", "L2", "L3", "DRAM")})
        peaks = {k: v.value / 1e9 for k, v in roof.peak_performance_by_op.items()}
        fp64 = {e["fma"]: e["gflops_per_s"] for e in doc["ceilings"]["compute"]
                if e["precision"] == "fp64" and "unit" not in e and not e.get("mix") and e.get("pipe", "vector") == "vector"}
        assert peaks == pytest.approx({"fma": fp64[True], "ert_no_fma": fp64[False]})  # not CARM's "add"


def test_carm_export_keeps_carm_records_and_replaces_its_own(zen4, tmp_path):
    results = tmp_path / "carm"
    path = results / "m" / "benchmarks.jsonl"
    path.parent.mkdir(parents=True)
    own = {"type": "arithmetic", "name": "carm-add", "machine": "m", "isa": "x86_avx512", "data_type": "f64",
           "num_threads": 2, "operation": "add", "performance_gops": 99.0, "timestamp": "2026-01-01"}
    path.write_text(json.dumps(own) + "\n")
    for _ in range(2):
        assert _export(zen4, "--format", "carm", "-o", results, "--label", "m").returncode == 0
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0] == own
    names = [r["name"] for r in lines[1:]]
    assert len(names) == len(set(names)) and all(n.startswith("ert:") for n in names)


# ----------------------------------------------------------------------------- Nsight Compute
def _ncu() -> str | None:
    found = os.environ.get("ERT_NCU") or shutil.which("ncu")
    if found:
        return found
    hits = glob.glob(str(ROOT / ".ci/cache/ncu/usr/lib/*/nsight-compute/target/*/ncu"))
    return hits[0] if hits else None


def _list_sections(ncu: str, folder: Path, home: Path) -> str:
    proc = subprocess.run([ncu, "--list-sections", "--section-folder", str(folder)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HOME": str(home)})
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("source", ["zen4", "gpu"])
def test_ncu_section_constants_are_the_measured_roofs(source, zen4, tmp_path):
    path = zen4 if source == "zen4" else DATA / "ceilings-handworked-gpu.json"
    folder = tmp_path / "sections"
    assert _export(path, "--format", "ncu-section", "-o", folder, "--label", "box A").returncode == 0
    doc = _doc(path)
    text = (folder / "ert_box_A_fp64.section").read_text()
    assert 'Identifier: "ert_box_A_fp64_roofline"' in text
    assert text.count("{") == text.count("}")
    constants = [float(x) for x in re.findall(r"Constant: ([0-9.e+]+)", text)]
    peaks = [e["gflops_per_s"] * 1e9 for e in doc["ceilings"]["compute"] if e["precision"] == "fp64"
             and "unit" not in e and not e.get("mix") and e.get("pipe", "vector") == "vector"]
    levels = [e["gbytes_per_s"] * 1e9 for e in doc["ceilings"]["memory"]
              if e.get("precision") == "fp64" and e.get("access") == "rw" and e.get("kind") is None]
    # Each roofline is (PeakWork, PeakTraffic): every level against every fp64 peak.
    pairs = sorted(zip(constants[0::2], constants[1::2]))
    assert pairs == sorted((p, b) for b in levels for p in peaks)
    assert "dram__bytes.sum.per_second" in text and "smsp__sass_thread_inst_executed_op_dfma_pred_on" in text


def test_ncu_loads_the_exported_sections(zen4, tmp_path):
    ncu = _ncu()
    if ncu is None:
        pytest.skip("Nsight Compute's CLI is not here: .ci/get-ncu fetches Debian's nsight-compute-target "
                    "(non-free) where apt reaches deb.debian.org; set ERT_NCU to another ncu")
    folder = tmp_path / "sections"
    for path, label in ((zen4, "cpu box"), (DATA / "ceilings-handworked-gpu.json", "gpu box")):
        assert _export(path, "--format", "ncu-section", "-o", folder, "--label", label).returncode == 0
    out = _list_sections(ncu, folder, tmp_path)
    assert "Error" not in out, out
    for ident in ("ert_cpu_box_fp64_roofline", "ert_cpu_box_fp32_roofline", "ert_gpu_box_fp64_roofline"):
        assert ident in out  # two machines' sections side by side
    # ncu checks the schema: a misspelled field in the same file is refused with its line and column.
    bad = tmp_path / "bad"
    bad.mkdir()
    text = (folder / "ert_gpu_box_fp64.section").read_text().replace("PeakTraffic", "PeakTrafic", 1)
    (bad / "x.section").write_text(text)
    out = _list_sections(ncu, bad, tmp_path)
    assert "Error" in out and "Line=" in out


def test_ncu_section_needs_a_folder(zen4, tmp_path):
    proc = _export(zen4, "--format", "ncu-section")
    assert proc.returncode != 0 and "-o DIR" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- rocprof-compute
def _amd_gpu_doc() -> dict:
    """An AMD GPU's ceilings as the OpenCL backend records them (numbers from the handworked GPU file)."""
    doc = _doc(DATA / "ceilings-handworked-gpu.json")
    doc["metadata"].update(backend="opencl", device="AMD Instinct MI300X (AMD Accelerated Parallel Processing)")
    doc["metadata"]["backend_info"] = {"memory_name": "HBM", "device_type": "GPU",
                                       "device_vendor": "Advanced Micro Devices, Inc."}
    return doc


def _rocprof_read(text: str, device: int = 0) -> dict[str, float]:
    """rocprof-compute's reader, as documented: drop the first (device id) column, then float() by header."""
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0][1:]
    values = rows[1 + device][1:]
    return {k: float(v) for k, v in zip(header, values)}


def test_rocprof_compute_csv_from_an_amd_gpu_run(tmp_path):
    src = tmp_path / "mi300x.json"
    src.write_text(json.dumps(_amd_gpu_doc()))
    workload = tmp_path / "workload"
    workload.mkdir()
    proc = _export(src, "--format", "rocprof-compute", "-o", workload)
    assert proc.returncode == 0, proc.stderr
    text = (workload / "roofline.csv").read_text()
    assert text.splitlines()[0].split(",")[0] == "devID"
    got = _rocprof_read(text)
    doc = _doc(src)
    assert got["HBMBw"] == pytest.approx(_bw(doc, "HBM", "rw")) and got["L2Bw"] == pytest.approx(_bw(doc, "L2", "rw"))
    assert got["FP64Flops"] == pytest.approx(7000.0) and got["FP32Flops"] == pytest.approx(14000.0)
    for col in ("HBMBw", "L2Bw", "L1Bw", "LDSBw", "FP16Flops", "FP32Flops", "FP64Flops", "I32Ops", "I64Ops",
                "MFMAF16Flops", "MFMABF16Flops", "MFMAF32Flops", "MFMAF64Flops", "MFMAI8Ops", "MFMAF8Flops"):
        assert col in got  # every column its plots read by name
    assert math.isnan(got["LDSBw"]) and math.isnan(got["MFMAF64Flops"])  # not measured by ert: absent, not 0


def test_rocprof_compute_merge_keeps_lds_and_mfma(tmp_path):
    src = tmp_path / "mi300x.json"
    src.write_text(json.dumps(_amd_gpu_doc()))
    theirs = tmp_path / "theirs.csv"
    theirs.write_text("devID,HBMBw,L2Bw,L1Bw,LDSBw,MFMAF64Flops,FP64Flops\n"
                      "0,4000.0,10000.0,20000.0,60000.0,81000.0,50000.0\n"
                      "1,4001.0,10001.0,20001.0,60001.0,81001.0,50001.0\n")
    proc = _export(src, "--format", "rocprof-compute", "--merge", theirs)
    assert proc.returncode == 0, proc.stderr
    dev0, dev1 = _rocprof_read(proc.stdout, 0), _rocprof_read(proc.stdout, 1)
    assert dev0["LDSBw"] == 60000.0 and dev0["MFMAF64Flops"] == 81000.0  # kept
    assert dev0["HBMBw"] == pytest.approx(800.0) and dev0["FP64Flops"] == pytest.approx(7000.0)  # ert's
    assert dev1["HBMBw"] == 4001.0  # another device's row untouched


def test_rocprof_compute_refuses_a_cpu_run_in_one_line(zen4, tmp_path):
    out = tmp_path / "roofline.csv"
    proc = _export(zen4, "--format", "rocprof-compute", "-o", out)
    assert proc.returncode != 0 and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and "AMD GPU" in proc.stderr and "CPU" in proc.stderr


def test_rocprof_compute_bad_merge_file_is_one_line(tmp_path):
    src = tmp_path / "mi300x.json"
    src.write_text(json.dumps(_amd_gpu_doc()))
    bad = tmp_path / "bad.csv"
    bad.write_text("devID,HBMBw\n0,1,2\n")
    proc = _export(src, "--format", "rocprof-compute", "--merge", bad)
    assert proc.returncode != 0 and "bad.csv" in proc.stderr and "line 2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
