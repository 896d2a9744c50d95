"""The run directory's lock: one process at a time, with real processes; shared within one; freed by a kill."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from ert.records import runlock
from ert.errors import ErtError
from ert.records.rawio import RawWriter

# A second process that takes the lock (or a RawWriter, which does), says so, and holds it until killed.
HOLDER = """
import sys, time
from ert.records import runlock
from ert.records.rawio import RawWriter
held = RawWriter(sys.argv[1] + "/raw.jsonl") if sys.argv[2] == "writer" else runlock.hold(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def start_holder(directory, how: str = "lock") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), how], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder(tmp_path):
    procs = []

    def start(how: str = "lock") -> subprocess.Popen:
        procs.append(start_holder(tmp_path, how))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["lock", "writer"])
def test_a_second_process_is_refused_naming_the_holder(tmp_path, holder, how):
    proc = holder(how)
    with pytest.raises(ErtError) as exc:
        runlock.hold(tmp_path, key="--resume")
    text = str(exc.value)
    assert "\n" not in text and exc.value.key == "--resume"
    assert f"in use by another ert-run (pid {proc.pid} on host {socket.gethostname()})" in text
    with pytest.raises(ErtError, match=f"pid {proc.pid}"):
        RawWriter(tmp_path / "raw.jsonl")  # every writer of raw.jsonl takes it


def test_a_killed_holder_leaves_no_lock_behind(tmp_path, holder):
    proc = holder()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / runlock.LOCK_NAME).exists()  # its file stays, stale
    lock = runlock.hold(tmp_path)  # but the kernel dropped the lock with the process
    assert runlock.holder(tmp_path) == f"pid {__import__('os').getpid()} on host {socket.gethostname()}"
    lock.release()


def test_the_lock_is_shared_within_a_process_and_gone_after_the_last_release(tmp_path):
    first = runlock.hold(tmp_path)
    second = runlock.hold(tmp_path)  # the same process: one more user, not a conflict
    writer = RawWriter(tmp_path / "raw.jsonl")
    assert second is first and runlock.held(tmp_path)
    writer.close()
    first.release()
    assert runlock.held(tmp_path)
    second.release()
    assert not runlock.held(tmp_path) and not (tmp_path / runlock.LOCK_NAME).exists()
    proc = start_holder(tmp_path)  # free for another process now
    proc.kill()
    proc.wait()
