"""The stage frame (ert/records/rawlog.py): one writer, the records filed for later stages, Ctrl-C and errors."""

from __future__ import annotations

import pytest

from ert.records.rawio import RAW_VERSION, end_record, read_raw
from ert.records.rawlog import RawLog

META = {"ranks": 1, "threads_per_rank": 1, "config": {}}  # the metadata keys every reader uses


def _new_log(tmp_path, **header):
    return RawLog.open(tmp_path, header={"metadata": META, "planned_points": 2, **header}, writes=True)


def test_a_stage_frame_appends_files_its_records_and_ends_with_its_stage(tmp_path):
    log = _new_log(tmp_path)
    first = {"type": "transfer", "id": "t:1", "level": "t", "bytes": 1, "moved_bytes": 1, "repeats": 1,
             "seconds": {"min": 1.0, "median": 1.0, "max": 1.0}, "valid": True}
    with log.stage("transfers", done=lambda data: {r["id"] for r in data.transfers},
                   ending=lambda interrupted: {"time": 5.0}) as frame:
        assert frame.done == set()
        frame.append(first)
        frame.append({**first, "valid": False})  # measured again: the last record stands, in its place
    assert not frame.interrupted and frame.wall_seconds >= 0
    # The next stage sees every record without reading the file again.
    with log.stage(None, done=lambda data: {r["id"] for r in data.transfers}) as later:
        assert later.done == {"t:1"} and later.data.transfers == [{**first, "valid": False}]
    log.close()
    on_disk = read_raw(tmp_path)
    assert on_disk.records() == log.data.records()
    assert on_disk.header == {"type": "header", "raw_version": RAW_VERSION, "metadata": META, "planned_points": 2}
    assert on_disk.ends == [end_record(wall_seconds=round(frame.wall_seconds, 3), stage="transfers", time=5.0)]
    assert on_disk.ends[0]["stage"] == "transfers" and "stage" not in end_record(wall_seconds=1.0)


def test_ctrl_c_or_an_error_inside_a_frame_is_an_interrupted_stage_and_an_error_says_why(tmp_path):
    log = _new_log(tmp_path)
    with log.stage(None, done=lambda data: set(),
                   ending=lambda interrupted: {"interrupted": interrupted}) as frame:
        raise KeyboardInterrupt
    assert frame.interrupted and frame.reason is None
    with pytest.raises(MemoryError):  # the error goes on to the CLI, after the end record says why
        with log.stage("transfers", done=lambda data: set(),
                       ending=lambda interrupted: {"interrupted": interrupted}) as failed:
            raise MemoryError("Unable to allocate 1.00 PiB\nsecond line")
    assert failed.interrupted and failed.reason == "MemoryError: Unable to allocate 1.00 PiB"
    with log.stage("sustain", done=lambda data: set(), ending=lambda interrupted: None):
        raise KeyboardInterrupt  # a stage that writes no end record when cut short
    log.close()
    assert [{k: v for k, v in e.items() if k != "wall_seconds"} for e in read_raw(tmp_path).ends] == [
        {"type": "end", "interrupted": True},
        {"type": "end", "stage": "transfers", "interrupted": True, "reason": "MemoryError: Unable to allocate 1.00 PiB"}]


def test_only_the_writing_rank_holds_the_records_and_every_rank_gets_the_done_ids(tmp_path):
    _new_log(tmp_path).close()
    other = RawLog.open(tmp_path, header=None, writes=False)
    shared = []
    with other.stage(None, done=lambda data: {"never called"}, share=lambda ids: shared.append(ids) or {"a"}) as f:
        f.append({"type": "point", "id": "x"})  # not the writer: nothing written, nothing held
    assert other.data is None and f.done == {"a"} and shared == [None]
    assert read_raw(tmp_path).points == []
