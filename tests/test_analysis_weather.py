"""The host's weather in the ceilings (ert.analysis.weather): suspect points, flagged ceilings, one warning."""

from __future__ import annotations

from test_analysis_ceilings import RO, RO_LEVELS, ZEN4_CACHES, sweep
from test_weather_rule import sentinel

import json
from importlib import resources

import jsonschema

from ert.analysis.ceilings import build
from ert.records.rawio import RawData, confirm_record
from ert.spec import rates

T0 = 1_700_000_000.0
STEP = 0.1  # seconds between points


def validate(doc: dict) -> None:
    """The weather block and the flags against the ceilings schema (the synthetic header has no metadata to check)."""
    schema = json.loads(resources.files("ert.schemas").joinpath("ceilings-1.schema.json").read_text())
    for part, value in [("weather", doc["weather"])] + [("memory", c) for c in doc["ceilings"]["memory"]]:
        sub = schema["properties"]["weather"] if part == "weather" else schema["$defs"]["memory_ceiling"]
        jsonschema.validate(value, {**sub, "$defs": schema["$defs"]})


def _run(points: list[dict], sentinels: list[dict], confirms=(), rated: dict | None = None) -> dict:
    header = {"metadata": {"threads_per_rank": 2, "ranks": 1, "config": {"timing": {"noise_threshold": 0.10}},
                           **({"backend_info": {"rated": rated}} if rated else {}),
                           "caches_reported": [dict(level=c.level, kind=c.kind, size_bytes=c.size_bytes,
                                                    shared_cpu_count=c.shared_cpu_count) for c in ZEN4_CACHES]}}
    return build(RawData(path=None, header=header, points=points, ends=[], confirms=list(confirms),
                         sentinels=sentinels))


def _timed_sweep(order: list[int] | None = None) -> list[dict]:
    """The read-only Zen 4 curve, its points measured STEP apart (in ``order``, working-set order by default)."""
    points = sweep(RO, RO_LEVELS)
    order = order or list(range(len(points)))
    for k, i in enumerate(order):
        points[i] = {**points[i], "time": T0 + (k + 1) * STEP}
    return points


def _sentinels(n_points: int, low: tuple[float, float] = (), ratio: float = 0.8, every: float = 0.5) -> list[dict]:
    """L1 sentinels every ``every`` s over the run, reading ``ratio`` of 400 GB/s from low[0] to low[1] s."""
    out, t, n = [], 0.0, 0
    while t <= (n_points + 1) * STEP + every:
        slow = bool(low) and low[0] <= t <= low[1]
        out.append(sentinel(n, "L1", T0 + t + 0.01, 400.0 * (ratio if slow else 1.0)))
        t, n = t + every, n + 1
    return out


def test_a_calm_run_has_its_weather_and_no_warning():
    points = _timed_sweep()
    doc = _run(points, _sentinels(len(points)))
    validate(doc)
    weather = doc["weather"]
    assert weather["stretches"] == [] and weather["disturbed_seconds"] == 0
    assert weather["levels"]["L1"]["lowest"] == 1.0 and weather["levels"]["L1"]["best_gbytes_per_s"] == 400.0
    assert len(weather["series"]["L1"]) == weather["levels"]["L1"]["readings"] > 10
    assert not any(w.startswith("the host was disturbed") for w in doc["warnings"])
    assert "weather" not in _run(points, [])  # no sentinels, no weather


def test_a_level_measured_only_while_disturbed_is_flagged_and_named_in_one_warning():
    points = _timed_sweep()
    # The L1 points (the first of the sweep) measured in a stretch from 0.01 s to 1.51 s.
    when = {p["id"]: p["time"] - T0 for p in points}
    doc = _run(points, _sentinels(len(points), low=(0.4, 1.1)))
    validate(doc)
    (stretch,) = doc["weather"]["stretches"]
    assert (stretch["start_s"], stretch["end_s"], stretch["lowest"]) == (0.0, 1.5, 0.8)
    assert stretch["levels"] == ["L1"] and stretch["open"] == [False, False]
    (entry,) = [c for c in doc["ceilings"]["memory"] if c["level"] == "L1"]
    assert entry["disturbed"] is True and "confirmed" not in entry
    assert all(0.01 < when[i] < 1.51 for i in entry["evidence"]["point_ids"])
    assert not any(c.get("disturbed") for c in doc["ceilings"]["memory"] if c["level"] != "L1")
    (warning,) = [w for w in doc["warnings"] if w.startswith("the host was disturbed")]
    assert doc["warnings"][0] == warning
    assert doc["metadata"]["warning_codes"][0] == {"code": "host-disturbed", "group": "act"}
    total = doc["weather"]["seconds"]
    assert warning == (f"the host was disturbed for 1.5 of {total:.1f} s (0.0-1.5 s; L1 sentinel down to 0.80 of its "
                       f"best): 0 points measured again, {doc['weather']['points']['suspect']} left suspect; fp64 "
                       f"read-only L1 was measured while disturbed: what other work left, not the machine's ceiling; "
                       f"measure again when the host is quiet")


def test_a_re_measurement_inside_a_stretch_confirms_nothing_and_refutes_nothing():
    points = _timed_sweep()
    k = min(range(len(points)), key=lambda i: abs(points[i]["wss_bytes"] - (1 << 20)))  # an L2 point, 1.2 x
    fast = points[k] = {**points[k], "seconds": {key: v / 1.2 for key, v in points[k]["seconds"].items()}}
    end = points[-1]["time"] - T0

    def again(at: float, factor: float) -> dict:
        return {**confirm_record(measured={**fast, "seconds": {key: v / factor for key, v in fast["seconds"].items()}},
                                 point_id=fast["id"]), "time": T0 + at}

    sentinels = _sentinels(len(points) + 20, low=(end + 0.9, end + 1.6))
    calm = _run(points, sentinels, [again(end + 0.5, 0.97)])
    (l2,) = [c for c in calm["ceilings"]["memory"] if c["level"] == "L2"]
    assert l2["gbytes_per_s"] == round(rates(fast).gbytes_per_s, 4) and l2["confirmed"]["by"] == "measured again"
    # The same re-measurement taken inside the stretch: no confirmation; one reading the level's own rate there
    # is no failed reproduction either (the planner tries it again).
    for factor in (0.97, 1 / 1.2):
        doc = _run(points, sentinels, [again(end + 1.2, factor)])
        (l2,) = [c for c in doc["ceilings"]["memory"] if c["level"] == "L2"]
        assert l2["gbytes_per_s"] < 0.95 * rates(fast).gbytes_per_s
        assert not any("not reproduced" in w for w in doc["warnings"])


def test_one_lone_low_reading_is_a_stretch_but_no_warning():
    # One L1 reading at 0.8 (three bursts of other work in a row inside a few milliseconds, say) in the middle of
    # the run: a stretch of 1 s of 5.5 (18 %), its points re-measured by the planner, but no "act on it" warning.
    points = _timed_sweep()
    doc = _run(points, _sentinels(len(points), low=(2.4, 2.6)))
    (stretch,) = doc["weather"]["stretches"]
    assert stretch["sentinels"] == 1 and doc["weather"]["disturbed_seconds"] >= 0.10 * doc["weather"]["seconds"]
    assert not any(c.get("disturbed") for c in doc["ceilings"]["memory"])
    assert not any(w.startswith("the host was disturbed") for w in doc["warnings"])


def _rated(l1_gbytes_per_s: float) -> dict:
    """A device-style rated block (not per core): the L1 read+write and read-only rates, one fp64 FMA peak."""
    return {"memory": [{"level": "L1", "access": access, "gbytes_per_s": l1_gbytes_per_s, "derivation": "given"}
                       for access in ("rw", "ro")],
            "compute": [{"precision": "fp64", "fma": True, "gflops_per_s": 100.0, "derivation": "given"}]}


def test_a_run_disturbed_throughout_is_caught_against_the_rated_l1_rate():
    # Every L1 sentinel reads 400 GB/s: no reading is low against the run's best, so no stretch. Against a rated
    # L1 read+write rate of 1000 GB/s (0.40) the whole run was disturbed: every memory level is flagged, one
    # warning says so; at 600 GB/s (0.67, above the 0.6 a calm kernel clears) nothing is said.
    points = _timed_sweep()
    doc = _run(points, _sentinels(len(points)), rated=_rated(1000.0))
    assert doc["weather"]["stretches"] == []
    memory = doc["ceilings"]["memory"]
    assert memory and all(c.get("disturbed") is True for c in memory)
    (warning,) = [w for w in doc["warnings"] if w.startswith("the host was disturbed")]
    assert doc["warnings"][0] == warning and "disturbed throughout" in warning
    assert "0.40 of the rated L1 read+write rate (1000 GB/s)" in warning
    assert f"{len(memory)} ceilings flagged" in warning
    assert doc["metadata"]["warning_codes"][0] == {"code": "host-disturbed", "group": "act"}
    calm = _run(points, _sentinels(len(points)), rated=_rated(600.0))
    assert not any(c.get("disturbed") for c in calm["ceilings"]["memory"])
    assert not any(w.startswith("the host was disturbed") for w in calm["warnings"])


def test_a_roof_measured_mostly_while_disturbed_is_flagged_though_a_calm_point_lies_beside_it():
    # The L1 points measured in a stretch (0.4-1.1 s), but the last of them measured again 3 s later, calm: the
    # roof still rests mostly on suspect points, so it is flagged; with most of them calm, it is not.
    points = _timed_sweep()
    calm_doc = _run(points, _sentinels(len(points)))
    (l1,) = [c for c in calm_doc["ceilings"]["memory"] if c["level"] == "L1"]
    ids = l1["evidence"]["point_ids"]
    assert len(ids) >= 3
    end = points[-1]["time"]
    late = {ids[-1]: end + 3.0}
    moved = [{**p, "time": late.get(p["id"], p["time"])} for p in points]
    doc = _run(moved, _sentinels(len(points) + 40, low=(0.4, 1.1)))
    (entry,) = [c for c in doc["ceilings"]["memory"] if c["level"] == "L1"]
    assert entry["disturbed"] is True
    mostly_calm = {i: end + 3.0 + k for k, i in enumerate(ids[: len(ids) // 2 + 1])}
    moved = [{**p, "time": mostly_calm.get(p["id"], p["time"])} for p in points]
    doc = _run(moved, _sentinels(len(points) + 60, low=(0.4, 1.1)))
    (entry,) = [c for c in doc["ceilings"]["memory"] if c["level"] == "L1"]
    assert "disturbed" not in entry


def test_a_run_disturbed_most_of_its_time_flags_a_confirmed_roof_too():
    from ert.analysis.weather import MOSTLY_SHARE, flag_disturbed, mostly_disturbed, stretches_of

    points = _timed_sweep()
    sentinels = _sentinels(len(points), low=(0.4, 1.1))
    stretches = stretches_of(sentinels, 0.10)
    inside = [p for p in points if any(s.start <= p["time"] <= s.end for s in stretches)]
    assert len(inside) >= 3
    entry = {"level": "L1", "evidence": {"point_ids": [p["id"] for p in inside]},
             "confirmed": {"gbytes_per_s": 400.0, "by": "neighbour"}}
    by_id = {p["id"]: p for p in points}
    # A rate the run confirmed (two measurements that agree) stands in a run calm enough to trust its calm moments...
    assert flag_disturbed([dict(entry)], by_id, stretches, mostly=False) == []
    # ... not in one disturbed for most of its time: its points were read while disturbed, confirmed or not.
    (flagged,) = flag_disturbed([dict(entry)], by_id, stretches, mostly=True)
    assert flagged["disturbed"] is True
    assert mostly_disturbed({"seconds": 61.0, "disturbed_seconds": 60.0})
    assert not mostly_disturbed({"seconds": 46.0, "disturbed_seconds": MOSTLY_SHARE * 46.0 - 0.5})
    assert not mostly_disturbed(None)
    # End to end: the sentinels low all run but for one calm second in the L2 points' time (as the busy Zen 4 run
    # had): the L2 roof confirmed there by neighbours is flagged with the rest.
    readings = [sentinel(n, "L1", T0 + 0.01 + 0.25 * n, 400.0 * (1.0 if 1.25 <= 0.25 * n <= 1.5 else 0.8))
                for n in range(int((len(points) + 2) * STEP / 0.25))]
    doc = _run(points, readings)
    assert doc["weather"]["disturbed_seconds"] >= MOSTLY_SHARE * doc["weather"]["seconds"]
    (l2,) = [c for c in doc["ceilings"]["memory"] if c["level"] == "L2"]
    assert l2["confirmed"]["by"] == "neighbour" and l2["disturbed"] is True


def test_a_ceiling_near_its_rated_value_is_never_flagged():
    """A disturbance cannot have held down by more than 5 % a ceiling that reads 0.95 of what the hardware can
    physically do: in every rule (a disturbed stretch, below earlier runs, disturbed throughout) it stays unflagged."""
    from ert.analysis.weather import (NEAR_RATED_SHARE, flag_below_earlier, flag_disturbed, flag_throughout,
                                      near_rated, stretches_of)

    points = _timed_sweep()
    stretches = stretches_of(_sentinels(len(points), low=(0.4, 1.1)), 0.10)
    inside = [p["id"] for p in points if any(s.start <= p["time"] <= s.end for s in stretches)]
    by_id = {p["id"]: p for p in points}

    def entry(ratio: float | None) -> dict:
        return {"level": "L1", "evidence": {"point_ids": inside}, "rated": {"gbytes_per_s": 400.0, "ratio": ratio}}

    near, low, unrated = entry(NEAR_RATED_SHARE), entry(NEAR_RATED_SHARE - 0.01), entry(None)
    assert near_rated(near) and not near_rated(low) and not near_rated(unrated)
    assert flag_disturbed([near, low, unrated], by_id, stretches, mostly=True) == [low, unrated]
    assert flag_below_earlier([dict(near), dict(low)], {"L1": (0.8, 450.0)}) == [low]
    peak = {"precision": "fp64", "fma": True, "rated": {"gflops_per_s": 100.0, "ratio": 0.97}}
    assert flag_throughout([dict(near), dict(low), peak]) == [low]
    assert "disturbed" not in near and "disturbed" not in peak
