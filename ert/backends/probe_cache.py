"""A probe's answer kept on disk between runs: one small JSON file of answers by key, beside Numba's cache.

A cache, never an input: a missing, unreadable or malformed file is no answer
(the probe runs), and a file that cannot be written is left as it was
(``ert.records.files.read_cache``, ``write_cache``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ert.records.files import read_cache, write_cache


def remembered(path: Path, key: str, probe: Callable[[], int | None]) -> int | None:
    """The integer answer kept under ``key`` in ``path``, or ``probe()``'s, kept there for the next run (a None
    answer is not kept)."""
    known = read_cache(path)
    if isinstance(known.get(key), int) and not isinstance(known.get(key), bool):
        return known[key]
    answer = probe()
    if answer is not None:
        write_cache(path, {**known, key: answer})
    return answer
