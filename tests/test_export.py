"""ert export: ERT 1.1 roofline.json read as ERT's consumers read it, NERSC plot data, CSV."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
import yaml

from conftest import REPO, run_cmd, stderr_lines
from ert.analysis.ceilings import build
from ert.consumers.export.export import to_csv, to_ert, to_nersc
from ert.consumers.export.kerncraft import to_kerncraft
from ert.errors import ErtError
from ert.records.ceilings_io import load_ceilings
from ert.records.rawio import read_raw

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
    """The way NERSC's scripts and mperf's port read their data file: each keyword tested anywhere in a line,
    in this order, numbers split on blanks, names split on single quotes."""
    out = {}
    names = lambda line: [a for a in line.strip().split("'") if a not in (" ", "")][1:]
    for line in text.splitlines():
        if "memroofs" in line:
            out["memroofs"] = [float(a) for a in line.split()[1:]]
        if "mem_roof_names" in line:
            out["mem_roof_names"] = names(line)
        if "comproofs" in line:
            out["comproofs"] = [float(a) for a in line.split()[1:]]
        if "comp_roof_names" in line:
            out["comp_roof_names"] = names(line)
        for key in ("AI_HBM", "AI_DRAM", "AI_L3", "AI_L2", "AI_L1"):
            if key in line:
                out[key] = [float(a) for a in line.split()[1:]]
        if "AI" in line and "AI_" not in line:  # the flat script's test is just 'AI' in line
            out["AI"] = [float(a) for a in line.split()[1:]]
        if "FLOPS" in line:
            out["FLOPS"] = [float(a) for a in line.split()[1:]]
        if "labels" in line:
            out["labels"] = names(line)
    return out


# app-handworked.yaml against ceilings-handworked-cpu.json (L1 400, L2 200, L3 100, DRAM 25 GB/s):
#   stencil      2.0e8 FLOPs / 0.01 s  = 20 GFLOP/s; AI L1 2e8/8e8 = 0.25, L2 0.5, DRAM 2.0
#   dgemm-block  1.6e8 / 0.004        = 40 GFLOP/s; AI L1 1.6, L2 8, DRAM 40
#   stream-sum   1.0e7 / 0.002        =  5 GFLOP/s; AI L1 0.025, L2 1.0 (no DRAM bytes)
def test_nersc_flat_file_at_one_level():
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "nersc",
                   "--app", DATA / "app-handworked.yaml", "--level", "L2")
    assert proc.returncode == 0, proc.stderr
    data = _nersc_read(proc.stdout)
    # One memory roof, as the flat scripts assume, and the kernels' AI at it.
    assert data["memroofs"] == [200] and data["mem_roof_names"] == ["L2"]
    assert data["comproofs"] == [100, 50, 200]
    assert data["comp_roof_names"] == ["FP64 FMA", "FP64 no-FMA", "FP32 FMA"]
    assert data["AI"] == [0.5, 8, 1.0] and data["FLOPS"] == [20, 40, 5]
    assert data["labels"] == ["stencil", "dgemm-block", "stream-sum"]


def test_nersc_flat_default_level_needs_every_kernel_there():
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "nersc",
                   "--app", DATA / "app-handworked.yaml")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1
    assert "stream-sum" in proc.stderr and "DRAM" in proc.stderr and "--level" in proc.stderr


def test_nersc_hierarchical_file(tmp_path):
    app = tmp_path / "two.yaml"
    app.write_text(yaml.safe_dump({"kernels": [k for k in yaml.safe_load((DATA / "app-handworked.yaml").read_text())
                                              ["kernels"] if k["name"] != "stream-sum"]}))
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "nersc",
                   "--app", app, "--layout", "hierarchical")
    assert proc.returncode == 0, proc.stderr
    data = _nersc_read(proc.stdout)
    assert data["memroofs"] == [400, 200, 100, 25]
    assert data["AI_L1"] == [0.25, 1.6] and data["AI_L2"] == [0.5, 8] and data["AI_DRAM"] == [2.0, 40]
    assert "AI_L3" not in data  # no kernel reported L3 bytes
    assert data["FLOPS"] == [20, 40] and data["labels"] == ["stencil", "dgemm-block"]


def test_nersc_hierarchical_one_kernel_repeats_flops_per_level(tmp_path):
    """mperf's port reads FLOPS[0], FLOPS[1], FLOPS[2] for its three levels; NERSC's reads FLOPS[0]."""
    app = tmp_path / "one.yaml"
    app.write_text(yaml.safe_dump({"kernels": [{"name": "stencil", "seconds": 0.01, "flops": {"fp64": 2.0e8},
                                                "bytes": {"L2": 4.0e8, "L3": 2.0e8, "DRAM": 1.0e8}}]}))
    proc = run_cmd("ert", "export", DATA / "ceilings-handworked-cpu.json", "--format", "nersc",
                   "--app", app, "--layout", "hierarchical")
    assert proc.returncode == 0, proc.stderr
    data = _nersc_read(proc.stdout)
    assert data["AI_L2"] == [0.5] and data["AI_L3"] == [1.0] and data["AI_DRAM"] == [2.0]
    assert data["FLOPS"] == [20, 20, 20, 20] and data["labels"] == ["stencil"]


def test_nersc_names_never_carry_a_readers_keyword():
    doc = load_ceilings(DATA / "ceilings-handworked-cpu.json")
    text = to_nersc(doc, kernels=[("AI FLOPS labels kernel", {"L1": 1.0, "L2": 2.0, "L3": 3.0, "DRAM": 4.0}, 9.0)],
                    layout="hierarchical")
    data = _nersc_read(text)
    assert data["labels"] == ["ai flops labels kernel"] and data["FLOPS"] == [9.0] * 4


def test_nersc_without_app_has_only_roofs(recorded_run):
    text = to_nersc(load_ceilings(recorded_run / "ceilings.json"))
    data = _nersc_read(text)
    assert set(data) == {"memroofs", "mem_roof_names", "comproofs", "comp_roof_names"}
    assert len(data["memroofs"]) == len(data["mem_roof_names"]) >= 1


def test_csv_one_row_per_ceiling(recorded_run):
    doc = load_ceilings(recorded_run / "ceilings.json")
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


def test_kerncraft_machine_file_has_every_level_and_a_run_without_them_is_refused():
    """`ert export --format kerncraft` in process (kerncraft itself reads it in tests/test_export_tools.py): a
    recorded Zen 4 run's levels, each with its read-only (load) and read+write (update) fp64 bandwidths; a run
    whose fp64 curves separate no L1 or L2 is refused, naming them."""
    doc = build(read_raw(DATA / "bare-zen4-full.raw.jsonl"))
    machine = yaml.safe_load(re.sub(r"!!omap", "", to_kerncraft(doc)))
    assert [lv["level"] for lv in machine["memory hierarchy"]] == ["L1", "L2", "L3", "MEM"]

    def bw(level, access):
        return next(e["gbytes_per_s"] for e in doc["ceilings"]["memory"]
                    if (e["level"], e["access"], e["precision"]) == (level, access, "fp64"))

    for level, ert_level in (("L1", "L1"), ("L2", "L2"), ("L3", "L3"), ("MEM", "DRAM")):
        (measured,) = machine["benchmarks"]["measurements"][level].values()
        assert measured["results"] == {"load": [f"{bw(ert_level, 'ro'):.2f} GB/s"],
                                       "update": [f"{bw(ert_level, 'rw'):.2f} GB/s"]}, level
    with pytest.raises(ErtError, match="have no L1, L2 level: kerncraft needs every cache level and memory"):
        to_kerncraft(load_ceilings(DATA / "bare-2core-busy.ceilings.json"))
