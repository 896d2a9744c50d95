"""Tests of the plain-text ceilings report and its number formatting."""

from __future__ import annotations

import pytest

from ert.records.ceilings_io import validate
from ert.consumers.terminal.report import format_ceilings
from ert.consumers.cells import format_rate
from ert.units import human_bytes


def make_doc() -> dict:
    return {
        "schema_version": "1.0",
        "metadata": {
            "tool": "ert", "tool_version": "0.1.0", "host": "node17", "hosts": ["node17"],
            "cpu_model": "AMD EPYC 7763 64-Core Processor", "backend": "numba-cpu",
            "device": "AMD EPYC 7763 64-Core Processor (2 threads)",
            "caches_reported": [{"level": 1, "kind": "Data", "size_bytes": 32768, "shared_cpu_count": 1}],
            "libraries": {"python": "3.11.7", "numpy": "2.4.6"},
            "ranks": 1, "threads_per_rank": 2, "date": "2026-11-21T12:00:00+00:00",
            "config": {}, "config_sha256": "f" * 64, "wall_seconds": 95.2,
            "points": {"planned": 400, "measured": 400, "noisy": 3, "invalid": 0},
        },
        "raw": "raw.jsonl",
        "ceilings": {
            "memory": [
                {"level": "DRAM", "gbytes_per_s": 38.05, "spread": 0.012, "wss_bytes": [134217728, 1073741824],
                 "n_points": 8, "precision": "fp64", "access": "ro", "noisy_points": 0},
                {"level": "L1", "gbytes_per_s": 712.9, "spread": 0.02, "wss_bytes": [4096, 49152], "n_points": 14,
                 "precision": "fp64", "access": "rw", "noisy_points": 0},
                {"level": "L2", "gbytes_per_s": 301.4, "spread": 0.03, "wss_bytes": [98304, 786432], "n_points": 9,
                 "precision": "fp64", "access": "rw", "noisy_points": 1},
                {"level": "DRAM", "gbytes_per_s": 43.26, "spread": 0.01, "wss_bytes": [134217728, 1073741824],
                 "n_points": 8, "precision": "fp64", "access": "rw", "noisy_points": 0},
            ],
            "compute": [
                {"precision": "fp64", "fma": True, "gflops_per_s": 172.1, "spread": 0.01,
                 "flops_per_element": 64, "wss_bytes": 16384, "noisy": False},
                {"precision": "fp32", "fma": False, "gflops_per_s": 1234.6, "spread": 0.0004},
            ],
        },
        "warnings": ["3 points were noisy", "L3 not found:\nno plateau between L2 and DRAM"],
    }


@pytest.fixture
def doc() -> dict:
    d = make_doc()
    validate(d)
    return d


def test_report_contains_every_level_value_and_warning(doc):
    text = format_ceilings(doc, verbose=True)
    for entry in doc["ceilings"]["memory"]:
        assert entry["level"] in text
        assert format_rate(entry["gbytes_per_s"]) in text
    for value in ("712.9", "301.4", "43.26", "38.05", "172.1", "1235"):
        assert value in text
    assert "  - 3 points were noisy" in text
    assert "  - L3 not found:\n    no plateau between L2 and DRAM" in text


def test_report_header(doc):
    first = format_ceilings(doc, verbose=True).splitlines()[0]
    for part in ("ert 0.1.0", "node17", "AMD EPYC 7763 64-Core Processor (2 threads)", "numba-cpu",
                 "1 rank x 2 threads", "2026-11-21T12:00:00+00:00"):
        assert part in first
    # The CPU model is part of the device name here, so it appears once.
    assert first.count("AMD EPYC") == 1


def test_header_shows_cpu_and_a_different_device():
    doc = make_doc()
    doc["metadata"]["device"] = "NVIDIA A100-SXM4-40GB"
    first = format_ceilings(doc, verbose=True).splitlines()[0]
    assert "AMD EPYC 7763 64-Core Processor / NVIDIA A100-SXM4-40GB" in first


def test_read_write_table_comes_before_read_only(doc):
    text = format_ceilings(doc, verbose=True)
    rw = text.index("Memory bandwidth, read+write")
    ro = text.index("Memory bandwidth, read-only")
    assert rw < ro
    # Document order is kept inside the read+write table.
    assert rw < text.index("712.9") < text.index("301.4") < text.index("43.26") < ro < text.index("38.05")


def test_table_cells(doc):
    lines = format_ceilings(doc, verbose=True).splitlines()
    l1 = next(line for line in lines if line.split()[:1] == ["L1"])
    assert l1.split() == ["L1", "712.9", "2.0%", "4", "KiB", "-", "48", "KiB", "14", "0"]
    dram = next(line for line in lines if "38.05" in line)
    assert "128 MiB - 1 GiB" in dram
    fp64 = next(line for line in lines if line.split()[:1] == ["fp64"])
    assert fp64.split() == ["fp64", "yes", "172.1", "1.0%", "64", "16", "KiB", "no"]
    fp32 = next(line for line in lines if line.split()[:1] == ["fp32"])
    assert fp32.split() == ["fp32", "no", "1235", "<0.1%", "-", "-", "-"]


def test_columns_are_aligned(doc):
    lines = format_ceilings(doc, verbose=True).splitlines()
    start = lines.index("Memory bandwidth, read+write, fp64") + 1
    table = lines[start:start + 4]
    # Right-aligned GB/s column: every row ends that column at the same place.
    ends = {line.index(value) + len(value) for line, value in zip(table, ["GB/s", "712.9", "301.4", "43.26"])}
    assert len(ends) == 1


def test_scaling_table_from_by_threads_and_no_warnings_section(doc):
    # What `ert-run --threads 1,2` writes (ert.analysis.mode_results.scaling_section).
    memory = {"level": "L1", "precision": "fp64", "access": "rw", "spread": 0.01, "wss_bytes": [8, 8], "n_points": 1}
    doc["scaling"] = {"by_threads": [
        {"threads_per_rank": t, "ranks": 1, "warnings": [],
         "ceilings": {"memory": [{**memory, "gbytes_per_s": 100.0 * t}],
                      "compute": [{"precision": "fp64", "fma": True, "gflops_per_s": 50.0 * t, "spread": 0.0}]}}
        for t in (1, 2)]}
    doc["warnings"] = []
    lines = format_ceilings(doc, verbose=True).splitlines()
    start = lines.index("Thread scaling (threads per rank)")
    assert lines[start + 1].split() == ["ceiling", "unit", "1", "thr", "2", "thr", "2/1"]
    rows = [line.split() for line in lines[start + 2:start + 4]]
    assert rows[0][-4:] == ["GB/s", "100.0", "200.0", "2.00x"]
    assert rows[1][-4:] == ["GFLOP/s", "50.00", "100.0", "2.00x"]
    assert "Warnings" not in lines
    # A shape the report does not know (no by_threads list) prints no table rather than failing.
    doc["scaling"] = {"threads": [1, 2, 4]}
    assert "Thread scaling" not in format_ceilings(doc, verbose=True)


def test_empty_ceilings():
    doc = make_doc()
    doc["ceilings"] = {"memory": [], "compute": []}
    text = format_ceilings(doc, verbose=True)
    assert "Memory bandwidth: none measured" in text
    assert "Compute: none measured" in text


def test_optional_fields_missing():
    doc = make_doc()
    for key in ("tool", "hosts", "backend", "device", "wall_seconds", "points"):
        del doc["metadata"][key]
    doc["ceilings"]["memory"] = [{"level": "DRAM", "gbytes_per_s": 40, "spread": 0, "wss_bytes": [8, 8], "n_points": 1}]
    validate(doc)
    text = format_ceilings(doc, verbose=True)
    assert "DRAM" in text and "40.00" in text and "8 B" in text


@pytest.mark.parametrize("n,text", [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1 KiB"), (32768, "32 KiB"), (49152, "48 KiB"),
    (72192, "70.5 KiB"), (1536 * 1024, "1.5 MiB"), (1073741824, "1 GiB"), (3 * 2**40, "3 TiB"),
])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("value,text", [
    (712.9, "712.9"), (43.26, "43.26"), (172.1, "172.1"), (1234.6, "1235"), (12345.6, "12346"),
    (999.96, "1000"), (3.14159, "3.142"), (0.012345, "0.01235"), (0, "0"),
])
def test_format_rate(value, text):
    assert format_rate(value) == text
