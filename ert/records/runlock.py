"""One run per directory: the lock a process holds on a run directory while it writes there.

Two processes measuring into one directory would each measure every point the
other has not written yet, on the same cores, into one raw.jsonl.  So the
process that writes a run (``ert-run``'s rank 0, every ``RawWriter``) holds an
exclusive ``flock`` on ``RUN_DIR/.ert-run.lock`` for as long as it writes; a
second process fails at once with the holder's PID and host.  The kernel drops
the lock when the holder exits, however it ends (a kill -9 too), so a stale
lock file never blocks a resume.

Within one process the lock is shared: ``hold`` of a directory this process
already holds counts one more user, and the lock goes when the last lets go.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ert.errors import ErtError

LOCK_NAME = ".ert-run.lock"


@dataclass
class RunLock:
    """A held lock on one run directory (``release`` once per ``hold``)."""

    directory: Path
    fd: int
    users: int = 1

    def release(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        _HELD.pop(_key(self.directory), None)
        try:
            # Unlinked while still locked: a process that opened the old file
            # finds, once it has the lock, that the name no longer leads to it,
            # and tries again (``_try_lock``); no two ever hold the same name.
            os.unlink(self.directory / LOCK_NAME)
        except OSError:
            pass
        os.close(self.fd)


_HELD: dict[str, RunLock] = {}


def _key(directory: Path) -> str:
    return os.path.realpath(directory)


def holder(directory: Path) -> str:
    """Who holds ``directory``'s lock, as the holder wrote it: 'pid 123 on host node1', or '' if unknown."""
    try:
        info = json.loads((Path(directory) / LOCK_NAME).read_text(encoding="utf-8"))
        return f"pid {int(info['pid'])} on host {info['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _try_lock(directory: Path) -> int | None:
    """This process's fd holding the lock file of ``directory``, or None while another process holds it."""
    path = directory / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder let go and unlinked it while we waited: lock the new one


def hold(directory: str | os.PathLike, *, key: str | None = None) -> RunLock:
    """Take (or share, within this process) the lock of run directory ``directory``, which must exist.

    ErtError naming the holder's PID and host when another process holds it;
    ``key`` is the command-line option the directory came from, for the message.
    """
    directory = Path(directory)
    held = _HELD.get(_key(directory))
    if held is not None:
        held.users += 1
        return held
    try:
        fd = _try_lock(directory)
    except OSError as exc:
        raise ErtError(f"cannot lock the run directory: {exc.strerror or exc}", path=directory, key=key) from None
    if fd is None:
        who = ""
        for _ in range(20):  # the holder writes its name just after it locks: give it a moment
            who = holder(directory)
            if who:
                break
            time.sleep(0.01)
        raise ErtError(f"in use by another ert-run ({who or 'pid unknown'}); wait for it to end, or choose "
                       f"another directory", path=directory, key=key)
    info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}) + "\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, info.encode("utf-8"), 0)
    lock = RunLock(directory, fd)
    _HELD[_key(directory)] = lock
    return lock


def held(directory: str | os.PathLike) -> bool:
    """Whether this process holds ``directory``'s lock."""
    return _key(Path(directory)) in _HELD
