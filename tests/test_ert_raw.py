"""ERT's raw results run (FLOPS.NNN/MPI.NNNN/OpenMP.NNNN/{max,sum}) read by `ert analyze`, on hand-made fixtures."""

from __future__ import annotations

import json

import pytest

from conftest import run_cmd, stderr_lines
from ert.interop.ert_raw import looks_like_ert_results, read_ert_results

META = """
META_DATA
ERT_VERSION  1.1.0
OPENMP_THREADS 2
HOSTNAME  ('oldbox', [], ['127.0.1.1'])
CONFIG  {'ERT_CFLAGS': ['-O3', '-march=native'], 'ERT_CC': ['gcc'], 'ERT_FLOPS': ['1'], 'ERT_NUM_EXPERIMENTS': ['3']}
FLOPS          1
TIMESTAMP_DATA  1560424198.1
MPI_PROCS      1
"""


def _line(wss: int, trials: int, gbs: float) -> str:
    """One line of ERT's max file whose median time gives ``gbs`` GB/s: 2 x wss x trials bytes (load + store)."""
    usec = 2 * wss * trials / (gbs * 1e9) * 1e6
    times = (usec * 0.99, usec, usec * 1.01)
    rates = [2 * wss * trials / (t * 1e-6) / 1e9 for t in reversed(times)]
    return " ".join([str(wss), str(trials)] + [f"{t:.3f}" for t in times] + [f"{r:.6f}" for r in rates]
                    + ["0", "0", "0"])


# A staircase worked out by hand: 400 GB/s up to 64 KiB (the 2 threads' 2 x 32 KiB L1), 200 to 1 MiB
# (2 x 512 KiB L2), 50 beyond; working sets doubling from 4 KiB to 64 MiB, 8 points per octave on the flats.
def _staircase() -> list[str]:
    lines, wss = [], 4096
    while wss <= 64 << 20:
        gbs = 400.0 if wss <= 48 << 10 else (200.0 if 96 << 10 <= wss <= 768 << 10 else (50.0 if wss >= 2 << 20 else None))
        if gbs:
            lines.append(_line(wss, max(1, (64 << 20) // wss), gbs))
        wss = int(wss * 2 ** 0.25)
    return lines


@pytest.fixture
def ert_run(tmp_path):
    leaf = tmp_path / "Run.018" / "FLOPS.001" / "MPI.0001" / "OpenMP.0002"
    leaf.mkdir(parents=True)
    (leaf / "max").write_text("\n".join(_staircase()) + "\n" + META)
    (leaf / "sum").write_text("   10.00 GFLOPs\n\n  400.00 L1\n" + META)
    return tmp_path / "Run.018"


def test_the_run_reads_as_ert_raw_records(ert_run):
    assert looks_like_ert_results(ert_run)
    raw = read_ert_results(ert_run)
    meta = raw.header["metadata"]
    assert meta["tool"] == "ERT" and meta["ranks"] == 1 and meta["threads_per_rank"] == 2
    assert meta["host"] == "oldbox" and meta["date"].startswith("2019-06-13")
    first = min(raw.points, key=lambda p: p["wss_bytes"])
    assert first["spec"] == {"precision": "fp64", "flops_per_element": 1, "fma": False, "access": "rw"}
    assert first["elements"] == 4096 // 8 and first["trials"] == (64 << 20) // 4096


def test_analyze_rederives_the_levels_with_cache_hints(ert_run):
    proc = run_cmd("ert", "analyze", ert_run, "--json", "--cache", "1:32K", "--cache", "2:512K")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    levels = {m["level"]: m["gbytes_per_s"] for m in doc["ceilings"]["memory"]}
    assert list(levels) == ["L1", "L2", "DRAM"]
    assert levels["L1"] == pytest.approx(400, rel=0.03) and levels["L2"] == pytest.approx(200, rel=0.03)
    assert levels["DRAM"] == pytest.approx(50, rel=0.03)
    assert any("unroll-and-jam" in w for w in doc["warnings"])


def _analyze_results(tmp_path, text: str, *, flops: str = "001"):
    """`ert analyze` of an ERT results tree whose one `max` file holds ``text``."""
    leaf = tmp_path / f"FLOPS.{flops}" / "MPI.0001" / "OpenMP.0001"
    leaf.mkdir(parents=True)
    (leaf / "max").write_text(text)
    return run_cmd("ert", "analyze", tmp_path)


def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path):
    proc = _analyze_results(tmp_path, _line(4096, 10, 100.0) + "\nnot numbers here\n")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1
    assert "max: line 2" in proc.stderr and "WSS_BYTES TRIALS" in proc.stderr


def test_a_bad_cache_hint_is_one_error(ert_run):
    proc = run_cmd("ert", "analyze", ert_run, "--cache", "2:lots")
    assert proc.returncode == 2 and stderr_lines(proc) == [
        "ert: error: --cache: expected LEVEL:SIZE[:SHARED_BY] such as 2:256K or 3:8M:4, got '2:lots'"]


def test_the_converted_run_saves_as_a_raw_file_ert_reads_back(ert_run, tmp_path):
    """ERT's run turned into raw.jsonl: analysing that file gives the same ceilings as the run itself."""
    saved = tmp_path / "ert-run.raw.jsonl"
    first = run_cmd("ert", "analyze", ert_run, "--json", "--cache", "1:32K", "--cache", "2:512K", "--save-raw", saved)
    assert first.returncode == 0, first.stderr
    again = run_cmd("ert", "analyze", saved, "--json")  # the cache hints travel in the header
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ceilings"] == json.loads(first.stdout)["ceilings"]
    refused = run_cmd("ert", "analyze", ert_run, "--save-raw", saved)
    assert refused.returncode == 2 and "already exists" in refused.stderr


@pytest.mark.parametrize("stamp", ["-5", "1e20"])
def test_a_timestamp_that_is_no_date_leaves_the_date_unknown(tmp_path, stamp):
    """A TIMESTAMP_DATA in ert's range of numbers that is no date (before 1970, after 9999): a caveat."""
    leaf = tmp_path / "FLOPS.001" / "MPI.0001" / "OpenMP.0002"
    leaf.mkdir(parents=True)
    (leaf / "max").write_text("\n".join(_staircase()) + "\n" + META.replace("1560424198.1", stamp))
    raw = read_ert_results(tmp_path)
    meta = raw.header["metadata"]
    assert meta["date"].startswith("1970")
    assert any("TIMESTAMP_DATA" in w for w in meta["rank_warnings"]) and "imported" in meta["rank_warning_codes"]
    proc = run_cmd("ert", "analyze", tmp_path, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("meta, key", [("TIMESTAMP_DATA  1e300", "TIMESTAMP_DATA"),
                                       ("TIMESTAMP_DATA  -1e300", "TIMESTAMP_DATA"),
                                       ("MPI_PROCS      1e-300", "MPI_PROCS"),
                                       ("CONFIG  {'ERT_FLOPS': ['1'], 'ERT_SPEC_GFLOPS': [1e400]}",
                                        "CONFIG.ERT_SPEC_GFLOPS[0]")])
def test_a_sum_file_number_out_of_range_is_one_error(tmp_path, meta, key):
    """Issue 41: `sum` with TIMESTAMP_DATA 1e300 was accepted by `ert analyze` (with a caveat) while every consumer
    refuses such a number: now the same rule (ert.records.ceilings_io.magnitude_fault) refuses it, in one line."""
    leaf = tmp_path / "FLOPS.001" / "MPI.0001" / "OpenMP.0002"
    leaf.mkdir(parents=True)
    (leaf / "max").write_text("\n".join(_staircase()) + "\n")
    name = meta.split()[0]
    lines = [line if not line.startswith(name + " ") else meta for line in META.splitlines()]
    (leaf / "sum").write_text("   10.00 GFLOPs\n\n  400.00 L1\n" + "\n".join(lines) + "\n")
    proc = run_cmd("ert", "analyze", tmp_path)
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert stderr_lines(proc)[0].startswith(f"ert: error: {leaf / 'sum'}: {key}: ")
    assert "is out of range (ert reads magnitudes from 1e-30 to 1e+30)" in proc.stderr or "not a finite" in proc.stderr


@pytest.mark.parametrize("line, words", [("8192 10 1e400 1e400 1e400 1 1 1 0 0 0", "positive and finite"),
                                         ("8192 10 1e-300 1e-300 1e-300 1 1 1 0 0 0", "seconds.min"),
                                         ("8192 1" + "0" * 400 + " 1 1 1 1 1 1 0 0 0", "positive and finite")])
def test_a_max_line_out_of_range_is_one_error(tmp_path, line, words):
    proc = _analyze_results(tmp_path, _line(4096, 10, 100.0) + "\n" + line + "\n")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1 and "max: line 2" in proc.stderr
    assert words in proc.stderr


def test_a_config_fault_of_an_ert_run_names_the_run(tmp_path):
    """ERT's FLOPS.2048 is no ert config: the error names the results directory, not <config>."""
    proc = _analyze_results(tmp_path, _line(4096, 10, 100.0) + "\n", flops="2048")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1
    assert stderr_lines(proc)[0].startswith(f"ert: error: {tmp_path}: flops_per_element: ")
