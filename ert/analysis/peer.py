"""Peer GPU levels from raw "transfer" records: the device x device matrix and the best pair's records."""

from __future__ import annotations


def record_rate_gbytes_per_s(record: dict) -> float:
    """GB/s (1e9) of one transfer record at its best sample: moved_bytes x repeats / seconds.min (the contract)."""
    seconds = record["seconds"]["min"]
    return record["moved_bytes"] * record["repeats"] / seconds / 1e9 if seconds > 0 else float("inf")


def _peer_records(records: list[dict], variant: str | None) -> list[dict]:
    return [r for r in records if r.get("level") == "peer-d2d" and r.get("pair") and r.get("valid", True)
            and (variant is None or r.get("variant") == variant)]


def largest_per_pair(records: list[dict], *, variant: str | None = None) -> dict[tuple[int, int], dict]:
    """(source, destination) -> its record at the largest size measured for that pair (valid records only)."""
    out: dict[tuple[int, int], dict] = {}
    for r in _peer_records(records, variant):
        pair = (int(r["pair"][0]), int(r["pair"][1]))
        if pair not in out or r["bytes"] > out[pair]["bytes"]:
            out[pair] = r
    return out


def peer_matrix(records: list[dict], *, variant: str | None = None) -> dict | None:
    """The ``matrix`` of a peer-d2d ceiling entry: {"devices", "gbytes_per_s", "peer_access", "bytes"}.

    Row = source GPU, column = destination; each cell the rate at that pair's
    largest size (None on the diagonal and for a pair not measured); where two
    variants are mixed (``variant`` None) a cell holds the faster one and
    ``peer_access`` says which it was.  ``bytes`` is the size each cell was
    measured at.  None without any peer record.
    """
    best = largest_per_pair(records, variant=variant) if variant is not None else {}
    if variant is None:
        for v in sorted({r.get("variant") for r in _peer_records(records, None)}):
            for pair, r in largest_per_pair(records, variant=v).items():
                if pair not in best or record_rate_gbytes_per_s(r) > record_rate_gbytes_per_s(best[pair]):
                    best[pair] = r
    if not best:
        return None
    devices = sorted({d for pair in best for d in pair})
    index = {d: i for i, d in enumerate(devices)}
    n = len(devices)
    rates = [[None] * n for _ in range(n)]
    access = [[None] * n for _ in range(n)]
    sizes = [[None] * n for _ in range(n)]
    for (a, b), r in best.items():
        rates[index[a]][index[b]] = round(record_rate_gbytes_per_s(r), 3)
        access[index[a]][index[b]] = bool(r.get("peer_access", False))
        sizes[index[a]][index[b]] = int(r["bytes"])
    return {"devices": devices, "gbytes_per_s": rates, "peer_access": access, "bytes": sizes}


def best_pair(records: list[dict], *, variant: str) -> tuple[list[int], list[dict]] | None:
    """The pair fastest at its largest size for ``variant``, and every valid record of that pair (its plateau's
    points, smallest size first); None without a peer record of that variant."""
    largest = largest_per_pair(records, variant=variant)
    if not largest:
        return None
    pair = max(largest, key=lambda p: (record_rate_gbytes_per_s(largest[p]), -p[0], -p[1]))
    chosen = sorted((r for r in _peer_records(records, variant) if tuple(r["pair"]) == pair),
                    key=lambda r: r["bytes"])
    return [pair[0], pair[1]], chosen
