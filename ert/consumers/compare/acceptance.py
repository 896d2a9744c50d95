"""A run's ceilings against a reference ceilings.json: the numbers and bounds a regression test checks.

`jobs/reframe/ert_check.py` (ReFrame) reports every ceiling of a run as a
performance variable and takes its references from a reference file; the
rules live here, in ert, so that they are tested without ReFrame and any
other harness can use them.

Names: ``aggregate/<ceiling>`` for the run's ceilings (all ranks' bytes over
the slowest rank's time) and ``<host>/<ceiling>`` for each host's own
(``hosts`` of schema 1.10), ``<ceiling>`` being ``ert.consumers.compare.ceiling_values``'
name without its unit (``L1 fp64 read+write``, ``fp64 FMA peak``,
``net-inter-node p2p latency``).  No name holds a ``:`` (ReFrame splits its
keys there).

Which reference value a name is held to:

* ``aggregate/X``: the reference's aggregate ``X``, only when the reference
  ran on as many hosts and ranks (an aggregate grows with both); otherwise
  none, and the value is reported only;
* ``<host>/X``: the reference's own entry for that host where it has one (a
  previous run on the same nodes); else the median over the reference's
  hosts (other nodes of the same kind); else, for a reference from one host
  (a vendor's per-node acceptance figures, or one node's run), its ``X``.

A value may fall ``tolerance`` (a fraction) below its reference, and may be
any amount above it: a roof is an upper bound, so higher is never a
regression.  A latency is the other way round (higher is worse).
"""

from __future__ import annotations

import statistics

from ert.consumers.compare.ceiling_values import ceiling_values

AGGREGATE = "aggregate"
LOWER_IS_BETTER_UNITS = ("us",)


def _split(name: str) -> tuple[str, str]:
    """``L1 fp64 read+write GB/s`` -> (``L1 fp64 read+write``, ``GB/s``)."""
    label, _, unit = name.rpartition(" ")
    return (label, unit) if label else (name, "")


def _named(ceilings: dict) -> dict[str, tuple[float, str]]:
    return {label: (value, unit) for label, unit, value in
            ((*_split(name), value) for name, value in ceiling_values(ceilings).items())}


def host_count(doc: dict) -> int:
    return len(doc.get("hosts") or []) or 1


def same_shape(doc: dict, reference: dict) -> bool:
    """The two ran on as many hosts and ranks, so their aggregates compare."""
    return (host_count(doc) == host_count(reference)
            and (doc.get("metadata") or {}).get("ranks") == (reference.get("metadata") or {}).get("ranks"))


def perf_values(doc: dict) -> dict[str, tuple[float, str]]:
    """Every ceiling of a ceilings.json as ``{name: (value, unit)}``: the aggregate's, then each host's."""
    out = {f"{AGGREGATE}/{label}": vu for label, vu in _named(doc.get("ceilings") or {}).items()}
    for host in doc.get("hosts") or []:
        out.update({f"{host['host']}/{label}": vu for label, vu in _named(host.get("ceilings") or {}).items()})
    return out


def _host_reference(reference: dict) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The reference's per-host values by host, and the value any other host is held to (per ceiling)."""
    by_host = {h["host"]: {label: v for label, (v, _) in _named(h.get("ceilings") or {}).items()}
               for h in reference.get("hosts") or []}
    if not by_host:  # one host: its ceilings are every host's reference
        return {}, {label: v for label, (v, _) in _named(reference.get("ceilings") or {}).items()}
    labels = {label for values in by_host.values() for label in values}
    typical = {label: statistics.median(values[label] for values in by_host.values() if label in values)
               for label in labels}
    return by_host, typical


def reference_values(doc: dict, reference: dict) -> dict[str, float]:
    """``{name: reference value}`` for every name of ``perf_values(doc)`` that the reference gives a value."""
    aggregate = ({label: v for label, (v, _) in _named(reference.get("ceilings") or {}).items()}
                 if same_shape(doc, reference) else {})
    by_host, typical = _host_reference(reference)
    out: dict[str, float] = {}
    for name in perf_values(doc):
        host, _, label = name.partition("/")
        if host == AGGREGATE:
            value = aggregate.get(label)
        else:
            value = by_host.get(host, {}).get(label, typical.get(label))
        if value is not None:
            out[name] = value
    return out


def bounds(value: float, unit: str, tolerance: float) -> tuple[float, float | None, float | None, str]:
    """ReFrame's reference tuple ``(value, lower, upper, unit)``: ``tolerance`` below allowed, any amount above
    (for a latency: above allowed, any amount below)."""
    if unit in LOWER_IS_BETTER_UNITS:
        return (value, None, tolerance, unit)
    return (value, -tolerance, None, unit)


def references(doc: dict, reference: dict, tolerance: float) -> dict[str, tuple]:
    """``{name: (value, lower, upper, unit)}``, the references of ``doc``'s ceilings that ``reference`` gives."""
    units = {name: unit for name, (_, unit) in perf_values(doc).items()}
    return {name: bounds(value, units[name], tolerance) for name, value in reference_values(doc, reference).items()}


def missing(doc: dict, reference: dict) -> list[str]:
    """Ceilings the reference has that the run lacks (aggregate, and each host the reference covers): a
    level or peak that went away is a regression too, and no reference check would see it."""
    have = perf_values(doc)
    hosts = [h["host"] for h in doc.get("hosts") or []]
    want: list[str] = []
    if same_shape(doc, reference):
        want += [f"{AGGREGATE}/{label}" for label in _named(reference.get("ceilings") or {})]
    by_host, typical = _host_reference(reference)
    for host in hosts:
        want += [f"{host}/{label}" for label in (by_host.get(host) or typical)]
    return [name for name in want if name not in have]
