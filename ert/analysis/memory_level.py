"""The memory level (DRAM, HBM) of one curve: only from 2 x the last cache on, and its fast mode on a shared host.

* **From 2 x the last cache.**  Below twice the last cache's capacity (as the
  run's threads share it, ``ert.hardware.hwinfo.aggregate_capacity_bytes``) a working
  set still partly lives in that cache, so no memory roof comes from it: the
  level's own plateau, or the range it was borrowed over from a clearer curve
  (a break inside the L3 put L3-speed points into the memory of the Zen 4
  newcomer's run: fp32 read+write "DRAM" at 306 GB/s), keeps only its points
  from there on.  Points left out that read above the roof are the last
  cache's transition (the host's cache may be larger than the guest is told),
  and a warning says so.  A curve with no point there has no memory level.
* **Fast mode.**  On a shared host the memory's bandwidth can switch between
  modes during a run (Zen 4 guest: read-only 34 or 57 GB/s, read+write 54 or
  100, at random working sets from one point to the next, so no plateau of the
  fast mode forms).  When the rate ``MIN_REGIME_POINTS`` of its clean points
  reach is above its plateau by more than ``MEMORY_MODE_MARGIN``, that rate is
  its value (what the memory gives the kernel while the host lets it), its
  range the lowest to highest clean rate, and a warning says so.  One or two
  fast points make no mode; a rate the run confirmed is the roof where there is
  one (``ert.analysis.roof_confirm``), and clean points above the roof are named.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ert.analysis.levels import NamedLevel
from ert.analysis.plateaus import Curve
from ert.spec import plateau_spread
from ert.units import human_bytes as fmt_bytes
from ert.records.warning_codes import warn

# A regime, or a memory mode, is at least this many points (ert.analysis.regimes).
MIN_REGIME_POINTS = 3
# The memory is re-valued at its fast mode only when that mode is this much above its plateau (the noise of a
# memory plateau on a quiet host is a few per cent).
MEMORY_MODE_MARGIN = 0.10


def memory_from(lvl: NamedLevel, start: float, wss: np.ndarray, bw: np.ndarray,
                flags: np.ndarray) -> tuple[NamedLevel | None, np.ndarray]:
    """The memory level without its points below ``start`` (2 x the last cache), and those left out.

    None when no point of the level lies at ``start`` or beyond."""
    held = np.array(lvl.plateau.indices, dtype=int)
    dropped = held[wss[held] < start]
    if not dropped.size:
        return lvl, dropped
    kept = held[wss[held] >= start]
    if not kept.size:
        return None, dropped
    plateau = Curve(wss, bw, flags).level(kept, min_points=MIN_REGIME_POINTS, value=np.median)
    basis = f"{lvl.basis}; from {fmt_bytes(start)} (2 x the last cache) on"
    return replace(lvl, plateau=plateau, basis=basis), dropped


def transition_note(lvl: NamedLevel, dropped: np.ndarray, roof: float, wss: np.ndarray, bw: np.ndarray,
                    label: str) -> str | None:
    """The warning for points ``memory_from`` left out that read above the memory's roof, or None."""
    above = dropped[bw[dropped] > roof * (1 + MEMORY_MODE_MARGIN)]
    if not above.size:
        return None
    return warn("memory-transition",
                f"{label} {lvl.name}: {dropped.size} point(s) from {fmt_bytes(float(wss[dropped].min()))} to "
                f"{fmt_bytes(float(wss[dropped].max()))}, below 2 x the last cache, read up to "
                f"{float(bw[above].max()):.4g} GB/s, above the {lvl.name} roof of {roof:.4g} GB/s: the last "
                f"cache's transition (the host's cache may be larger than the guest is told), left out of "
                f"{lvl.name}, which starts at 2 x the last cache")


def no_memory_note(name: str, start: float, dropped: np.ndarray, wss: np.ndarray, label: str) -> str:
    """The warning for a curve whose memory level has no point from 2 x the last cache on."""
    return warn("level-missing",
                f"{label} {name}: no point from {fmt_bytes(start)} (2 x the last cache) on; its {dropped.size} "
                f"point(s) up to {fmt_bytes(float(wss[dropped].max()))} still live partly in the last cache: "
                f"no {name} roof (sweep larger working sets)")


def fast_mode(lvl: NamedLevel, start: float, taken: set[int], wss: np.ndarray, bw: np.ndarray, flags: np.ndarray,
              label: str, confirmed: float | None = None,
              ) -> tuple[NamedLevel, tuple[float, float] | None, str | None]:
    """The memory level re-valued at its fast mode when the host's bandwidth changed during the run:
    (level, its rate range or None, a warning or None).  ``confirmed`` is the rate the run confirmed from
    ``start`` on (None: none), the roof wherever there is one."""
    lo = max(start, lvl.plateau.wss_bytes[0])
    points = np.array([i for i in np.flatnonzero(wss >= lo) if i not in taken and np.isfinite(bw[i]) and bw[i] > 0],
                      dtype=int)
    clean = points[~flags[points]] if points.size else points
    if clean.size < MIN_REGIME_POINTS:
        return lvl, None, None
    fast = float(np.sort(bw[clean])[-MIN_REGIME_POINTS])
    value = lvl.plateau.gbytes_per_s
    if fast <= value * (1 + MEMORY_MODE_MARGIN):
        # Fast points nothing confirmed make no roof, but a point above the roof is never passed over in silence.
        roof = value if confirmed is None else confirmed
        high = clean[bw[clean] > roof * (1 + MEMORY_MODE_MARGIN)]
        if not high.size:
            return lvl, None, None
        where = ", ".join(f"{float(bw[i]):.4g} GB/s at {fmt_bytes(float(wss[i]))}" for i in high)
        return lvl, None, warn(
            "unconfirmed-points",
            f"{label} {lvl.name}: {high.size} clean point(s) read above its roof of {roof:.4g} GB/s ({where}): "
            f"the host's memory bandwidth rose for a moment (a shared host); neither measured again nor met by "
            f"a neighbour within the noise threshold, so not a roof: a kernel can meet it, not count on it")
    held = np.union1d(np.array(lvl.plateau.indices, dtype=int), points)
    values = bw[clean]
    plateau = replace(lvl.plateau, gbytes_per_s=fast, spread=plateau_spread(values), n_points=int(held.size),
                      wss_bytes=(int(wss[held].min()), int(wss[held].max())), indices=tuple(int(i) for i in held),
                      noisy_points=int(np.count_nonzero(flags[held])))
    n_fast = int(np.count_nonzero(values >= fast))
    basis = (f"{lvl.basis}; roof: the rate {MIN_REGIME_POINTS} of its clean points from "
             f"{fmt_bytes(lo)} on reach ({n_fast} of {clean.size} points), above its plateau of {value:.4g} GB/s")
    if confirmed is None:
        roof = f"{fast:.4g} GB/s (the rate {n_fast} of them reach), not the {value:.4g} GB/s plateau"
    else:
        roof = (f"{confirmed:.4g} GB/s, the fastest rate the run confirmed (not the {fast:.4g} GB/s {n_fast} of them "
                f"reach, nor the {value:.4g} GB/s plateau)")
    warning = warn("bandwidth-changed",
                   f"{label} {lvl.name}: the memory read {float(values.min()):.4g} - {float(values.max()):.4g} GB/s "
                   f"over {clean.size} clean points from {fmt_bytes(lo)}: the host's memory bandwidth changed during "
                   f"the run (another tenant); the roof is {roof}; the slower mode shows in its range")
    return replace(lvl, plateau=plateau, basis=basis), (float(values.min()), float(values.max())), warning
