"""Warning codes and groups (ert.records.warning_codes): written beside every warning, read back, classified when absent."""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import re
from pathlib import Path

import pytest

from ert.analysis.ceilings import build
from ert.records.ceilings_io import validate
from ert.errors import ErtError
from ert.records.rawio import read_raw
from ert.records.warning_codes import CODES, GROUPS, classify, code_of, coded_warnings, codes_of, relabel, warn

DATA = Path(__file__).parent / "data"
BUSY = DATA / "bare-2core-busy.ceilings.json"
BUSY_RAW = DATA / "bare-2core-busy.raw.jsonl"


@pytest.fixture(scope="module")
def busy() -> dict:
    return json.loads(BUSY.read_text())


def test_every_warning_of_a_run_has_a_code_and_a_group(busy):
    codes = busy["metadata"]["warning_codes"]
    assert busy["schema_version"] == "1.10" and len(codes) == len(busy["warnings"]) > 20
    for entry in codes:
        assert entry["code"] in CODES and entry["group"] == CODES[entry["code"]]
    assert {c["group"] for c in codes} == set(GROUPS)  # a busy machine raises all three kinds
    assert codes[0] == {"code": "busy-machine", "group": "act"}  # raised first, so read first


def test_the_analysis_writes_the_codes_its_raise_sites_give():
    doc = build(read_raw(BUSY_RAW))
    validate(doc)
    by_code = {}
    for text, entry in zip(doc["warnings"], doc["metadata"]["warning_codes"]):
        by_code.setdefault(entry["code"], []).append(text)
    assert all(t.startswith("busy machine:") for t in by_code["busy-machine"])
    assert all(" of the rated " in t for t in by_code["below-rated"])
    assert all("in no level" in t for t in by_code["points-in-no-level"])
    assert all("built on" in t and "noisy" in t for t in by_code["noisy-level"])
    # One warning for each cache that a curve of its own (not one measured over another's ranges) has no level
    # of, naming it: in this busy run the L1 of both read+write curves (their points inside the L1s read no faster
    # than L2's) and the fp64 read-only L3.
    found = [re.fullmatch(r"(fp\d+) (read\+write|read-only): no separate plateau for (L\d) \(.+\)", t)
             for t in by_code["level-missing"]]
    own = {(c["precision"], c["access"]) for c in doc["ceilings"]["memory"] if "over the" not in c["basis"]}
    levels = {(c["precision"], c["access"], c["level"]) for c in doc["ceilings"]["memory"]}
    access = {"rw": "read+write", "ro": "read-only"}
    missing = {(p, access[a], f"L{k}") for p, a in own for k in (1, 2, 3) if (p, a, f"L{k}") not in levels}
    assert all(found) and sorted(m.groups() for m in found) == sorted(missing)
    assert missing == {("fp64", "read+write", "L1"), ("fp32", "read+write", "L1"), ("fp64", "read-only", "L3")}


def test_a_partial_run_is_something_to_act_on():
    raw = read_raw(BUSY_RAW)
    raw.points[:] = raw.points[:-20]
    raw.ends[:] = []
    doc = build(raw)
    (i,) = [k for k, w in enumerate(doc["warnings"]) if w.startswith("partial run:")]
    assert doc["metadata"]["warning_codes"][i] == {"code": "partial-run", "group": "act"}


def test_a_file_without_codes_is_classified_from_its_text(busy):
    """A 1.9 file (no warning_codes): every warning of this run is placed as the analysis placed it."""
    old = copy.deepcopy(busy)
    old["schema_version"] = "1.9"
    del old["metadata"]["warning_codes"]
    validate(old)
    assert [(w.code, w.group) for w in coded_warnings(old)] == [
        (c["code"], c["group"]) for c in busy["metadata"]["warning_codes"]]
    # A list that does not pair up with the warnings (edited by hand) is not trusted either.
    old["metadata"]["warning_codes"] = busy["metadata"]["warning_codes"][1:]
    assert coded_warnings(old)[0].code == "busy-machine"


def test_a_newer_file_s_unknown_group_or_code_is_still_read(busy):
    doc = copy.deepcopy(busy)
    doc["metadata"]["warning_codes"][0] = {"code": "partial-run", "group": "some-new-group"}
    doc["metadata"]["warning_codes"][1] = {"code": "some-new-code", "group": "some-new-group"}
    validate(doc)
    first, second = coded_warnings(doc)[:2]
    assert (first.code, first.group) == ("partial-run", "act")
    assert (second.code, second.group) == ("some-new-code", "machine")


def test_the_schema_checks_the_codes(busy):
    doc = copy.deepcopy(busy)
    doc["metadata"]["warning_codes"][2] = {"code": "Not A Code", "group": "act"}
    with pytest.raises(ErtError) as info:
        validate(doc)
    assert info.value.key == "metadata.warning_codes[2].code"


def test_a_coded_warning_is_a_string_that_keeps_its_code():
    w = warn("ramp", "L1: from 16 KiB to 20 KiB the kernel is overhead-bound")
    assert isinstance(w, str) and w.startswith("L1:") and json.dumps([w]) == json.dumps([str(w)])
    assert code_of(copy.deepcopy(w)) == "ramp" and code_of(pickle.loads(pickle.dumps(w))) == "ramp"
    assert code_of(relabel(w, f"fp64 read-only: {w}")) == "ramp"
    assert code_of(f"fp64 read-only: {w}") == "ramp"  # a plain rewording falls back on the text, which agrees
    assert code_of(relabel("a plain text", "reworded")) == "other"
    assert codes_of([w, "partial run: 3 of 9 points measured"]) == [
        {"code": "ramp", "group": "bookkeeping"}, {"code": "partial-run", "group": "act"}]
    with pytest.raises(KeyError, match="unknown warning code"):
        warn("no-such-code", "text")


@pytest.mark.parametrize("text,code", [
    ("[rank 1] the launcher's cpu binding overlaps 1 other rank(s) on node2: cpus [0, 1]", "oversubscribed"),
    ("3 ranks on node1 share device GPU-1234: each measures a share of it", "oversubscribed"),
    ("OpenCL device is a CPU (pocl): its rates are the host's", "backend"),
    ("backend opencl runs no measured mixes: mixes fma+add are skipped", "skipped"),
    ("fp64 read+write: the break at 67.3 MiB is 2.1x off the L3 hint (32 MiB = 1 x 32 MiB L3); named L3 by order",
     "break-off-cache"),
    ("something nobody wrote before", "other"),
])
def test_classify_places_warnings_raised_as_plain_text(text, code):
    assert classify(text) == code and CODES[code] in GROUPS


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.raw.jsonl")))
def test_every_warning_the_analysis_raises_carries_its_code(name):
    """Issue 41: break-off-cache, the short-of-memory level-missing and the memory's unconfirmed fast points were
    raised as plain text and reached their code (or "other") only through classify's reading of the words."""
    from ert.records.warning_codes import CodedText

    doc = build(read_raw(DATA / name))
    plain = [w for w in doc["warnings"] if not isinstance(w, CodedText)]
    assert not plain, plain


def test_the_setup_warnings_carry_their_codes_through_raw_jsonl():
    """A rank's warnings (placement, skipped precisions, a backend's own) are raised with their codes, merged with
    the ranks' tags, and kept beside their texts in the header (rank_warning_codes) for the analysis."""
    from test_precisions import Backend, cfg

    from ert.measure.comm import merge_rank_warnings, shared_device_warnings
    from ert.measure.placement import split_cores
    from ert.measure.precisions import supported_precisions
    from ert.records.warning_codes import with_codes

    _, shared = split_cores([[0], [1]], local_rank=2, local_size=3)
    _, skipped = supported_precisions(cfg("fp64", "fp16"), Backend({"fp64"}))
    (device,) = shared_device_warnings([("n1", "gpu-0"), ("n1", "gpu-0")], 0)
    assert [code_of(w) for w in (shared, skipped, device)] == ["oversubscribed", "skipped", "oversubscribed"]
    merged = merge_rank_warnings([[shared, skipped], [skipped]])
    assert merged == [f"[rank 0] {shared}", skipped] and [code_of(w) for w in merged] == ["oversubscribed", "skipped"]
    raw = read_raw(BUSY_RAW)
    meta = raw.header["metadata"]
    meta["rank_warnings"], meta["rank_warning_codes"] = [str(w) for w in merged], [code_of(w) for w in merged]
    doc = build(raw)
    assert {doc["warnings"][i]: c["code"] for i, c in enumerate(doc["metadata"]["warning_codes"])
            if doc["warnings"][i] in merged} == {merged[0]: "oversubscribed", merged[1]: "skipped"}
    # An older header's rank warnings (no codes beside them) stay plain, for classify to read.
    assert with_codes(["x"], None) == ["x"] and code_of(with_codes(["x"], ["skipped"])[0]) == "skipped"


def test_an_ert_import_raises_its_warnings_with_codes(tmp_path):
    """ERT's roofline.json and results: what ert read and how ("imported"), the gcc -O3 kernel ("backend")."""
    from ert.interop.ert_results import to_ceilings

    config = {"ERT_CC": ["gcc"], "ERT_CFLAGS": ["-O3"]}
    doc = to_ceilings({"empirical": {"metadata": {"CONFIG": config},
                                     "gflops": {"data": [["FP64 GFLOPs", 100.0]], "metadata": {}},
                                     "gbytes": {"data": [["L1", 400.0], ["STREAM HBM", 50.0]], "metadata": {}}}},
                      path=tmp_path / "roofline.json")
    assert [c.code for c in coded_warnings(doc)] == ["imported", "imported", "backend"]
