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
    assert info.value.key == "line 1" and info.value.message == "header record lacks 'metadata'"


def _damaged_metadata(tmp_path, key: str, value):
    """The fixture run whose header's ``metadata[key]`` is ``value`` (deleted for ...)."""
    lines = RAW.read_text().splitlines()
    header = json.loads(lines[0])
    if value is ...:
        del header["metadata"][key]
    else:
        header["metadata"][key] = value
    path = tmp_path / "raw.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return path


# The header's keys that the readers use (issue 41: ranks "two" and a header without config were tracebacks).
BAD_HEADERS = [
    ("ranks", "two", "metadata.ranks", "expected an integer, got 'two'"),
    ("ranks", 0, "metadata.ranks", "expected an integer from 1"),
    ("threads_per_rank", 2.5, "metadata.threads_per_rank", "expected an integer"),
    ("threads_per_rank", ..., "metadata.threads_per_rank", "missing"),
    ("config", ..., "metadata.config", "missing"),
    ("config", "default", "metadata.config", "expected a run config"),
    ("config", {"timing": {"noise_threshold": "low"}}, "metadata.config.timing.noise_threshold", "expected a number"),
    ("config", {"slow_host_threshold": -1}, "metadata.config.slow_host_threshold", "expected a positive number"),
    ("backend_info", [], "metadata.backend_info", "expected a mapping"),
    ("caches_reported", [{"level": "L2", "size_bytes": 1024}], "metadata.caches_reported[0].level",
     "expected an integer"),
    ("rank_warnings", "busy", "metadata.rank_warnings", "expected a list"),
    ("hosts", [1], "metadata.hosts[0]", "expected a string"),
    ("cpus_usable", -2, "metadata.cpus_usable", "expected an integer from 1"),
    ("load_average_at_start", {"load1": "high"}, "metadata.load_average_at_start.load1", "expected a number"),
]


@pytest.mark.parametrize("key, value, named, words", BAD_HEADERS,
                         ids=[f"{k}={str(v)[:20]}" for k, v, _, _ in BAD_HEADERS])
def test_a_header_out_of_type_or_range_is_refused_naming_line_and_key(tmp_path, key, value, named, words):
    path = _damaged_metadata(tmp_path, key, value)
    with pytest.raises(ErtError) as info:
        read_raw(path)
    assert info.value.key == f"line 1: {named}" and info.value.message.startswith(f"header record: {words}")


@pytest.mark.parametrize("key, value", [("ranks", "two"), ("config", ...)])
def test_analyze_refuses_the_issues_headers_in_one_line(tmp_path, key, value):
    """The two headers of issue 41's probe: a ValueError and a KeyError traceback from `ert analyze` before."""
    path = _damaged_metadata(tmp_path, key, value)
    proc = run_cmd("ert", "analyze", path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(stderr_lines(proc)) == 1
    assert stderr_lines(proc)[0].startswith(f"ert: error: {path}: line 1: metadata.{key}: header record: ")


def test_a_header_of_a_rated_table_out_of_type_is_refused(tmp_path):
    lines = RAW.read_text().splitlines()
    header = json.loads(lines[0])
    header["metadata"]["backend_info"]["rated"]["compute"][0]["gflops_per_s"] = "fast"
    path = tmp_path / "raw.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(ErtError) as info:
        read_raw(path)
    assert info.value.key == "line 1: metadata.backend_info.rated.compute[0].gflops_per_s"


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


def test_every_builder_makes_its_kinds_keys_and_the_table_refuses_a_key_it_lacks():
    """One table per record kind (ert.records.rawcheck.RECORDS): each builder's record has exactly keys of its
    table, every required one, and reads back sound; a key the table lacks is refused where the record is made."""
    from ert.records import rawio
    from ert.records.rawcheck import RECORDS, fault, shaped

    spec = {"precision": "fp64", "flops_per_element": 1, "fma": False, "access": "rw"}
    point = rawio.point_record(point_id="p", spec=spec, wss_bytes=4096, elements_per_thread=512, launch=None, ranks=1,
                               threads_per_rank=1, trials=4, samples=[1e-3, 2e-3], rank_seconds=[[1e-3], [2e-3]],
                               spread=1.0, noisy=True, remeasured=1, serialized=0, valid=True, check="ok")
    built = [
        rawio.header_record({"metadata": {"ranks": 1, "threads_per_rank": 1, "config": {}}, "planned_points": 1}),
        point,
        rawio.confirm_record(measured=point, point_id="p"),
        rawio.sustain_record(target="memory", point_id="p", spec=spec, wss_bytes=4096, elements_per_thread=512,
                             ranks=1, threads_per_rank=1, trials_per_region=4, region_seconds=[1e-3],
                             region_start_seconds=[0.0], hold_seconds=1.0, valid=True, check="ok"),
        rawio.transfer_record(level="link-h2d", kind="link", variant="pinned", method="copy", nbytes=4096,
                              moved_bytes=4096, repeats=2, samples=[1e-4], valid=True, check="ok",
                              noise_threshold=0.1, transport="PCIe"),
        rawio.end_record(wall_seconds=1.0, interrupted=False, measured=1, threads_per_rank=1),
    ]
    assert {rec["type"] for rec in built} == set(RECORDS) - {"sentinel"}
    for rec in built:
        table = RECORDS[rec["type"]]
        assert set(rec) - {"type"} <= set(table), rec["type"]
        assert {k for k, key in table.items() if key.required} <= set(rec), rec["type"]
        assert fault(rec) is None, (rec["type"], fault(rec))
    with pytest.raises(ValueError, match="not in ert.records.rawcheck.RECORDS"):
        shaped({**point, "bandwidth": 1.0})
    with pytest.raises(ValueError, match="without its required keys"):
        shaped({k: v for k, v in point.items() if k != "trials"})


def test_a_header_whose_config_records_no_timing_is_analysed_at_the_default_threshold(tmp_path):
    """The checks let a config without ``timing`` through (an older or foreign file): every reader falls back to
    the default noise threshold instead of a KeyError."""
    from ert.analysis.ceilings import build

    doc = build(read_raw(_damaged_metadata(tmp_path, "config", {})))
    assert any("stayed noisy after re-measuring (spread above 10%)" in w for w in doc["warnings"])
