"""The original ERT's roofline.json read wherever a ceilings file is read (fixtures in ERT's real shapes)."""

from __future__ import annotations

import json

import pytest

from ert import cli
from ert.interop.ert_results import load_any_ceilings
from ert.errors import ErtError

# ERT 1.1 (2019) layout: "GFLOPs" without a precision, metadata as dicts, ERT's per-section lists.
ERT_DICT_META = {
    "empirical": {
        "gbytes": {"data": [["L1", 1000.0], ["L2", 500.0], ["L3", 250.0], ["DRAM", 50.0]],
                   "metadata": {"FLOPS": 1, "TIMESTAMP_DATA": [1600000000.0, 1600000010.0]}},
        "gflops": {"data": [["GFLOPs", 200.0]],
                   "metadata": {"FLOPS": 16, "TIMESTAMP_DATA": [1600000020.0]}},
        "metadata": {"ERT_VERSION": "1.1.0", "HOSTNAME": ["nodeA", [], ["10.0.0.1"]], "MPI_PROCS": 2,
                     "OPENMP_THREADS": 4,
                     "CONFIG": {"ERT_CC": ["g++"], "ERT_CFLAGS": ["-O3", "-march=native"],
                                "ERT_PRECISION": ["FP64"]}},
    },
    "spec": {"gbytes": {"data": []}, "gflops": {"data": []}},
}

# HPCL's layout: metadata as a "" list of "KEY value" strings; user-extended compute rows; "STREAM HBM".
ERT_LIST_META = {
    "empirical": {
        "metadata": {},
        "gflops": {"data": [["FP64 Vector GFLOPs FMA", 3000.0], ["FP64 Vector GFLOPs", 1500.0],
                            ["FP64 Scalar GFLOPs FMA", 200.0], ["FP64 Scalar GFLOPs", 100.0]],
                   "metadata": {"": ["META_DATA", "FLOPS          64", "OPENMP_THREADS 8", "ERT_VERSION  1.1.0",
                                     "HOSTNAME  ('nodeB', [], ['10.0.0.2'])", "TIMESTAMP_DATA  1600000000.5",
                                     "CONFIG  {'ERT_CC': ['icpc'], 'ERT_CFLAGS': ['-O3']}"]}},
        "gbytes": {"data": [["L1", 8000.0], ["L2", 3000.0], ["STREAM HBM", 800.0]], "metadata": {}},
    },
    "spec": {"gflops": {"data": []}, "gbytes": {"data": []}},
}

DRAM_ONLY = {"empirical": {"gbytes": {"data": [["DRAM", 1600.0]]}, "gflops": {"data": [["FP64 GFLOPs", 1400.0]]},
                           "metadata": {"ERT_VERSION": "1.1.0", "HOSTNAME": ["nodeC", [], []]}},
             "spec": {}}


def _write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_dict_metadata(tmp_path):
    doc = load_any_ceilings(_write(tmp_path, "roofline.json", ERT_DICT_META))
    meta = doc["metadata"]
    assert meta["tool"] == "ERT" and meta["host"] == "nodeA"
    assert (meta["ranks"], meta["threads_per_rank"]) == (2, 4)
    assert meta["date"] == "2020-09-13T12:27:00+00:00"  # latest TIMESTAMP_DATA 1600000020 s
    assert [(m["level"], m["gbytes_per_s"]) for m in doc["ceilings"]["memory"]] == [
        ("L1", 1000.0), ("L2", 500.0), ("L3", 250.0), ("DRAM", 50.0)]
    # "GFLOPs" without a precision is ERT's default FP64 FMA-contracted kernel
    assert doc["ceilings"]["compute"] == [{"precision": "fp64", "fma": True, "gflops_per_s": 200.0, "spread": 0.0}]
    assert any("unroll-and-jam" in w for w in doc["warnings"])  # g++ -O3


def test_list_metadata_and_extended_rows(tmp_path):
    doc = load_any_ceilings(_write(tmp_path, "r.json", ERT_LIST_META))
    assert doc["metadata"]["host"] == "nodeB" and doc["metadata"]["threads_per_rank"] == 8
    assert [m["level"] for m in doc["ceilings"]["memory"]] == ["L1", "L2", "HBM"]
    peaks = {(c["precision"], c["fma"]): c["gflops_per_s"] for c in doc["ceilings"]["compute"]}
    assert peaks == {("fp64", True): 3000.0, ("fp64", False): 1500.0}  # vector rows win over scalar
    assert sum("Scalar" in w for w in doc["warnings"]) == 2
    assert not any("unroll-and-jam" in w for w in doc["warnings"])  # icpc


def test_cli_show_compare_plot_export_profile(tmp_path, capsys):
    a = _write(tmp_path, "a.json", ERT_DICT_META)
    run = tmp_path / "Run.001"
    run.mkdir()
    _write(run, "roofline.json", DRAM_ONLY)
    assert cli.main(["show", str(run)]) == 0
    assert "1600" in capsys.readouterr().out
    assert cli.main(["compare", str(a), str(run)]) == 0
    out = capsys.readouterr().out
    assert "from ERT 1.1.0, nodeA" in out and "from ERT 1.1.0, nodeC" in out
    # DRAM 1600 / 50 = 32.00x
    assert "32.00x" in out
    assert cli.main(["plot", str(a), "-o", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["export", str(a), "--format", "nersc"]) == 0
    assert "memroofs 1000 500 250 50" in capsys.readouterr().out
    # a kernel of 1e9 FLOPs moving 1e9 DRAM bytes in 0.01 s: AI 1, DRAM bound 50 GFLOP/s, achieved 100 GFLOP/s
    app = tmp_path / "app.yaml"
    app.write_text("kernels:\n  - name: k\n    seconds: 0.01\n    flops: {fp64: 1.0e9}\n    bytes: {DRAM: 1.0e9}\n")
    assert cli.main(["profile", str(app), "--ceilings", str(a)]) == 0
    out = capsys.readouterr().out
    assert "200" in out and "exceeds" in out


@pytest.mark.parametrize("change, key", [
    (lambda d: d["empirical"].pop("gbytes"), "empirical.gbytes.data"),
    (lambda d: d["empirical"]["gbytes"]["data"].append(["L4", "fast"]), "empirical.gbytes.data[4]"),
    (lambda d: d["empirical"]["gflops"]["data"].__setitem__(0, ["GFLOPs", -1]), "empirical.gflops.data[0][1]"),
])
def test_bad_ert_file_is_one_line(tmp_path, capsys, change, key):
    doc = json.loads(json.dumps(ERT_DICT_META))
    change(doc)
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(ErtError) as info:
        load_any_ceilings(path)
    assert info.value.key == key
    assert cli.main(["show", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and key in err and "Traceback" not in err


def test_a_timestamp_that_is_no_date_is_skipped(tmp_path):
    """TIMESTAMP_DATA 1e300 overflowed datetime in every consumer; a stamp past year 9999 counts as none."""
    doc = json.loads(json.dumps(ERT_DICT_META))
    doc["empirical"]["gflops"]["metadata"]["TIMESTAMP_DATA"] = [1e300]
    assert load_any_ceilings(_write(tmp_path, "r.json", doc))["metadata"]["date"] == "2020-09-13T12:26:50+00:00"  # 1600000010 s, the latest real one
    doc["empirical"]["gbytes"]["metadata"]["TIMESTAMP_DATA"] = [1e300]
    assert load_any_ceilings(_write(tmp_path, "r.json", doc))["metadata"]["date"].startswith("1970")
