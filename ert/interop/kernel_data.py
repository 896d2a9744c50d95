"""An application kernel's measured data (time, FLOPs per precision, bytes per level) and the number and unit
reading that Nsight Compute's CSV and hand-written kernel files share."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ert.errors import ErtError
from ert.records.ceilings_io import magnitude_fault
# Seconds per unit of time, as ncu writes them (older releases spell them out).
_TIME_UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
               "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# ncu scales units with decimal SI prefixes (--print-units auto): 1 Kbyte = 1000 byte.
_PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BASE_UNITS = ("byte", "inst", "cycle", "sector", "hz", "B")
# The precisions an application's FLOPs are counted in, and ncu's letter for each (its sass metrics).
PRECISION_LETTERS = (("fp64", "d"), ("fp32", "f"), ("fp16", "h"))
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")


@dataclass
class KernelData:
    """One application kernel: time, FLOPs per precision (FMA counted twice), bytes per memory level."""

    name: str
    seconds: float
    flops: dict[str, float]
    bytes: dict[str, float]
    fma_ratio: dict[str, float] = field(default_factory=dict)  # precision -> fma/(add+mul+fma) instructions
    launches: int = 1
    fma_ratio_source: str = "file"  # where fma_ratio came from: "file" (hand-written) or "instruction counts"
    device: str | None = None  # what ncu says of the profiled GPU: display name, device index, CC
    notes: list[str] = field(default_factory=list)  # how the file was read (number convention, rate x time ...)


# ----------------------------------------------------------------------------------------- numbers and units
def parse_number(text: str, *, where: str, path, decimal_comma: bool = False) -> float | None:
    """A metric value as ncu prints it ("1,234.5", "n/a"; "1.234,5" with ``decimal_comma``); None when no value."""
    value = text.strip()
    if value in ("", "n/a", "N/A", "(!) n/a", "-"):
        return None
    if decimal_comma:
        value = value.replace(".", "").replace(",", ".")
    elif "," in value:
        if not _THOUSANDS_RE.match(value):
            raise ErtError(f"cannot read number {text!r} (a decimal comma? export with a C/English locale)",
                           path=path, key=where)
        value = value.replace(",", "")
    try:
        number = float(value)
    except ValueError:
        raise ErtError(f"not a number: {text!r}", path=path, key=where) from None
    if not math.isfinite(number):
        raise ErtError(f"not a finite number: {text!r}", path=path, key=where)
    if magnitude_fault(number):
        raise ErtError(magnitude_fault(number), path=path, key=where)
    return number


def unit_scale(unit: str, *, where: str, path) -> tuple[str, float]:
    """(kind, factor to base units): 'usecond' -> ('time', 1e-6), 'Kbyte' -> ('byte', 1e3), 'cycle/nsecond' -> ..."""
    text = unit.strip()
    if text in _TIME_UNITS:
        return "time", _TIME_UNITS[text]
    if text in ("", "inst", "count"):
        return "count", 1.0
    if "/" in text:
        top, bottom = text.split("/", 1)
        kind_top, f_top = unit_scale(top, where=where, path=path)
        kind_bottom, f_bottom = unit_scale(bottom, where=where, path=path)
        return f"{kind_top}/{kind_bottom}", f_top / f_bottom
    for base in _BASE_UNITS:
        if text.endswith(base) and text[: -len(base)] in _PREFIXES:
            factor = _PREFIXES[text[: -len(base)]]
            kind = {"B": "byte", "inst": "count", "hz": "cycle/time"}.get(base, base)
            return kind, factor
    raise ErtError(f"unknown unit {unit!r}", path=path, key=where)
