"""raw.jsonl records checked by type and range as they are read (ert.records.rawcheck): one line naming the line and
key, in analyze and before `--resume` measures anything."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.errors import ErtError
from ert.records.rawio import read_raw

RAW = REPO / "tests" / "data" / "bare-zen4-fp64.raw.jsonl"


def _damaged(tmp_path, key: str, value, *, line: int = 2):
    """The fixture run with one key of its ``line``-th record set to ``value`` (deleted for ...)."""
    lines = RAW.read_text().splitlines()
    rec = json.loads(lines[line - 1])
    if value is ...:
        del rec[key]
    else:
        rec[key] = value
    lines[line - 1] = json.dumps(rec)
    path = tmp_path / "raw.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_POINTS = [
    ("seconds", {}, "seconds.min"),
    ("seconds", {"min": 0, "median": 0, "max": 0}, "seconds.min"),
    ("seconds", {"min": -1.0, "median": 0.1, "max": 0.1}, "seconds.min"),
    ("seconds", {"min": 1e-308, "median": 1e-308, "max": 1e-308}, "seconds.min"),
    ("seconds", {"min": 0.1, "median": 10 ** 400, "max": 0.1}, "seconds.median"),
    ("seconds", [0.1], "seconds"),
    ("spec", "x", "spec"),
    ("spec", {"precision": "fp99", "flops_per_element": 1, "fma": False}, "spec"),
    ("wss_bytes", "16384", "wss_bytes"),
    ("wss_bytes", 0, "wss_bytes"),
    ("wss_bytes", 10 ** 400, "wss_bytes"),
    ("elements", 0, "elements"),
    ("trials", None, "trials"),
    ("trials", 0, "trials"),
    ("trials", 1.5, "trials"),
    ("valid", "no", "valid"),
    ("id", 7, "id"),
    ("samples", ["0.1"], "samples[0]"),
]


@pytest.mark.parametrize("key, value, named", BAD_POINTS, ids=[f"{k}={str(v)[:20]}" for k, v, _ in BAD_POINTS])
def test_a_point_out_of_type_or_range_is_refused_naming_line_and_key(tmp_path, key, value, named):
    path = _damaged(tmp_path, key, value)
    with pytest.raises(ErtError) as info:
        read_raw(path)
    err = info.value
    assert err.path == str(path) and err.key == f"line 2: {named}", str(err)
    assert len(str(err)) < 300


def test_a_header_without_metadata_is_refused(tmp_path):
    with pytest.raises(ErtError) as info:
        read_raw(_damaged(tmp_path, "metadata", ..., line=1))
    assert info.value.key == "line 1: metadata"


def test_a_sound_file_still_reads(tmp_path):
    raw = read_raw(RAW)
    assert raw.points and all(p["seconds"]["min"] > 0 for p in raw.points)


def test_analyze_refuses_in_one_line(tmp_path):
    path = _damaged(tmp_path, "trials", None)
    proc = run_cmd("ert", "analyze", path)
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1 and "Traceback" not in proc.stderr
    assert "line 2: trials" in proc.stderr


def test_resume_refuses_a_damaged_record_before_measuring_anything(recorded_copy):
    raw = recorded_copy / "raw.jsonl"
    lines = raw.read_text().splitlines()
    kept = lines[:-4]  # as if killed: the last records and the end record missing, so a resume would measure
    at = next(i for i, line in enumerate(kept) if json.loads(line)["type"] == "point")  # sentinels come first
    rec = json.loads(kept[at])
    rec["seconds"] = {"min": 0, "median": 0, "max": 0}
    kept[at] = json.dumps(rec)
    raw.write_text("\n".join(kept) + "\n")
    before = raw.read_bytes()
    proc = run_cmd("ert-run", "--resume", recorded_copy, "-q", timeout=180)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert stderr_lines(proc)[-1].endswith(f"line {at + 1}: seconds.min: point record: expected a positive number, "
                                           "got 0")
    assert raw.read_bytes() == before  # nothing measured, nothing appended


def test_a_re_measurement_is_checked_as_its_point_is(tmp_path):
    """A "confirm" record (issue 30) carries a point's keys and the point it repeats: checked the same way."""
    from ert.records.rawio import confirm_record

    lines = RAW.read_text().splitlines()
    point = json.loads(lines[1])
    again = confirm_record(measured=point, point_id=point["id"])
    path = tmp_path / "raw.jsonl"
    path.write_text("\n".join([*lines, json.dumps(again)]) + "\n")
    assert [c["point_id"] for c in read_raw(path).confirms] == [point["id"]]
    path.write_text("\n".join([*lines, json.dumps({**again, "trials": 0})]) + "\n")
    with pytest.raises(ErtError) as info:
        read_raw(path)
    assert info.value.key == f"line {len(lines) + 1}: trials"
    path.write_text("\n".join([*lines, json.dumps({**again, "point_id": 5})]) + "\n")
    with pytest.raises(ErtError) as info:
        read_raw(path)
    assert info.value.key == f"line {len(lines) + 1}: point_id"
