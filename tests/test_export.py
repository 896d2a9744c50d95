"""ert export: ERT 1.1 roofline.json read as ERT's consumers read it, NERSC plot data, CSV."""

from __future__ import annotations

import csv
import io
import json

from conftest import REPO, run_cmd, stderr_lines
from ert.ceilings_io import load_ceilings
from ert.consumers.export import to_csv, to_ert, to_nersc

DATA = REPO / "tests" / "data"


def test_ert_roofline_json_as_consumers_read_it(tmp_path):
    out = tmp_path / "roofline.json"
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "ert", "-o", out)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    with open(out) as fh:
        database = json.load(fh)
    # What ERT's own roofline step does with the database: the first gflops entry is the compute roof,
    # each gbytes entry a [name, GB/s] pair, fastest level first, DRAM last.
    gflops_emp = database["empirical"]["gflops"]["data"][0]
    gbytes_emp = [[float(v), name] for name, v in database["empirical"]["gbytes"]["data"]]
    assert gflops_emp == ["FP64 GFLOPs", 100.0]
    assert gbytes_emp == [[400.0, "L1"], [200.0, "L2"], [100.0, "L3"], [25.0, "DRAM"]]
    assert database["spec"] == {"gflops": {"data": []}, "gbytes": {"data": []}}
    meta = database["empirical"]["metadata"]
    assert meta["HOSTNAME"] == "handworked-cpu" and meta["MPI_PROCS"] == 1 and meta["OPENMP_THREADS"] == 1
    assert isinstance(meta["TIMESTAMP_DATA"], float)
    assert database["empirical"]["gflops"]["metadata"]["NO_FMA_GFLOPS"] == {"FP64": 50.0}


def test_ert_format_names_the_gpu_memory_dram():
    doc = to_ert(load_ceilings(DATA / "ceilings-handworked-gpu.json"))
    assert [name for name, _ in doc["empirical"]["gbytes"]["data"]] == ["L1", "L2", "DRAM"]
    assert [name for name, _ in doc["empirical"]["gflops"]["data"]] == ["FP64 GFLOPs", "FP32 GFLOPs"]


def _nersc_read(text: str) -> dict:
    """The way NERSC's plot_roofline.py reads its data file: keyword anywhere in a line, names split on quotes."""
    out = {}
    for line in text.splitlines():
        if "memroofs" in line:
            out["memroofs"] = [float(a) for a in line.split()[1:]]
        if "mem_roof_names" in line:
            out["mem_roof_names"] = [a for a in line.strip().split("'") if a not in (" ", "")][1:]
        if "comproofs" in line:
            out["comproofs"] = [float(a) for a in line.split()[1:]]
        if "comp_roof_names" in line:
            out["comp_roof_names"] = [a for a in line.strip().split("'") if a not in (" ", "")][1:]
        if "AI" in line:
            out["AI"] = [float(a) for a in line.split()[1:]]
        if "GFLOPs" in line:
            out["GFLOPs"] = [float(a) for a in line.split()[1:]]
        if "labels" in line:
            out["labels"] = [a for a in line.strip().split("'") if a not in (" ", "")][1:]
    return out


def test_nersc_data_file_with_application_points():
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "nersc",
                   "--app", DATA / "app-handworked.yaml")
    assert proc.returncode == 0, proc.stderr
    data = _nersc_read(proc.stdout)
    assert data["memroofs"] == [400, 200, 100, 25] and data["mem_roof_names"] == ["L1", "L2", "L3", "DRAM"]
    assert data["comproofs"] == [100, 50, 200]
    assert data["comp_roof_names"] == ["FP64 FMA", "FP64 no-FMA", "FP32 FMA"]
    # stencil at L1, L2, DRAM; dgemm-block at 3 levels; stream-sum at 2: 8 points, AI = FLOPs / bytes
    assert data["AI"][:3] == [0.25, 0.5, 2.0] and data["GFLOPs"][:3] == [20, 20, 20]
    assert len(data["AI"]) == len(data["GFLOPs"]) == len(data["labels"]) == 8
    assert data["labels"][0] == "stencil L1"


def test_nersc_without_app_has_only_roofs(tiny_run):
    text = to_nersc(load_ceilings(tiny_run / "ceilings.json"))
    data = _nersc_read(text)
    assert set(data) == {"memroofs", "mem_roof_names", "comproofs", "comp_roof_names"}
    assert len(data["memroofs"]) == len(data["mem_roof_names"]) >= 1


def test_csv_one_row_per_ceiling(tiny_run):
    doc = load_ceilings(tiny_run / "ceilings.json")
    rows = list(csv.DictReader(io.StringIO(to_csv(doc))))
    assert len(rows) == len(doc["ceilings"]["memory"]) + len(doc["ceilings"]["compute"])
    first = doc["ceilings"]["memory"][0]
    assert rows[0]["level"] == first["level"] and float(rows[0]["value"]) == first["gbytes_per_s"]
    assert {r["unit"] for r in rows} == {"GB/s", "GFLOP/s"}


def test_export_errors(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text('{"schema_version": "2.0"}')
    out = tmp_path / "x.csv"
    proc = run_cmd("ert", "export", bad, "--format", "csv", "-o", out)
    lines = stderr_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and "unsupported schema_version '2.0'" in lines[0]
    assert not out.exists()
