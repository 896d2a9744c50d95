"""raw.jsonl: its records (one builder per kind), the writer, and reading.

One JSON object per line, appended and fsynced as each point finishes.  A new
record kind gets its table of keys in ``ert.records.rawcheck.RECORDS`` (which
the builder, the reader and the check all use), a builder here (beside
``transfer_record``), a list in ``RawData`` filed by ``RawData.add``, and a
section in ``ert/schemas/RAW.md``.  The frame every measuring stage writes its records
in (``RawLog``, ``StageFrame``) is ``ert.records.rawlog``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ert.errors import ErtError
from ert.records.rawcheck import MISSING, fault, shaped
from ert.spec import KernelSpec, rates, timing_spread

RAW_NAME = "raw.jsonl"
RAW_VERSION = "1.1"  # 1.1: "sentinel" records (the host's weather); a 1.0 file reads the same


# ---------------------------------------------------------------------------- records (RAW.md describes every key)
# One builder per record kind: a stage hands over what it measured, the builder gives the line's keys.
def header_record(header: dict) -> dict:
    """The first record of a new raw file: ``header`` ({"metadata", "planned_points", ...}) with its type and
    version (assembled in ``ert.measure.metadata.run_header``)."""
    return shaped({"type": "header", "raw_version": RAW_VERSION, **header})


def point_record(*, point_id: str, spec: dict, wss_bytes: int, elements_per_thread: int, launch: dict | None,
                 ranks: int, threads_per_rank: int, trials: int, samples: list[float],
                 rank_seconds: list[list[float]], spread: float, noisy: bool, remeasured: int, serialized: int,
                 valid: bool, check: str, device: dict | None = None,
                 host_seconds: list[dict[str, float]] | None = None) -> dict:
    """One sweep point: ``samples`` are the seconds of each timed region (the slowest rank's),
    ``rank_seconds[i]`` every rank's seconds of region i; ``device`` what a device backend saw during it;
    ``host_seconds[i]`` each host's seconds of region i (runs on 2+ hosts: ``host_seconds`` and the
    ``limiting_host``, whose median seconds are the longest)."""
    record = {
        "type": "point",
        "id": point_id,
        "spec": spec,
        "wss_bytes": wss_bytes,
        "elements_per_thread": elements_per_thread,
        **({"launch": launch} if launch else {}),
        "elements": elements_per_thread * threads_per_rank * ranks,
        "ranks": ranks,
        "threads_per_rank": threads_per_rank,
        "trials": trials,
        "seconds": {"min": min(samples), "median": statistics.median(samples), "max": max(samples)},
        "samples": samples,
        # Imbalance shows here: the fastest and slowest region of any rank,
        # and each rank's own fastest and slowest over the repeats.
        "rank_seconds": {"min": min(min(r) for r in rank_seconds),
                         "max": max(max(r) for r in rank_seconds),
                         "per_rank": [{"min": min(col), "max": max(col)} for col in zip(*rank_seconds)]},
        "spread": spread,
        "noisy": noisy,
        "remeasured": remeasured,
        **({"serialized_regions": serialized} if serialized else {}),
        "valid": valid,
        "check": check,
        "time": time.time(),
    }
    if host_seconds and len(host_seconds) == len(samples) and len(host_seconds[0]) > 1:
        by_host = {h: [row[h] for row in host_seconds] for h in sorted(host_seconds[0])}
        record["host_seconds"] = by_host
        record["limiting_host"] = max(by_host, key=lambda h: statistics.median(by_host[h]))
    if device:
        record["device"] = device  # rank 0's, as rank 0 writes
    return shaped(record)


def sustain_record(*, target: str, point_id: str, spec: dict, wss_bytes: int, elements_per_thread: int,
                   ranks: int, threads_per_rank: int, trials_per_region: int, region_seconds: list[float],
                   region_start_seconds: list[float], hold_seconds: float, valid: bool, check: str) -> dict:
    """One peak point held for seconds (sustained mode): every region's seconds and when it started."""
    return shaped({
        "type": "sustain",
        "target": target,
        "point_id": point_id,
        "spec": spec,
        "wss_bytes": wss_bytes,
        "elements_per_thread": elements_per_thread,
        "elements": elements_per_thread * threads_per_rank * ranks,
        "threads_per_rank": threads_per_rank,
        "trials_per_region": trials_per_region,
        "region_seconds": region_seconds,
        "region_start_seconds": region_start_seconds,
        "hold_seconds": hold_seconds,
        "valid": valid,
        "check": check,
        "time": time.time(),
    })


def end_record(*, wall_seconds: float, stage: str | None = None, **fields) -> dict:
    """A stage's end: its wall seconds (summed into the run's); the sweep's has no ``stage`` and says
    ``interrupted`` and ``measured`` (and an adaptive plan's size), the transfer stage's says ``time``."""
    return shaped({"type": "end", **({"stage": stage} if stage else {}), "wall_seconds": wall_seconds, **fields})


def transfer_id(level: str, variant: str, nbytes: int, pair=None, pairs=None) -> str:
    """A transfer record's id: ``level:variant:bytes``; ``level:variant:a-b:bytes`` for one pair of devices or
    ranks; ``level:variant:a-b+c-d:bytes`` for several pairs at once (the network's injection)."""
    if pairs:
        return f"{level}:{variant}:{'+'.join(f'{a}-{b}' for a, b in pairs)}:{int(nbytes)}"
    if pair is not None:
        return f"{level}:{variant}:{pair[0]}-{pair[1]}:{int(nbytes)}"
    return f"{level}:{variant}:{int(nbytes)}"


def transfer_record(*, level: str, kind: str, variant: str, method: str, nbytes: int, moved_bytes: int,
                    repeats: int, samples: list[float], valid: bool, check: str, noise_threshold: float,
                    pair=None, pairs=None, **extra) -> dict:
    """One raw.jsonl "transfer" record (links, peers and the network alike); ``extra`` adds optional keys
    (transport, rank_seconds, round_trips ...). RAW.md describes every key."""
    if not samples:
        raise ValueError("a transfer record needs at least one sample")
    spread = timing_spread(samples)
    record = {
        "type": "transfer",
        "id": transfer_id(level, variant, nbytes, pair, pairs),
        "level": level,
        "kind": kind,
        "variant": variant,
        "method": method,
        "bytes": int(nbytes),
        "moved_bytes": int(moved_bytes),
        "repeats": int(repeats),
        "seconds": {"min": min(samples), "median": statistics.median(samples), "max": max(samples)},
        "samples": list(samples),
        "valid": bool(valid),
        "check": check,
        "noisy": bool(spread > noise_threshold),
        "spread": spread,
    }
    if pair is not None:
        record["pair"] = [int(pair[0]), int(pair[1])]
    if pairs:
        record["pairs"] = [[int(a), int(b)] for a, b in pairs]
    record.update(extra)
    record["time"] = time.time()
    return shaped(record)


def confirm_id(point_id: str, again: int = 1) -> str:
    """The id of a point's ``again``-th re-measurement: ``<point id>~again<N>``."""
    return f"{point_id}~again{int(again)}"


def confirm_record(*, measured: dict, point_id: str, again: int = 1) -> dict:
    """One raw.jsonl "confirm" record: the sweep point ``point_id`` measured again at the same working set, with a
    fresh calibration, after other points (ert.measure.window_search); ``measured`` is the point record that the
    re-measurement made, whose keys it keeps. RAW.md describes every key."""
    return shaped({**measured, "type": "confirm", "id": confirm_id(point_id, again), "point_id": point_id,
                   "again": int(again)})


def sentinel_record(*, index: int, level: str, spec: dict, wss_bytes: int, elements_per_thread: int, ranks: int,
                    threads_per_rank: int, trials: int, samples: list[float], valid: bool, after_point: str | None,
                    now: float | None = None, earlier_best: float | None = None) -> dict:
    """One raw.jsonl "sentinel" record: a reading of the short fixed kernel of one cache level between the sweep's
    points (ert.measure.weather); ``samples`` are its timed regions' seconds (the slowest rank's), ``after_point``
    the id of the point measured just before (None: before the first), ``earlier_best`` the level's best rate in
    earlier runs on this machine (``ert.measure.history``; None: none kept). RAW.md describes every key."""
    extra = {} if earlier_best is None else {"earlier_best_gbytes_per_s": round(float(earlier_best), 4)}
    return shaped({
        "type": "sentinel",
        "id": f"sentinel-{int(index)}",
        "level": level,
        "spec": spec,
        "wss_bytes": int(wss_bytes),
        "elements_per_thread": int(elements_per_thread),
        "elements": int(elements_per_thread) * threads_per_rank * ranks,
        "ranks": int(ranks),
        "threads_per_rank": int(threads_per_rank),
        "trials": int(trials),
        "seconds": {"min": min(samples), "median": statistics.median(samples), "max": max(samples)},
        "samples": list(samples),
        "valid": bool(valid),
        "time": time.time() if now is None else now,
        "after_point": after_point,
        **extra,
    })


def best_launches(points: list[dict]) -> list[dict]:
    """One record per (kernel variant, working set): the fastest valid launch geometry, a clean one before a noisy one.

    Accelerator backends measure each working set at several launch
    geometries (global x local size, blocks x threads), as ERT does; a ceiling
    is what the best geometry sustains.  A geometry flagged noisy (or whose
    re-measurement did not reproduce it) gives way to the fastest clean one, as
    the planner's window search picks them (``ert.measure.window_search``).
    Records without a launch pass through.  Invalid records are kept so they
    are still counted and reported.
    """
    best: dict[tuple, tuple] = {}
    out: list[dict] = []
    for rec in points:
        if "launch" not in rec or not rec["valid"]:
            out.append(rec)
            continue
        spec = KernelSpec.from_dict(rec["spec"])
        key = (spec.key, rec["wss_bytes"])
        # A tensor MMA moves no bytes: its geometries are compared by GFLOP/s.
        rank = (not rec.get("noisy"), rates(rec).gflops_per_s if spec.tensor else rates(rec).gbytes_per_s)
        if key not in best or rank > best[key][0]:
            best[key] = (rank, rec)
    return out + [rec for _, rec in best.values()]


class RawWriter:
    """Appends records to raw.jsonl; each line is flushed and fsynced before append returns.

    A line is written with one write() call, so a kill leaves at worst one
    truncated last line, which readers skip.  The writer holds its directory's
    run lock (``ert.records.runlock``) until ``close``: one writer process per run.
    """

    def __init__(self, path: str | Path):
        from ert.records import runlock

        self.path = Path(path)
        self._lock = runlock.hold(self.path.parent)
        try:
            self._repair_tail()
            self._fh = open(self.path, "a", encoding="utf-8")
        except BaseException:
            self._lock.release()
            raise

    def _repair_tail(self) -> None:
        """Cut a truncated last line (left by a kill) so new lines start clean."""
        if not self.path.exists():
            return
        with open(self.path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return  # the usual case: nothing to read beyond one byte
            # Scan back (in blocks) to the last newline and cut there.
            end, block = size, 1 << 16
            while end > 0:
                start = max(0, end - block)
                fh.seek(start)
                chunk = fh.read(end - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    fh.truncate(start + newline + 1)
                    return
                end = start
            fh.truncate(0)

    def append(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._lock is not None:
            self._fh.close()
            self._lock.release()
            self._lock = None


def transfer_gbytes_per_s(record: dict) -> float:
    """GB/s (1e9) of a "transfer" record at its best sample: moved_bytes x repeats / seconds.min.

    A ping-pong records one-way trips as ``repeats`` (two per round trip), so the
    same rule gives its one-way bandwidth.  The one definition, for the
    backends that measure links, the network stage and the analysis.
    """
    seconds = record["seconds"]["min"]
    return record["moved_bytes"] * record["repeats"] / seconds / 1e9 if seconds > 0 else float("inf")


def transfer_latency_us(record: dict) -> float:
    """One transfer's time in microseconds: the median sample over its repeats (a ping-pong's half round trip)."""
    return record["seconds"]["median"] / record["repeats"] * 1e6


def _iter_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_last = number == len(lines)  # no newline after it: possibly truncated
        yield number, raw.decode("utf-8", errors="replace"), is_last


@dataclass
class RawData:
    """What a raw file holds: its header, the latest record of each point, and the end records."""

    path: Path | None
    header: dict
    points: list[dict]
    ends: list[dict] = field(default_factory=list)
    sustained: list[dict] = field(default_factory=list)  # "sustain" records: peak points held for seconds
    transfers: list[dict] = field(default_factory=list)  # "transfer" records (links, peers, network), latest per id
    confirms: list[dict] = field(default_factory=list)  # "confirm" records: points measured again, latest per id
    sentinels: list[dict] = field(default_factory=list)  # "sentinel" records: the host's weather, in file order
    _slot: dict = field(default_factory=dict, repr=False, compare=False)  # (type, id) -> index in its list

    def records(self) -> list[dict]:
        """Every record, header first, in the order a raw file holds them: what ``read_raw`` gives back."""
        return [self.header, *self.points, *self.confirms, *self.sentinels, *self.sustained, *self.transfers,
                *self.ends]

    def add(self, record: dict) -> None:
        """File one record (not a header) as ``read_raw`` would: a point or transfer measured again (a resume
        that raced a kill) keeps its last record, in the place of its first; other types accumulate."""
        kind = record["type"]
        if kind in ("point", "transfer", "confirm"):
            listed = {"point": self.points, "transfer": self.transfers, "confirm": self.confirms}[kind]
            if not self._slot:  # first add: index what the lists hold
                for name, held in (("point", self.points), ("transfer", self.transfers), ("confirm", self.confirms)):
                    self._slot.update({(name, r["id"]): i for i, r in enumerate(held)})
            slot = self._slot.get((kind, record["id"]))
            if slot is None:
                self._slot[(kind, record["id"])] = len(listed)
                listed.append(record)
            else:
                listed[slot] = record
        elif kind == "sustain":
            self.sustained.append(record)
        elif kind == "sentinel":
            self.sentinels.append(record)
        elif kind == "end":
            self.ends.append(record)
        # Any other type is a newer ert's record: kept on disk, not read here.


def write_raw(raw: RawData, path: str | Path) -> None:
    """``raw`` as a new raw.jsonl at ``path``, written whole or not at all (ErtError if it exists); like every
    file ert writes, through ``ert.records.files`` (fsynced, the mode a new file gets: 0644 under the usual umask)."""
    from ert.records.files import write_text_atomic

    path = Path(path)
    if path.exists():
        raise ErtError("already exists; choose a new file", path=path)
    try:
        text = "".join(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n" for rec in raw.records())
    except ValueError as exc:
        raise ErtError(f"cannot write as JSON: {exc}", path=path) from None
    write_text_atomic(text, path)


def read_raw(path: str | Path) -> RawData:
    """Header, point and end records from a raw file (or a run directory holding one).

    A truncated final line (a kill mid-write) is tolerated and dropped; a bad
    line anywhere else is a corrupt file and raises ErtError with its number.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RAW_NAME
    try:
        lines = list(_iter_lines(path))
    except FileNotFoundError:
        raise ErtError("no such file", path=path) from None
    except OSError as exc:
        raise ErtError(f"cannot read: {exc.strerror or exc}", path=path) from None
    raw = None
    for number, text, is_last in lines:
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            if is_last:
                break
            raise ErtError(f"corrupt line: {exc.msg}", path=path, key=f"line {number}") from None
        if not isinstance(rec, dict) or "type" not in rec:
            raise ErtError("not a raw record (a JSON object with a 'type')", path=path, key=f"line {number}")
        if rec["type"] == "header" and str(rec.get("raw_version", "")).split(".")[0] != RAW_VERSION.split(".")[0]:
            # Another major version's header may hold other keys: its version is the one thing to say.
            raise ErtError(f"unsupported raw_version {rec.get('raw_version')!r} (this ert reads {RAW_VERSION})",
                           path=path, key=f"line {number}")
        # Every key by the table of its kind (ert.records.rawcheck.RECORDS): a hand-edited or foreign file fails
        # on its line and key.
        bad = fault(rec)
        if bad and bad[1] == MISSING and bad[0].isidentifier():  # a key of the record itself
            raise ErtError(f"{rec['type']} record lacks '{bad[0]}'", path=path, key=f"line {number}")
        if bad:
            raise ErtError(f"{rec['type']} record: {bad[1]}", path=path, key=f"line {number}: {bad[0]}")
        if rec["type"] == "header":
            if raw is None:
                raw = RawData(path, rec, [])
        elif raw is not None:
            raw.add(rec)
    if raw is None:
        raise ErtError("no header record: not an ert raw file", path=path)
    return raw
