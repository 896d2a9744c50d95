"""Application data for rooflines: the kernels of Nsight Compute CSV files (read by ``ert.consumers.ncu_csv``)
or of a hand-written YAML/JSON file, and the number and unit reading both share."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ert.errors import ErtError, parse_user_json, read_user_text

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
    if number != 0 and not _MAGNITUDES[0] <= abs(number) <= _MAGNITUDES[1]:
        raise ErtError(f"{number:g} is out of range (ert reads magnitudes from {_MAGNITUDES[0]:g} to "
                       f"{_MAGNITUDES[1]:g})", path=path, key=where)
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


# ----------------------------------------------------------------------------------------- reading files
def _read_text(path: Path) -> str:
    return read_user_text(path, expected="an application data file")


def _is_profiler_output(path: Path, text: str) -> bool:
    suffix = path.suffix.lower()
    return suffix == ".csv" or (suffix not in (".yaml", ".yml", ".json") and any(
        mark in text for mark in ('"Kernel Name"', "==PROF==", "==ERROR==", "NVPROF", '"Metric Name"')))


def load_app(path, *more) -> list[KernelData]:
    """Kernels from ncu CSV files (either layout) or a hand-written YAML/JSON file; ErtError on any fault.

    Several ncu files (NERSC's two passes: memory + time, then FLOPs) are merged
    by kernel and launch ID before the kernels are built: for a metric in both,
    the first file that has byte metrics wins, so give the memory+time pass first.
    """
    paths = [Path(p) for p in (path, *more)]
    texts = [_read_text(p) for p in paths]
    if len(paths) == 1 and not _is_profiler_output(paths[0], texts[0]):
        suffix = paths[0].suffix.lower()
        return read_handwritten(texts[0], path=paths[0],
                                as_json=suffix == ".json" or texts[0].lstrip().startswith("{"))
    for p, t in zip(paths, texts):
        if not _is_profiler_output(p, t):
            raise ErtError("only Nsight Compute CSV files can be merged; a hand-written file comes alone", path=p)
    # Imported here: ncu_csv builds on this module's KernelData and units.
    from ert.consumers.ncu_csv import read_ncu_files

    return read_ncu_files([(t, p) for t, p in zip(texts, paths)])


# ----------------------------------------------------------------------------------------- hand-written
_KERNEL_KEYS = {"name", "seconds", "flops", "bytes", "fma_ratio", "launches"}


def read_handwritten(text: str, *, path, as_json: bool) -> list[KernelData]:
    """YAML or JSON: {kernels: [{name, seconds, flops: {fp64: N}, bytes: {L1: N, L2: N, DRAM: N}, fma_ratio?}]}."""
    if as_json:
        doc = parse_user_json(text, path=path)
    else:
        import yaml

        from ert import yamlsafe

        try:
            doc = yamlsafe.load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ErtError(f"invalid YAML: {getattr(exc, 'problem', None) or exc}", path=path,
                           key=f"line {mark.line + 1}" if mark else None) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list) or not doc["kernels"]:
        raise ErtError("expected a mapping with a non-empty list 'kernels'", path=path, key="kernels")
    return [_handwritten_kernel(k, i, path) for i, k in enumerate(doc["kernels"])]


def _positive(value, key: str, path, *, allow_zero: bool = False) -> float:
    if isinstance(value, str):
        # YAML 1.1 reads 2.0e8 (no sign in the exponent) as a string; take it as the number it was meant to be.
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        # math.isfinite(10**400) raises OverflowError: no float holds it.
        raise ErtError(f"expected a positive number below 1e30, got an integer of {len(str(abs(value)))} digits",
                       path=path, key=key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero):
        raise ErtError(f"expected a positive number, got {value!r}", path=path, key=key)
    if value != 0 and not _MAGNITUDES[0] <= value <= _MAGNITUDES[1]:
        # Ratios of such numbers (intensity, % of a roof) overflow to infinity or 0 in the plots.
        raise ErtError(f"{value:g} is out of range (ert reads magnitudes from {_MAGNITUDES[0]:g} to "
                       f"{_MAGNITUDES[1]:g})", path=path, key=key)
    return float(value)


_MAGNITUDES = (1e-30, 1e30)  # as ert.ceilings_io.MAGNITUDE_RANGE: no seconds, FLOPs or bytes come near them


def _handwritten_kernel(entry, index: int, path) -> KernelData:
    where = f"kernels[{index}]"
    if not isinstance(entry, dict):
        raise ErtError("expected a mapping", path=path, key=where)
    unknown = sorted(set(entry) - _KERNEL_KEYS)
    if unknown:
        raise ErtError(f"unknown key (allowed: {', '.join(sorted(_KERNEL_KEYS))})", path=path,
                       key=f"{where}.{unknown[0]}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ErtError("every kernel needs a name", path=path, key=f"{where}.name")
    if "seconds" not in entry:
        raise ErtError(f"kernel {name!r} has no time: give seconds", path=path, key=f"{where}.seconds")
    seconds = _positive(entry["seconds"], f"{where}.seconds", path)
    flops = entry.get("flops")
    if not isinstance(flops, dict) or not flops:
        raise ErtError(f"kernel {name!r}: give flops per precision, e.g. {{fp64: 1.0e9}}", path=path,
                       key=f"{where}.flops")
    for p in flops:
        if p not in dict(PRECISION_LETTERS):
            raise ErtError("unknown precision (fp64, fp32, fp16)", path=path, key=f"{where}.flops.{p}")
    flops = {p: _positive(v, f"{where}.flops.{p}", path, allow_zero=True) for p, v in flops.items()}
    if not any(flops.values()):
        raise ErtError(f"kernel {name!r} does no FLOPs", path=path, key=f"{where}.flops")
    levels = entry.get("bytes")
    if not isinstance(levels, dict) or not levels:
        raise ErtError(f"kernel {name!r}: give bytes per level, e.g. {{L1: ..., L2: ..., DRAM: ...}}", path=path,
                       key=f"{where}.bytes")
    levels = {str(k): _positive(v, f"{where}.bytes.{k}", path) for k, v in levels.items()}
    ratios = {}
    if "fma_ratio" in entry:
        f = entry["fma_ratio"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            raise ErtError(f"expected a fraction from 0 to 1, got {f!r}", path=path, key=f"{where}.fma_ratio")
        ratios = {p: float(f) for p in flops}
    launches = entry.get("launches", 1)
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise ErtError(f"expected a positive integer, got {launches!r}", path=path, key=f"{where}.launches")
    return KernelData(name=name, seconds=seconds, flops={p: v for p, v in flops.items() if v > 0}, bytes=levels,
                      fma_ratio=ratios, launches=launches)
