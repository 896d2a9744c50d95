"""End to end with real Numba: thread scaling, sustained mode, and an adaptive run resumed after kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter

import pytest

from ert.records.warning_codes import CODES
from ert.records.ceilings_io import SCHEMA_VERSION
from ert.measure.adaptive import AdaptivePlanner
from ert.records.ceilings_io import load_ceilings, validate
from ert.config.schema import load
from ert.measure.driver import _cache_resident_bytes, cache_windows
from ert.consumers.terminal.report import format_ceilings
from ert.measure.modes import plan_for

from conftest import command, first_points, numba_plan, point_records, raw_records, run_cmd, write_config

pytestmark = pytest.mark.slow

# fp64 only, L1 to past L2, short regions: a few seconds per thread count.
SMALL_ADAPTIVE = {
    "backend": "numba-cpu", "precisions": ["fp64"], "flops_per_element": [1, 8, 32], "fma": "on",
    "access": ["rw", "ro"], "sweep": "adaptive",
    "working_set": {"min_bytes": 16384, "max_bytes": 8 << 20, "growth": 1.25, "compute_max_bytes": 4 << 20},
    "timing": {"min_seconds": 0.002, "repeats": 4, "min_repeats": 2, "max_point_seconds": 0.2,
               "noise_threshold": 0.15, "max_remeasure": 1},
    "threads": "auto",
}


@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory):
    """One `ert-run --threads 1,2 --sustain 0.5` of the small adaptive config."""
    tmp = tmp_path_factory.mktemp("scaling")
    cfg = write_config(tmp / "small.yaml", SMALL_ADAPTIVE)
    out = tmp / "run"
    proc = run_cmd("ert-run", cfg, "--threads", "1,2", "--sustain", "0.5", "--out", out, "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return out, proc


def test_ceilings_per_thread_count_validate_and_the_top_level_is_the_largest(scaling_run):
    out, _ = scaling_run
    doc = load_ceilings(out / "ceilings.json")
    assert doc["schema_version"] == SCHEMA_VERSION
    counts = doc["scaling"]["by_threads"]
    assert [c["threads_per_rank"] for c in counts] == [1, 2]
    assert doc["metadata"]["threads_per_rank"] == 2
    # The clock of each thread count it sweeps is measured (one core alone may boost higher).
    clocks = doc["metadata"]["backend_info"]["rated"]["clock_ghz_by_threads"]
    assert set(clocks) == {"1", "2"} and all(v > 0 for v in clocks.values())
    top = counts[-1]["ceilings"]
    # The top level's own annotations: sustained beside burst, and "disturbed" (the weather is the run's own count's).
    strip = lambda entries: [{k: v for k, v in e.items() if k not in ("sustained", "disturbed")} for e in entries]
    assert strip(doc["ceilings"]["memory"]) == top["memory"] and top["memory"]
    assert strip(doc["ceilings"]["compute"]) == top["compute"] and top["compute"]
    # Each count's ceilings rest on that count's own points.
    for entry in counts:
        t = entry["threads_per_rank"]
        for m in entry["ceilings"]["memory"]:
            assert all(pid.endswith(f"-t{t}") for pid in m["evidence"]["point_ids"])
    records = point_records(out)
    assert {r["threads_per_rank"] for r in records} == {1, 2}
    firsts = first_points(records)  # the weather's re-measurements repeat an id
    assert len({r["id"] for r in firsts}) == len(firsts)
    # Each count's warnings carry their codes beside them, as the top level's do (schema 1.10).
    for entry in counts:
        codes = entry["warning_codes"]
        assert len(codes) == len(entry["warnings"]) and all(c["group"] == CODES[c["code"]] for c in codes)


def test_analyze_reproduces_scaling_and_sustained(scaling_run):
    out, _ = scaling_run
    proc = run_cmd("ert", "analyze", out, "--json")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    saved = load_ceilings(out / "ceilings.json")
    for key in ("ceilings", "scaling", "warnings"):
        assert again[key] == saved[key]


def test_sustained_beside_burst(scaling_run):
    out, _ = scaling_run
    doc = load_ceilings(out / "ceilings.json")
    held = [r for r in raw_records(out) if r["type"] == "sustain"]
    assert sorted(r["target"] for r in held) == ["compute", "memory"]
    for r in held:
        assert r["valid"] and r["hold_seconds"] >= 0.5 and r["threads_per_rank"] == 2
    peak = next(c for c in doc["ceilings"]["compute"] if c["precision"] == "fp64" and c["fma"])
    s = peak["sustained"]
    assert s["point_id"] == peak["evidence"]["point_id"]
    assert s["ratio_to_burst"] == pytest.approx(s["gflops_per_s"] / peak["gflops_per_s"], rel=1e-3)
    # The hold's rate is all its work over all its time, from the raw regions alone.
    hold = next(r for r in held if r["target"] == "compute")
    work = hold["elements"] * hold["trials_per_region"] * len(hold["region_seconds"]) * hold["spec"]["flops_per_element"]
    assert s["gflops_per_s"] == pytest.approx(work / sum(hold["region_seconds"]) / 1e9, rel=1e-3)
    assert hold["elements"] == next(r["elements"] for r in point_records(out) if r["id"] == s["point_id"])
    # The same kernel as the burst point: even on a busy machine within a factor 4 of it.
    assert 0.25 < s["ratio_to_burst"] < 4
    outer = [m for m in doc["ceilings"]["memory"] if "sustained" in m]
    assert len(outer) == 1 and outer[0]["access"] == "rw"
    text = format_ceilings(doc)
    assert "Sustained versus burst" in text and "fp64 FMA peak" in text


def test_show_prints_the_scaling_table(scaling_run):
    out, _ = scaling_run
    proc = run_cmd("ert", "show", out)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("Thread scaling (threads per rank)")[1].split("\n\n")[0].splitlines()
    assert table[1].split() == ["ceiling", "unit", "1", "thr", "2", "thr", "2/1"]
    doc = load_ceilings(out / "ceilings.json")
    one, two = (c["ceilings"]["compute"][0]["gflops_per_s"] for c in doc["scaling"]["by_threads"])
    row = next(line for line in table if "fp64 FMA peak" in line)
    assert row.rstrip().endswith(f"{two / one:.2f}x")


def test_the_plan_of_each_count_has_the_same_per_thread_sets(scaling_run):
    out, _ = scaling_run
    cfg = load(out / "config.yaml")
    assert cfg.thread_counts == [1, 2] and cfg.threads == 2 and cfg.sustain_seconds == 0.5

    class Granule:
        @staticmethod
        def granule_elements(spec):
            return 512 // spec.itemsize

        @staticmethod
        def launches(spec, elements_per_thread):
            return [None]  # one point per working set, no launch geometry

    class One:
        size = 1

    per_thread = {t: {p.elements_per_thread for p in plan_for(cfg, Granule, One, t)} for t in (1, 2)}
    # One thread starts at half the aggregate set, so both counts share the per-thread sets;
    # both reach max_bytes in aggregate, so one thread goes further per thread.
    # (The largest set is max_bytes itself, off the geometric grid.)
    assert per_thread[2] - {max(per_thread[2])} <= per_thread[1] and min(per_thread[1]) == min(per_thread[2])


@pytest.mark.parametrize("flag,value,problem", [
    ("--threads", "1,1", "repeat"), ("--threads", "0,2", "at least 1"), ("--threads", "two", "not an integer"),
    ("--sustain", "0", "more than 0"), ("--sustain", "x", "not a number")])
def test_bad_flags_are_one_line_errors(tmp_path, flag, value, problem):
    proc = run_cmd("ert-run", "--out", tmp_path / "r", flag, value)
    assert proc.returncode == 2 and problem in proc.stderr and "Traceback" not in proc.stderr


def test_adaptive_run_resumes_after_kill_9_and_finishes_its_plan(tmp_path):
    cfg_path = write_config(tmp_path / "small.yaml", SMALL_ADAPTIVE)
    out = tmp_path / "run"
    proc = subprocess.Popen([command("ert-run"), str(cfg_path), "--out", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from test_run import wait_for_points

    wait_for_points(proc, out, 25)  # past the coarse pass: inside the refinement rounds
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    before = {r["id"]: r for r in point_records(out)}
    resumed = run_cmd("ert-run", "--resume", out, "-q", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    records = point_records(out)
    # Nothing measured twice but what the weather measured again (a point written in a disturbed stretch).
    counts = Counter(r["id"] for r in first_points(records))
    assert max(counts.values()) == 1
    final = {r["id"]: r for r in records}
    assert all(rec in records for rec in before.values())  # what was on disk stays
    # Replaying the planner over the finished raw file asks for nothing more, and
    # everything measured is part of its plan.
    cfg = load(out / "config.yaml")
    threads = cfg.threads
    candidates = numba_plan(cfg, threads)
    # As the driver builds it (numba-cpu's caches are the host's: None here), with its re-measurements.
    from ert.backends.numba_cpu import NumbaCpuBackend
    from ert.measure.window_search import level_windows
    from ert.measure.driver import _capacities
    from ert.records.rawio import read_raw

    granule = NumbaCpuBackend(threads=threads).granule_elements
    planner = AdaptivePlanner(candidates, growth=cfg.working_set.growth,
                              cache_resident_bytes=_cache_resident_bytes(None, threads),
                              cache_windows=cache_windows(None, threads),
                              level_windows=level_windows(_capacities(None, threads)),
                              granule_bytes=lambda spec: granule(spec) * spec.itemsize * threads,
                              noise_threshold=cfg.timing.noise_threshold)
    raw = read_raw(out)
    confirms = {r["id"]: r for r in raw.confirms}
    assert planner.next_batch({**final, **confirms}, raw.sentinels) == []
    assert set(final) | set(confirms) == {p.id for p in planner.planned}
    doc = load_ceilings(out / "ceilings.json")
    validate(doc)
    assert doc["metadata"]["points"]["planned"] == doc["metadata"]["points"]["measured"] == len(final)
    assert not any("partial run" in w for w in doc["warnings"])
    assert len(final) < len(candidates)
