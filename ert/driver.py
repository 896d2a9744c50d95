"""The driver: the only loop over points; calibrates, repeats, checks and streams each one to raw.jsonl."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ert.config import RunConfig, Timing
from ert.progress import Progress
from ert.rawio import RAW_NAME, RAW_VERSION, RawWriter, read_raw
from ert.sweep import Point

# Calibration never asks for more trials than this (a guard against a timer
# that reports zero); 2**40 trials of even one element is days of work.
MAX_TRIALS = 1 << 40


@dataclass
class Measurement:
    """The timed result of one point, before it becomes a raw record."""

    trials: int
    samples: list[float]          # seconds of each repeat (slowest rank's), best attempt
    spread: float                 # (max - min) / min of samples
    noisy: bool
    remeasured: int               # attempts after the first, set once the loop ends
    rank_seconds: list[list[float]] = field(default_factory=list)  # per repeat: every rank's seconds


def _timed(backend, comm, trials: int) -> tuple[float, list[float]]:
    """One timed region on every rank after a barrier: (slowest rank's seconds, every rank's seconds).

    The slowest rank decides: aggregate rates are all ranks' work over it.
    """
    comm.barrier()
    seconds = backend.run(trials)
    everyone = comm.allgather(seconds)
    return max(everyone), everyone


def calibrate(backend, comm, *, min_seconds: float) -> tuple[int, float]:
    """Double the trial count until a timed region lasts at least ``min_seconds``.

    The runs double as warm-up.  A region that reaches ``min_seconds`` is timed
    once more and the faster of the two decides, so one region stretched by a
    disturbance (a descheduled thread) cannot fix the trial count far too low.
    Returns (trials, seconds of the faster last run).
    """
    trials = 1
    while True:
        seconds, _ = _timed(backend, comm, trials)
        if seconds >= min_seconds:
            seconds = min(seconds, _timed(backend, comm, trials)[0])
        if seconds >= min_seconds or trials >= MAX_TRIALS:
            return trials, seconds
        trials *= 2


def measure(backend, comm, *, timing: Timing) -> Measurement:
    """Calibrate, then time ``repeats`` regions; re-measure a noisy point a bounded number of times.

    Of the attempts, the one with the smallest spread is kept: the others were
    disturbed by something outside the kernel.
    """
    trials, _ = calibrate(backend, comm, min_seconds=timing.min_seconds)
    best: Measurement | None = None
    for attempt in range(timing.max_remeasure + 1):
        slow, per_rank = zip(*(_timed(backend, comm, trials) for _ in range(timing.repeats)))
        while statistics.median(slow) < timing.min_seconds / 2 and trials < MAX_TRIALS:
            # Calibration was fooled by a stalled region: the repeats are far
            # shorter than asked.  Scale the trial count up and time them again.
            factor = timing.min_seconds / max(statistics.median(slow), 1e-9)
            trials = min(MAX_TRIALS, trials * 2 ** max(1, math.ceil(math.log2(factor))))
            slow, per_rank = zip(*(_timed(backend, comm, trials) for _ in range(timing.repeats)))
        spread = (max(slow) - min(slow)) / min(slow) if min(slow) > 0 else float("inf")
        current = Measurement(trials, list(slow), spread, spread > timing.noise_threshold, 0,
                              [list(r) for r in per_rank])
        if best is None or current.spread < best.spread:
            best = current
        if not current.noisy:
            break
    best.remeasured = attempt
    return best


def point_record(point: Point, m: Measurement, *, check_ok: bool, check_detail: str, ranks: int,
                 threads: int) -> dict:
    samples = m.samples
    return {
        "type": "point",
        "id": point.id,
        "spec": point.spec.to_dict(),
        "wss_bytes": point.wss_bytes,
        "elements_per_thread": point.elements_per_thread,
        **({"launch": point.launch_dict()} if point.launch else {}),
        "elements": point.elements_per_thread * threads * ranks,
        "ranks": ranks,
        "threads_per_rank": threads,
        "trials": m.trials,
        "seconds": {"min": min(samples), "median": statistics.median(samples), "max": max(samples)},
        "samples": samples,
        # Imbalance shows here: the fastest and slowest region of any rank,
        # and each rank's own fastest and slowest over the repeats.
        "rank_seconds": {"min": min(min(r) for r in m.rank_seconds),
                         "max": max(max(r) for r in m.rank_seconds),
                         "per_rank": [{"min": min(col), "max": max(col)} for col in zip(*m.rank_seconds)]},
        "spread": m.spread,
        "noisy": m.noisy,
        "remeasured": m.remeasured,
        "valid": check_ok,
        "check": check_detail,
        "time": time.time(),
    }


@dataclass
class SweepResult:
    planned: int
    measured_now: int
    interrupted: bool
    wall_seconds: float


def run_sweep(*, config: RunConfig, points: list[Point], run_dir: Path, backend, comm, header: dict | None,
              progress: Progress | None = None) -> SweepResult:
    """Measure every point of ``points`` (the plan) not already in RUN_DIR/raw.jsonl.

    ``header`` is written first when the raw file is new (None on resume).
    Only rank 0 writes.  Ctrl-C stops between or inside points and leaves a
    valid raw file; the point in progress is not recorded.
    """
    raw_path = run_dir / RAW_NAME
    threads = backend.threads
    done: set[str] = set()
    if header is None and comm.rank == 0:  # only rank 0 may see the file (no shared file system)
        done = {r["id"] for r in read_raw(raw_path).points}
    done = comm.bcast(done)
    todo = [p for p in points if p.id not in done]
    writer = RawWriter(raw_path) if comm.rank == 0 else None
    if writer and header is not None:
        writer.append({"type": "header", "raw_version": RAW_VERSION, **header})
    if progress:
        progress.start(total=len(points), already=len(points) - len(todo), todo=todo)
    start = time.perf_counter()
    measured = 0
    interrupted = False
    try:
        for point in todo:
            if progress:
                progress.begin(point)
            if point.launch:
                backend.prepare(point.spec, elements_per_thread=point.elements_per_thread,
                                launch=point.launch_dict())
            else:
                backend.prepare(point.spec, elements_per_thread=point.elements_per_thread)
            m = measure(backend, comm, timing=config.timing)
            check = backend.check()
            # Every rank's output must pass for the point to be used.
            checks = comm.allgather((check.ok, check.detail))
            ok = all(c[0] for c in checks)
            detail = "; ".join(f"rank {i}: {d}" for i, (good, d) in enumerate(checks) if not good) or check.detail
            record = point_record(point, m, check_ok=ok, check_detail=detail, ranks=comm.size, threads=threads)
            if writer:
                writer.append(record)
            measured += 1
            if progress:
                progress.end(point, record)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        wall = time.perf_counter() - start
        if writer:
            if not interrupted or measured:
                writer.append({"type": "end", "wall_seconds": wall, "interrupted": interrupted,
                               "measured": measured})
            writer.close()
        if progress:
            progress.finish()
    return SweepResult(planned=len(points), measured_now=measured, interrupted=interrupted, wall_seconds=wall)
