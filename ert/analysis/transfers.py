"""Transfer levels: host<->device links, peer GPUs and the network, from "transfer" records.

Each (level, variant) of the raw "transfer" records (ert.measure.transfers,
a device backend's ``link_transfers``) becomes one entry of
``ceilings.memory`` with a ``kind`` (link, peer or network): the plateau of
its largest transfer sizes, its spread, the latency at its smallest size,
the record ids it rests on, and its rated value where one is known.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ert.records.rawio import transfer_gbytes_per_s, transfer_latency_us
from ert.spec import plateau_spread
from ert.hardware import NO_RATED, no_rated_text
from ert.records.warning_codes import warn

KINDS = ("link", "peer", "network")
# Order in which levels are reported: links, then peers, then the network.
LEVEL_ORDER = ("link-h2d", "link-d2h", "link-bidir", "peer-d2d", "net-intra-node", "net-inter-node",
               "net-injection")
# A size joins the plateau of the largest sizes while its rate stays within this of the plateau's median.
PLATEAU_TOLERANCE = 0.10
SHARED_MEMORY_REASON = no_rated_text("ranks on one node exchange through shared memory")


def kind_of(rec: dict) -> str:
    kind = rec.get("kind")
    if kind in KINDS:
        return kind
    level = str(rec.get("level", ""))
    return "network" if level.startswith("net-") else "peer" if level.startswith("peer") else "link"


def plateau_of_largest(recs: list[dict], tolerance: float = PLATEAU_TOLERANCE) -> list[dict]:
    """The records of the largest sizes whose rates agree within ``tolerance`` (ascending by size).

    Walk down from the largest size; a size joins while its rate is within
    ``tolerance`` of the median of those already in.  Small transfers are
    latency-bound (slower) and, for memory copies, may be cache-bound (faster):
    either way they fall outside.  At least the largest size is taken.
    """
    ordered = sorted(recs, key=lambda r: r["bytes"])
    chosen = [ordered[-1]]
    for rec in reversed(ordered[:-1]):
        centre = statistics.median(transfer_gbytes_per_s(r) for r in chosen)
        if abs(transfer_gbytes_per_s(rec) - centre) > tolerance * centre:
            break
        chosen.append(rec)
    return sorted(chosen, key=lambda r: r["bytes"])


def _rated(level: str, kind: str, rate: float, meta: dict, recs: list[dict]) -> dict:
    """The rated value of a level, from the backend (links, peers) or the host's NICs (network)."""
    if kind in ("link", "peer"):
        table = (meta.get("backend_info") or {}).get("link_rated") or {}
        known = table.get(level)
        if not isinstance(known, dict):
            transport = next((r.get("transport") for r in recs if r.get("transport")), None)
            why = f"{transport}" if transport else f"the backend knows no rated value for {level}"
            return {"gbytes_per_s": None, "ratio": None, "derivation": no_rated_text(why)}
        value = known.get("gbytes_per_s")
        derivation = str(known.get("derivation") or "")
        if not value:
            text = derivation if derivation.startswith(NO_RATED) else no_rated_text(derivation)
            return {"gbytes_per_s": None, "ratio": None, "derivation": text}
        return {"gbytes_per_s": round(float(value), 4), "ratio": round(rate / float(value), 4),
                "derivation": derivation}
    network = meta.get("network") or {}
    if level == "net-intra-node":
        return {"gbytes_per_s": None, "ratio": None, "derivation": SHARED_MEMORY_REASON}
    if network.get("node_override"):
        return {"gbytes_per_s": None, "ratio": None,
                "derivation": f"{SHARED_MEMORY_REASON} (the 'nodes' are split by the test-only "
                              f"ERT_TEST_NODE_ID={network['node_override']!r}; no NIC was used)"}
    route = network.get("route") or None
    if route and route.get("virtual"):
        kind = route.get("kind") or "virtual"
        speed = f"; its speed file's {route['speed_mbit']} Mb/s is nominal" if route.get("speed_mbit") else ""
        return {"gbytes_per_s": None, "ratio": None,
                "derivation": no_rated_text(f"{kind} has no line rate ({route.get('from', 'rank 0')} reaches "
                                            f"{route.get('to', 'its partner')} over {route['name']}, a virtual "
                                            f"{kind} interface{speed})")}
    if route and route.get("speed_mbit") and level == "net-inter-node":
        rate_nic = route["speed_mbit"] / 8000.0
        return {"gbytes_per_s": round(rate_nic, 4), "ratio": round(rate / rate_nic, 4),
                "derivation": f"the NIC the two hosts talk over, {route['name']} ({route['address']}): its link "
                              f"speed {route['speed_mbit']} Mb/s / 8 = {rate_nic:g} GB/s per direction"}
    nics = [n for n in network.get("nics", []) if n.get("gbytes_per_s")]
    if not nics:
        return {"gbytes_per_s": None, "ratio": None,
                "derivation": no_rated_text("no NIC speed readable in /sys/class/net or /sys/class/infiniband")}
    if level == "net-injection":
        total = sum(n["gbytes_per_s"] for n in nics)
        parts = " + ".join(f"{n['name']} {n['gbytes_per_s']:g}" for n in nics)
        return {"gbytes_per_s": round(total, 4), "ratio": round(rate / total, 4),
                "derivation": f"every NIC of the node at its link rate: {parts} = {total:g} GB/s "
                              f"(link rate / 8, rank 0's node)"}
    best = max(nics, key=lambda n: n["gbytes_per_s"])
    return {"gbytes_per_s": round(best["gbytes_per_s"], 4), "ratio": round(rate / best["gbytes_per_s"], 4),
            "derivation": f"the fastest NIC, {best['name']}: {best.get('source', 'link rate')} = "
                          f"{best['gbytes_per_s']:g} GB/s per direction"}


def _basis(level: str, variant: str, chosen: list[dict], n_all: int) -> str:
    lo, hi = chosen[0]["bytes"], chosen[-1]["bytes"]
    return (f"plateau of the largest sizes: {len(chosen)} of {n_all} sizes ({lo} - {hi} bytes) within "
            f"{PLATEAU_TOLERANCE:.0%} of their median; rate = moved bytes x repeats / fastest sample")


def transfer_ceilings(transfers: list[dict], meta: dict) -> tuple[list[dict], list[str]]:
    """One ceilings.memory entry per (level, variant) of valid transfer records, and warnings."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    invalid: list[dict] = []
    for rec in transfers:
        if not rec.get("valid"):
            invalid.append(rec)
            continue
        groups[(rec["level"], str(rec.get("variant", "default")))].append(rec)
    warnings: list[str] = []
    if invalid:
        warnings.append(warn("output-check-failed",
                        f"{len(invalid)} transfer record(s) failed their data check and were not used, "
                        f"e.g. {invalid[0]['id']}: {invalid[0].get('check', '')}"))
    override = (meta.get("network") or {}).get("node_override")
    if override and any(kind_of(r) == "network" for r in transfers):
        warnings.append(warn("test-only",
                        f"TEST ONLY: node identity was overridden (ERT_TEST_NODE_ID={override!r}); the "
                        f"'inter-node' and injection levels ran between ranks of one host, through shared "
                        f"memory, not through a NIC"))
    rank = {name: i for i, name in enumerate(LEVEL_ORDER)}
    entries = []
    for (level, variant) in sorted(groups, key=lambda k: (rank.get(k[0], len(rank)), k[0], k[1])):
        recs, pair_matrix = best_pair(groups[(level, variant)])
        recs = sorted(recs, key=lambda r: r["bytes"])
        kind = kind_of(recs[0])
        chosen = plateau_of_largest(recs)
        rates = [transfer_gbytes_per_s(r) for r in chosen]
        rate = statistics.median(rates)
        smallest = recs[0]
        entry = {
            "level": level,
            "kind": kind,
            "variant": variant,
            "method": str(recs[-1].get("method", "")),
            "gbytes_per_s": round(rate, 4),
            "spread": round(plateau_spread(rates), 4),  # as every memory level's: (p90 - p10) / median
            "wss_bytes": [int(chosen[0]["bytes"]), int(chosen[-1]["bytes"])],
            "n_points": len(chosen),
            "noisy_points": sum(1 for r in chosen if r.get("noisy")),
            "latency_us": round(transfer_latency_us(smallest), 4),
            "latency_bytes": int(smallest["bytes"]),
            "evidence": {"point_ids": [r["id"] for r in chosen]},
            "basis": _basis(level, variant, chosen, len(recs)),
            "rated": _rated(level, kind, rate, meta, recs),
        }
        for key in ("transport", "cuda_aware", "peer_access"):
            value = next((r[key] for r in recs if key in r), None)
            if value is not None:
                entry[key] = value
        pairs = []
        for r in recs:
            for pair in ([r["pair"]] if "pair" in r else []) + list(r.get("pairs", [])):
                if list(pair) not in pairs:
                    pairs.append(list(pair))
        if pairs:
            entry["pairs"] = pairs
        matrix = pair_matrix or next((r["matrix"] for r in reversed(recs) if isinstance(r.get("matrix"), dict)),
                                     None)
        if matrix is not None:
            entry["matrix"] = matrix
        crossed = interface_share(recs)
        if crossed:
            entry["interface_bytes"] = crossed
            route = (meta.get("network") or {}).get("route") or {}
            if route.get("virtual") and crossed["share"] < MIN_INTERFACE_SHARE:
                warnings.append(warn(
                    "network-path", f"{level} {variant}: only {crossed['share']:.0%} of the bytes the messages carried crossed "
                    f"{crossed['interface']}, the {route.get('kind', 'virtual')} link between "
                    f"{route.get('from', 'the hosts')} and {route.get('to', 'its partner')}: MPI took another path "
                    f"(shared memory between hosts that share one machine's kernel, as containers and namespaces "
                    f"do), so this is not the link's bandwidth; with UCX, UCX_TLS=tcp,self keeps it on the link"))
        entries.append(entry)
        if len(chosen) < 2:
            warnings.append(warn("lone-size", f"{level} {variant}: the largest size stands alone (no neighbour within "
                            f"{PLATEAU_TOLERANCE:.0%}): not yet a plateau; sweep larger sizes"))
        if entry["noisy_points"]:
            warnings.append(warn("noisy-level",
                    f"{level} {variant}: built on {entry['noisy_points']} noisy size(s) of {len(chosen)}"))
    return entries, warnings


# Below this share of the messages' bytes on the hosts' interface, the traffic went another way.
MIN_INTERFACE_SHARE = 0.5


def interface_share(recs: list[dict]) -> dict | None:
    """Bytes the hosts' interface counted against the bytes the messages carried, over a level's records.

    None where no record read the counters (one host, or a run made before they were read).
    """
    counted = [r["interface_bytes"] for r in recs if isinstance(r.get("interface_bytes"), dict)]
    payload = sum(int(c.get("payload", 0)) for c in counted)
    if not counted or payload <= 0:
        return None
    total = sum(max(0, int(c.get("counted", 0))) for c in counted)
    return {"interface": str(counted[0].get("interface", "")), "counted": total, "payload": payload,
            "share": round(total / payload, 4)}


def _by_pair(recs: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in recs:
        out[tuple(r["pair"]) if isinstance(r.get("pair"), list) else ()].append(r)
    return out


def best_pair(recs: list[dict]) -> tuple[list[dict], dict | None]:
    """(the records of the fastest pair, the pair matrix) of a level measured over several pairs.

    Peer copies are measured between every pair of devices: the level is the
    best pair's plateau, and the matrix holds every pair's plateau rate (and
    whether peer access was on).  Records of one pair (or none) pass through.
    """
    pairs = _by_pair(recs)
    if len(pairs) < 2:
        return recs, None
    plateaus = {pair: statistics.median(transfer_gbytes_per_s(r) for r in plateau_of_largest(rs))
                for pair, rs in pairs.items()}
    best = max(plateaus, key=plateaus.get)
    devices = sorted({d for pair in pairs for d in pair})
    index = {d: i for i, d in enumerate(devices)}
    grid = [[None] * len(devices) for _ in devices]
    access = [[None] * len(devices) for _ in devices]
    for pair, value in plateaus.items():
        if len(pair) == 2:
            grid[index[pair[0]]][index[pair[1]]] = round(value, 4)
            flags = {r.get("peer_access") for r in pairs[pair]} - {None}
            access[index[pair[0]]][index[pair[1]]] = flags.pop() if len(flags) == 1 else None
    return pairs[best], {"devices": devices, "gbytes_per_s": grid, "peer_access": access}
