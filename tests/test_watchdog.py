"""The heartbeat processes of ert.measure.watchdog, as real processes on loopback.

Each side runs under a stand-in "rank" (a Python process that starts it and
sleeps), so that what the watchdog does to its rank (SIGKILL) is observed.
A silent host is a beat (or monitor) stopped with SIGSTOP: no byte, no EOF.
Those run for seconds each (slow); the settings' checks run in the fast tier.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from ert.measure import watchdog

RANK = r"""
import os, subprocess, sys
mode, rest = sys.argv[1], sys.argv[2:]
proc = subprocess.Popen([sys.executable, "-m", "ert.measure.watchdog", mode, "--parent", str(os.getpid()), *rest],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(proc.pid, proc.stdout.readline().decode().strip(), flush=True)
sys.stdin.readline()          # "bye" from the test: the rank finishes normally
proc.stdin.write(b"bye\n"); proc.stdin.flush(); proc.wait(timeout=10)
"""


class Rank:
    """A stand-in rank whose watchdog process is started with ``args`` ("{pid}" is this rank's own pid)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-c", RANK, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def started(self) -> tuple[int, str]:
        child, *first = self.proc.stdout.readline().split(maxsplit=1)
        return int(child), (first[0].strip() if first else "")

    def finish(self) -> None:
        self.proc.stdin.write("bye\n")
        self.proc.stdin.flush()

    def wait(self, seconds: float) -> int | None:
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def pair():
    started = []

    def make(silent: float = 1.0):
        rank0 = Rank(*["monitor", "--ranks", "2", "--run-dir", "/runs/x", "--silent-after", str(silent)])
        monitor_pid, line = rank0.started()
        assert line.startswith("listening "), line
        port = line.split()[1]
        rank1 = Rank(*["beat", "--rank", "1", "--host", "node2", "--connect", "127.0.0.1", "--port", port,
                            "--silent-after", str(silent)])
        beat_pid, hello = rank1.started()
        assert hello == "connected"
        started.extend([rank0, rank1])
        return rank0, monitor_pid, rank1, beat_pid

    yield make
    for rank in started:
        rank.kill()


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_a_normal_finish_is_quiet(pair):
    rank0, _, rank1, _ = pair()
    rank1.finish()
    assert rank1.wait(10) == 0
    time.sleep(1.5)  # longer than silent-after: a rank that said bye is not missed
    assert rank0.proc.poll() is None
    rank0.finish()
    assert rank0.wait(10) == 0
    assert "error" not in rank0.proc.stderr.read()


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_a_dead_rank_ends_rank_0_naming_its_host(pair):
    rank0, _, rank1, _ = pair(silent=30.0)   # a death is seen at once (EOF), not after the silence
    rank1.proc.kill()
    code = rank0.wait(5)
    assert code == -signal.SIGKILL
    err = rank0.proc.stderr.read()
    assert "rank 1 on node2 exited without finishing" in err
    assert "ert-run --resume /runs/x" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_a_silent_host_ends_rank_0_after_the_silence(pair):
    rank0, _, rank1, beat_pid = pair(silent=1.0)
    t0 = time.monotonic()
    subprocess.run(["kill", "-STOP", str(beat_pid)], check=True)   # no beat and no EOF: a cut link
    try:
        code = rank0.wait(10)
    finally:
        subprocess.run(["kill", "-CONT", str(beat_pid)], check=False)
    assert code == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - t0 < 5
    assert "rank 1 on node2 sent nothing for 1 s" in rank0.proc.stderr.read()


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_a_rank_cut_off_from_rank_0_ends_itself(pair):
    rank0, monitor_pid, rank1, _ = pair(silent=1.0)
    subprocess.run(["kill", "-STOP", str(monitor_pid)], check=True)
    try:
        code = rank1.wait(10)
    finally:
        subprocess.run(["kill", "-CONT", str(monitor_pid)], check=False)
    assert code == -signal.SIGKILL
    assert "rank 1 on node2 heard nothing from rank 0 for 1 s" in rank1.proc.stderr.read()


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_the_monitor_leaves_when_rank_0_dies(pair):
    rank0, monitor_pid, rank1, _ = pair(silent=30.0)
    rank0.proc.kill()
    rank0.proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{monitor_pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the monitor outlived its rank")


def test_one_host_or_switched_off_starts_nothing(monkeypatch):
    class Comm:
        size, rank = 2, 0

    # One host: the launcher sees a death itself, and there is no network to lose.
    assert watchdog.start(Comm(), "/r", ["a", "a"]).proc is None
    monkeypatch.setenv(watchdog.VARIABLE, "0")
    assert not watchdog.enabled()
    off = watchdog.start(Comm(), "/r", ["a", "b"])
    assert off.proc is None and "ERT_WATCHDOG=0" in off.note
    monkeypatch.setenv(watchdog.VARIABLE, "1")
    assert watchdog.enabled()


@pytest.mark.slow  # a monitor and a beat process, waiting out their silences
def test_a_job_torn_down_whole_gets_no_second_line(pair):
    # One rank's own error aborts the job: its partner dies and rank 0 with it; the launcher has said it all.
    rank0, monitor_pid, rank1, _ = pair(silent=30.0)
    rank1.proc.kill()
    rank0.proc.kill()
    rank0.proc.wait()
    assert rank0.proc.stderr.read() == ""   # read to EOF: the monitor, which shares the pipe, has left too


def test_the_silence_is_a_setting_with_a_floor():
    assert watchdog.silence_seconds(None) == watchdog.SILENT_AFTER
    assert watchdog.silence_seconds(" 12 ") == 12.0
    for bad in ("soon", "0.5", "-3", "nan", "inf"):
        with pytest.raises(ValueError, match="expected"):
            watchdog.silence_seconds(bad)
