"""raw.jsonl's record shapes: one table per record kind, which its builder, its reader and the check all use.

``RECORDS[kind]`` names every key a record of that kind may have, whether it
is required, and the type and range its value must have.  The builders in
``ert.records.rawio`` pass each record through ``shaped`` (a key that is not
in its table is a programming error, caught where the record is made), and
``read_raw`` calls ``fault`` on every record it reads, so analyze, every
consumer and ``--resume`` (which reads the file before it measures) refuse a
record whose keys are missing or whose values could not have been measured:
``seconds: {}``, zero or negative seconds, ``wss_bytes: "16384"``, ``trials:
0``, ``valid: "no"``, a header without ``metadata``, a header whose
``metadata.ranks`` is ``"two"``.  Optional keys are checked where present;
keys a newer ert adds pass through on reading.  A new key goes into its
table here and into ``ert/schemas/RAW.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

# No count or size that ert measures comes near 2^63; a larger integer is damage, and
# would overflow the float arithmetic of the analysis (10^400 has no float).
MAX_INT = 1 << 63
# A timed region lasts from a nanosecond (one small transfer) to hours; 1e-308 seconds would
# give bandwidths no float holds.
SECONDS_RANGE = (1e-12, 1e9)
# What ``fault`` says of a required key that is absent (read_raw: "<kind> record lacks '<key>'").
MISSING = "missing"

# A check takes a value and gives None, or (the path below the key, the fault): ("", "expected ...") for the value
# itself, (".min", "...") or ("[2]", "...") for a part of it.
Check = Callable[[object], Optional[tuple]]


@dataclass(frozen=True)
class Key:
    """One key of a record kind: its check (None: any value) and whether every record of the kind has it."""

    check: Check | None = None
    required: bool = False


def req(check: Check | None = None) -> Key:
    return Key(check, True)


def opt(check: Check | None = None) -> Key:
    return Key(check, False)


# ---------------------------------------------------------------------------- values
def _shown(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {len(str(value))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(test: Callable[[object], str | None]) -> Check:
    """A check of the value itself from a test that gives the fault's text or None."""
    def check(value):
        text = test(value)
        return None if text is None else ("", text)
    return check


def count_from(minimum: int) -> Check:
    """An integer from ``minimum`` to 2^63."""
    def test(value):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer, got {_shown(value)}"
        if value < minimum or value >= MAX_INT:
            return f"expected an integer from {minimum} to 2^63, got {_shown(value)}"
        return None
    return _scalar(test)


def _number_fault(value, positive: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {_shown(value)}"
    if isinstance(value, int) and abs(value) >= MAX_INT:
        return f"expected a number below 2^63, got {_shown(value)}"
    if not math.isfinite(value):
        return f"expected a finite number, got {_shown(value)}"
    if value <= 0 if positive else value < 0:
        return f"expected a {'positive' if positive else 'non-negative'} number, got {_shown(value)}"
    return None


def _duration_fault(value) -> str | None:
    fault = _number_fault(value, True)
    if fault is None and not SECONDS_RANGE[0] <= value <= SECONDS_RANGE[1]:
        fault = f"expected seconds from {SECONDS_RANGE[0]:g} to {SECONDS_RANGE[1]:g}, got {_shown(value)}"
    return fault


def _spec_fault(value) -> str | None:
    from ert.spec import KernelSpec

    if not isinstance(value, dict):
        return f"expected a kernel spec (a mapping), got {_shown(value)}"
    try:
        KernelSpec.from_dict(value)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return f"not a kernel spec: {str(exc)[:80] or type(exc).__name__}"
    return None


COUNT = count_from(1)
COUNT0 = count_from(0)
POSITIVE = _scalar(lambda v: _number_fault(v, True))
NON_NEGATIVE = _scalar(lambda v: _number_fault(v, False))
DURATION = _scalar(_duration_fault)
TEXT = _scalar(lambda v: None if isinstance(v, str) else f"expected a string, got {_shown(v)}")
FLAG = _scalar(lambda v: None if isinstance(v, bool) else f"expected true or false, got {_shown(v)}")
SPEC = _scalar(_spec_fault)


def nullable(check: Check) -> Check:
    """``check``, or null."""
    return lambda value: None if value is None else check(value)


def list_of(item: Check | None = None, *, what: str = "a list") -> Check:
    """A list, each item passing ``item``."""
    def check(value):
        if not isinstance(value, list):
            return "", f"expected {what}, got {_shown(value)}"
        for i, entry in enumerate(value if item is not None else ()):
            problem = item(entry)
            if problem:
                return f"[{i}]{problem[0]}", problem[1]
        return None
    return check


def mapping(table: dict[str, Key] | None = None, *, values: Check | None = None, what: str = "a mapping") -> Check:
    """A mapping: the keys of ``table`` (required ones present, each passing its check), or every value passing
    ``values``; other keys pass."""
    def check(value):
        if not isinstance(value, dict):
            return "", f"expected {what}, got {_shown(value)}"
        problem = fault_in(value, table) if table is not None else None
        for key, entry in (value.items() if values is not None and problem is None else ()):
            found = values(entry)
            if found:
                return f".{key}{found[0]}", found[1]
        return problem
    return check


def fault_in(value: dict, table: dict[str, Key]) -> tuple[str, str] | None:
    """(dotted path, fault) of the first key of ``value`` that ``table`` refuses, or None; a required key that is
    absent gives ``MISSING``."""
    for key, spec in table.items():
        if key not in value:
            if spec.required:
                return f".{key}", MISSING
            continue
        problem = spec.check(value[key]) if spec.check is not None else None
        if problem:
            return f".{key}{problem[0]}", problem[1]
    return None


SECONDS = mapping({part: req(DURATION) for part in ("min", "median", "max")}, what="{min, median, max}")
SAMPLES = list_of(DURATION, what="a list of seconds")
NUMBERS = list_of(NON_NEGATIVE, what="a list of numbers")

# ---------------------------------------------------------------------------- the header's metadata
# Every key a reader of the header uses (the analysis, `ert analyze`, `--resume`), by type and range.
_CACHE = mapping({"level": req(COUNT), "size_bytes": req(COUNT), "shared_cpu_count": opt(COUNT), "kind": opt(TEXT),
                  "access": opt(list_of(TEXT))})
_RATED_ENTRY = mapping({"precision": opt(nullable(TEXT)), "fma": opt(FLAG), "gflops_per_s": opt(nullable(NON_NEGATIVE)),
                        "gbytes_per_s": opt(nullable(NON_NEGATIVE)), "level": opt(nullable(TEXT)),
                        "access": opt(nullable(TEXT)), "scope": opt(nullable(TEXT)), "derivation": opt(TEXT)})
_RATED = mapping({"per_core": opt(FLAG), "cores_per_rank": opt(nullable(COUNT0)),
                  "clock_ghz": opt(nullable(NON_NEGATIVE)), "clock_ghz_by_threads": opt(mapping(values=nullable(NON_NEGATIVE))),
                  "compute": opt(list_of(_RATED_ENTRY)), "tensor": opt(list_of(_RATED_ENTRY)),
                  "memory": opt(list_of(_RATED_ENTRY))})
_BACKEND_INFO = mapping({"caches": opt(list_of(_CACHE)), "memory_name": opt(TEXT), "caveats": opt(list_of(TEXT)),
                         "rated": opt(nullable(_RATED)), "link_rated": opt(mapping())})
_RUN_CONFIG = mapping({"timing": opt(mapping({"noise_threshold": opt(POSITIVE)})),
                       "slow_host_threshold": opt(POSITIVE)}, what="a run config (a mapping)")
METADATA: dict[str, Key] = {
    "ranks": req(COUNT),
    "threads_per_rank": req(COUNT),
    "config": req(_RUN_CONFIG),
    "config_sha256": opt(TEXT),
    "backend_info": opt(_BACKEND_INFO),
    "caches_reported": opt(list_of(_CACHE)),
    "memory_name": opt(TEXT),
    "rank_warnings": opt(list_of(TEXT)),
    "rank_warning_codes": opt(list_of(TEXT)),
    "hosts": opt(list_of(TEXT)),
    "ranks_per_host": opt(mapping(values=COUNT)),
    "placement": opt(list_of()),
    "cpus_usable": opt(COUNT),
    "network": opt(mapping()),
    "load_average_at_start": opt(mapping({"load1": opt(NON_NEGATIVE)})),
    **{key: opt(TEXT) for key in ("tool", "tool_version", "host", "cpu_model", "platform", "backend", "device",
                                  "date")},
}

# ---------------------------------------------------------------------------- the record kinds
# The keys of a measured kernel (a sweep point, and what a re-measurement or a sentinel repeats).
_MEASURED: dict[str, Key] = {
    "id": req(TEXT),
    "spec": req(SPEC),
    "wss_bytes": req(COUNT),
    "elements_per_thread": opt(COUNT),
    "launch": opt(mapping()),
    "elements": req(COUNT),
    "ranks": opt(COUNT),
    "threads_per_rank": opt(COUNT),
    "trials": req(COUNT),
    "seconds": req(SECONDS),
    "samples": opt(SAMPLES),
    "valid": req(FLAG),
    "time": opt(NON_NEGATIVE),
}
RECORDS: dict[str, dict[str, Key]] = {
    "header": {
        "raw_version": req(TEXT),
        "metadata": req(mapping(METADATA, what="the run's metadata (a mapping)")),
        "planned_points": opt(nullable(COUNT0)),
        "sweep": opt(TEXT),
        "thread_counts": opt(list_of(COUNT)),
    },
    "point": {
        **_MEASURED,
        "rank_seconds": opt(mapping()),
        "spread": opt(NON_NEGATIVE),
        "noisy": opt(FLAG),
        "remeasured": opt(COUNT0),
        "serialized_regions": opt(COUNT0),
        "check": opt(TEXT),
        "host_seconds": opt(mapping(values=SAMPLES)),
        "limiting_host": opt(TEXT),
        "device": opt(mapping()),
        # Measured again because a sentinel found the host disturbed (the last record of an id wins).
        "remeasured_for": opt(TEXT),
        "disturbed_first": opt(FLAG),
    },
    "sustain": {
        "target": req(TEXT),
        "point_id": req(TEXT),
        "spec": req(SPEC),
        "wss_bytes": opt(COUNT),
        "elements_per_thread": opt(COUNT),
        "elements": req(COUNT),
        "threads_per_rank": opt(COUNT),
        "trials_per_region": req(COUNT),
        "region_seconds": req(SAMPLES),
        "region_start_seconds": opt(NUMBERS),
        "hold_seconds": req(NON_NEGATIVE),
        "valid": req(FLAG),
        "check": opt(TEXT),
        "time": opt(NON_NEGATIVE),
    },
    "transfer": {
        "id": req(TEXT),
        "level": req(TEXT),
        "kind": opt(TEXT),
        "variant": opt(TEXT),
        "method": opt(TEXT),
        "bytes": req(COUNT),
        "moved_bytes": req(COUNT0),
        "repeats": req(COUNT),
        "seconds": req(SECONDS),
        "samples": opt(SAMPLES),
        "valid": req(FLAG),
        "check": opt(TEXT),
        "noisy": opt(FLAG),
        "spread": opt(NON_NEGATIVE),
        "time": opt(NON_NEGATIVE),
        # Optional, by level (RAW.md): the pairs, a ping-pong's round trips, each member rank's samples ...
        "pair": opt(list_of(COUNT0)),
        "pairs": opt(list_of(list_of(COUNT0))),
        "round_trips": opt(COUNT),
        "rank_seconds": opt(mapping(values=SAMPLES)),
        "pair_seconds_min": opt(SAMPLES),
        "devices": opt(list_of(COUNT0)),
        "peer_access": opt(FLAG),
        "matrix": opt(),
        "transport": opt(TEXT),
        "cuda_aware": opt(FLAG),
        "node_override": opt(),
        "interface_bytes": opt(mapping()),
        "gate_timeouts": opt(COUNT0),
    },
    "end": {
        "stage": opt(TEXT),
        "wall_seconds": req(NON_NEGATIVE),
        "interrupted": opt(FLAG),
        "reason": opt(TEXT),
        "measured": opt(COUNT0),
        "threads_per_rank": opt(COUNT),
        "sweep": opt(TEXT),
        "complete": opt(FLAG),
        "planned_points": opt(nullable(COUNT0)),
        "planned_again": opt(COUNT0),
        "time": opt(NON_NEGATIVE),
        "weather": opt(mapping()),
    },
    # The host's weather (issue 39): a short fixed kernel of one cache level read between the sweep's points.
    "sentinel": {
        **_MEASURED,
        "level": req(TEXT),
        "time": req(NON_NEGATIVE),
        "after_point": opt(nullable(TEXT)),
        "earlier_best_gbytes_per_s": opt(NON_NEGATIVE),
    },
}
# A re-measurement ("confirm") is a point record measured again, naming the point it repeats.
RECORDS["confirm"] = {**RECORDS["point"], "point_id": req(TEXT), "again": opt(COUNT)}


def shaped(record: dict) -> dict:
    """``record``, as a builder made it, once its keys are its kind's: every required key present and none that
    the kind's table lacks (ValueError otherwise: a key is added to ``RECORDS`` and RAW.md first)."""
    table = RECORDS[record["type"]]
    unknown = sorted(set(record) - set(table) - {"type"})
    absent = sorted(key for key, spec in table.items() if spec.required and key not in record)
    if unknown or absent:
        raise ValueError(f"a {record['type']} record with keys not in ert.records.rawcheck.RECORDS {unknown} or "
                         f"without its required keys {absent}")
    return record


def fault(record: dict) -> tuple[str, str] | None:
    """(key path, fault) of the first key of ``record`` absent (``MISSING``) or out of type or range, or None if
    it is sound; a record of a kind this ert does not know passes."""
    kind = record.get("type")
    table = RECORDS.get(kind) if isinstance(kind, str) else None
    problem = fault_in(record, table) if table is not None else None
    return None if problem is None else (problem[0][1:], problem[1])
