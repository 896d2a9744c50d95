"""The sentinels' history between runs (ert.measure.history) and what the analysis does with it: a level that read
below its earlier runs' best all run is named and its ceilings flagged."""

from __future__ import annotations

from test_analysis_weather import _run, _sentinels, _timed_sweep, validate
from test_weather_rule import sentinel

from ert.measure.history import History, level_key, memory_key


def _key(level: str) -> str:
    return level_key(backend="numba-cpu", device="AMD EPYC (2 threads)", ranks=1, threads=2, level=level,
                     wss_bytes=32768, spec="fp64-add-rw-f1")


def test_a_level_keeps_its_best_over_runs_and_a_short_or_broken_history_is_none(tmp_path):
    path = tmp_path / "cache" / "sentinels.json"
    keys = {"L1": _key("L1"), "L2": _key("L2")}
    assert History(keys, path).earlier() == {}
    run1 = [sentinel(k, "L1", 100.0 + k, r) for k, r in enumerate([400, 420, 410])] + [sentinel(9, "L2", 101.0, 300)]
    History(keys, path).remember(run1)            # L2 read once: too few readings to keep
    assert History(keys, path).earlier() == {"L1": 420.0}
    run2 = [sentinel(k, "L1", 200.0 + k, r) for k, r in enumerate([300, 310, 305])]
    History(keys, path).remember(run2)            # a slower run keeps the earlier best
    assert History(keys, path).earlier() == {"L1": 420.0}
    assert History({"L1": _key("L1") + "-other"}, path).earlier() == {}  # another host, device or size: no history
    path.write_text("{not json")
    assert History(keys, path).earlier() == {}
    History(keys, path).remember(run2)            # a spoilt file is replaced
    assert History(keys, path).earlier() == {"L1": 310.0}


def test_a_run_below_its_earlier_best_all_run_is_flagged_and_warned():
    points = _timed_sweep()
    calm = _run(points, _sentinels(len(points)))  # every L1 reading 400 GB/s: no stretch in the run itself
    assert calm["weather"]["stretches"] == [] and not any(c.get("disturbed") for c in calm["ceilings"]["memory"])
    earlier = [{**s, "earlier_best_gbytes_per_s": 480.0} for s in _sentinels(len(points))]
    doc = _run(points, earlier)
    assert doc["weather"]["levels"]["L1"]["earlier_best_gbytes_per_s"] == 480.0
    # 400 of 480 (0.83): below the earlier best by more than the noise threshold, from start to end.
    assert all(c.get("disturbed") is True for c in doc["ceilings"]["memory"])
    (warning,) = [w for w in doc["warnings"] if w.startswith("the host was disturbed")]
    assert "throughout, as earlier runs here show: the L1 sentinel never read above 0.83 of its best in earlier " \
           "runs here (480 GB/s)" in warning
    assert doc["metadata"]["warning_codes"][0] == {"code": "host-disturbed", "group": "act"}
    within = [{**s, "earlier_best_gbytes_per_s": 430.0} for s in _sentinels(len(points))]  # 0.93: noise
    doc = _run(points, within)
    assert not any(c.get("disturbed") for c in doc["ceilings"]["memory"])
    assert not any(w.startswith("the host was disturbed") for w in doc["warnings"])


def test_the_earlier_best_goes_into_every_sentinel_record_of_its_level():
    from test_weather import FakeHost

    from ert.measure.weather import Settings, Weather

    host = FakeHost()
    sky = host.weather()
    weather = Weather(probe=host, sentinels=sky.sentinels, settings=Settings(), noise_threshold=0.10, ranks=1,
                      threads_per_rank=2, append=host.written.append, clock=lambda: host.now, wall=lambda: host.now,
                      earlier={"L1": 512.5})
    weather.start()
    weather.read("p")
    l1 = [r for r in host.written if r["level"] == "L1"]
    assert len(l1) == 2 and all(r["earlier_best_gbytes_per_s"] == 512.5 for r in l1)
    assert all("earlier_best_gbytes_per_s" not in r for r in host.written if r["level"] == "L2")


def _memory_key(curve: str) -> str:
    return memory_key(backend="numba-cpu", device="AMD EPYC (2 threads)", ranks=1, threads=2, curve=curve)


def test_a_curves_memory_roof_keeps_its_best_over_runs(tmp_path):
    path = tmp_path / "cache" / "sentinels.json"
    keys = {"fp64-rw": _memory_key("fp64-rw"), "fp32-rw": _memory_key("fp32-rw")}
    assert History({}, path, memory_keys=keys).earlier_memory() == {}
    History({}, path, memory_keys=keys).remember_memory({"fp64-rw": 61.6, "fp32-rw": 0.0, "fp64-ro": 40.0})
    assert History({}, path, memory_keys=keys).earlier_memory() == {"fp64-rw": 61.6}  # no zero, no unkeyed curve
    History({}, path, memory_keys=keys).remember_memory({"fp64-rw": 28.7})  # a slower run keeps the best
    assert History({}, path, memory_keys=keys).earlier_memory() == {"fp64-rw": 61.6}
    # The sentinels' history and the memory's share the file and never mix.
    assert History({"L1": _key("L1")}, path).earlier() == {}
    assert History({}, path, memory_keys={"fp64-rw": _memory_key("fp64-rw") + "-other"}).earlier_memory() == {}


def _with_memory_history(points, sentinels, best: float) -> dict:
    raw = _run(points, sentinels)  # the same run, then with an end record that carries the earlier best
    from ert.analysis.ceilings import build
    from ert.records.rawio import RawData

    header = {"metadata": {"threads_per_rank": 2, "ranks": 1, "config": {"timing": {"noise_threshold": 0.10}},
                           "caches_reported": raw["metadata"]["caches_reported"]}}
    ends = [{"interrupted": False, "measured": len(points), "weather": {"memory_earlier": {"fp64-ro": best}}}]
    return build(RawData(path=None, header=header, points=points, ends=ends, confirms=[], sentinels=sentinels))


def test_a_memory_roof_below_its_earlier_best_is_flagged_and_named():
    points = _timed_sweep()
    calm = _run(points, _sentinels(len(points)))
    (dram,) = [c for c in calm["ceilings"]["memory"] if c["level"] == "DRAM"]
    assert "disturbed" not in dram and not any(w.startswith("the host") for w in calm["warnings"])
    doc = _with_memory_history(points, _sentinels(len(points)), best=2 * dram["gbytes_per_s"])
    validate(doc)
    assert doc["weather"]["memory"] == {"fp64-ro": {"earlier_best_gbytes_per_s": round(2 * dram["gbytes_per_s"], 4)}}
    flagged = [c for c in doc["ceilings"]["memory"] if c.get("disturbed")]
    assert [c["level"] for c in flagged] == ["DRAM"]  # the caches' sentinels read calm: only the memory is named
    (warning,) = [w for w in doc["warnings"] if w.code == "host-disturbed"]
    assert f"the fp64 read-only DRAM roof is 0.50 of its best in earlier runs here ({2 * dram['gbytes_per_s']:.4g} " \
           f"GB/s)" in warning and "fp64 read-only DRAM was measured while disturbed" in warning
    within = _with_memory_history(points, _sentinels(len(points)), best=1.05 * dram["gbytes_per_s"])  # noise
    assert not any(c.get("disturbed") for c in within["ceilings"]["memory"])
    assert not any(w.code == "host-disturbed" for w in within["warnings"])
