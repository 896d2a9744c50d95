"""Fault injection for testing how a multi-rank job fails: ERT_INJECT_FAULT="rank=R,point=K".

A job of many ranks must end, with one clear message, when any one rank fails;
that can only be tested by making one rank fail on purpose.  With the variable
set, rank R raises an error inside the timed region of its K-th point (counted
from 1), while the other ranks wait for it in a collective.  Without it,
nothing is wrapped.
"""

from __future__ import annotations

import os

from ert.errors import ErtError

VARIABLE = "ERT_INJECT_FAULT"


class InjectedFault(RuntimeError):
    """The error an injected fault raises."""


def parse(text: str) -> tuple[int, int]:
    """(rank, point) of ``"rank=1,point=3"``; ErtError for anything else."""
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("rank", "point") or not value.strip().isdigit():
            raise ErtError(f"expected rank=R,point=K, got {text!r}", key=VARIABLE)
        fields[key.strip()] = int(value)
    if set(fields) != {"rank", "point"} or fields["point"] < 1:
        raise ErtError(f"expected rank=R,point=K with K >= 1, got {text!r}", key=VARIABLE)
    return fields["rank"], fields["point"]


class _Faulty:
    """A backend that behaves like the one it wraps until its K-th point's first timed run."""

    def __init__(self, inner, point: int):
        self._inner = inner
        self._point = point
        self._prepared = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def prepare(self, spec, **kwargs):
        self._prepared += 1
        return self._inner.prepare(spec, **kwargs)

    def run(self, trials: int) -> float:
        if self._prepared >= self._point:
            raise InjectedFault(f"injected fault ({VARIABLE}) in point {self._prepared}")
        return self._inner.run(trials)


def check() -> None:
    """ErtError if ERT_INJECT_FAULT is set but malformed: every rank checks it before the sweep, and the CLI
    says it once (``ert.cli.run._agreed``), not once per rank."""
    text = os.environ.get(VARIABLE)
    if text:
        parse(text)


def maybe_wrap(backend, *, rank: int):
    """``backend`` itself, or a failing wrapper where ERT_INJECT_FAULT names this rank."""
    text = os.environ.get(VARIABLE)
    if not text:
        return backend
    fault_rank, point = parse(text)
    return _Faulty(backend, point) if fault_rank == rank else backend


def unwrapped(backend):
    """The backend ``maybe_wrap`` wrapped (or ``backend`` itself): the sentinels read the host's weather on it,
    so that K counts the sweep's points alone."""
    return backend._inner if isinstance(backend, _Faulty) else backend
