"""The stage frame: raw.jsonl of the run being measured, shared by its stages (``RawLog``), and the frame
each measuring stage runs in (``StageFrame``: done ids, one writer, Ctrl-C, its end record).

The records themselves are built, written and read in ``ert.records.rawio``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ert.records.rawio import RAW_NAME, RawData, RawWriter, end_record, header_record


class RawLog:
    """raw.jsonl of the run being measured, shared by its stages, read at most once.

    ``data`` is what the file holds on the rank that writes (rank 0): what the
    CLI read for ``--resume``, or a new run's header (written at once).  One
    writer appends every record as it is measured and files it in ``data``,
    so a later stage (the hold, the transfers) sees the sweep's records
    without reading the file again.  Other ranks hold no data and write nothing.
    """

    def __init__(self, path: str | Path, data: RawData | None, *, writes: bool, new: bool = False):
        self.path = Path(path)
        self.data = data
        self._writer = RawWriter(self.path) if writes else None
        if self._writer and new:
            self._writer.append(data.header)

    @classmethod
    def open(cls, run_dir: Path, *, header: dict | None, writes: bool, data: RawData | None = None) -> "RawLog":
        """A new run's log from its ``header`` (its record written now), or a resumed run's ``data``."""
        if header is not None:
            data = RawData(Path(run_dir) / RAW_NAME, header_record(header), []) if writes else None
        return cls(Path(run_dir) / RAW_NAME, data if writes else None, writes=writes, new=header is not None)

    @property
    def writes(self) -> bool:
        return self._writer is not None

    def append(self, record: dict) -> None:
        if self._writer:
            self._writer.append(record)
            self.data.add(record)

    def stage(self, name: str | None, *, done: Callable[[RawData], set], share=None,
              ending: Callable[[bool], dict | None] | None = None) -> "StageFrame":
        return StageFrame(self, name=name, done=done, share=share, ending=ending)

    def close(self) -> None:
        if self._writer:
            self._writer.close()
            self._writer = None


class StageFrame:
    """One measuring stage over the run's log (``with log.stage(...) as frame:``).

    ``frame.done``: the ids the stage need not measure again (``done(data)``
    on the writing rank, handed to every rank by ``share``, e.g. comm.bcast).
    ``frame.append`` writes a record (rank 0).  Ctrl-C inside the block ends
    it quietly with ``frame.interrupted`` set; then ``ending(interrupted)``
    gives the fields of the stage's end record (``end_record``, with its
    ``name`` as ``stage`` and its wall seconds), or None for no end record.
    Any other error ends the stage interrupted too, its end record adding
    ``reason`` (``frame.reason``), and propagates.
    """

    def __init__(self, log: RawLog, *, name: str | None, done: Callable[[RawData], set], share=None,
                 ending: Callable[[bool], dict | None] | None = None):
        self.log, self.name, self.ending = log, name, ending
        mine = done(log.data) if log.data is not None else None
        self.done: set = share(mine) if share else (mine or set())
        self.interrupted = False
        self.reason: str | None = None  # what ended the stage, when an error did
        self.wall_seconds = 0.0
        self._start = 0.0

    @property
    def data(self) -> RawData | None:
        return self.log.data

    def append(self, record: dict) -> None:
        self.log.append(record)

    def __enter__(self) -> "StageFrame":
        self._start = time.perf_counter()
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        self.wall_seconds = time.perf_counter() - self._start
        self.interrupted = kind is not None
        failed = kind is not None and not issubclass(kind, KeyboardInterrupt)
        if not failed:
            self._end()
            return True
        # An error (a MemoryError, an injected fault): the stage ends interrupted, its end record saying why,
        # and the error goes on to the CLI.  The file stays resumable: every point before it is on disk.
        self.reason = failure_reason(value)
        try:
            self._end(reason=self.reason)
        except Exception:  # noqa: BLE001 - the disk that failed the stage may fail this too; the error goes on
            pass
        return False

    def _end(self, **extra) -> None:
        fields = self.ending(self.interrupted) if self.ending else None
        if fields is not None:
            self.log.append(end_record(wall_seconds=round(self.wall_seconds, 3), stage=self.name, **fields, **extra))


def failure_reason(exc: BaseException) -> str:
    """One line saying what ended a stage: the exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:200]
