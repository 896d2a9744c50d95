"""The weather's scheduling (ert.measure.weather) and a window's re-measurements (ert.measure.window_search) on a fake
clock: when the sentinels are read, what they cost, which points are measured again, and when."""

from __future__ import annotations

from dataclasses import replace

from ert.measure.window_search import MAX_AGAIN_PER_WINDOW, WindowSearch
from ert.measure.plan import Point
from ert.measure.weather import (SENTINEL_SAMPLES, Sentinel, Settings, Weather, by_weight, sentinel_sets)
from ert.spec import KernelSpec

KIB, MIB = 1024, 1024 * 1024
RW = KernelSpec("fp64", 1, False, "rw")


def test_each_sentinel_lies_well_inside_its_cache():
    # A Zen 4 guest, 2 threads: L1 2 x 32 KiB, L2 2 x 1 MiB, one 32 MiB L3 shared by 8 cpus.
    sets = dict(sentinel_sets([64 * KIB, 2 * MIB, 32 * MIB], workers=2, granule_elements=32, shared_last=True))
    assert list(sets) == ["L1", "L2", "L3"]
    aggregate = {level: n * 8 * 2 for level, n in sets.items()}
    assert aggregate["L1"] <= 32 * KIB                      # half of L1
    assert 2 * 64 * KIB < aggregate["L2"] < 2 * MIB / 2     # inside L2's window, well below its capacity
    assert 2 * 2 * MIB < aggregate["L3"] <= 32 * MIB / 4    # a shared L3: at most a quarter of it
    assert all(n % 32 == 0 for n in sets.values())
    # No room between L1 and an L2 twice its size: no L2 sentinel; no caches: none at all.
    assert [lv for lv, _ in sentinel_sets([64 * KIB, 128 * KIB], workers=2, granule_elements=32)] == ["L1"]
    assert sentinel_sets([], workers=2, granule_elements=32) == []


class FakeHost:
    """Fake time: a reading costs ``reading_seconds`` per level, a point ``point_seconds``; between ``slow`` (a
    (start, end) of fake seconds) every region runs ``factor`` times longer."""

    def __init__(self, *, point_seconds=0.1, reading_seconds=0.01, slow=(None, None), factor=1.25):
        self.now = 0.0
        self.point_seconds, self.reading_seconds = point_seconds, reading_seconds
        self.slow, self.factor = slow, factor
        self.records: dict[str, dict] = {}
        self.written: list[dict] = []
        self.remeasured: list[str] = []

    def slowed(self) -> bool:
        lo, hi = self.slow
        return lo is not None and lo <= self.now < hi

    # the probe
    def calibrate(self, s: Sentinel) -> int:
        self.now += self.reading_seconds
        return 1000

    def read(self, s: Sentinel, trials: int):
        self.now += self.reading_seconds
        seconds = 0.002 * (self.factor if self.slowed() else 1.0)
        return [seconds] * SENTINEL_SAMPLES, True

    # the sweep
    def measure(self, point: Point) -> None:
        self.now += self.point_seconds
        self.records[point.id] = {"type": "point", "id": point.id, "time": self.now}

    def remeasure(self, point: Point) -> None:
        self.remeasured.append(point.id)
        self.measure(point)

    def weather(self, **settings) -> Weather:
        sentinels = [Sentinel("L1", 32 * KIB, 2048), Sentinel("L2", 512 * KIB, 32768)]
        return Weather(probe=self, sentinels=sentinels, settings=Settings(**settings), noise_threshold=0.10,
                       ranks=1, threads_per_rank=2, append=self.written.append, clock=lambda: self.now,
                       wall=lambda: self.now, sleep=self.sleep)

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def sweep(self, weather: Weather, n: int) -> dict[str, Point]:
        points = {p.id: p for p in (Point(RW, 64 * KIB * (k + 1), 4096 * (k + 1)) for k in range(n))}
        weather.start()
        for point in points.values():
            self.measure(point)
            weather.after_point(point.id, self.records, self.remeasure, points.get)
        weather.finish(point.id, self.records, self.remeasure, points.get)
        return points


def test_readings_come_every_interval_and_stay_within_their_budget():
    host = FakeHost()
    weather = host.weather(every_seconds=0.5)
    host.sweep(weather, 100)  # 10 s of points
    readings = [r for r in host.written if r["type"] == "sentinel"]
    assert {r["level"] for r in readings} == {"L1", "L2"}
    times = [r["time"] for r in readings if r["level"] == "L1"]
    assert 18 <= len(times) <= 24                                     # about every 0.5 s, start and end
    assert all(b - a >= 0.5 for a, b in zip(times[:-2], times[1:-1]))
    assert [r["id"] for r in readings] == [f"sentinel-{k}" for k in range(len(readings))]
    assert readings[0]["after_point"] is None and readings[-1]["after_point"] is not None
    assert weather.reading_seconds <= 0.10 * host.now and not host.remeasured  # calm: nothing measured again


def test_readings_that_cost_more_than_the_budget_come_less_often():
    host = FakeHost(reading_seconds=0.05)   # 0.1 s a reading: every 0.5 s would take 20 % of the run
    weather = host.weather(every_seconds=0.5, budget=0.10)
    host.sweep(weather, 100)
    # Within the budget, but for the fixed readings: calibration and the first reading, and the last.
    assert weather.reading_seconds <= 0.10 * host.now + 0.3
    assert 5 <= sum(1 for r in host.written if r["level"] == "L1") <= 14
    assert weather.summary()["sentinel_seconds"] == round(weather.reading_seconds, 3)


def test_points_measured_in_a_disturbed_stretch_are_measured_again_once_it_is_calm():
    host = FakeHost(slow=(3.0, 4.0))        # rates 20 % low from 3 to 4 s of a 10 s sweep
    weather = host.weather(every_seconds=0.5, remeasure_budget=0.3)
    first_times: dict[str, float] = {}
    original = host.measure

    def measure(point):
        original(point)
        first_times.setdefault(point.id, host.now)
    host.measure = measure
    host.sweep(weather, 100)
    again = set(host.remeasured)
    # Every point written inside the slow stretch, and no point written well outside it.
    assert {pid for pid, t in first_times.items() if 3.1 <= t <= 3.9} <= again
    assert not {pid for pid, t in first_times.items() if t < 2.4 or t > 4.6} & again
    # Measured again after the host was calm, within the budget.
    assert all(host.records[pid]["time"] > 4.0 for pid in again)
    assert weather.remeasure_seconds <= 0.3 * host.now + host.point_seconds


def test_measuring_suspect_points_again_stays_within_its_budget():
    host = FakeHost(slow=(1.0, 6.0))        # half the sweep disturbed
    weather = host.weather(every_seconds=0.5, remeasure_budget=0.15)
    host.sweep(weather, 100)
    assert host.remeasured and weather.remeasure_seconds <= 0.15 * host.now + host.point_seconds
    assert weather.summary()["remeasured_points"] == len(host.remeasured)


def test_a_host_that_stays_disturbed_leaves_its_suspect_points_within_the_budget():
    host = FakeHost(slow=(6.0, 1e9))        # slow from 6 s to the end: it never recovers
    weather = host.weather(every_seconds=0.5)
    host.sweep(weather, 100)
    assert not host.remeasured              # never calm again: nothing measured again
    assert not weather.calm()
    # It waited for the host to recover, but no longer than the re-measuring budget allows.
    assert 0 < weather.remeasure_seconds <= Settings().remeasure_budget * host.now + 0.5 + 0.1


def test_a_resumed_run_continues_the_sentinel_count():
    host = FakeHost()
    first = host.weather()
    first.start()
    resumed = Weather(probe=host, sentinels=first.sentinels, settings=Settings(), noise_threshold=0.1, ranks=1,
                      threads_per_rank=2, append=host.written.append, previous=list(first.records),
                      clock=lambda: host.now, wall=lambda: host.now)
    resumed.start()
    assert [r["id"] for r in host.written] == [f"sentinel-{k}" for k in range(4)]


# ---------------------------------------------------------------------------- a window's re-measurements
def _rec(point: Point, gbs: float, t: float, *, noisy=False, again=0) -> dict:
    elements = point.wss_bytes // 8
    seconds = elements * 16 / (gbs * 1e9)
    rec = {"type": "confirm" if again else "point", "id": replace(point, again=again).id, "spec": RW.to_dict(),
           "wss_bytes": point.wss_bytes, "elements": elements, "trials": 1, "valid": True, "noisy": noisy,
           "seconds": {"min": seconds, "median": seconds, "max": seconds}, "time": t}
    return rec


def _window():
    """One L2-like window (256 KiB - 2 MiB) of a grid of five points: p1 fastest, then p2, p3."""
    curve = [Point(RW, w * KIB, w * KIB // 16) for w in (256, 512, 768, 1024, 1536)]
    search = WindowSearch([curve], [(256 * KIB, 2 * MIB)], granule_bytes=None, noise_threshold=0.10)
    rates = dict(zip(curve, (300.0, 440.0, 420.0, 400.0, 320.0)))
    known = {p.id: _rec(p, g, t) for t, (p, g) in enumerate(rates.items())}
    return search, curve, known


def test_the_fastest_point_is_measured_again_first_then_the_next_when_it_did_not_reproduce():
    search, curve, known = _window()
    chosen = {p.id: p for p in curve}
    p1, p2 = curve[1], curve[2]
    assert search.again(known, chosen) == [replace(p1, again=1)]
    # Measured again calm and clean at 300 GB/s: not reproduced, so the next-fastest goes next.
    known[replace(p1, again=1).id] = _rec(p1, 300.0, 10, again=1)
    known[curve[0].id]["time"] = 11  # another point measured since
    assert search.again(known, chosen) == [replace(p2, again=1)]
    # It reproduces: the window is done.
    known[replace(p2, again=1).id] = _rec(p2, 410.0, 12, again=1)
    assert search.again(known, chosen) == []


def test_a_re_measurement_in_a_disturbed_stretch_is_retried_later_not_back_to_back():
    search, curve, known = _window()
    chosen = {p.id: p for p in curve}
    p1, p2 = curve[1], curve[2]
    known[replace(p1, again=1).id] = _rec(p1, 300.0, 10, again=1)
    disturbed = {replace(p1, again=1).id}

    def suspect(rec):
        return rec["id"] in disturbed
    # p1's re-measurement was the run's latest measurement: never straight again; the next-fastest goes first.
    assert search.again(known, chosen, suspect) == [replace(p2, again=1)]
    known[replace(p2, again=1).id] = _rec(p2, 200.0, 11, again=1)
    disturbed.add(replace(p2, again=1).id)
    # Now p1 (the fastest, whose only re-measurement was disturbed) is tried again.
    assert search.again(known, chosen, suspect) == [replace(p1, again=2)]
    known[replace(p1, again=2).id] = _rec(p1, 436.0, 12, again=2)
    assert search.again(known, chosen, suspect) == []   # reproduced at another time


def test_a_rate_that_two_re_measurements_agree_on_is_reproduced_though_the_first_read_low():
    # The run 1: the fastest point read 399 (the host was slow then), its re-measurement 444 but noisy.
    search, curve, known = _window()
    chosen = {p.id: p for p in curve}
    p1 = curve[1]
    known[p1.id] = _rec(p1, 399.0, 1)
    known[curve[2].id] = _rec(curve[2], 380.0, 2)
    known[replace(p1, again=1).id] = _rec(p1, 444.0, 10, noisy=True, again=1)
    known[curve[0].id]["time"] = 11
    # Its best reading is the window's fastest, and a noisy re-measurement is no failure: it is tried again.
    assert search.again(known, chosen) == [replace(p1, again=2)]
    known[replace(p1, again=2).id] = _rec(p1, 447.0, 12, again=2)
    assert search.again(known, chosen) == []


def test_a_window_stops_when_its_budget_is_spent():
    search, curve, known = _window()
    chosen = {p.id: p for p in curve}
    t = 100
    made = 0
    while batch := search.again(known, chosen):
        (point,) = batch
        known[point.id] = _rec(point, 100.0, t, again=point.again)  # never reproduces
        t += 1
        known[curve[0].id]["time"] = t  # other work between
        t += 1
        made += 1
        assert made <= MAX_AGAIN_PER_WINDOW
    assert made == MAX_AGAIN_PER_WINDOW


def test_a_trial_count_calibrated_under_load_grows_once_regions_run_short():
    host = FakeHost()
    host.read = lambda s, trials: ([0.0005 * trials / 1000] * SENTINEL_SAMPLES, True)  # 0.5 ms at the count
    weather = host.weather()
    weather.start()
    weather.read(None)
    first, second = [[r["trials"] for r in host.written if r["level"] == "L1"][k] for k in (0, 1)]
    assert (first, second) == (1000, 4000)  # the second reading's regions last 2 ms


def test_a_re_measurement_waits_for_a_calm_host_within_the_budget():
    host = FakeHost(slow=(1.0, 2.0))
    weather = host.weather(every_seconds=0.5)
    weather.start()
    host.now = 1.2
    weather.read("p")                 # disturbed now
    host.now = 10.0                   # ... after 10 s of sweep: 2.5 s of re-measuring budget
    host.slow = (1.0, 11.0)           # still disturbed until 11 s
    weather.wait_calm("p~again1")
    assert weather.calm() and 11.0 <= host.now <= 11.6   # it waited for the calm reading, no longer
    host.slow = (0.0, 1e9)
    weather.read("q")
    start = host.now
    weather.wait_calm("q~again1")     # never calm again: it gives up when the budget is spent
    assert not weather.calm() and weather.remeasure_seconds <= Settings().remeasure_budget * host.now + 0.6 and host.now > start


def _mixed(n_per_kernel: int) -> list[Point]:
    """A sweep's points in its order: the bandwidth kernel, then FMA kernels of 8, 32 and 128 FLOPs per element
    (fp64), each at ``n_per_kernel`` working sets."""
    specs = [RW] + [KernelSpec("fp64", f, True, "rw") for f in (8, 32, 128)]
    return [Point(spec, 64 * KIB * (k + 1), 4096 * (k + 1)) for spec in specs for k in range(n_per_kernel)]


def test_suspect_points_a_ceiling_rests_on_come_first():
    points = _mixed(3)
    ordered = by_weight(list(reversed(points)))
    flops = [p.spec.flops_per_element for p in ordered]
    assert sorted(flops[:6]) == [1, 1, 1, 128, 128, 128]   # bandwidth and the family's peak candidates
    assert flops[6:] == [32, 32, 32, 8, 8, 8]                # then the rest, most FLOPs first
    assert by_weight([]) == []


def test_a_short_budget_measures_the_points_a_ceiling_rests_on_again_first():
    # The FMA kernels (8, 32 and 128 FLOPs per element, 2 s each after 2 s of bandwidth points) measured while the
    # host was slow: the budget reaches the 128-FLOP points (the peak's) before the 8- and 32-FLOP ones, measured
    # earlier in the sweep.
    host = FakeHost(slow=(2.05, 8.0))
    weather = host.weather(every_seconds=0.5, remeasure_budget=0.1)
    points = {p.id: p for p in _mixed(20)}
    weather.start()
    for point in points.values():
        host.measure(point)
        weather.after_point(point.id, host.records, host.remeasure, points.get)
    weather.finish(point.id, host.records, host.remeasure, points.get)
    again = [points[i].spec.flops_per_element for i in host.remeasured]
    assert 0 < len(again) < 40, again       # the budget ran out before every suspect point
    fma = [f for f in again if f != 1]     # (the stretch also takes in the last bandwidth points)
    assert len(fma) >= 5 and fma == [128] * len(fma), again
