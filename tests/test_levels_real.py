"""One level per cache on real ERT-style curves: the C kernel on this machine (benchmarks/ert_c_curves.py).

tests/data/c-kernel-zen5-*.raw.jsonl were measured on a 2-core AMD EPYC
(Zen 5) KVM guest, 1 thread, 1 KiB - 1 GiB ascending (as ERT), with the
caches the OS reported recorded in the header (48 KiB L1d, 1 MiB L2, 32 MiB
L3).  Both start with an overhead ramp below 3 KiB; the fp32 curve's memory
changed speed during the run (about 30 then 55 GB/s).  The reference values
are the raw points well inside each cache, computed here without the plateau
fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ert.analysis.ceilings import build
from ert.spec import rates
from ert.records.rawio import read_raw

DATA = Path(__file__).parent / "data"
KiB, MiB = 1024, 1024**2
# Well inside each level on this machine, clear of the transitions.
INSIDE = {"L1": (12 * KiB, 40 * KiB), "L2": (96 * KiB, 400 * KiB), "L3": (3 * MiB, 10 * MiB)}
# Rule 6's windows (2 x the cache before, up to the cache): on Zen 5 L2 has a faster regime at 0.45-0.7 x L2.
WINDOW = {"L1": (0, 48 * KiB), "L2": (96 * KiB, 1 * MiB), "L3": (2 * MiB, 32 * MiB)}


@pytest.mark.parametrize("name", ["c-kernel-zen5-fp64-1t.raw.jsonl", "c-kernel-zen5-fp32-1t.raw.jsonl"])
def test_real_c_kernel_curve_has_exactly_the_caches_plus_memory(name):
    raw = read_raw(DATA / name)
    assert [c["size_bytes"] for c in raw.header["metadata"]["caches_reported"] if c["kind"] != "Instruction"] == [
        48 * KiB, 1 * MiB, 32 * MiB]
    doc = build(raw)
    memory = doc["ceilings"]["memory"]
    assert [c["level"] for c in memory] == ["L1", "L2", "L3", "DRAM"], doc["warnings"]
    wss = np.array([p["wss_bytes"] for p in raw.points])
    gbs = np.array([rates(p).gbytes_per_s for p in raw.points])
    for level in memory[:3]:
        lo, hi = INSIDE[level["level"]]
        inside = gbs[(wss >= lo) & (wss <= hi)]
        reference = float(np.median(inside))
        # A roof is the fastest rate confirmed inside the level's window (ert.analysis.roof_confirm): an upper
        # bound of the level, from its median to its fastest point.
        window = gbs[(wss >= WINDOW[level["level"]][0]) & (wss <= max(WINDOW[level["level"]][1],
                                                                      level["wss_bytes"][1]))]
        assert 0.97 * reference <= level["gbytes_per_s"] <= window.max() * (1 + 1e-6), level["level"]
    beyond = gbs[wss >= 64 * MiB]  # the memory's window: from 2 x the last cache on
    assert beyond.min() <= memory[3]["gbytes_per_s"] <= beyond.max() * (1 + 1e-6)
    assert not any(c["level"][-1].islower() for c in memory)
