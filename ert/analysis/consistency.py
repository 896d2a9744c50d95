"""Levels that cannot be: the same bytes read at two rates, and a level faster than the level above it.

Both come from the finished memory ceilings of one thread count, and both
are "act on it" warnings: the run's numbers are not the machine's alone.

* **Precisions.**  fp32 and fp64 kernels of one access pattern move the same
  bytes through the same level, so their roofs agree within the run's noise
  threshold.  When the fastest and the slowest precision of a (level,
  access) differ by more (the Zen 4 newcomer's read+write DRAM: fp32 306
  GB/s, fp64 61), one warning names both: one of them was measured while
  other work shared the host, or the level's range came from the wrong
  working sets.
* **Inversions.**  Bandwidth only falls as the data moves away from the core:
  L2 can not stream faster than L1, L3 than L2, the memory than the last
  cache.  A curve whose level reads faster than the level above it by more
  than the noise threshold (the same newcomer run: fp64 read+write L1 359
  GB/s confirmed, L2 449) gets one warning naming both.
"""

from __future__ import annotations

from collections import defaultdict

from ert.records.warning_codes import warn

PRECISIONS_CODE = "precisions-disagree"
INVERTED_CODE = "level-inverted"


def _label(precision: str, access: str) -> str:
    return f"{precision} {'read+write' if access == 'rw' else 'read-only'}"


def _apart(fast: float, slow: float, threshold: float) -> bool:
    return slow > 0 and fast > slow * (1.0 + threshold)


def precision_warnings(ceilings: list[dict], threshold: float) -> list[str]:
    """One warning per (level, access) whose fastest and slowest precision differ beyond the noise threshold."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for c in ceilings:
        groups[(c["level"], c["access"])].append(c)
    warnings = []
    for (level, access), same in groups.items():
        if len({c["precision"] for c in same}) < 2:
            continue
        fast = max(same, key=lambda c: c["gbytes_per_s"])
        slow = min(same, key=lambda c: c["gbytes_per_s"])
        if not _apart(fast["gbytes_per_s"], slow["gbytes_per_s"], threshold):
            continue
        ratio = fast["gbytes_per_s"] / slow["gbytes_per_s"]
        warnings.append(warn(PRECISIONS_CODE,
                        f"{level} {_label(fast['precision'], access)} {fast['gbytes_per_s']:.4g} GB/s against "
                        f"{_label(slow['precision'], access)} {slow['gbytes_per_s']:.4g} GB/s: the same bytes at "
                        f"{ratio:.2f}x the rate, beyond the noise threshold ({threshold:.0%}); one of them was "
                        f"measured while other work shared the host (or the {level} bandwidth changed during the "
                        f"run): neither value is the machine's alone; measure again"))
    return warnings


def _order(level: str, memory_name: str) -> int | None:
    """A level's place from the core out (L1 = 1 ... the memory last); None for a level the hints do not list."""
    if level == memory_name:
        return 1 << 20
    if level.startswith("L") and level[1:].isdigit():
        return int(level[1:])
    return None


def inversion_warnings(ceilings: list[dict], threshold: float, memory_name: str) -> list[str]:
    """One warning per curve level that reads faster than the level above it beyond the noise threshold."""
    curves: dict[tuple[str, str], list[tuple[int, dict]]] = defaultdict(list)
    for c in ceilings:
        place = _order(c["level"], memory_name)
        if place is not None:
            curves[(c["precision"], c["access"])].append((place, c))
    warnings = []
    for (precision, access), levels in curves.items():
        levels.sort(key=lambda pair: pair[0])
        for (_, upper), (_, lower) in zip(levels, levels[1:]):
            if not _apart(lower["gbytes_per_s"], upper["gbytes_per_s"], threshold):
                continue
            warnings.append(warn(INVERTED_CODE,
                            f"{_label(precision, access)} {lower['level']} {lower['gbytes_per_s']:.4g} GB/s reads "
                            f"faster than its {upper['level']} {upper['gbytes_per_s']:.4g} GB/s, beyond the noise "
                            f"threshold ({threshold:.0%}): no level streams faster than the one above it; one of "
                            f"them was measured while other work shared the host: measure again"))
    return warnings


def consistency_warnings(ceilings: list[dict], threshold: float, memory_name: str) -> list[str]:
    """The precision and inversion warnings of one set of memory ceilings."""
    return precision_warnings(ceilings, threshold) + inversion_warnings(ceilings, threshold, memory_name)
