"""Put the ceilings of several machines side by side, with ratios; unpaired levels and precisions are reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from ert.consumers import roofs as roofs_mod

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

    @property
    def paired(self) -> bool:
        return all(v is not None for v in self.values)

    def ratios(self) -> list[float | None]:
        base = self.values[0]
        return [None if (v is None or not base) else v / base for v in self.values]


def _memory_key(e: dict) -> tuple:
    return (e.get("precision") or "?", e.get("access") or "?", e["level"])


def _rows(docs: list[dict]) -> list[Row]:
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
            row = rows.setdefault(key, Row("memory", key, label, "GB/s", [None] * n, [None] * n))
            row.values[i] = float(e["gbytes_per_s"])
            row.wss[i] = tuple(e["wss_bytes"])
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
            row = rows.setdefault(key, Row("compute", key, label, unit, [None] * n, [None] * n))
            row.values[i] = float(e["gflops_per_s"])
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


# Public: the rows of one or more ``ceilings`` blocks (ert.consumers.ceiling_values names them).
ceiling_rows = _rows


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


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if value < 1000 else f"{value:.0f}"


def format_comparison(docs: list[dict], labels: list[str]) -> str:
    rows = _rows(docs)
    lines = []
    for i, doc in enumerate(docs):
        lines.append(f"{chr(65 + i) if i < 26 else i}: {labels[i]}  ({roofs_mod.machine_label(doc)})")
    letters = [chr(65 + i) if i < 26 else str(i) for i in range(len(docs))]
    header = ["ceiling", "unit"] + letters + [f"{x}/A" for x in letters[1:]]
    table = []
    for row in rows:
        ratios = row.ratios()[1:]
        table.append([row.label, row.unit] + [_fmt(v) for v in row.values]
                     + ["-" if r is None else f"{r:.2f}x" for r in ratios])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *table)]
    lines.append("")
    for cells in [header] + table:
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths))))
    notes = mismatches(docs, letters, rows)
    if notes:
        lines += ["", "Not compared / read with care"] + [f"  - {n}" for n in notes]
    return "\n".join(lines)


def to_json(docs: list[dict], labels: list[str]) -> dict:
    rows = _rows(docs)
    return {"machines": [{"label": labels[i], "machine": roofs_mod.machine_label(d)} for i, d in enumerate(docs)],
            "ceilings": [{"kind": r.kind, "ceiling": r.label, "unit": r.unit, "values": r.values,
                          "ratios_to_first": r.ratios(), "paired": r.paired} for r in rows],
            "notes": mismatches(docs, labels, rows)}


def plot_comparison(docs: list[dict], labels: list[str], out_path) -> None:
    """Horizontal bars: each paired ceiling of every machine relative to the first (1.0 = equal)."""
    from ert.consumers.plot import _pyplot, save_figure

    plt = _pyplot()
    rows = [r for r in _rows(docs) if r.paired and r.kind != "transfer-latency"]  # bars: higher is better
    if not rows:
        from ert.errors import ErtError

        raise ErtError("no ceiling is present in every file: nothing to chart", key="--plot")
    n_other = len(docs) - 1
    height = 0.8 / max(n_other, 1)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) * max(n_other, 1) + 1.8))
    for j in range(1, len(docs)):
        ys = [i + (j - 1) * height for i in range(len(rows))]
        ratios = [r.ratios()[j] for r in rows]
        bars = ax.barh(ys, ratios, height=height, label=f"{labels[j]} / {labels[0]}", color=f"C{j - 1}")
        for bar, ratio, row in zip(bars, ratios, rows):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {ratio:.2f}x ({_fmt(row.values[j])} vs {_fmt(row.values[0])} {row.unit})",
                    va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + (n_other - 1) * height / 2 for i in range(len(rows))], [r.label for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"ratio to {labels[0]} (higher is faster)")
    ax.set_xlim(0, max(max(r.ratios()[1:]) for r in rows) * 1.45)
    ax.set_title("Ceilings compared: " + " vs ".join(labels), fontsize=11)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_path)
