"""The recorded Zen 5 curve replayed through the planner, the driver and the analysis.

tests/data/zen5-l2-window/ (a copy of the shared measurements) holds a quiet Zen 5 guest's fp64
bandwidth (2 threads): two bare runs (bare-r1, bare-r2) and, across L2, the
best of 3 rounds of ert's own kernel at 4 per octave (l2_regimes.txt).  Its
read+write L2 streams at 686-732 GB/s from 96 to 412 KiB per thread and at
884-948 GB/s only at 492-708 KiB per thread, half an octave.  The backend
below is that recorded hardware behaviour as input: its rate at a working set
is the recorded curve's (interpolated in log-log), slowed by noise, and
``run`` returns the seconds the kernel would take.  The sweep goes through
``run_sweep`` (adaptive plan, window search, re-measurements) into a
raw.jsonl, and ``build`` makes the ceilings from it, as ``ert-run`` does.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import re
from pathlib import Path

import numpy as np
import pytest

from ert.analysis.ceilings import build
from ert.backends.check import CheckResult
from ert.config.schema import default_path, from_dict, load
from ert.measure.comm import SerialComm
from ert.measure.driver import run_sweep
from ert.measure.plan import plan
from ert.records.rawio import read_raw
from ert.records.rawlog import RawLog
from ert.spec import rates

DATA = Path(__file__).resolve().parent / "data" / "zen5-l2-window"
KIB = 1024
THREADS = 2
# The fast window's best point: read+write 948.1 GB/s at 592 KiB per thread (l2_regimes.txt, 4 KiB pages).
FAST_RW = 948.1
# A prepared point costs this much simulated time (allocation, first touch), beside its timed regions.
PREPARE_SECONDS = 0.002
# A disturbed stretch: every region at this much below its rate.
DROP = 0.15
NOISE = 0.02  # the offset of a whole point (half-normal, in log)
T0 = 1_800_000_000.0  # the simulated run's unix start


@functools.lru_cache(maxsize=None)
def recorded_caches() -> list:
    return read_raw(DATA / "bare-r1").header["metadata"]["caches_reported"]


@functools.lru_cache(maxsize=None)
def recorded_curve(access: str) -> tuple[np.ndarray, np.ndarray]:
    """(KiB per thread, GB/s) of the recorded fp64 curve: bare-r1's clean points, l2_regimes.txt across L2."""
    raw = read_raw(DATA / "bare-r1")
    points = [p for p in raw.points if p["spec"]["precision"] == "fp64" and p["spec"]["access"] == access
              and p["spec"]["flops_per_element"] == 1 and p["valid"] and not p["noisy"]]
    curve = {p["wss_bytes"] / THREADS / KIB: rates(p).gbytes_per_s for p in points}
    text = (DATA / "l2_regimes.txt").read_text()
    section = text.split("read-only")[0] if access == "rw" else text.split("read-only")[1]
    fine = {float(m[1]): float(m[2]) for m in re.finditer(r"^\s+(\d+)\s+[\d.]+\s+([\d.]+)", section, re.M)}
    lo, hi = min(fine), max(fine)
    curve = {k: v for k, v in curve.items() if not lo / 1.1 <= k <= hi * 1.1} | fine
    kib = np.array(sorted(curve))
    return kib, np.array([curve[k] for k in kib])


class RecordedCurveBackend:
    """A backend whose kernel streams at the recorded curve's rate, slowed by noise (a shared host only slows).

    Each point gets a slowdown drawn once (half-normal in log, ``noise``: the offset of a whole point, which
    its own repeats cannot see), each timed region a jitter of its own (0.5 %) and, one region in ten, a
    burst of another tenant's work that slows it 10-40 %; ``run`` returns the seconds.  Time is simulated:
    ``now`` is the seconds every region took so far (plus ``PREPARE_SECONDS`` per prepared point), the clock
    the sweep's weather reads; ``disturbed`` = (from, to) seconds in which every region runs at ``1 - DROP``
    of its rate, sentinels included (another tenant on the host).
    """

    name = "recorded-zen5"
    threads = THREADS
    device_id = None
    warnings: list[str] = []

    def __init__(self, seed: int, noise: float = NOISE, disturbed: tuple[float, float] | None = None):
        self.rng = random.Random(seed)
        self.noise = noise
        self.curves = {access: recorded_curve(access) for access in ("rw", "ro")}
        self.caches = recorded_caches()
        self.now, self.disturbed = 0.0, disturbed

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def describe(self) -> dict:
        return {"backend": self.name, "device": "recorded AMD EPYC Zen 5 curve", "threads": THREADS,
                "caches": self.caches}

    def granule_elements(self, spec) -> int:
        return 64

    def supports(self, spec) -> bool:
        return True

    def launches(self, spec, elements_per_thread: int) -> list[dict]:
        return [{"chains": 8}]  # one geometry per kernel, as numba-cpu records its chain count

    def prepare(self, spec, *, elements_per_thread: int, launch=None) -> None:
        kib, gbs = self.curves[spec.access]
        per_thread = elements_per_thread * spec.itemsize / KIB
        rate = float(np.exp(np.interp(math.log(per_thread), np.log(kib), np.log(gbs))))
        slow = math.exp(abs(self.rng.gauss(0.0, self.noise)))
        self.spec, self.elements, self.rate = spec, elements_per_thread * THREADS, rate / slow
        self.now += PREPARE_SECONDS

    def run(self, trials: int) -> float:
        jitter = math.exp(abs(self.rng.gauss(0.0, 0.005)))
        if self.rng.random() < 0.1:
            jitter *= self.rng.uniform(1.1, 1.4)
        if self.disturbed and self.disturbed[0] <= self.now < self.disturbed[1]:
            jitter /= 1.0 - DROP
        seconds = self.spec.bytes_moved(elements=self.elements, trials=trials) / (self.rate * 1e9) * jitter
        self.now += seconds
        return seconds

    def check(self) -> CheckResult:
        return CheckResult(True, "replayed")

    def point_info(self) -> dict:
        return {}

    def close(self) -> None:
        pass


# The bare run's sweep and timing (the packaged default.yaml), on the fp64 bandwidth curves.
CONFIG = {**load(default_path()).to_dict(), "backend": "numba-cpu", "precisions": ["fp64"], "flops_per_element": [1],
          "threads": THREADS}


def replay(seed: int, run_dir: Path, disturbed: tuple[float, float] | None = None, *,
           backend_class: type = RecordedCurveBackend) -> dict:
    """The sweep of the recorded curve into ``run_dir`` on simulated time (its weather too), and the ceilings
    ``build`` makes of it."""
    cfg = from_dict(CONFIG)
    backend = backend_class(seed, disturbed=disturbed)
    run_dir.mkdir(parents=True)
    points = plan(cfg, workers=THREADS, granule_elements_of=backend.granule_elements, launches_of=backend.launches)
    header = {"metadata": {"threads_per_rank": THREADS, "ranks": 1, "caches_reported": backend.caches,
                           "backend_info": backend.describe(), "config": cfg.to_dict()}}
    log = RawLog.open(run_dir, header=header, writes=True)
    run_sweep(config=cfg, points=points, log=log, backend=backend, comm=SerialComm(),
              weather={"clock": lambda: backend.now, "wall": lambda: T0 + backend.now, "sleep": backend.sleep})
    log.close()
    return build(read_raw(run_dir))


def roof(doc: dict, level: str, access: str) -> dict:
    (entry,) = [c for c in doc["ceilings"]["memory"] if c["level"] == level and c["access"] == access
                and c["precision"] == "fp64"]
    return entry


SEEDS = range(20)
# The injected disturbance: every region 15 % slower from 3 to 4.5 s of simulated time (a run takes 9-13 s; the
# sentinels are read every 0.75 s, so a shorter one can fall between two readings).
DISTURBED = (3.0, 4.5)
CACHE_ROOFS = [(access, level) for access in ("rw", "ro") for level in ("L1", "L2", "L3")]


@pytest.fixture(scope="module")
def calm_replays(tmp_path_factory) -> list[dict]:
    """The ceilings of the 20 seeds' replays without a disturbance."""
    base = tmp_path_factory.mktemp("calm")
    return [replay(seed, base / f"s{seed}") for seed in SEEDS]


@pytest.mark.slow  # 20 replays of a whole sweep: the fast tier keeps the one-replay tests below
def test_the_read_write_l2_roof_lands_in_the_fast_window_in_19_of_20_seeds(calm_replays):
    got = [roof(doc, "L2", "rw")["gbytes_per_s"] for doc in calm_replays]
    hits = sum(g >= 0.95 * FAST_RW for g in got)
    assert hits >= 19, [round(g) for g in got]
    # A calm host reads calm: no warning; a stretch only where one reading caught three bursts in a row (one region
    # in ten is slowed 10-40 %: a 6 ms reading of 3 regions now and then), re-measured at small cost.
    assert not any(w.startswith("the host was disturbed") for doc in calm_replays for w in doc["warnings"])
    short = [s for doc in calm_replays for s in doc["weather"]["stretches"]]
    assert len(short) <= 6 and all(s["sentinels"] == 1 for s in short), short


@pytest.mark.slow  # 20 replays of a whole sweep, disturbed, beside calm_replays' 20
def test_a_disturbed_stretch_is_named_and_the_cache_roofs_match_the_undisturbed_curve_in_19_of_20_seeds(
        calm_replays, tmp_path):
    """Issue 39: rates 15 % low for a stretch of the run's time (sentinels included). The sweep's sentinels find the
    stretch, its points are measured again once the host is calm, and in 19 of 20 seeds every cache roof (L1-L3,
    read+write and read-only) matches the undisturbed curve's within 3 %: the median of the 20 calm replays' roofs
    (one calm replay against another of the same curve differs by more than 3 % in about 3 seeds of 20: the noise
    of one replay, which the median leaves out; the calm replays themselves match it in 18 of 20).  The memory is
    left out:
    the recorded DRAM curve is a shared host's scattered tail (56-89 GB/s from one working set to the next), so
    where the adaptive plan samples it decides its roof."""
    curve = {key: statistics.median(roof(doc, key[1], key[0])["gbytes_per_s"] for doc in calm_replays)
             for key in CACHE_ROOFS}

    def off(doc: dict) -> dict:
        ratios = {f"{a} {lv}": round(roof(doc, lv, a)["gbytes_per_s"] / curve[(a, lv)], 3) for a, lv in CACHE_ROOFS}
        return {k: r for k, r in ratios.items() if abs(r - 1) > 0.03}

    assert sum(bool(off(doc)) for doc in calm_replays) <= 2
    misses = []
    for seed in SEEDS:
        doc = replay(seed, tmp_path / f"s{seed}", disturbed=DISTURBED)
        # Named: the stretch around the injected one (any other is one reading's burst, as in the calm replays).
        (stretch,) = [s for s in doc["weather"]["stretches"] if s["start_s"] < DISTURBED[1] and s["end_s"] > DISTURBED[0]]
        assert all(s["sentinels"] == 1 for s in doc["weather"]["stretches"] if s is not stretch)
        assert stretch["start_s"] < DISTURBED[0] + 0.2 and DISTURBED[1] - 0.2 < stretch["end_s"] < DISTURBED[1] + 1.6
        assert 0.70 <= stretch["lowest"] < 0.90  # 15 % slower, read by the sentinels (a burst may add to it)
        assert stretch["levels"] == ["L1", "L2", "L3"]  # a lasting disturbance slows every level's sentinel
        (warning,) = [w for w in doc["warnings"] if w.startswith("the host was disturbed")]
        assert f"{stretch['start_s']:.1f}-{stretch['end_s']:.1f} s" in warning
        assert doc["weather"]["points"]["measured_again"] > 5
        if off(doc):
            misses.append((seed, off(doc)))
    assert len(misses) <= 1, misses


def test_the_window_is_searched_off_the_grid_and_its_best_point_measured_again(tmp_path):
    doc = replay(0, tmp_path / "r")
    raw = read_raw(tmp_path / "r")
    l2 = roof(doc, "L2", "rw")
    # The search added points off the dense grid inside the fast window (the grid holds one there).
    grid = {p.wss_bytes for p in plan(from_dict(CONFIG), workers=THREADS, granule_elements_of=lambda s: 64)}
    assert all(p["launch"] == {"chains": 8} for p in raw.points)  # off the grid too: the grid's geometry
    off = [p for p in raw.points if p["wss_bytes"] not in grid and p["spec"]["access"] == "rw"
           and 450 * KIB <= p["wss_bytes"] / THREADS <= 710 * KIB]
    assert off
    # Every level's window has its fastest point measured again, as its own record.
    assert raw.confirms and all(c["type"] == "confirm" and c["point_id"] in {p["id"] for p in raw.points}
                                for c in raw.confirms)
    for access in ("rw", "ro"):
        for level in ("L1", "L2", "L3", "DRAM"):
            assert roof(doc, level, access).get("confirmed"), (level, access)
    assert l2["confirmed"]["gbytes_per_s"] == l2["gbytes_per_s"]
    # Complete: the plan's points all measured (its re-measurements counted apart), no "partial run".
    assert doc["metadata"]["points"]["planned"] == len(raw.points) == doc["metadata"]["points"]["measured"]
    assert raw.ends[-1]["planned_again"] == len(raw.confirms)
    assert not any("partial run" in w for w in doc["warnings"])
    # A resumed run replays the same plan: nothing left to measure.
    cfg = from_dict(CONFIG)
    before = len(raw.points) + len(raw.confirms)
    backend = RecordedCurveBackend(1)
    log = RawLog.open(tmp_path / "r", header=None, writes=True, data=read_raw(tmp_path / "r"))
    result = run_sweep(config=cfg, points=plan(cfg, workers=THREADS, granule_elements_of=lambda s: 64,
                                               launches_of=backend.launches),
                       log=log, backend=backend, comm=SerialComm())
    log.close()
    again = read_raw(tmp_path / "r")
    assert result.measured_now == 0 and len(again.points) + len(again.confirms) == before


@pytest.mark.parametrize("run", ["bare-r1", "bare-r2"])
def test_analysing_the_recorded_zen5_runs_roofs_read_write_l2_at_its_best_clean_window_point(run):
    raw = read_raw(DATA / run)
    doc = build(raw)
    l2 = roof(doc, "L2", "rw")
    window = [rates(p).gbytes_per_s for p in raw.points
              if p["spec"]["precision"] == "fp64" and p["spec"]["access"] == "rw" and p["spec"]["flops_per_element"] == 1
              and p["valid"] and not p["noisy"] and 2 * 96 * KIB <= p["wss_bytes"] <= 2 * 1024 * KIB]
    assert l2["gbytes_per_s"] >= 0.90 * max(window)   # was 879 / 944 and 733 / 971 before the rule
    assert l2["confirmed"]["by"] == "neighbour" and l2["range_gbytes_per_s"][0] < 700  # the slow stretch stays


class GeometriesBackend(RecordedCurveBackend):
    """The recorded curve at three launch geometries per working set, as a device backend measures each size at
    several blocks x threads: the best streams at the recorded rate, the others below it."""

    EFFICIENCY = {4: 0.85, 8: 1.0, 16: 0.90}

    def launches(self, spec, elements_per_thread: int) -> list[dict]:
        return [{"chains": c} for c in self.EFFICIENCY]

    def prepare(self, spec, *, elements_per_thread: int, launch=None) -> None:
        super().prepare(spec, elements_per_thread=elements_per_thread, launch=launch)
        self.rate *= self.EFFICIENCY[(launch or {"chains": 8})["chains"]]


def test_several_geometries_per_size_get_the_window_search_and_re_measurements_under_a_disturbance(tmp_path):
    """Issue 39: a curve with several launch geometries per size (the GPU path) is searched and measured again
    like a single-geometry one (it used to get neighbour confirmation only: read+write L2 at 0.82 of the fast
    window in every seed), on a host disturbed for a stretch."""
    got = []
    for seed in range(6):
        doc = replay(seed, tmp_path / f"s{seed}", disturbed=DISTURBED, backend_class=GeometriesBackend)
        raw = read_raw(tmp_path / f"s{seed}")
        assert doc["weather"]["stretches"][0]["start_s"] < DISTURBED[0] + 0.2  # the stretch is named
        for access in ("rw", "ro"):
            for level in ("L1", "L2", "L3", "DRAM"):
                entry = roof(doc, level, access)
                assert entry["gbytes_per_s"] == entry["confirmed"]["gbytes_per_s"]
                lo, hi = entry["wss_bytes"]  # a point of the level measured again (its roof may be a neighbour's)
                assert any(c["spec"]["access"] == access and lo <= c["wss_bytes"] <= hi for c in raw.confirms), (
                    seed, access, level)
        # The fast window searched off the grid, each point at the best geometry where the search started.
        grid = {p.wss_bytes for p in plan(from_dict(CONFIG), workers=THREADS, granule_elements_of=lambda s: 64)}
        off = [p for p in raw.points if p["wss_bytes"] not in grid]
        assert off and len({(p["spec"]["access"], p["wss_bytes"]) for p in off}) == len(off)
        assert sum(p["launch"] == {"chains": 8} for p in off) > len(off) / 2
        got.append(roof(doc, "L2", "rw")["gbytes_per_s"])
    assert sum(g >= 0.95 * FAST_RW for g in got) >= 5, [round(g) for g in got]
