"""Put the ceilings of several machines side by side, with ratios; unpaired levels and precisions are reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from ert.consumers import roofs as roofs_mod
from ert.consumers.report_rows import DISTURBED_NOTE, disturbed_mark

# Two plateaus named alike whose working-set ranges differ more than this are
# probably not the same thing (a VM that reports the host's caches, say).
_RANGE_FACTOR = 4.0


@dataclass
class Row:
    """One ceiling across the files: its values (None where a file lacks it) and ratios to the first file."""

    kind: str  # "memory" or "compute"
    key: tuple
    label: str
    unit: str
    values: list[float | None]
    wss: list[tuple[int, int] | None] = field(default_factory=list)
    disturbed: list[bool] = field(default_factory=list)  # per file: measured while its host was disturbed

    def mark(self, i: int) -> str:
        """'*' after file ``i``'s value when it was measured while the host was disturbed (DISTURBED_NOTE)."""
        return disturbed_mark(i < len(self.disturbed) and self.disturbed[i])

    @property
    def paired(self) -> bool:
        return all(v is not None for v in self.values)

    def ratios(self) -> list[float | None]:
        base = self.values[0]
        return [None if (v is None or not base) else v / base for v in self.values]


def _memory_key(e: dict) -> tuple:
    return (e.get("precision") or "?", e.get("access") or "?", e["level"])


def comparison_rows(docs: list[dict]) -> list[Row]:
    rows: dict[tuple, Row] = {}
    n = len(docs)
    for i, doc in enumerate(docs):
        for e in doc["ceilings"]["memory"]:
            if e.get("kind") is not None:
                # Links, peers, the network: paired by level and variant across machines.
                key = ("transfer", e["level"], str(e.get("variant", "")))
                label = f"{e['level']} {e.get('variant', '')}".strip()
                row = rows.setdefault(key, Row("transfer", key, label, "GB/s", [None] * n, [None] * n))
                row.values[i] = float(e["gbytes_per_s"])
                if isinstance(e.get("latency_us"), (int, float)):
                    lat_key = ("transfer-latency", e["level"], str(e.get("variant", "")))
                    lat = rows.setdefault(lat_key, Row("transfer-latency", lat_key, f"{label} latency", "us",
                                                       [None] * n, [None] * n))
                    lat.values[i] = float(e["latency_us"])
                continue
            key = ("memory",) + _memory_key(e)
            label = f"{e['level']} {roofs_mod.basis_label(e.get('precision'), e.get('access'))}"
            row = rows.setdefault(key, Row("memory", key, label, "GB/s", [None] * n, [None] * n, [False] * n))
            row.values[i] = float(e["gbytes_per_s"])
            row.wss[i] = tuple(e["wss_bytes"])
            row.disturbed[i] = e.get("disturbed") is True
        for e in doc["ceilings"]["compute"]:
            key = ("compute", e["precision"], bool(e["fma"]))
            # The integer add roof and the measured mixes are rows of their own, and
            # so are tensor roofs, never set beside the vector roof of their precision.
            key += ((e["mix"],) if e.get("mix") else (("add",) if e.get("op") == "add" else ()))
            key += ("tensor", e.get("instruction") or "mma.sync") if e.get("pipe") == "tensor" else ()
            integer = e.get("unit") == "GIOP/s" or e["precision"] in ("int32", "int64")
            if e.get("pipe") == "tensor":
                shape = "".join(f" {x}" for x in (e.get("instruction") if e.get("instruction") == "wgmma" else None,
                                                   e.get("mma_shape")) if x)
                acc = f", {e['accumulate']} accumulate" if e.get("accumulate") else ""
                label = f"{e['precision']} tensor{shape}{acc} peak"
            else:
                label = (f"{e['precision']} {e['mix']} mix peak" if e.get("mix")
                         else f"{e['precision']} {'add' if e.get('op') == 'add' else 'multiply-add'} peak" if integer
                         else f"{e['precision']} {'FMA' if e['fma'] else 'no-FMA'} peak")
            unit = e.get("unit") or ("GIOP/s" if integer else "GFLOP/s")
            row = rows.setdefault(key, Row("compute", key, label, unit, [None] * n, [None] * n, [False] * n))
            row.values[i] = float(e["gflops_per_s"])
            row.disturbed[i] = e.get("disturbed") is True
    # Memory by precision, access, then level order within the first file that has it; compute last.
    level_rank = {}
    for doc in docs:
        for e in sorted(doc["ceilings"]["memory"], key=lambda e: e["wss_bytes"][0]):
            level_rank.setdefault(e["level"], len(level_rank))
    prec = {p: i for i, p in enumerate(roofs_mod.PRECISIONS)}

    transfer_rank = {"link-h2d": 0, "link-d2h": 1, "link-bidir": 2, "peer-d2d": 3, "net-intra-node": 4,
                     "net-inter-node": 5, "net-injection": 6}

    def order(row: Row):
        if row.kind in ("transfer", "transfer-latency"):
            return (2, transfer_rank.get(row.key[1], 9), row.key[1], row.key[2], row.kind)
        if row.kind == "memory":
            _, p, a, level = row.key
            return (0, prec.get(p, 9), a != "rw", level_rank.get(level, 99))  # ERT's read+write first
        extra = row.key[3:]  # (pipe, mix) of tensor and mix roofs: after the vector roofs
        return (1, bool(extra), str(extra), prec.get(row.key[1], 9), not row.key[2])

    return sorted(rows.values(), key=order)




def mismatches(docs: list[dict], labels: list[str], rows: list[Row]) -> list[str]:
    """Everything that could not be paired, and pairs that may not be like for like."""
    notes = []
    for row in rows:
        if not row.paired and row.kind != "transfer-latency":  # its GB/s row says it already
            have = [labels[i] for i, v in enumerate(row.values) if v is not None]
            lack = [labels[i] for i, v in enumerate(row.values) if v is None]
            notes.append(f"{row.label}: only in {', '.join(have)} (missing in {', '.join(lack)}); "
                         f"not compared there")
        ranges = [w for w in row.wss if w and w[1] > 0]  # ERT's roofline.json keeps no working sets
        if row.kind == "memory" and len(ranges) > 1:
            lows = [max(w[0], 1) for w in ranges]
            highs = [max(w[1], 1) for w in ranges]
            if max(lows) / min(lows) > _RANGE_FACTOR or max(highs) / min(highs) > _RANGE_FACTOR:
                from ert.units import human_bytes

                spans = "; ".join(f"{labels[i]} {human_bytes(w[0])}-{human_bytes(w[1])}"
                                  for i, w in enumerate(row.wss) if w and w[1] > 0)
                notes.append(f"{row.label}: working-set ranges differ ({spans}); the same name may not be the "
                             f"same level on both machines")
    precisions = [sorted({e["precision"] for e in d["ceilings"]["compute"]}) for d in docs]
    if any(p != precisions[0] for p in precisions):
        notes.append("precisions differ: " + "; ".join(f"{labels[i]} {', '.join(p) or 'none'}"
                                                       for i, p in enumerate(precisions)))
    for i in range(len(docs)):
        flagged = [row.label for row in rows if row.mark(i)]
        if flagged:
            notes.append(f"{labels[i]}: {len(flagged)} ceiling(s) measured while the host was disturbed (marked *: "
                         f"{', '.join(flagged)}): a ratio with one of them says more of the host's weather than of "
                         f"the machine; measure that machine again on a quiet host")
    for i, doc in enumerate(docs):
        for w in doc.get("warnings", []):
            # Only what changes how a ratio reads: levels that are ramps or scatter, and overall noise.
            if "not flat" in w or "scatter" in w or "stayed noisy" in w:
                notes.append(f"{labels[i]} warns: {w}")
    return notes


def default_labels(docs: list[dict], paths: list[str]) -> list[str]:
    """A short distinct name per file: its host, or the file path when hosts repeat."""
    hosts = [str(d["metadata"].get("host", "?")) for d in docs]
    if len(set(hosts)) == len(hosts):
        return hosts
    return [str(p) for p in paths]


def format_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if value < 1000 else f"{value:.0f}"


def format_comparison(docs: list[dict], labels: list[str]) -> str:
    rows = comparison_rows(docs)
    lines = []
    for i, doc in enumerate(docs):
        lines.append(f"{chr(65 + i) if i < 26 else i}: {labels[i]}  ({roofs_mod.machine_label(doc)})")
    letters = [chr(65 + i) if i < 26 else str(i) for i in range(len(docs))]
    header = ["ceiling", "unit"] + letters + [f"{x}/A" for x in letters[1:]]
    table = []
    for row in rows:
        ratios = row.ratios()[1:]
        either = [row.mark(0) or row.mark(k) for k in range(1, len(row.values))]
        table.append([row.label, row.unit] + [format_value(v) + row.mark(i) for i, v in enumerate(row.values)]
                     + ["-" if r is None else f"{r:.2f}x{mark}" for r, mark in zip(ratios, either)])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *table)]
    lines.append("")
    for cells in [header] + table:
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths))))
    if any(any(row.disturbed) for row in rows):
        lines.append(DISTURBED_NOTE + " (a ratio with one: *)")
    notes = mismatches(docs, letters, rows)
    if notes:
        lines += ["", "Not compared / read with care"] + [f"  - {n}" for n in notes]
    return "\n".join(lines)


def to_json(docs: list[dict], labels: list[str]) -> dict:
    rows = comparison_rows(docs)
    return {"machines": [{"label": labels[i], "machine": roofs_mod.machine_label(d)} for i, d in enumerate(docs)],
            "ceilings": [{"kind": r.kind, "ceiling": r.label, "unit": r.unit, "values": r.values,
                          "ratios_to_first": r.ratios(), "paired": r.paired, "disturbed": r.disturbed} for r in rows],
            "notes": mismatches(docs, labels, rows)}
