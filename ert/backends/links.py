"""The data every link and peer transfer moves, and its check: one pattern, compared in full.

Shared by the device backends' ``link_transfers`` (``ert.backends.opencl_links``,
``ert.backends.cuda_links``).  A backend supplies one ``ert.backends.Transfer``
per (level, variant), which moves the bytes and times them on its device;
``ert.measure.transfers`` does the rest (sizes from ``config.TransferOptions.sizes``,
calibration, samples, checks, records) in one place for every runtime, and
``ert.records.rawio.transfer_gbytes_per_s`` / ``transfer_latency_us`` compute the rates.
The rated link rates (PCIe, C2C, NVLink) are hardware facts: ``ert.hardware.links``.

Words (as in raw.jsonl's "transfer" records): a **transfer** is one copy of
``bytes``; a **sample** times ``repeats`` transfers back to back (``repeats``
calibrated by doubling until a sample lasts ``transfer.min_seconds``); a size is
timed in ``transfer.samples`` samples.  **moved_bytes** is what one repetition
moves in total (both directions of a bidirectional one).
"""

from __future__ import annotations

import numpy as np


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
