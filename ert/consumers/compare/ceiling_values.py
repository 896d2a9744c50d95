"""Every ceiling of a ``ceilings`` block as one number under a stable human name (for ReFrame, scripts, tables).

The names are ``ert compare``'s row labels with the unit: ``L1 fp64 read+write
GB/s``, ``DRAM fp64 read-only GB/s``, ``fp64 FMA peak GFLOP/s``, ``int32
multiply-add peak GIOP/s``, ``net-inter-node p2p GB/s``, ``net-inter-node p2p
latency us``.  The same names fit the top-level ``doc["ceilings"]`` and each
``doc["hosts"][i]["ceilings"]`` (schema 1.10), so a host's value and the
aggregate's pair by name.
"""

from __future__ import annotations

from ert.consumers.compare.compare import comparison_rows


def ceiling_values(ceilings: dict) -> dict[str, float]:
    """{name: value} of every ceiling in ``ceilings`` ({"memory": [...], "compute": [...]}), in compare's order.

    A name two ceilings would share (never seen; compare's keys are finer than its labels) gets its
    key appended, so no value is dropped.
    """
    out: dict[str, float] = {}
    for row in comparison_rows([{"ceilings": {"memory": ceilings.get("memory", []),
                                           "compute": ceilings.get("compute", [])}}]):
        if row.values[0] is None:
            continue
        name = f"{row.label} {row.unit}"
        if name in out:
            name = f"{row.label} [{' '.join(str(k) for k in row.key[1:])}] {row.unit}"
        out[name] = float(row.values[0])
    return out
