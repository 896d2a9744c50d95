"""Heavy, independent setups started when the session starts, on the core the serial test run leaves idle.

The suite runs one test at a time, and most tests use one core; the compiles that a few modules need (nvcc for
every CUDA architecture, Numba's assembly for other x86 targets, the sweep under qemu in the arm64 rig) need
none of the tests before them.  A module registers such a setup with ``@job("name", fixture="...")``: when the
selected tests use that fixture, ``start`` (called by tests/conftest.py once collection is done) runs the jobs
one after another in a worker thread at a lower CPU priority (nice 10: a measuring test's threads keep their
cores), and the modules that use them run last (``run_last``), by when their setup is done or nearly so.  The
fixture calls ``result("name")``, which waits for the job, re-raises what it raised, and runs it in place when
it was not started (a single test selected by name, say).  A job never calls pytest.skip: it returns what the
fixture needs to decide.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any, Callable

_JOBS: dict[str, tuple[Callable[[], Any], str, str]] = {}  # name -> (function, fixture name, module name)
_FUTURES: dict[str, Future] = {}
NICE = 10


def job(name: str, *, fixture: str):
    """Register ``fn`` as the background setup ``name`` of the fixture ``fixture`` (decorator)."""
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _JOBS[name] = (fn, fixture, fn.__module__)
        return fn
    return register


def _needed(items) -> list[str]:
    wanted = {(item.module.__name__, name) for item in items if getattr(item, "module", None) is not None
              for name in getattr(item, "fixturenames", ())}
    return [name for name, (_, fixture, module) in _JOBS.items() if (module, fixture) in wanted]


def run_last(items, quiet: tuple[str, ...] = ()) -> None:
    """Reorder ``items`` in place (stable within each part): the modules whose tests use a registered job's fixture
    after the others, and the ``quiet`` modules (those that hold measured rates against each other: a slow host
    named, a disturbance seen) last of all, when the jobs are long done."""
    jobs = {_JOBS[name][2] for name in _needed(items)}

    def part(item) -> int:
        module = getattr(item, "module", None)
        name = module.__name__ if module is not None else ""
        return 2 if name in quiet else 1 if name in jobs else 0

    items.sort(key=part)  # sort is stable


def start(items) -> None:
    """Start the jobs that ``items`` need, one after another, in one low-priority worker thread."""
    names = [name for name in _needed(items) if name not in _FUTURES]
    if not names:
        return
    futures = {name: Future() for name in names}
    _FUTURES.update(futures)

    def work() -> None:
        try:
            os.nice(NICE)  # this thread only (Linux), and every process and thread it starts
        except OSError:
            pass
        for name, future in futures.items():
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(_JOBS[name][0]())
            except BaseException as exc:  # handed to the fixture that waits for it
                future.set_exception(exc)

    threading.Thread(target=work, name="tests-background", daemon=True).start()


def result(name: str, timeout: float = 1800) -> Any:
    """What job ``name`` returned (waiting for it), or its exception; run here and now when it was not started."""
    future = _FUTURES.get(name)
    if future is None:
        return _JOBS[name][0]()
    return future.result(timeout=timeout)
