"""The driver: the only loop over points; calibrates, repeats, checks and streams each one to raw.jsonl."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ert.measure import timing as timing_engine
from ert.measure.adaptive import AdaptivePlanner
from ert.config.schema import RunConfig, Timing
from ert.measure.progress import Progress
from ert.measure.window_search import level_windows
from ert.records.rawio import confirm_record, point_record
from ert.records.rawlog import RawLog
from ert.measure.plan import Point, interleaved


# Calibration never asks for more trials than this (a guard against a timer
# that reports zero); 2**40 trials of even one element is days of work.
MAX_TRIALS = 1 << 40


@dataclass
class Measurement:
    """The timed result of one point, before it becomes a raw record."""

    trials: int
    samples: list[float]          # seconds of each repeat (slowest rank's), best attempt
    spread: float                 # timing_spread of the samples (ert.spec)
    noisy: bool
    remeasured: int               # attempts after the first, set once the loop ends
    rank_seconds: list[list[float]] = field(default_factory=list)  # per repeat: every rank's seconds
    host_seconds: list[dict[str, float]] = field(default_factory=list)  # per repeat: each host's (2+ hosts)
    serialized: int = 0           # regions (of all attempts) timed over a host's span: its ranks took turns


# Ranks of one host ran together when their regions, on the host's clock, span at most this much more
# than the slowest region (barrier exit skew is microseconds against regions of milliseconds).
CONCURRENT_SLACK = 1.10


def region_seconds(everyone: list[tuple[float, float]], hosts: list[str] | None) -> tuple[float, bool]:
    """The seconds all ranks' work of one region took, and whether some host's ranks ran one after another.

    ``everyone[r]`` is rank r's (seconds, end) with ``end`` read from the
    host's monotonic clock as its region finished; ``hosts[r]`` its host.
    Normally the slowest rank's seconds.  But ranks that share cores (more
    ranks than cores, or an oversubscribed test cluster) can each run their
    whole region while the others wait, and every rank then times a full
    core: summed, their work would sit above what the host can do.  So where
    a host's ranks span (first start to last end) more than CONCURRENT_SLACK x
    the slowest region, that span is the region's time.
    """
    slowest = max(s for s, _ in everyone)
    if not hosts or len(hosts) != len(everyone):
        return slowest, False
    spans: dict[str, list[float]] = {}
    for (seconds, end), host in zip(everyone, hosts):
        lo_hi = spans.setdefault(host, [end - seconds, end])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], end - seconds), max(lo_hi[1], end)
    span = max(hi - lo for lo, hi in spans.values())
    if span > CONCURRENT_SLACK * slowest:
        return span, True
    return slowest, False


def host_region_seconds(everyone: list[tuple[float, float]], hosts: list[str]) -> dict[str, float]:
    """Each host's seconds of one region, by the rule of ``region_seconds`` applied to its own ranks.

    Its slowest rank's seconds, or the span of its ranks where they took turns.
    A host's ceilings (``ert.analysis.hosts``) are its own ranks' work over these.
    """
    out: dict[str, list[float]] = {}
    for (seconds, end), host in zip(everyone, hosts):
        row = out.setdefault(host, [seconds, end - seconds, end])
        row[0], row[1], row[2] = max(row[0], seconds), min(row[1], end - seconds), max(row[2], end)
    return {host: (hi - lo if hi - lo > CONCURRENT_SLACK * slowest else slowest)
            for host, (slowest, lo, hi) in out.items()}


def _timed(backend, comm, trials: int, host_rows: list | None = None) -> tuple[float, list[float], bool]:
    """One timed region on every rank after a barrier: (its seconds, every rank's seconds, serialized).

    The slowest rank decides: aggregate rates are all ranks' work over it --
    or over the span of a host whose ranks did not run at the same time
    (``region_seconds``; ``serialized`` is then true).  A run on 2+ hosts
    appends each host's own seconds of the region to ``host_rows`` when given.
    """
    comm.barrier()
    seconds = backend.run(trials)
    end = time.perf_counter()
    if comm.size == 1:
        return seconds, [seconds], False
    everyone = comm.allgather((seconds, end))
    hosts = getattr(comm, "hosts", None)
    region, serialized = region_seconds(everyone, hosts)
    if host_rows is not None and hosts and len(hosts) == len(everyone) and len(set(hosts)) > 1:
        host_rows.append(host_region_seconds(everyone, hosts))
    return region, [s for s, _ in everyone], serialized


def calibrate(backend, comm, *, min_seconds: float, start_trials: int = 1) -> tuple[int, float]:
    """Double the trial count until a timed region (the slowest rank's) lasts at least ``min_seconds``.

    ``ert.measure.timing.calibrate`` with ``confirm``: a region that reaches
    ``min_seconds`` is timed once more and the faster of the two decides.
    ``start_trials`` (a guess from a similar point) skips the first doublings.
    Returns (trials, seconds of the faster last run).
    """
    return timing_engine.calibrate(lambda n: _timed(backend, comm, n)[0], min_seconds=min_seconds,
                                   start=start_trials, max_count=MAX_TRIALS, confirm=True, jump=False)


def measure(backend, comm, *, timing: Timing, start_trials: int = 1) -> Measurement:
    """Calibrate, then time ``repeats`` regions (the calibration's last regions the first of them); re-measure a
    noisy point a bounded number of times.

    Of the attempts, the one with the smallest spread is kept: the others were
    disturbed by something outside the kernel.

    With a timing budget (``timing.min_repeats``), each attempt starts with
    ``min_repeats`` regions and stops there when they agree within half the
    noise threshold; otherwise regions are added up to ``repeats``.  A noisy
    attempt is followed by one with regions twice as long (a short disturbance
    then weighs half as much), and ``max_point_seconds`` caps the timed work:
    a point still noisy when the budget runs out is flagged, never dropped.
    """
    log: list[tuple] = []  # per timed region, in call order: (every rank's seconds, ranks took turns, host row)

    def timed(count: int) -> float:
        host: list[dict[str, float]] = []
        region, everyone, turns = _timed(backend, comm, count, host)
        log.append((everyone, turns, host[0] if host else None))
        return region

    kept: list[float] = []
    trials, _ = timing_engine.calibrate(timed, min_seconds=timing.min_seconds, start=start_trials,
                                        max_count=MAX_TRIALS, confirm=True, jump=False, kept=kept)
    # The calibration's regions at the count it chose are the first samples (ert.measure.timing.sample).
    first_samples = timing.min_repeats if timing.min_repeats is not None else timing.repeats
    del log[:len(log) - len(kept)]
    del log[first_samples:], kept[first_samples:]
    got = timing_engine.sample(timed, trials, samples=timing.repeats, noise_threshold=timing.noise_threshold,
                               max_remeasure=timing.max_remeasure, min_samples=timing.min_repeats,
                               max_seconds=timing.max_point_seconds, min_seconds=timing.min_seconds,
                               max_count=MAX_TRIALS, initial=kept)
    rows = [everyone for everyone, _, _ in log]
    serialized = sum(turns for _, turns, _ in log)  # regions (of all attempts) whose ranks on one host took turns
    host_rows = [row for _, _, row in log if row is not None]  # each host's seconds per region (2+ hosts)
    first, end = got.calls
    return Measurement(got.count, list(got.seconds), got.spread, got.noisy, got.attempts - 1,
                       [list(r) for r in rows[first:end]],
                       host_seconds=host_rows[first:end] if len(host_rows) == len(rows) else [],
                       serialized=serialized)


@dataclass
class SweepResult:
    planned: int
    measured_now: int
    interrupted: bool
    wall_seconds: float
    history: object = None  # the run's ert.measure.history.History (rank 0): the analysed memory roofs go there


def _interleave_batch(batch: list[Point]) -> list[Point]:
    """A batch in the sweep's interleaved order within each kernel, kernels in plan order."""
    by_spec: dict = {}
    for p in batch:
        by_spec.setdefault(p.spec, []).append(p)
    out = []
    for pts in by_spec.values():
        pts.sort(key=lambda p: p.wss_bytes)
        out += [pts[i] for i in interleaved(len(pts))]
    return out


def _cache_infos(caches: list[dict] | None) -> list:
    """The backend's cache hints (``describe()["caches"]``) as CacheInfo, data and unified only; None: this host's."""
    from ert.hardware import hwinfo

    if caches:
        caches = [hwinfo.CacheInfo(level=c["level"], kind=c.get("kind", "Unified"), size_bytes=c["size_bytes"],
                                   shared_cpu_count=c.get("shared_cpu_count", 1)) for c in caches]
    else:
        caches = hwinfo.read_cpu_caches()
    return [c for c in caches if c.kind != "Instruction"]


def cache_windows(caches: list[dict] | None, workers: int) -> list[tuple[int, int]]:
    """(low, high) aggregate working sets inside each cache after the first: 2 x the cache before it up to its own.

    The same windows the analysis judges a cache level's regimes over (ert.analysis.regimes), so the
    planner samples them densely enough to find the best regime, not only the breaks.
    """
    from ert.hardware import hwinfo

    by_level: dict[int, int] = {}
    for c in _cache_infos(caches):
        by_level[c.level] = max(by_level.get(c.level, 0), hwinfo.aggregate_capacity_bytes(c, workers))
    levels = sorted(by_level)
    return [(2 * by_level[a], by_level[b]) for a, b in zip(levels, levels[1:]) if 2 * by_level[a] < by_level[b]]


def _capacities(caches: list[dict] | None, workers: int) -> list[int]:
    """The aggregate capacity of each cache level (data and unified), as the analysis names the levels."""
    from ert.hardware import hwinfo

    by_level: dict[int, int] = {}
    for c in _cache_infos(caches):
        by_level[c.level] = max(by_level.get(c.level, 0), hwinfo.aggregate_capacity_bytes(c, workers))
    return [by_level[k] for k in sorted(by_level)]


def _cache_resident_bytes(caches: list[dict] | None, workers: int) -> int:
    """A working set held in each thread's private cache: half the aggregate L2 (L1 without an L2).

    ``caches`` are the backend's cache hints (``describe()["caches"]``); None: this host's.
    """
    from ert.hardware import hwinfo

    usable = _cache_infos(caches)
    for level in (2, 1):
        found = [c for c in usable if c.level == level]
        if found:
            return max(1, hwinfo.aggregate_capacity_bytes(max(found, key=lambda c: c.size_bytes), workers) // 2)
    return 256 * 1024 * workers


def run_sweep(*, config: RunConfig, points: list[Point], log: RawLog, backend, comm,
              progress: Progress | None = None, weather: bool | dict = True) -> SweepResult:
    """Measure the points of ``points`` (the dense plan) not already in the run's raw.jsonl (``log``).

    With ``config.sweep == "adaptive"`` only the subset an AdaptivePlanner
    chooses is measured, batch by batch; each batch is decided from the
    records before it, so a resume replays the same decisions from disk.
    Only rank 0 writes.  Ctrl-C stops between or inside points and leaves a
    valid raw file; the point in progress is not recorded.

    With ``weather`` (and the config's ``weather.enabled``), sentinel readings
    go between the points and suspect points are measured again
    (``ert.measure.weather``); a dict passes ``clock``, ``wall`` and ``sleep``
    to it (a replay on a simulated clock: ``wall`` then stamps every record).
    """
    threads = backend.threads
    planner = None
    if config.sweep == "adaptive":  # before the frame: describe() may measure (a CPU's clock), not sweep time
        planner = _planner(config, points, backend=backend, workers=threads * comm.size)
    measured = 0
    total = len(points)

    def ending(interrupted: bool) -> dict | None:
        if interrupted and not measured:
            return None
        end = {"interrupted": interrupted, "measured": measured, "threads_per_rank": threads}
        if started:
            end["weather"] = sky.summary()
            if sky.memory_earlier:  # each curve's best memory roof in earlier runs here
                end["weather"]["memory_earlier"] = sky.memory_earlier
            if not interrupted and comm.rank == 0:
                sky.history.remember(sky.records)  # this run's bests, for the next run here to be held against
        if planner is not None:
            # An adaptive plan's size is known only once it is done.
            # Points only: re-measurements ("confirm" records) are counted apart.
            end.update(sweep="adaptive", complete=not interrupted,
                       planned_points=sum(1 for p in planner.planned if not p.again),
                       planned_again=sum(1 for p in planner.planned if p.again))
        return end

    frame = log.stage(None, done=lambda data: {r["id"] for r in data.points + data.confirms}, share=comm.bcast,
                      ending=ending)
    # Rank 0's records (the planner's input): what the file held and every point measured since, re-measurements
    # too (the plan replays them).
    records = {r["id"]: r for r in frame.data.points + frame.data.confirms} if frame.data is not None else {}
    last_trials: dict = {}  # spec -> {wss_bytes: trials}: the next calibration's guess
    known = {p.id: p for p in points}  # every point this sweep may measure again, by id (rank 0 adds the planner's)

    def remeasure(point: Point) -> None:  # a suspect point measured again once the host is calm
        record = _measure_point(point, backend=backend, comm=comm, config=config, last_trials=last_trials,
                                progress=None, records=records, again_of=records.get(point.id))
        record.update(remeasured_for="disturbed", disturbed_first=True)
        if "wall" in clocks:
            record["time"] = clocks["wall"]()
        frame.append(record)
        records[point.id] = record

    def between(point_id: str | None, end: bool = False) -> None:
        mine = records if comm.rank == 0 else None
        (sky.finish if end else sky.after_point)(point_id, mine, remeasure, known.get)

    def plan_next() -> list[Point]:  # the planner's next batch (every rank), [] for a dense sweep or when done
        nonlocal total
        if planner is None:
            return []
        todo = comm.bcast(planner.next_batch(records, sky.records if sky else ()) if comm.rank == 0 else None)
        total = len(planner.planned)
        known.update((p.id, p) for p in planner.planned)
        if progress and todo:
            progress.extend(total=total, todo=todo)
        return todo

    clocks = weather if isinstance(weather, dict) else {}
    sky = _weather(config, backend, comm, frame, points, **clocks) if weather else None
    started = False
    try:
        with frame:
            if planner is not None:
                todo = comm.bcast(planner.next_batch(records, sky.records if sky else ()) if comm.rank == 0
                                  else None)
                total = len(planner.planned)
                known.update((p.id, p) for p in planner.planned)
            else:
                todo = [p for p in points if p.id not in frame.done]
            if progress:
                progress.start(total=total, already=total - len(todo), todo=todo)
            point = None
            while todo:
                for point in (_interleave_batch(todo) if planner else todo):
                    if sky is not None and not started:
                        sky.start()
                        started = True
                    if point.again and started:  # a re-measurement waits for a calm host, within a budget
                        sky.wait_calm(point.id)
                    record = _measure_point(point, backend=backend, comm=comm, config=config,
                                            last_trials=last_trials, progress=progress, records=records)
                    if "wall" in clocks:
                        record["time"] = clocks["wall"]()
                    frame.append(record)
                    records[point.id] = record
                    known[point.id] = point
                    measured += 1
                    if progress:
                        progress.end(point, record)
                    if sky is not None:
                        between(point.id)
                todo = plan_next()
                if not todo and started:  # the last reading; suspect points measured again once calm
                    between(point.id, end=True)
                    # What they read now may ask for points the disturbed readings did not, and the last readings
                    # may have changed which measurements were disturbed: the plan is asked again, so it is
                    # settled over the records as they stand at the end (a resume replays it so).
                    todo = plan_next()
    finally:
        if progress:
            progress.finish()
    return SweepResult(planned=total, measured_now=measured, interrupted=frame.interrupted,
                       wall_seconds=frame.wall_seconds, history=sky.history if sky and comm.rank == 0 else None)


def _planner(config: RunConfig, points: list[Point], *, backend, workers: int) -> AdaptivePlanner:
    caches = backend.describe().get("caches")
    return AdaptivePlanner(points, growth=config.working_set.growth,
                           cache_resident_bytes=_cache_resident_bytes(caches, workers),
                           cache_windows=cache_windows(caches, workers),
                           level_windows=level_windows(_capacities(caches, workers)),
                           granule_bytes=lambda spec: backend.granule_elements(spec) * spec.itemsize * workers,
                           noise_threshold=config.timing.noise_threshold)


def _weather(config: RunConfig, backend, comm, frame, points: list[Point], **clocks):
    """The sweep's weather (``ert.measure.weather``): a sentinel per cache level from the backend's cache hints;
    None when the config turns it off, the sweep has no bandwidth curve to take its kernel from, or no level
    has room for one."""
    from ert.measure import faults, history, weather

    settings = config.weather
    spec = weather.sentinel_spec(p.spec for p in points)
    if not settings.enabled or spec is None:
        return None
    workers = backend.threads * comm.size
    hints = backend.describe().get("caches")
    caches = _cache_infos(hints)
    last = max((c.level for c in caches), default=0)
    shared_last = any(c.level == last and c.shared_cpu_count > workers for c in caches)
    sentinels = []
    for level, per_thread in weather.sentinel_sets(_capacities(hints, workers),
                                                   workers=workers, granule_elements=backend.granule_elements(spec),
                                                   itemsize=spec.itemsize, shared_last=shared_last):
        launches = backend.launches(spec, per_thread) or [None]
        sentinels.append(weather.Sentinel(level, per_thread * spec.itemsize * workers, per_thread, launches[0], spec))
    if not sentinels:
        return None
    data = frame.data
    sensor = faults.unwrapped(backend)  # an injected fault (ERT_INJECT_FAULT) counts the sweep's points alone
    device = str(backend.describe().get("device", ""))
    # Each bandwidth curve's memory roof too, where the run's top-level ceilings are this sweep's (no thread scaling).
    curves = sorted({f"{p.spec.precision}-{p.spec.access}" for p in points if p.spec.pipe == "vector"}
                    if not config.thread_counts else ())
    store = history.History({s.level: history.level_key(backend=config.backend, device=device, ranks=comm.size,
                                                        threads=backend.threads, level=s.level, wss_bytes=s.wss_bytes,
                                                        spec=s.spec.key) for s in sentinels},
                            memory_keys={c: history.memory_key(backend=config.backend, device=device, ranks=comm.size,
                                                               threads=backend.threads, curve=c) for c in curves})
    sky = weather.Weather(probe=weather.Probe(sensor, comm, lambda n: _timed(sensor, comm, n)[0]),
                          sentinels=sentinels, settings=settings, noise_threshold=config.timing.noise_threshold,
                          ranks=comm.size, threads_per_rank=backend.threads, append=frame.append, share=comm.bcast,
                          previous=getattr(data, "sentinels", []) if data is not None else [],
                          earlier=comm.bcast(store.earlier()), **clocks)
    sky.history = store
    sky.memory_earlier = comm.bcast(store.earlier_memory())
    return sky


def _measure_point(point: Point, *, backend, comm, config: RunConfig, last_trials: dict, progress,
                   records: dict, again_of: dict | None = None) -> dict:
    """One point: prepared, calibrated from the nearest larger set's trials, timed, checked on every rank; a
    re-measurement (``point.again``, or a suspect point measured again: ``again_of``, its earlier record on
    rank 0) calibrates afresh, from half its earlier trial count; ``point.again`` is recorded as a "confirm"
    record of its point."""
    if progress:
        progress.begin(point)
    backend.prepare(point.spec, elements_per_thread=point.elements_per_thread, launch=point.launch_dict())
    guess = 1
    larger = [w for w in last_trials.get(point.spec, {}) if w >= point.wss_bytes]
    first = records.get(replace(point, again=0).id) if point.again else again_of
    if first is not None and config.timing.min_repeats is not None:
        # A re-measurement calibrates afresh, from half its first measurement's trial count.
        guess = max(1, int(first["trials"]) // 2)
    elif config.timing.min_repeats is not None and larger and not point.again and again_of is None:
        # Trials scale inversely with the working set at equal bandwidth, and
        # bandwidth only rises towards smaller sets, so scaling from the nearest
        # larger set never overshoots; half of it leaves a doubling to warm up.
        w = min(larger)
        guess = int(last_trials[point.spec][w] * w / point.wss_bytes) // 2
    m = measure(backend, comm, timing=config.timing, start_trials=guess)
    if not point.again and again_of is None:
        last_trials.setdefault(point.spec, {})[point.wss_bytes] = m.trials
    check = backend.check()
    # Every rank's output must pass for the point to be used.
    checks = comm.allgather((check.ok, check.detail))
    ok = all(c[0] for c in checks)
    detail = "; ".join(f"rank {i}: {d}" for i, (good, d) in enumerate(checks) if not good) or check.detail
    record = point_record(point_id=point.id, spec=point.spec.to_dict(), wss_bytes=point.wss_bytes,
                          elements_per_thread=point.elements_per_thread, launch=point.launch_dict(),
                          ranks=comm.size, threads_per_rank=backend.threads, trials=m.trials, samples=m.samples,
                          rank_seconds=m.rank_seconds, host_seconds=m.host_seconds, spread=m.spread, noisy=m.noisy,
                          remeasured=m.remeasured, serialized=m.serialized, valid=ok, check=detail,
                          device=backend.point_info())  # device backends: occupancy, clocks seen during the point
    if point.again:  # a re-measurement: its own record kind, naming the point it repeats
        record = confirm_record(measured=record, point_id=replace(point, again=0).id, again=point.again)
    return record
