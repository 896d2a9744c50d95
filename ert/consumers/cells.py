"""A report's cells, one way for every product: rates, spreads, sizes, counts and flags, and the ceilings' names."""

from __future__ import annotations

import math
from typing import Any

from ert.spec import access_name
from ert.units import human_bytes

MISSING = "-"


def format_rate(value: float) -> str:
    """A GB/s or GFLOP/s value, 4 significant digits but every integer digit: 712.9, 43.26, 12346."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    # Round to 4 significant digits first so that 999.96 becomes 1000, not 1000.0.
    rounded = float(f"{value:.4g}")
    if abs(rounded) >= 1000:
        # Large values keep every integer digit: 12346, not 12350.
        return f"{value:.0f}"
    magnitude = math.floor(math.log10(abs(rounded))) + 1
    decimals = min(max(0, 4 - magnitude), 8)
    return f"{rounded:.{decimals}f}"


def format_spread(spread: Any) -> str:
    if not isinstance(spread, (int, float)) or isinstance(spread, bool):
        return MISSING
    percent = spread * 100
    if 0 < percent < 0.1:
        return "<0.1%"
    return f"{percent:.1f}%"


def format_bytes(n: Any) -> str:
    return human_bytes(n) if isinstance(n, int) and not isinstance(n, bool) else MISSING


def format_wss_range(wss: Any) -> str:
    if not (isinstance(wss, (list, tuple)) and len(wss) == 2):
        return MISSING
    low, high = (format_bytes(v) for v in wss)
    return low if low == high else f"{low} - {high}"


def format_count(n: Any) -> str:
    return str(n) if isinstance(n, int) and not isinstance(n, bool) else MISSING


def format_flag(flag: Any) -> str:
    return MISSING if flag is None else ("yes" if flag else "no")


def is_transfer_entry(e: dict) -> bool:
    """A link, peer or network level (an entry with a ``kind``), not a memory level."""
    return isinstance(e, dict) and e.get("kind") is not None


def is_int_entry(e: dict) -> bool:
    """An integer-operation roof: its gflops_per_s is GIOP/s."""
    return e.get("unit") == "GIOP/s" or e.get("precision") in ("int32", "int64")


def unit_of(e: dict) -> str:
    if e.get("unit") == "GOP/s":
        return "GOP/s"
    return "GIOP/s" if is_int_entry(e) else "GFLOP/s"


def memory_name(e: dict) -> str:
    if is_transfer_entry(e):
        return f"{e.get('level', MISSING)} {e.get('variant', '')}".strip()
    access = access_name(e.get("access", ""))
    return " ".join(str(x) for x in (e.get("precision", ""), access, e.get("level", MISSING)) if x)


def compute_name(e: dict) -> str:
    if e.get("pipe") == "tensor":
        return f"{e.get('precision', MISSING)} tensor peak"
    if e.get("mix"):
        return f"{e.get('precision', MISSING)} {e['mix']} mix peak"
    if is_int_entry(e):
        return f"{e.get('precision', MISSING)} {'add' if e.get('op') == 'add' else 'multiply-add'} peak"
    return f"{e.get('precision', MISSING)} {'FMA' if e.get('fma') else 'no-FMA'} peak"
