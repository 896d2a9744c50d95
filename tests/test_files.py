"""-o through ert.records.files: devices, FIFOs and stdout written in place, symlinks followed, long names, and a bad
-o found before anything else is written."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.errors import ErtError
from ert.records.files import check_writable, write_text_atomic

CEILINGS = REPO / "tests" / "data" / "bare-2core-busy.ceilings.json"
RAW = REPO / "tests" / "data" / "bare-zen4-fp64.raw.jsonl"


def test_a_device_stays_a_device(tmp_path):
    # As root the old writer renamed a regular file over the device node.  So that a regression here cannot
    # replace the machine's /dev/null, root tests a null device of its own; others /dev/null (which they
    # cannot replace: there the old writer failed).
    device = "/dev/null"
    if os.geteuid() == 0:
        device = str(tmp_path / "null")
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        try:
            open(device, "wb").close()
        except OSError:
            pytest.skip("this filesystem does not open device nodes (mounted nodev)")
    write_text_atomic("hello\n", device)
    assert stat.S_ISCHR(os.stat(device).st_mode)
    assert not [n for n in os.listdir(os.path.dirname(device)) if n.startswith(".null.")]


def test_a_fifo_is_written_into(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic("through the pipe\n", fifo)
    reader.join(10)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_stdout_is_written_in_place():
    # `-o /dev/stdout | ...`: a pipe.  As root the old writer renamed a file over the /dev/stdout link itself,
    # so root names stdout through /proc/self/fd/1 (nothing can be renamed there) and never risks /dev.
    import subprocess

    from conftest import command

    stdout = "/proc/self/fd/1" if os.geteuid() == 0 else "/dev/stdout"
    proc = subprocess.run([command("ert"), "export", str(CEILINGS), "--format", "csv", "-o", stdout],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("kind,name,level")


def test_a_symlink_is_followed_to_its_target(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target.name)
    write_text_atomic("new\n", link)
    assert link.is_symlink() and os.readlink(link) == "real.csv"
    assert target.read_text() == "new\n"
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to("made.csv")
    write_text_atomic("made\n", dangling)
    assert dangling.is_symlink() and (tmp_path / "made.csv").read_text() == "made\n"


def test_a_name_of_254_bytes_can_be_written(tmp_path):
    path = tmp_path / ("n" * 250 + ".csv")
    write_text_atomic("long\n", path)
    assert path.read_text() == "long\n"
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new.json")
    check_writable("/dev/null")  # only checked, never written
    for bad, words in ((tmp_path / "missing" / "c.json", "no such directory"), (tmp_path, "is a directory")):
        with pytest.raises(ErtError) as info:
            check_writable(bad)
        assert words in info.value.message


def test_save_raw_is_not_written_when_o_cannot_be(tmp_path):
    saved = tmp_path / "S.jsonl"
    proc = run_cmd("ert", "analyze", RAW, "--save-raw", saved, "-o", tmp_path / "MISSING" / "c.json")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1 and "MISSING" in proc.stderr
    assert not saved.exists()
