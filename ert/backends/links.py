"""Host<->device and device<->device transfer levels: sizes, the data pattern and its check, rated link rates.

Shared by the device backends' ``link_transfers`` (``ert.backends.opencl_links``,
``ert.backends.cuda_links``).  A backend supplies one ``ert.backends.Transfer``
per (level, variant), which moves the bytes and times them on its device;
``ert.measure.transfers`` does the rest (calibration, samples, checks,
records) in one place for every runtime.

Words (as in raw.jsonl's "transfer" records): a **transfer** is one copy of
``bytes``; a **sample** times ``repeats`` transfers back to back (``repeats``
calibrated by doubling until a sample lasts ``min_seconds``); a size is timed
in ``samples`` samples (the config's ``timing.repeats``).  **moved_bytes** is
what one repetition moves in total (both directions of a bidirectional one).
Rates and latencies are computed by ``ert.rawio.transfer_gbytes_per_s`` / ``transfer_latency_us``;
the backends only time.
"""

from __future__ import annotations

import numpy as np

LEVELS = ("link-h2d", "link-d2h", "link-bidir", "peer-d2d")


# ----------------------------------------------------------------------------- sizes
def link_sizes(*, min_bytes: int = 4096, max_bytes: int = 256 << 20, per_octave: int = 1) -> list[int]:
    """Transfer sizes from ``min_bytes`` (latency-bound) to ``max_bytes`` (the plateau), geometric.

    Every size is a multiple of 4096 bytes (a page: pinned and mapped buffers
    are page-granular) except where ``min_bytes`` itself is smaller; sorted, no repeats.
    """
    if min_bytes < 8 or max_bytes < min_bytes or per_octave < 1:
        raise ValueError(f"bad link size range {min_bytes}..{max_bytes} ({per_octave} per octave)")
    out, k = [], 0
    while True:
        value = min_bytes * 2 ** (k / per_octave)
        if value > max_bytes * (1 + 1e-9):
            break
        size = int(round(value))
        if size >= 4096:
            size = size // 4096 * 4096
        if not out or size > out[-1]:
            out.append(size)
        k += 1
    return out


# ----------------------------------------------------------------------------- data and its check
# Odd 64-bit multiplier: word i of the source holds i x GOLDEN (mod 2^64), so every word differs
# and a copy to the wrong offset, a short copy or a stale buffer all fail the comparison.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
POISON_BYTE = 0xA5


def pattern(nbytes: int) -> np.ndarray:
    """``nbytes`` of the source pattern as uint8 (a whole number of 8-byte words, truncated)."""
    words = -(-nbytes // 8)
    with np.errstate(over="ignore"):
        data = np.arange(words, dtype=np.uint64) * GOLDEN
    return data.view(np.uint8)[:nbytes]


def compare(got: np.ndarray, expected: np.ndarray, *, what: str) -> tuple[bool, str]:
    """(equal, text) comparing two byte arrays in full; the text names the first differing byte."""
    got, expected = got.view(np.uint8).ravel(), expected.view(np.uint8).ravel()
    if got.size != expected.size:
        return False, f"{what}: {got.size} bytes, expected {expected.size}"
    if np.array_equal(got, expected):
        return True, f"{what}: all {got.size} bytes equal the source"
    first = int(np.flatnonzero(got != expected)[0])
    return False, (f"{what}: byte {first} of {got.size} is {int(got[first])}, the source holds "
                   f"{int(expected[first])}")
