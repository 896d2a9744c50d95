"""Tests of the ceilings file schema, its validation, and atomic reading and writing."""

from __future__ import annotations

import copy
import json
import os
import pathlib

import pytest

from ert.records import ceilings_io
from ert.records.ceilings_io import SCHEMA_VERSION, load_ceilings, schema, validate, write_ceilings
from ert.records.files import write_json_atomic
from ert.errors import ErtError


def make_doc() -> dict:
    """A realistic ceilings document of a small two-thread CPU run."""
    return {
        "schema_version": "1.0",
        "metadata": {
            "tool": "ert",
            "tool_version": "0.1.0",
            "host": "node17",
            "hosts": ["node17"],
            "cpu_model": "AMD EPYC 7763 64-Core Processor",
            "backend": "numba-cpu",
            "device": "AMD EPYC 7763 64-Core Processor (2 threads)",
            "caches_reported": [
                {"level": 1, "kind": "Data", "size_bytes": 32768, "shared_cpu_count": 1},
                {"level": 1, "kind": "Instruction", "size_bytes": 32768, "shared_cpu_count": 1},
                {"level": 2, "kind": "Unified", "size_bytes": 524288, "shared_cpu_count": 1},
                {"level": 3, "kind": "Unified", "size_bytes": 33554432, "shared_cpu_count": 16},
            ],
            "libraries": {"python": "3.11.7", "numpy": "2.4.6", "numba": "0.68.1", "mpi4py": None},
            "ranks": 1,
            "threads_per_rank": 2,
            "date": "2026-11-21T12:00:00+00:00",
            "config": {"backend": "numba-cpu", "working_set": {"min_bytes": 4096, "max_bytes": 1073741824}},
            "config_sha256": "0123456789abcdef" * 4,
            "wall_seconds": 95.2,
            "points": {"planned": 400, "measured": 400, "noisy": 3, "invalid": 0},
        },
        "raw": "raw.jsonl",
        "ceilings": {
            "memory": [
                {"level": "L1", "gbytes_per_s": 712.9, "spread": 0.02, "wss_bytes": [4096, 49152], "n_points": 14,
                 "precision": "fp64", "access": "rw", "noisy_points": 0,
                 "basis": "break at 70 KiB matches 2 x 32 KiB L1d",
                 "evidence": {"point_ids": ["fp64-add-rw-f1-w4096", "fp64-add-rw-f1-w8192"]}},
                {"level": "L2", "gbytes_per_s": 301.4, "spread": 0.03, "wss_bytes": [98304, 786432], "n_points": 9,
                 "precision": "fp64", "access": "rw", "noisy_points": 1},
                {"level": "L3", "gbytes_per_s": 143.7, "spread": 0.05, "wss_bytes": [1572864, 50331648],
                 "n_points": 11, "precision": "fp64", "access": "rw", "noisy_points": 2},
                {"level": "DRAM", "gbytes_per_s": 43.26, "spread": 0.01, "wss_bytes": [134217728, 1073741824],
                 "n_points": 8, "precision": "fp64", "access": "rw", "noisy_points": 0},
                {"level": "DRAM", "gbytes_per_s": 38.05, "spread": 0.012, "wss_bytes": [134217728, 1073741824],
                 "n_points": 8, "precision": "fp64", "access": "ro", "noisy_points": 0},
            ],
            "compute": [
                {"precision": "fp64", "fma": True, "gflops_per_s": 172.1, "spread": 0.01,
                 "flops_per_element": 64, "wss_bytes": 16384, "noisy": False,
                 "evidence": {"point_id": "fp64-fma-rw-f64-w16384", "trials": 4096,
                              "seconds": {"min": 0.0101, "median": 0.0103, "max": 0.0105}}},
                {"precision": "fp64", "fma": False, "gflops_per_s": 86.45, "spread": 0.015,
                 "flops_per_element": 64, "wss_bytes": 16384, "noisy": False},
                {"precision": "fp32", "fma": True, "gflops_per_s": 344.8, "spread": 0.02,
                 "flops_per_element": 64, "wss_bytes": 16384, "noisy": True},
            ],
        },
        "warnings": ["3 points were noisy (spread > 5 %) and were re-measured"],
    }


@pytest.fixture
def doc() -> dict:
    return make_doc()


def _error(doc: dict) -> ErtError:
    with pytest.raises(ErtError) as info:
        validate(doc, path="run/ceilings.json")
    return info.value


def _remove(doc: dict, parts: tuple) -> None:
    node = doc
    for part in parts[:-1]:
        node = node[part]
    del node[parts[-1]]


def _set(doc: dict, parts: tuple, value) -> None:
    node = doc
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


# --------------------------------------------------------------------------- schema


def test_schema_is_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    loaded = schema()
    Draft202012Validator.check_schema(loaded)
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_schema_returns_a_private_copy():
    schema()["properties"].clear()
    assert "ceilings" in schema()["properties"]


def test_realistic_doc_validates(doc):
    # A 1.0 file (the fixture) still validates: 1.1 only added optional fields.
    assert doc["schema_version"] == "1.0"
    validate(doc)


def test_minimal_doc_validates(doc):
    for key in ("tool", "hosts", "backend", "device", "wall_seconds", "points"):
        del doc["metadata"][key]
    doc["ceilings"]["memory"] = [{"level": "DRAM", "gbytes_per_s": 40, "spread": 0, "wss_bytes": [1, 1], "n_points": 1}]
    doc["ceilings"]["compute"] = [{"precision": "fp16", "fma": False, "gflops_per_s": 1e3, "spread": 0}]
    doc["warnings"] = []
    validate(doc)


REQUIRED = [
    ("metadata",),
    ("raw",),
    ("ceilings",),
    ("ceilings", "memory"),
    ("ceilings", "compute"),
    ("warnings",),
    *[("metadata", k) for k in (
        "tool_version", "host", "cpu_model", "caches_reported", "libraries",
        "ranks", "threads_per_rank", "date", "config", "config_sha256",
    )],
    *[("ceilings", "memory", 2, k) for k in ("level", "gbytes_per_s", "spread", "wss_bytes", "n_points")],
    *[("ceilings", "compute", 1, k) for k in ("precision", "fma", "gflops_per_s", "spread")],
]


def _dotted(parts: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))


@pytest.mark.parametrize("parts", REQUIRED, ids=_dotted)
def test_each_required_key_is_named_when_missing(doc, parts):
    _remove(doc, parts)
    error = _error(doc)
    assert error.key == _dotted(parts)
    assert error.path == "run/ceilings.json"
    assert "required" in error.message
    assert str(error) == f"run/ceilings.json: {_dotted(parts)}: {error.message}"


def test_missing_schema_version(doc):
    del doc["schema_version"]
    error = _error(doc)
    assert error.key == "schema_version"
    assert "this ert reads 1.x" in error.message


@pytest.mark.parametrize("version", ["2.0", "0.9", "1", "1.0.0", "v1.0", ""])
def test_unknown_schema_version_is_refused(doc, version):
    doc["schema_version"] = version
    error = _error(doc)
    assert error.key == "schema_version"
    assert error.message == f"unsupported schema_version '{version}' (this ert reads 1.x)"


def test_schema_version_is_checked_before_anything_else(doc):
    # A 2.x file may look nothing like 1.x; the version must be the complaint.
    doc = {"schema_version": "2.0", "results": []}
    error = _error(doc)
    assert "unsupported schema_version '2.0'" in str(error)


def test_numeric_schema_version_is_refused(doc):
    doc["schema_version"] = 1.0
    error = _error(doc)
    assert error.message == "unsupported schema_version '1.0' (this ert reads 1.x)"


def test_newer_minor_version_is_read(doc):
    major, minor = SCHEMA_VERSION.split(".")
    doc["schema_version"] = f"{major}.{int(minor) + 1}"  # newer than this writer
    doc["metadata"]["gpu"] = {"name": "future"}
    doc["ceilings"]["memory"][0]["per_threads"] = {"1": 356.0, "2": 712.9}
    doc["ceilings"]["compute"][0]["rated_gflops_per_s"] = 200.0
    validate(doc)


WRONG = [
    (("ceilings", "memory", 2, "gbytes_per_s"), "143.7", "expected number"),
    (("ceilings", "memory", 2, "gbytes_per_s"), 0, "must be > 0"),
    (("ceilings", "memory", 2, "spread"), -0.01, "must be >= 0"),
    (("ceilings", "memory", 2, "wss_bytes"), [50331648, 1572864], "inverted"),
    (("ceilings", "memory", 2, "wss_bytes"), [4096], "exactly 2 items"),
    (("ceilings", "memory", 2, "wss_bytes"), [4096.5, 8192], "expected integer"),
    (("ceilings", "memory", 2, "n_points"), 0, "must be >= 1"),
    (("ceilings", "memory", 2, "level"), 3, "expected string"),
    (("ceilings", "memory", 2, "precision"), "fp8", "must be one of fp64, fp32, fp16"),
    (("ceilings", "memory", 2, "access"), "wo", "must be one of rw, ro"),
    (("ceilings", "compute", 0, "fma"), "yes", "expected boolean"),
    (("ceilings", "compute", 0, "gflops_per_s"), -1.0, "must be > 0"),
    (("ceilings", "compute", 0, "wss_bytes"), [1, 2], "expected integer"),
    (("ceilings", "compute", 0, "evidence", "seconds"), {"min": 2.0, "median": 1.0, "max": 3.0}, "min <= median"),
    (("metadata", "ranks"), 0, "must be >= 1"),
    (("metadata", "threads_per_rank"), True, "expected integer"),
    (("metadata", "config_sha256"), "abc", "64 lowercase hex digits"),
    (("metadata", "date"), "2026-11-21 12:00", "ISO 8601"),
    (("metadata", "libraries"), {"numpy": 2}, "expected string or null"),
    (("metadata", "caches_reported"), [{"level": 1}], "required"),
    (("warnings",), "one warning", "expected array"),
    (("warnings",), ["ok", 7], "expected string"),
    (("raw",), "", "must not be empty"),
    (("scaling",), [], "expected object"),
]


@pytest.mark.parametrize("parts,value,problem", WRONG, ids=[f"{_dotted(p)}={v!r}" for p, v, _ in WRONG])
def test_wrong_values_are_named_by_key_path(doc, parts, value, problem):
    _set(doc, parts, value)
    error = _error(doc)
    assert error.key.startswith(_dotted(parts)), error
    assert problem in error.message, error


def test_key_path_format(doc):
    doc["ceilings"]["memory"][2]["gbytes_per_s"] = "fast"
    assert str(_error(doc)).startswith("run/ceilings.json: ceilings.memory[2].gbytes_per_s: expected number")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_are_refused(doc, value):
    doc["ceilings"]["memory"][3]["gbytes_per_s"] = value
    error = _error(doc)
    assert error.key == "ceilings.memory[3].gbytes_per_s"
    assert "finite" in error.message


def test_unknown_top_level_key_is_refused(doc):
    doc["ceiling"] = {}
    error = _error(doc)
    assert error.key == "ceiling"
    assert "unknown top-level key" in error.message


def test_unknown_key_inside_ceilings_is_refused(doc):
    doc["ceilings"]["network"] = []
    assert _error(doc).key == "ceilings.network"


def test_odd_key_names_are_quoted_in_the_key_path(doc):
    doc["bad key"] = 1
    assert _error(doc).key == '["bad key"]'


def test_scaling_and_additional_properties_are_allowed(doc):
    doc["scaling"] = {"threads": [1, 2], "anything": {"goes": True}}
    doc["metadata"]["gpu"] = {"name": "none"}
    doc["ceilings"]["memory"][0]["rated_gbytes_per_s"] = 800.0
    doc["ceilings"]["compute"][0]["per_threads"] = [{"threads": 1, "gflops_per_s": 86.0}]
    validate(doc)


@pytest.mark.parametrize("value", [[], "text", None, 3])
def test_non_object_document_is_refused(value):
    with pytest.raises(ErtError, match="expected a JSON object"):
        validate(value, path="x.json")


# --------------------------------------------------------------------------- writing


def test_write_round_trips(doc, tmp_path):
    target = tmp_path / "ceilings.json"
    write_ceilings(doc, target)
    assert load_ceilings(target) == doc
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text.startswith('{\n  "schema_version": "1.0",\n')
    assert sorted(os.listdir(tmp_path)) == ["ceilings.json"]


def test_write_accepts_str_paths(doc, tmp_path):
    target = str(tmp_path / "ceilings.json")
    write_ceilings(doc, target)
    assert load_ceilings(target) == doc


def test_invalid_write_leaves_previous_file_untouched(doc, tmp_path):
    target = tmp_path / "ceilings.json"
    write_ceilings(doc, target)
    before = target.read_bytes()
    bad = copy.deepcopy(doc)
    bad["ceilings"]["memory"][1]["spread"] = -1
    with pytest.raises(ErtError) as info:
        write_ceilings(bad, target)
    assert info.value.path == str(target)
    assert info.value.key == "ceilings.memory[1].spread"
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ceilings.json"]


def test_failed_replace_leaves_previous_file_and_no_temp_file(doc, tmp_path, monkeypatch):
    target = tmp_path / "ceilings.json"
    write_ceilings(doc, target)
    before = target.read_bytes()

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ceilings_io.os, "replace", failing_replace)
    changed = copy.deepcopy(doc)
    changed["warnings"].append("second write")
    with pytest.raises(ErtError, match="No space left on device") as info:
        write_ceilings(changed, target)
    assert info.value.path == str(target)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ceilings.json"]


def test_interrupted_write_removes_temp_file(tmp_path, monkeypatch):
    def interrupted_fsync(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(ceilings_io.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic({"a": 1}, tmp_path / "out.json")
    assert os.listdir(tmp_path) == []


def test_write_into_missing_directory_is_an_ert_error(doc, tmp_path):
    target = tmp_path / "no" / "such" / "ceilings.json"
    with pytest.raises(ErtError) as info:
        write_ceilings(doc, target)
    assert info.value.path == str(target)


def test_write_onto_a_directory_is_an_ert_error(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(ErtError, match="cannot write"):
        write_json_atomic({"a": 1}, tmp_path / "out.json")
    assert os.listdir(tmp_path) == ["out.json"]


def test_write_json_atomic_refuses_nan_without_leaving_a_file(tmp_path):
    with pytest.raises(ErtError, match="cannot write as JSON"):
        write_json_atomic({"x": float("nan")}, tmp_path / "out.json")
    assert os.listdir(tmp_path) == []


def test_write_json_atomic_keeps_mode_of_existing_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("{}\n")
    target.chmod(0o640)
    write_json_atomic({"a": [1, 2]}, target)
    assert target.stat().st_mode & 0o777 == 0o640
    assert json.loads(target.read_text()) == {"a": [1, 2]}


def test_write_json_atomic_new_file_is_not_private(tmp_path):
    # mkstemp creates 0600 files; the result should follow the umask like open().
    old = os.umask(0o022)
    try:
        write_json_atomic([], tmp_path / "out.json")
    finally:
        os.umask(old)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- reading


def _load_error(path) -> ErtError:
    with pytest.raises(ErtError) as info:
        load_ceilings(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value


def test_load_missing_file(tmp_path):
    assert "no such file" in _load_error(tmp_path / "nope.json").message


def test_load_directory(tmp_path):
    assert "directory" in _load_error(tmp_path).message


def test_load_invalid_json_names_the_line(tmp_path):
    target = tmp_path / "ceilings.json"
    target.write_text('{\n  "schema_version": "1.0",\n  "raw": raw.jsonl\n}\n')
    error = _load_error(target)
    assert error.key == "line 3"
    assert "invalid JSON" in error.message


def test_load_json_list(tmp_path):
    target = tmp_path / "ceilings.json"
    target.write_text("[1, 2]\n")
    assert "expected a JSON object" in _load_error(target).message


def test_load_empty_file(tmp_path):
    target = tmp_path / "ceilings.json"
    target.write_text("")
    assert "empty" in _load_error(target).message


def test_load_non_utf8(tmp_path):
    target = tmp_path / "ceilings.json"
    target.write_bytes(b'{"schema_version": "1.0\xff"}')
    assert "UTF-8" in _load_error(target).message


def test_load_unreadable_file(tmp_path, monkeypatch):
    target = tmp_path / "ceilings.json"
    target.write_text("{}")

    # chmod 000 does not stop root, so simulate the refusal.
    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "read_bytes", refuse)
    assert "Permission denied" in _load_error(target).message


def test_load_unknown_version(doc, tmp_path):
    doc["schema_version"] = "2.0"
    target = tmp_path / "ceilings.json"
    target.write_text(json.dumps(doc))
    error = _load_error(target)
    assert error.message == "unsupported schema_version '2.0' (this ert reads 1.x)"


def test_load_invalid_doc_names_file_and_key(doc, tmp_path):
    doc["ceilings"]["compute"][2]["precision"] = "fp128"
    target = tmp_path / "ceilings.json"
    target.write_text(json.dumps(doc))
    assert _load_error(target).key == "ceilings.compute[2].precision"


def test_load_nan_in_file(doc, tmp_path):
    target = tmp_path / "ceilings.json"
    target.write_text(json.dumps(doc).replace("712.9", "NaN"))
    assert _load_error(target).key == "ceilings.memory[0].gbytes_per_s"


# ---------------------------------------------------------------------------- numbers that overflow (issue 35)
_BUSY = pathlib.Path(__file__).parent / "data" / "bare-2core-busy.ceilings.json"


def _with_number(tmp_path, old: str, new: str) -> Path:
    text = _BUSY.read_text()
    assert old in text
    path = tmp_path / "c.json"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("new, words", [("1" + "0" * 400, "an integer of 401 digits is out of range"),
                                        ("1e-308", "1e-308 is out of range"), ("1e308", "1e+308 is out of range")])
def test_numbers_past_what_a_float_computes_with_are_refused(tmp_path, new, words):
    path = _with_number(tmp_path, "49.9853", new)  # the L3 bandwidth
    with pytest.raises(ErtError) as info:
        load_ceilings(path)
    assert words in info.value.message and info.value.path == str(path)


def test_every_consumer_refuses_an_overflowing_number_in_one_line(tmp_path):
    from conftest import REPO, run_cmd, stderr_lines

    app = REPO / "tests" / "data" / "app-handworked.yaml"
    # Each consumer meets one of the three numbers (a ceiling, a working set, a float past range), each number two
    # consumers: they all load through load_ceilings, whose refusal of every form is tested in process above.
    numbers = (("33.7209", "1" + "0" * 400), ("16384", "1" + "0" * 400), ("33.7209", "1e308"))
    consumers = (lambda p: ["show", p], lambda p: ["plot", p, "-o", tmp_path / "p.png"],
                 lambda p: ["export", p, "--format", "csv"], lambda p: ["compare", p, _BUSY],
                 lambda p: ["profile", "--ceilings", p, app], lambda p: ["report", p, "-o", tmp_path / "r.html"])
    for k, consumer in enumerate(consumers):
        argv = consumer(_with_number(tmp_path, *numbers[k % len(numbers)]))
        proc = run_cmd("ert", *argv)
        assert proc.returncode == 2 and len(stderr_lines(proc)) == 1, (argv, proc.stderr[-400:])
        assert "out of range" in proc.stderr
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("gflops, gbytes", [(1e29, 49.9853), (33.7209, 1e-29)])
def test_plot_axes_take_extreme_but_finite_roofs(tmp_path, gflops, gbytes):
    """Decades of 1e29 were Python ints that numpy's axis limits refuse; they are floats now."""
    from ert.consumers.plots.plot import plot_roofline

    path = _with_number(tmp_path, "33.7209", repr(gflops))
    path.write_text(path.read_text().replace("49.9853", repr(gbytes), 1))
    plot_roofline(load_ceilings(path), tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000
