"""raw.jsonl (ert/rawio.py): appending, and the repair of a tail a kill left torn."""

from __future__ import annotations

import json

import pytest

from ert.rawio import RawWriter


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("existing, kept", [
    (b'{"a":1}\n{"b":2}\n', b'{"a":1}\n{"b":2}\n'),         # whole lines: untouched
    (b'{"a":1}\n{"b":2}\n{"c":', b'{"a":1}\n{"b":2}\n'),     # a torn last line: cut at the last newline
    (b'{"a":', b''),                                            # nothing whole at all: emptied
    (b'', b''),
])
def test_a_writer_repairs_the_tail_before_appending(tmp_path, existing, kept):
    path = _write(tmp_path / "raw.jsonl", existing)
    writer = RawWriter(path)
    writer.append({"d": 4})
    writer.close()
    assert path.read_bytes() == kept + b'{"d":4}\n'
    assert [json.loads(line) for line in path.read_text().splitlines()][-1] == {"d": 4}


def test_a_torn_line_longer_than_one_scan_block_is_cut(tmp_path):
    whole = b'{"a":1}\n'
    path = _write(tmp_path / "raw.jsonl", whole + b'{"x":"' + b"y" * 200_000)  # 3 blocks of 64 KiB back
    RawWriter(path).close()
    assert path.read_bytes() == whole


def test_a_missing_file_is_created(tmp_path):
    path = tmp_path / "raw.jsonl"
    writer = RawWriter(path)
    writer.append({"a": 1})
    writer.close()
    assert path.read_text() == '{"a":1}\n'


def test_non_finite_numbers_are_refused(tmp_path):
    writer = RawWriter(tmp_path / "raw.jsonl")
    with pytest.raises(ValueError):
        writer.append({"seconds": float("nan")})
    writer.close()
