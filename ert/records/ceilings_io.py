"""Read, check and atomically write the ceilings file (RUN_DIR/ceilings.json)."""

from __future__ import annotations

import functools
import json
import math
import os
import re
from importlib import resources
from typing import Any, Iterable

from ert.errors import ErtError, parse_user_json, read_user_text
from ert.records.files import write_json_atomic

SCHEMA_VERSION = "1.13"  # the one definition; ert.analysis.ceilings writes this version

# This reader understands every minor version of this major (see schemas/HISTORY.md).
SUPPORTED_MAJOR = "1"
_SCHEMA_FILE = "ceilings-1.schema.json"
_VERSION_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- schema


@functools.lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files("ert.schemas").joinpath(_SCHEMA_FILE).read_text(encoding="utf-8")


def schema() -> dict:
    """The JSON Schema of the ceilings file (a fresh copy the caller may change)."""
    return json.loads(_schema_text())


@functools.lru_cache(maxsize=1)
def _validator():
    # Imported here so that modules which only write JSON do not pay for jsonschema.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema())


# --------------------------------------------------------------------------- key paths


def _key_path(parts: Iterable[Any]) -> str | None:
    """Render ('ceilings', 'memory', 2, 'gbytes_per_s') as 'ceilings.memory[2].gbytes_per_s'."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER_RE.match(part):
            out += f".{part}" if out else part
        else:
            # A key that would make the dotted path ambiguous is quoted instead.
            out += f"[{json.dumps(part)}]"
    return out or None


# JSON's name for each Python type json.load gives; bool before int, as a bool is an int.
_JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _short(value: Any, limit_chars: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit_chars else text[: limit_chars - 3] + "..."


# --------------------------------------------------------------------------- validation


def _check_version(doc: Any, path: object) -> None:
    """Refuse a document of a major version this ert does not know, before anything else."""
    if not isinstance(doc, dict):
        raise ErtError(f"expected a JSON object at the top level, got {_json_type(doc)}", path=path)
    if "schema_version" not in doc:
        raise ErtError(
            f"missing schema_version (this ert reads {SUPPORTED_MAJOR}.x)", path=path, key="schema_version"
        )
    version = doc["schema_version"]
    match = _VERSION_RE.match(version) if isinstance(version, str) else None
    if match is None or match.group(1) != SUPPORTED_MAJOR:
        shown = version if isinstance(version, str) else _short(version)
        raise ErtError(
            f"unsupported schema_version '{shown}' (this ert reads {SUPPORTED_MAJOR}.x)",
            path=path,
            key="schema_version",
        )


# No quantity in a ceilings file (GB/s, GFLOP/s, bytes, seconds, dates) comes near these magnitudes; past them
# the consumers' arithmetic (log axes, ratios, int(...)) overflows or divides by zero.
MAGNITUDE_RANGE = (1e-30, 1e30)


def magnitude_fault(value: Any) -> str | None:
    """The fault of a number out of ``MAGNITUDE_RANGE`` (NaN, infinity, 1e300, 1e-300, 10^400), or None for one
    inside it, for 0 and for what is not a number: the one rule every reader of others' numbers applies."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number (NaN or infinity)"
    low, high = MAGNITUDE_RANGE
    if value != 0 and not low <= abs(value) <= high:
        shown = f"{value:.3g}" if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
        return f"{shown} is out of range (ert reads magnitudes from {low:g} to {high:g})"
    return None


def out_of_range(doc: Any) -> tuple[list, str] | None:
    """(key path, fault) of the first number of ``doc`` (nested mappings, lists and tuples) that
    ``magnitude_fault`` refuses, or None.

    JSON has no NaN or Infinity (Python's json writes them anyway unless told
    not to), and a NaN passes every JSON Schema bound check, so look for them here.
    """
    stack: list[tuple[list, Any]] = [([], doc)]
    while stack:
        parts, value = stack.pop()
        fault = magnitude_fault(value)
        if fault:
            return parts, fault
        if isinstance(value, dict):
            children = [(parts + [k], v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            children = [(parts + [i], v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(children))
    return None


def _describe(error) -> tuple[list, str]:
    """Turn one jsonschema error into (key path parts, short message)."""
    parts = list(error.absolute_path)
    kind = error.validator
    value = error.instance
    rule = error.validator_value
    if kind == "required":
        missing = [k for k in rule if isinstance(value, dict) and k not in value]
        return parts + missing[:1], "required key is missing"
    if kind == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        unknown = [k for k in value if k not in known]
        where = "top-level key" if not parts else "key"
        allowed = ", ".join(error.schema.get("properties", {}))
        return parts + unknown[:1], f"unknown {where} (allowed: {allowed})"
    if kind == "type":
        wanted = " or ".join(rule) if isinstance(rule, list) else rule
        return parts, f"expected {wanted}, got {_json_type(value)} {_short(value)}"
    if kind == "minimum":
        return parts, f"must be >= {rule}, got {_short(value)}"
    if kind == "exclusiveMinimum":
        return parts, f"must be > {rule}, got {_short(value)}"
    if kind == "enum":
        return parts, f"must be one of {', '.join(map(str, rule))}, got {_short(value)}"
    if kind in ("minItems", "maxItems"):
        low, high = error.schema.get("minItems"), error.schema.get("maxItems")
        count = f"exactly {low}" if low == high else f"{'at least' if kind == 'minItems' else 'at most'} {rule}"
        return parts, f"expected {count} items, got {len(value)}"
    if kind == "minLength":
        return parts, "must not be empty"
    if kind == "pattern" and "description" in error.schema:
        return parts, f"expected {error.schema['description']}, got {_short(value)}"
    return parts, error.message


def _check_ordering(doc: dict, path: object) -> None:
    """Rules JSON Schema cannot express: ordered ranges."""
    for i, entry in enumerate(doc["ceilings"]["memory"]):
        low, high = entry["wss_bytes"]
        if low > high:
            raise ErtError(
                f"working-set range is inverted: low {low} > high {high}",
                path=path,
                key=_key_path(["ceilings", "memory", i, "wss_bytes"]),
            )
    for i, entry in enumerate(doc["ceilings"]["compute"]):
        seconds = entry.get("evidence", {}).get("seconds", {})
        if all(k in seconds for k in ("min", "median", "max")):
            if not seconds["min"] <= seconds["median"] <= seconds["max"]:
                raise ErtError(
                    "times are not ordered min <= median <= max: "
                    f"{seconds['min']}, {seconds['median']}, {seconds['max']}",
                    path=path,
                    key=_key_path(["ceilings", "compute", i, "evidence", "seconds"]),
                )


def validate(doc: dict, *, path: object = None) -> None:
    """Raise ErtError (file path, key path, problem) unless ``doc`` is a valid ceilings document."""
    _check_version(doc, path)
    bad = out_of_range(doc)
    if bad is not None:
        raise ErtError(bad[1], path=path, key=_key_path(bad[0]))
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        parts, message = _describe(error)
        raise ErtError(message, path=path, key=_key_path(parts))
    _check_ordering(doc, path)


# --------------------------------------------------------------------------- writing


def write_ceilings(doc: dict, path: os.PathLike | str) -> None:
    """Validate ``doc`` and write it atomically to ``path``; an invalid doc leaves ``path`` untouched."""
    validate(doc, path=path)
    write_json_atomic(doc, path)


# --------------------------------------------------------------------------- reading


def load_ceilings(path: os.PathLike | str) -> dict:
    """Read, parse and validate an ert ceilings file; faults are ErtErrors (a reader that takes ERT's
    roofline.json as well uses ``ert.interop.ert_results.load_any_ceilings``)."""
    text = read_user_text(path, expected="a ceilings JSON file")
    doc = parse_user_json(text, path=path)
    validate(doc, path=path)
    return doc


__all__ = [
    "SCHEMA_VERSION",
    "schema",
    "validate",
    "write_ceilings",
    "load_ceilings",
]
