"""The sentinels' best rates in earlier runs on this machine: what a run disturbed from start to end is held against.

A run's sentinels (``ert.measure.weather``) show how the host changed during
the run, never how the whole run compares with the machine when it is calm: a
co-tenant that stays all run (one sharing the core's L2, say) leaves every
reading alike, and the relative rule (``ert.records.weather``) sees nothing.
So each level's best sentinel rate is kept between runs in
``$ERT_CACHE_DIR/sentinels.json`` (default ``~/.cache/ert``), keyed by all
that makes two readings comparable: the host, its CPU or device, the backend,
ranks x threads, the level, its working set and kernel.  A run writes the best
of the earlier runs into its sentinel records (``earlier_best_gbytes_per_s``),
so ``ert analyze`` reads the same answer from the raw file alone, and adds its
own best when it ends (from ``MIN_READINGS`` valid readings of the level).
A cache, never an input: unreadable or unwritable, it is no history.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Iterable

from ert.records.files import read_cache, write_cache
from ert.records.weather import level_best

# A run adds its best to the history from this many valid readings of the level (fewer say little of the host).
MIN_READINGS = 3


def history_path() -> Path:
    base = os.environ.get("ERT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ert")
    return Path(base) / "sentinels.json"


def level_key(*, backend: str, device: str, ranks: int, threads: int, level: str, wss_bytes: int,
              spec: str) -> str:
    return "|".join(str(x) for x in (socket.gethostname(), backend, device, f"{ranks}x{threads}", level, wss_bytes,
                                     spec))


class History:
    """The earlier bests of one run's sentinel levels (``keys``: level -> its key)."""

    def __init__(self, keys: dict[str, str], path: Path | None = None):
        self.keys, self.path = dict(keys), path or history_path()
        self._known = read_cache(self.path)

    def earlier(self) -> dict[str, float]:
        """level -> the best rate of the earlier runs with its key (levels without one are left out)."""
        out = {}
        for level, key in self.keys.items():
            value = (self._known.get(key) or {}).get("best_gbytes_per_s")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                out[level] = float(value)
        return out

    def remember(self, sentinels: Iterable[dict]) -> None:
        """Add this run's best of each level read at least ``MIN_READINGS`` times (the file as it is now, not as
        it was read: another run may have ended meanwhile)."""
        sentinels = list(sentinels)
        counts: dict[str, int] = {}
        for rec in sentinels:
            if rec.get("valid"):
                counts[rec["level"]] = counts.get(rec["level"], 0) + 1
        bests = {lvl: v for lvl, v in level_best(sentinels).items() if counts.get(lvl, 0) >= MIN_READINGS}
        if not bests:
            return
        known = read_cache(self.path)
        for level, value in bests.items():
            key = self.keys.get(level)
            if key is None:
                continue
            old = known.get(key) if isinstance(known.get(key), dict) else {}
            best = max(value, float(old.get("best_gbytes_per_s") or 0.0))
            known[key] = {"best_gbytes_per_s": round(best, 4), "runs": int(old.get("runs") or 0) + 1,
                          "last": time.strftime("%Y-%m-%d")}
        write_cache(self.path, known)

