"""Types and ranges of raw.jsonl records, checked as they are read: a damaged record is one error naming its key.

``ert.records.rawio.read_raw`` calls ``fault`` on every record, so analyze, every
consumer and ``--resume`` (which reads the file before it measures) refuse a
record whose keys are present but whose values could not have been measured:
``seconds: {}``, zero or negative seconds, ``wss_bytes: "16384"``, ``trials:
0``, ``valid: "no"``, a header without ``metadata``.  Optional keys are
checked where present; keys a newer ert adds pass through.
"""

from __future__ import annotations

import math

# No count or size that ert measures comes near 2^63; a larger integer is damage, and
# would overflow the float arithmetic of the analysis (10^400 has no float).
MAX_INT = 1 << 63


def _count(value, *, minimum: int = 1) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, got {_shown(value)}"
    if value < minimum or value >= MAX_INT:
        return f"expected an integer from {minimum} to 2^63, got {_shown(value)}"
    return None


# A timed region lasts from a nanosecond (one small transfer) to hours; 1e-308 seconds would
# give bandwidths no float holds.
SECONDS_RANGE = (1e-12, 1e9)


def _number(value, *, positive: bool = True) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {_shown(value)}"
    if isinstance(value, int) and abs(value) >= MAX_INT:
        return f"expected a number below 2^63, got {_shown(value)}"
    if not math.isfinite(value):
        return f"expected a finite number, got {_shown(value)}"
    if value <= 0 if positive else value < 0:
        return f"expected a {'positive' if positive else 'non-negative'} number, got {_shown(value)}"
    return None


def _shown(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {len(str(value))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(value) -> str | None:
    return None if isinstance(value, str) else f"expected a string, got {_shown(value)}"


def _flag(value) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {_shown(value)}"


def _duration(value) -> str | None:
    fault = _number(value)
    if fault is None and not SECONDS_RANGE[0] <= value <= SECONDS_RANGE[1]:
        fault = f"expected seconds from {SECONDS_RANGE[0]:g} to {SECONDS_RANGE[1]:g}, got {_shown(value)}"
    return fault


def _seconds(value) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return "", f"expected {{min, median, max}}, got {_shown(value)}"
    for part in ("min", "median", "max"):
        if part not in value:
            return f".{part}", "missing"
        fault = _duration(value[part])
        if fault:
            return f".{part}", fault
    return None


def _samples(value) -> tuple[str, str] | None:
    if not isinstance(value, list):
        return "", f"expected a list of seconds, got {_shown(value)}"
    for i, sample in enumerate(value):
        fault = _duration(sample)
        if fault:
            return f"[{i}]", fault
    return None


def _spec(value) -> str | None:
    from ert.spec import KernelSpec

    if not isinstance(value, dict):
        return f"expected a kernel spec (a mapping), got {_shown(value)}"
    try:
        KernelSpec.from_dict(value)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return f"not a kernel spec: {str(exc)[:80] or type(exc).__name__}"
    return None


# Per record type: key -> check (returning a fault, or None).  Required keys are rawio._REQUIRED's.
_SCALARS = {
    "point": {"id": _text, "spec": _spec, "wss_bytes": _count, "elements": _count, "trials": _count,
              "valid": _flag, "elements_per_thread": _count, "ranks": _count, "threads_per_rank": _count,
              "noisy": _flag, "time": lambda v: _number(v, positive=False)},
    "sustain": {"target": _text, "point_id": _text, "spec": _spec, "elements": _count,
                "trials_per_region": _count, "hold_seconds": lambda v: _number(v, positive=False),
                "valid": _flag, "wss_bytes": _count},
    "transfer": {"id": _text, "level": _text, "bytes": _count, "moved_bytes": lambda v: _count(v, minimum=0),
                 "repeats": _count, "valid": _flag, "time": lambda v: _number(v, positive=False)},
    "end": {"wall_seconds": lambda v: _number(v, positive=False), "interrupted": _flag},
    "sentinel": {"id": _text, "level": _text, "spec": _spec, "wss_bytes": _count, "elements_per_thread": _count,
                 "elements": _count, "ranks": _count, "threads_per_rank": _count, "trials": _count, "valid": _flag,
                 "time": lambda v: _number(v, positive=False)},
}
# A re-measurement ("confirm") is a point record measured again, naming the point it repeats.
_SCALARS["confirm"] = {**_SCALARS["point"], "point_id": _text, "again": _count}
_NESTED = {
    "point": {"seconds": _seconds, "samples": _samples},
    "confirm": {"seconds": _seconds, "samples": _samples},
    "sustain": {"region_seconds": _samples, "region_start_seconds": None},
    "transfer": {"seconds": _seconds, "samples": _samples},
    "sentinel": {"seconds": _seconds, "samples": _samples},
}


def fault(record: dict) -> tuple[str, str] | None:
    """(key, fault) of the first value of ``record`` out of type or range, or None if all are sound."""
    kind = record.get("type")
    if kind == "header":
        if not isinstance(record.get("metadata"), dict):
            return "metadata", "a header needs its metadata (a mapping)"
        if record.get("planned_points") is not None and _count(record["planned_points"], minimum=0):
            return "planned_points", _count(record["planned_points"], minimum=0)
        return None
    for key, check in _SCALARS.get(kind, {}).items():
        if key in record:
            problem = check(record[key])
            if problem:
                return key, problem
    for key, check in _NESTED.get(kind, {}).items():
        if key in record and check is not None:
            problem = check(record[key])
            if problem:
                return key + problem[0], problem[1]
    return None
