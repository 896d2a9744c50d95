"""raw.jsonl (ert/records/rawio.py): appending, and the repair of a tail a kill left torn."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ert.errors import ErtError
from ert.records.rawio import RawWriter, read_raw


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


def test_write_raw_round_trips_every_record_type_and_save_raw_keeps_link_and_network_levels(tmp_path):
    """`ert analyze --save-raw` once dropped transfer records: a run with 6 link levels came back with none."""
    from conftest import run_cmd
    from test_transfers import curve

    from ert.records.rawio import confirm_record, write_raw

    source = Path(__file__).parent / "data" / "bare-zen4-fp64.raw.jsonl"
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    transfers = (curve("link-h2d", "pinned", {1 << 20: 20.0, 1 << 24: 24.0, 1 << 26: 24.5, 1 << 28: 24.6})
                 + curve("net-intra-node", "pingpong", {1 << 20: 10.0, 1 << 24: 18.0, 1 << 26: 18.5, 1 << 28: 18.7},
                         pair=(0, 1)))
    held = next(r for r in lines if r["type"] == "point" and r["spec"]["access"] == "rw")
    sustain = {"type": "sustain", "target": "memory", "point_id": held["id"], "spec": held["spec"],
               "wss_bytes": held["wss_bytes"], "elements": held["elements"], "trials_per_region": held["trials"],
               "region_seconds": [held["seconds"]["median"]] * 10, "hold_seconds": 10 * held["seconds"]["median"],
               "valid": True, "check": "ok", "time": 0.0}
    # A re-measurement of the fastest read+write point (ert.measure.window_search), 3 % slower: it confirms it.
    rw = [r for r in lines if r["type"] == "point" and r["spec"]["access"] == "rw"
          and r["spec"]["flops_per_element"] == 1 and not r["noisy"]]
    fastest = max(rw, key=lambda r: r["wss_bytes"] * r["trials"] / r["seconds"]["median"] if r["wss_bytes"] <= 1 << 16
                  else 0)
    confirm = confirm_record(measured={**fastest, "seconds": {k: v * 1.03 for k, v in fastest["seconds"].items()}},
                             point_id=fastest["id"])
    run = tmp_path / "run"
    run.mkdir()
    (run / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*lines, confirm, sustain, *transfers]))
    raw = read_raw(run)
    assert {r["type"] for r in raw.records()} == {"header", "point", "confirm", "sustain", "transfer", "end"}
    assert raw.confirms == [confirm] and confirm["id"] == fastest["id"] + "~again1"

    copy = tmp_path / "copy.jsonl"
    write_raw(raw, copy)
    again = read_raw(copy)
    assert again.records() == raw.records()
    with pytest.raises(ErtError, match="already exists"):
        write_raw(raw, copy)

    saved = tmp_path / "saved.jsonl"
    first = run_cmd("ert", "analyze", run, "--json", "--save-raw", saved)
    assert first.returncode == 0, first.stderr
    second = run_cmd("ert", "analyze", saved, "--json")
    assert second.returncode == 0, second.stderr

    def transfer_levels(text):
        return sorted((m["level"], m["variant"], m["gbytes_per_s"])
                      for m in json.loads(text)["ceilings"]["memory"] if "kind" in m)

    levels = transfer_levels(first.stdout)
    assert [(lvl, variant) for lvl, variant, _ in levels] == [("link-h2d", "pinned"), ("net-intra-node", "pingpong")]
    assert transfer_levels(second.stdout) == levels
    # The re-measurement survives --save-raw: the same levels, the same confirmations.
    confirmed = [(m["level"], m.get("access"), m.get("confirmed")) for m in json.loads(first.stdout)["ceilings"]["memory"]]
    assert confirmed == [(m["level"], m.get("access"), m.get("confirmed"))
                         for m in json.loads(second.stdout)["ceilings"]["memory"]]
    assert any(c and c["by"] == "measured again" and c["point_id"] == fastest["id"] for _, _, c in confirmed)
    # A sustain record without its keys is a one-line error naming the line, not a traceback.
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in [lines[0], {"type": "sustain", "point_id": "x"}]))
    refused = run_cmd("ert", "analyze", broken)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == f"ert: error: {broken}: line 2: sustain record lacks 'target'"


def test_write_raw_writes_through_the_atomic_writer_with_the_usual_mode(tmp_path):
    from ert.records.rawio import header_record, write_raw

    writer = RawWriter(tmp_path / "raw.jsonl")
    writer.append(header_record({"metadata": {"ranks": 1, "threads_per_rank": 1, "config": {}}, "planned_points": 2}))
    writer.close()
    old = os.umask(0o022)
    try:
        write_raw(read_raw(tmp_path), tmp_path / "copy.jsonl")
    finally:
        os.umask(old)
    assert (tmp_path / "copy.jsonl").stat().st_mode & 0o777 == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".copy.jsonl")]  # no temporary left behind
