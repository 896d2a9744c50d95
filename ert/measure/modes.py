"""Run modes beyond one sweep: the sweep once per thread count, and holding peak points (sustained mode)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ert.measure.driver import SweepResult, _timed, run_sweep
from ert.records.rawio import sustain_record
from ert.records.rawlog import RawLog
from ert.spec import KernelSpec
from ert.measure.plan import plan
from ert.backends import TensorBackend

# Each timed region of a hold lasts about this long: short enough to show a
# clock that drops within seconds, long enough that timer overhead is nothing.
HOLD_REGION_SECONDS = 0.25


def thread_counts(config) -> list[int]:
    """The thread counts a run sweeps, largest (the run's own, the top-level ceilings) first."""
    return sorted(config.thread_counts or [config.threads], reverse=True)


def plan_for(config, backend, comm, threads: int):
    """The plan of one thread count's sweep (every count of a scaling run shares the per-thread working sets)."""
    counts = config.thread_counts
    tag = threads if counts else None
    # Every count sweeps the same working sets per thread, so a level's range
    # lines up across counts (aggregate sets scale with the count), and all reach max_bytes.
    min_bytes = max(1, config.working_set.min_bytes * threads // max(counts)) if counts else None
    return plan(config, workers=threads * comm.size, granule_elements_of=backend.granule_elements,
                launches_of=backend.launches, thread_tag=tag, min_bytes=min_bytes,
                tensor_of=backend.tensor_plan if isinstance(backend, TensorBackend) else None,
                tensor_variants_of=backend.tensor_variants if isinstance(backend, TensorBackend) else None)


def run_all(*, config, log: RawLog, backend, make_backend, comm, progress=None,
            sustain_seconds: float | None = None) -> SweepResult:
    """The sweep of each thread count (the run's own first, with ``backend``), then the sustained hold.

    ``make_backend(threads)`` creates the backend of another thread count; it
    is closed after its sweep.
    """
    total = SweepResult(planned=0, measured_now=0, interrupted=False, wall_seconds=0.0)
    for k, threads in enumerate(thread_counts(config)):
        own = backend if k == 0 else make_backend(threads)
        try:
            points = plan_for(config, own, comm, threads)
            # The weather on the run's own count only: a sentinel's rate scales with the threads, and one run-best
            # per level is what its readings are judged against.
            result = run_sweep(config=config, points=points, log=log, backend=own, comm=comm, progress=progress,
                               weather=k == 0)
            if k == 0 and sustain_seconds and not result.interrupted:
                # With the run's own backend, before other counts change the thread pool.
                result.interrupted = hold_peaks(log=log, backend=own, comm=comm, seconds=sustain_seconds,
                                                progress=progress)
        finally:
            if k > 0:
                own.close()
        total = SweepResult(planned=total.planned + result.planned,
                            measured_now=total.measured_now + result.measured_now,
                            interrupted=result.interrupted, wall_seconds=total.wall_seconds + result.wall_seconds,
                            history=result.history if k == 0 else total.history)
        if result.interrupted:
            break
    return total


# ---------------------------------------------------------------------------- sustained mode
@dataclass(frozen=True)
class HoldTarget:
    """A point to hold: which ceiling it stands for, and the kernel and size to run."""

    target: str          # "compute" or "memory"
    point_id: str        # the sweep point it repeats (the ceiling's evidence)
    spec: dict
    wss_bytes: int
    elements_per_thread: int
    trials: int          # of the sweep point
    seconds: float       # median seconds of the sweep point at ``trials``
    launch: dict | None = None  # its launch geometry (device backends), so the hold runs the same kernel


def hold_targets(raw) -> list[HoldTarget]:
    """The points to hold, from the sweep's records alone (no analysis: the pipe runs one way).

    Compute: the fastest valid FP64 (else first precision's) FMA point of the
    vector units -- the point the FMA peak comes from. Memory: the largest
    working set of the read+write curve (ERT's kernel, the usual roofline) of
    FP64 (else the first precision) at one FLOP per element -- the memory
    behind the last cache when the sweep reached it. Quiet points are
    preferred to noisy ones.
    """
    from ert.spec import rates

    points = [r for r in raw.points if r.get("valid") and r["spec"].get("pipe", "vector") == "vector"]

    def first_precision(recs):
        names = [r["spec"]["precision"] for r in recs]
        return "fp64" if "fp64" in names else (names[0] if names else None)

    def quiet_first(recs):
        return [r for r in recs if not r.get("noisy")] or recs

    picks: list[tuple[str, dict]] = []
    fma = [r for r in points if r["spec"].get("fma") and r["spec"]["flops_per_element"] > 1]
    prec = first_precision(fma)
    if prec:
        recs = quiet_first([r for r in fma if r["spec"]["precision"] == prec])
        picks.append(("compute", max(recs, key=lambda r: rates(r).gflops_per_s)))
    memory = [r for r in points if r["spec"]["flops_per_element"] == 1]
    access = "rw" if any(r["spec"]["access"] == "rw" for r in memory) else "ro"
    memory = [r for r in memory if r["spec"]["access"] == access]
    prec = first_precision(memory)
    if prec:
        recs = quiet_first([r for r in memory if r["spec"]["precision"] == prec])
        # The largest working set; of its launch geometries (device backends), the fastest.
        picks.append(("memory", max(recs, key=lambda r: (r["wss_bytes"], rates(r).gbytes_per_s))))
    return [HoldTarget(target, rec["id"], rec["spec"], rec["wss_bytes"], rec["elements_per_thread"],
                       rec["trials"], rec["seconds"]["median"], rec.get("launch"))
            for target, rec in picks]


def hold_peaks(*, log: RawLog, backend, comm, seconds: float, progress=None) -> bool:
    """Hold each target for ``seconds``, appending one "sustain" record each; True if interrupted.

    The targets come from the sweep's records in ``log`` (no second read of the
    file); targets already held (a resumed run) are skipped.  The hold writes
    no end record: its seconds are in its records' ``hold_seconds``.
    """
    with log.stage("sustain", done=lambda data: {r.get("point_id") for r in data.sustained if r.get("valid")},
                   share=comm.bcast) as frame:
        targets = [t for t in hold_targets(frame.data) if t.point_id not in frame.done] if comm.rank == 0 else None
        for t in comm.bcast(targets):
            if progress:
                progress.say(f"sustain: holding {t.point_id} for {seconds:g} s")
            frame.append(_hold(t, backend=backend, comm=comm, seconds=seconds))
    return frame.interrupted


def _hold(t: HoldTarget, *, backend, comm, seconds: float) -> dict:
    spec = KernelSpec.from_dict(t.spec)
    backend.prepare(spec, elements_per_thread=t.elements_per_thread, launch=t.launch)
    per_trial = t.seconds / t.trials
    trials = max(1, round(HOLD_REGION_SECONDS / per_trial))
    region_seconds: list[float] = []
    region_start: list[float] = []
    start = time.perf_counter()
    # Rank 0's clock decides when to stop, so every rank runs the same regions.
    while True:
        region_start.append(time.perf_counter() - start)
        slowest, _, _ = _timed(backend, comm, trials)
        region_seconds.append(slowest)
        if comm.bcast(time.perf_counter() - start >= seconds if comm.rank == 0 else None):
            break
    held = time.perf_counter() - start
    check = backend.check()
    checks = comm.allgather((check.ok, check.detail))
    return sustain_record(target=t.target, point_id=t.point_id, spec=t.spec, wss_bytes=t.wss_bytes,
                          elements_per_thread=t.elements_per_thread, ranks=comm.size,
                          threads_per_rank=backend.threads, trials_per_region=trials, region_seconds=region_seconds,
                          region_start_seconds=region_start, hold_seconds=held, valid=all(c[0] for c in checks),
                          check="; ".join(d for good, d in checks if not good) or check.detail)
