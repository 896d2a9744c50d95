"""A probe's answer kept on disk between runs: one small JSON file of answers by key, beside Numba's cache.

A cache, never an input: a missing, unreadable or malformed file is no answer
(the probe runs), and a file that cannot be written is left as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable


def remembered(path: Path, key: str, probe: Callable[[], int | None]) -> int | None:
    """The integer answer kept under ``key`` in ``path``, or ``probe()``'s, kept there for the next run (a None
    answer is not kept)."""
    known = _read(path)
    if isinstance(known.get(key), int) and not isinstance(known.get(key), bool):
        return known[key]
    answer = probe()
    if answer is not None:
        _write(path, {**known, key: answer})
    return answer


def _read(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write(path: Path, value: dict) -> None:
    """Written whole: a temporary file renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(value, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
