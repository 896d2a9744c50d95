"""The transfer stage: host<->device links (and peer GPUs) through a backend's hook, and the network under MPI.

Run by ert-run after the sweep (and after the sustained holds).  Every
measured size becomes one "transfer" record in raw.jsonl, appended as it is
measured (rank 0 writes); a resumed run skips the ids already there.

Links: a device backend with the links capability (``ert.backends.LinkBackend``)
hands over one ``Transfer`` per (level, variant) of rank 0's device; numba-cpu
has none: the host is the host.  The network: one ``Transfer``-shaped job per
level over its member ranks (``ert.measure.network``).  Both go through
``measure_transfer``: calibrate, sample and check through the one engine
(``ert.measure.timing``), with the config's noise policy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ert.backends import LinkBackend
from ert.measure import network, timing
from ert.measure.comm import gentle_barrier
from ert.records.rawio import transfer_gbytes_per_s, transfer_id, transfer_latency_us, transfer_record
from ert.records.rawlog import RawLog

# Link transfers per sample never exceed this: enqueueing one costs the host ~2-5 us (Python, driver), so
# more would spend seconds queueing 4 KiB copies that the device finishes in a fraction of that.
LINK_MAX_REPEATS = 4096


@dataclass(frozen=True)
class TransferTiming:
    """How each size is timed: the config's transfer and noise settings, and the largest repeat count."""

    min_seconds: float
    samples: int
    noise_threshold: float
    max_remeasure: int
    max_count: int = LINK_MAX_REPEATS


def record_id(transfer, nbytes: int) -> str:
    """The id the record of ``transfer`` at ``nbytes`` gets (a resumed run skips ids already written)."""
    return transfer_id(transfer.level, transfer.variant, nbytes, transfer.extra.get("pair"),
                       transfer.extra.get("pairs"))


def measure_transfer(transfer, nbytes: int, *, how: TransferTiming, trips: int = 1,
                     details: Callable[[range, int], dict] | None = None) -> dict:
    """The record of one (level, variant, size): prepare, calibrate, sample (the engine's noise policy), check.

    ``trips``: one-way transfers per repeat (a ping-pong's round trip is 2).
    ``details(kept, count)``: record keys known only after sampling, ``kept``
    the indexes of the kept samples among the transfer's ``time`` calls (the
    network's jobs: every rank's seconds, interface counters).
    """
    calls = 0

    def timed(count: int) -> float:
        nonlocal calls
        calls += 1
        return transfer.time(count)

    transfer.prepare(nbytes)
    count, _ = timing.calibrate(timed, min_seconds=how.min_seconds, max_count=how.max_count)
    calibrating = calls
    got = timing.sample(timed, count, samples=how.samples, noise_threshold=how.noise_threshold,
                        max_remeasure=how.max_remeasure)
    ok, text = transfer.check()
    extra = dict(transfer.extra)
    if details is not None:
        extra.update(details(range(calibrating + got.calls[0], calibrating + got.calls[1]), got.count))
    pair, pairs = extra.pop("pair", None), extra.pop("pairs", None)
    return transfer_record(level=transfer.level, kind=transfer.kind, variant=transfer.variant,
                           method=transfer.method, nbytes=nbytes, moved_bytes=nbytes * transfer.directions,
                           repeats=got.count * trips, samples=got.seconds, valid=ok, check=text,
                           noise_threshold=how.noise_threshold, pair=pair, pairs=pairs, **extra)


def measure_transfers(transfers: list, sizes: list[int], *, min_seconds: float, samples: int,
                      noise_threshold: float, max_remeasure: int, emit, skip=frozenset()) -> int:
    """Every transfer at every size, smallest size first; ``emit`` each record as it is measured.

    Ids in ``skip`` (already in raw.jsonl: a resumed run) are not measured
    again.  Returns the number of records emitted.
    """
    how = TransferTiming(min_seconds=min_seconds, samples=samples, noise_threshold=noise_threshold,
                         max_remeasure=max_remeasure)
    emitted = 0
    for nbytes in sorted({int(s) for s in sizes}):
        for transfer in transfers:
            if record_id(transfer, nbytes) not in skip:
                emit(measure_transfer(transfer, nbytes, how=how))
                emitted += 1
    return emitted


def host_copy_reference(nbytes: int, *, min_seconds: float = 0.02, samples: int = 5) -> dict:
    """numpy's copy of ``nbytes`` between two host arrays on this host (one thread): the memory-copy rate
    a CPU device's "link" is set beside.  {"what", "bytes", "gbytes_per_s"} at the best sample."""
    from ert.backends.links import pattern

    src = pattern(nbytes).copy()
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch, untimed

    def copies(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            np.copyto(dst, src)
        return time.perf_counter() - start

    count, _ = timing.calibrate(copies, min_seconds=min_seconds, jump=False)
    got = timing.sample(copies, count, samples=samples, noise_threshold=float("inf"), max_remeasure=0)
    return {"what": "numpy.copyto between two host arrays, one thread", "bytes": int(nbytes),
            "gbytes_per_s": round(nbytes * count / min(got.seconds) / 1e9, 3)}


# ---------------------------------------------------------------------------- the stage
def run_transfers(*, cfg, log: RawLog, backend, comm, progress=None) -> bool:
    """Measure the link and network levels the config asks for; True if interrupted."""
    want_links = "links" in cfg.levels and isinstance(backend, LinkBackend)
    want_network = "network" in cfg.levels and comm.size > 1
    if progress and comm.rank == 0:
        if "network" in cfg.levels and comm.size == 1:
            progress.say("network: not measured (one rank; run under mpiexec with 2 or more ranks)")
        if "links" in cfg.levels and not isinstance(backend, LinkBackend):
            progress.say(f"links: not measured ({cfg.backend} has no host<->device link: the host is the host)")
    if not (want_links or want_network):
        return False
    say = progress.say if progress else (lambda text: None)
    # The stage's own end: its seconds join the run's wall time (a links-only run read 0.0 s).
    with log.stage("transfers", done=lambda data: {r["id"] for r in data.transfers}, share=comm.bcast,
                   ending=lambda interrupted: None if interrupted else {"time": time.time()}) as frame:
        meta = comm.bcast(frame.data.header["metadata"] if frame.data is not None else None)
        if want_links:
            _links(cfg, backend, comm, frame, say)
        if want_network and "network" in meta:
            _network(cfg, comm, meta["network"], frame, say)
    return frame.interrupted


def _links(cfg, backend, comm, frame, say) -> None:
    """Rank 0's backend hands over its device's links; the other ranks wait without spinning."""
    if comm.rank == 0:
        sizes = cfg.transfer.sizes(cfg.transfer.max_bytes)
        say(f"links: {len(sizes)} sizes from {sizes[0]} B to {sizes[-1]} B")

        def emit(record: dict) -> None:
            frame.append(record)
            say(f"links: {record['level']} {record.get('variant', '')} {record['bytes']} B -> "
                f"{transfer_gbytes_per_s(record):.2f} GB/s" + ("" if record.get("valid") else " CHECK FAILED"))

        measure_transfers(backend.link_transfers(max(sizes)), sizes, min_seconds=cfg.transfer.min_seconds,
                          samples=cfg.transfer.samples, noise_threshold=cfg.timing.noise_threshold,
                          max_remeasure=cfg.timing.max_remeasure, emit=emit, skip=frozenset(frame.done))
    gentle_barrier(comm)


def _network(cfg, comm, meta_network: dict, frame, say) -> None:
    """Every size of each network level, on its member ranks; rank 0 (in every level) writes."""
    sizes = cfg.transfer.sizes(cfg.transfer.network_max_bytes)
    # No cap below the engine's: a small message's round trip is far below a link copy's enqueue cost.
    how = TransferTiming(min_seconds=cfg.transfer.min_seconds, samples=cfg.transfer.samples,
                         noise_threshold=cfg.timing.noise_threshold, max_remeasure=cfg.timing.max_remeasure,
                         max_count=timing.MAX_COUNT)

    def measure(job: network.NetworkTransfer) -> None:
        for size in sizes:
            if record_id(job, size) in frame.done:
                continue
            record = measure_transfer(job, size, how=how, trips=job.trips, details=job.details)
            if comm.rank == 0:
                frame.append(record)
                say(f"network: {job.level} {size} B -> {transfer_gbytes_per_s(record):.3f} GB/s, "
                    f"{transfer_latency_us(record):.2f} us per transfer"
                    + ("" if record["valid"] else " CHECK FAILED"))

    network.each_level(comm, meta_network, say=say, measure=measure)
