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

The memory has no sentinel (a sentinel there would cost a run's worth of
time), yet on a shared host its bandwidth is the one that changes most
between runs (other tenants' streams: DRAM read 29-97 GB/s on the Zen 4
guest within an hour).  So each bandwidth curve's memory roof is kept the
same way (``memory_key``): the run writes the earlier best of each curve
into its end record (``weather.memory_earlier``) and, once analysed, adds
its own roofs (``remember_memory``).
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


def _key(*parts) -> str:
    """This host's key of a history entry: what makes two readings comparable, joined."""
    return "|".join(str(x) for x in (socket.gethostname(), *parts))


def level_key(*, backend: str, device: str, ranks: int, threads: int, level: str, wss_bytes: int,
              spec: str) -> str:
    return _key(backend, device, f"{ranks}x{threads}", level, wss_bytes, spec)


def memory_key(*, backend: str, device: str, ranks: int, threads: int, curve: str) -> str:
    """The key of a bandwidth curve's memory roof (``curve``: "fp64-rw", say)."""
    return _key(backend, device, f"{ranks}x{threads}", "memory", curve)


def _positive(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


class History:
    """The earlier bests of one run's sentinel levels (``keys``: level -> its key)."""

    def __init__(self, keys: dict[str, str], path: Path | None = None, memory_keys: dict[str, str] | None = None):
        self.keys, self.path = dict(keys), path or history_path()
        self.memory_keys = dict(memory_keys or {})  # curve -> key (memory_key)
        self._known = read_cache(self.path)

    def _best(self, keys: dict[str, str]) -> dict[str, float]:
        out = {}
        for name, key in keys.items():
            entry = self._known.get(key)
            value = _positive(entry.get("best_gbytes_per_s")) if isinstance(entry, dict) else None
            if value is not None:
                out[name] = value
        return out

    def earlier(self) -> dict[str, float]:
        """level -> the best rate of the earlier runs with its key (levels without one are left out)."""
        return self._best(self.keys)

    def earlier_memory(self) -> dict[str, float]:
        """curve -> the best memory roof of the earlier runs with its key."""
        return self._best(self.memory_keys)

    def _store(self, bests: dict[str, float], keys: dict[str, str]) -> None:
        known = read_cache(self.path)  # the file as it is now: another run may have ended meanwhile
        for name, value in bests.items():
            key = keys.get(name)
            if key is None:
                continue
            old = known.get(key) if isinstance(known.get(key), dict) else {}
            best = max(value, _positive(old.get("best_gbytes_per_s")) or 0.0)
            known[key] = {"best_gbytes_per_s": round(best, 4), "runs": int(old.get("runs") or 0) + 1,
                          "last": time.strftime("%Y-%m-%d")}
        write_cache(self.path, known)

    def remember_memory(self, roofs: dict[str, float]) -> None:
        """Add this run's memory roof of each curve (curve -> GB/s)."""
        bests = {curve: v for curve, v in roofs.items() if _positive(v) is not None and curve in self.memory_keys}
        if bests:
            self._store(bests, self.memory_keys)

    def remember(self, sentinels: Iterable[dict]) -> None:
        """Add this run's best of each level read at least ``MIN_READINGS`` times (the file as it is now, not as
        it was read: another run may have ended meanwhile)."""
        sentinels = list(sentinels)
        counts: dict[str, int] = {}
        for rec in sentinels:
            if rec.get("valid"):
                counts[rec["level"]] = counts.get(rec["level"], 0) + 1
        bests = {lvl: v for lvl, v in level_best(sentinels).items() if counts.get(lvl, 0) >= MIN_READINGS}
        if bests:
            self._store(bests, self.keys)

