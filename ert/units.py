"""Human-readable units shared by the report, the level names and the progress line."""

from __future__ import annotations

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int) -> str:
    """Bytes in binary units: 32768 -> '32 KiB', 1073741824 -> '1 GiB', 70.5 KiB -> '70.5 KiB'."""
    if n < 0:
        return "-" + human_bytes(-n)
    value = float(n)
    unit = 0
    while value >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(n)} B"
    # About three significant digits: enough to tell 48 KiB from 49.5 KiB.
    decimals = 2 if value < 10 else 1 if value < 100 else 0
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {_BYTE_UNITS[unit]}"
