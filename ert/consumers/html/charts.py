"""The report's charts as inline SVG: the roofline of one or several machines, and the sweep behind one run.

Every roof in the ceilings file is drawn (``data-roof`` on its group, so the
browser test can count them): the roofline's memory roofs are one kernel per
level (``roofs.choose_basis``: fp64 read+write first), the other kernels'
bandwidths are drawn too but start switched off; rated values are the same
lines, faint. Hover text is built by ``html_tips``.
"""

from __future__ import annotations

from ert.consumers.html import tips
from ert.consumers import roofs as roofs_mod
from ert.consumers.cells import format_rate
from ert.consumers.report_rows import DISTURBED_NOTE
from ert.consumers.html.svg_chart import Chart, decade_above, decade_below

PRECISION_COLORS = {"fp64": "#1f3b73", "fp32": "#0f8a6e", "fp16": "#8c510a", "bf16": "#b35806", "tf32": "#54278f",
                    "int32": "#1b7837", "int64": "#5aae61", "int8": "#00441b", "fp8": "#762a83"}
LEVEL_COLORS = ("#c0392b", "#e67e22", "#c9a000", "#8d6e63")  # L1..L4, warm to pale
MEMORY_COLOR = "#4e342e"  # DRAM / HBM, the memory behind the caches
EXTRA_COLORS = {"tensor": "#b2182b", "integer": "#1b7837", "mix": "#636363"}
TRANSFER_COLOR = "#1f78b4"
MACHINE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
GROUP_DASHES = ("", "7 4", "2 3", "9 3 2 3")  # memory kernels after the first: dashed, dotted ...
NO_FMA_DASH = "6 4"
RATED_DASH = "3 4"


def level_color(level: str, index: int) -> str:
    return LEVEL_COLORS[min(index, len(LEVEL_COLORS) - 1)] if roofs_mod.is_cache_level(level) else MEMORY_COLOR


def _compute_unit(e: dict) -> str:
    return tips.compute_unit(e)


# ----------------------------------------------------------------------------------------- roofline
def _basis(doc: dict) -> tuple | None:
    try:
        return roofs_mod.choose_basis(doc)
    except Exception:  # noqa: BLE001 - no memory ceilings: the chart has compute roofs only
        return None


def _top(doc: dict) -> float | None:
    """The roof memory roofs rise to: the highest vector FP peak, else the highest compute roof."""
    compute = doc["ceilings"].get("compute", [])
    vector = [e["gflops_per_s"] for e in compute if roofs_mod.is_vector_fp(e)]
    return max(vector or [e["gflops_per_s"] for e in compute] or [0.0]) or None


def roofline(docs: list[dict], labels: list[str], *, chart_id: str) -> str:
    """One roofline of every roof of every file; with several files one colour per machine (``machine<i>`` toggles)."""
    single = len(docs) == 1
    bases = [_basis(d) for d in docs]
    memory = [[e for e in d["ceilings"].get("memory", []) if e.get("kind") is None] for d in docs]
    transfers = [[e for e in d["ceilings"].get("memory", []) if e.get("kind") is not None] for d in docs]
    compute = [d["ceilings"].get("compute", []) for d in docs]
    box = _roofline_box(docs, bases, memory, transfers, compute)
    chart = Chart(chart_id=chart_id, x_low=box[0], x_high=box[1], y_low=box[2], y_high=box[3],
                  x_label="Arithmetic intensity [FLOP/byte]", y_label="Performance [GFLOP/s]")
    if not single:
        for i, label in enumerate(labels):
            chart.toggle(f"machine{i}", f"{chr(65 + i) if i < 26 else i}: {label}", color=MACHINE_COLORS[i % 8])
    groups = _memory_groups(memory, bases)
    for tag, text_, on, dash in groups.values():
        chart.toggle(tag, text_, color="#777" if not single else "#c0392b", on=on, dash=dash)
    for i, doc in enumerate(docs):
        machine = None if single else f"{chr(65 + i) if i < 26 else i}: {labels[i]}"
        top = _top(doc) or box[3] / 3
        fastest = max([e["gbytes_per_s"] for e in memory[i] if (e.get("precision"), e.get("access")) == bases[i]]
                      or [e["gbytes_per_s"] for e in memory[i]] or [top / box[0]])
        _draw_memory(chart, memory[i], groups, bases[i], top=top, machine_index=i, machine=machine, single=single)
        _draw_transfers(chart, transfers[i], top=top, machine_index=i, machine=machine, single=single)
        _draw_compute(chart, compute[i], fastest=fastest, machine_index=i, machine=machine, single=single)
        if bases[i] is not None:
            _draw_ridges(chart, doc, memory[i], bases[i], tag=groups[bases[i]][0], machine_index=i, machine=machine)
    if chart.under:  # the rated lines (none in ERT's roofline.json, nor for a CPU ert has no table for)
        chart.toggle("rated", "rated values (faint)", color="#999", dash=RATED_DASH)
    title = "Roofline" if single else f"Rooflines of {len(docs)} machines"
    caption = ("Slanted: memory roofs (bandwidth x intensity), one per level; flat: compute peaks (FMA solid, "
               "no-FMA dashed); faint dotted: rated values (what the hardware allows); circles: ridge points. "
               "Hover a line for its value, working set, spread and evidence; click the legend to show or hide.")
    if any(e.get("disturbed") is True for d in docs for e in d["ceilings"].get("memory", []) +
           d["ceilings"].get("compute", [])):
        caption += " " + DISTURBED_NOTE + "."
    return chart.figure(title=title, caption=caption, kind="roofline")


def _roofline_box(docs, bases, memory, transfers, compute) -> tuple[float, float, float, float]:
    """Whole decades around every ridge point, the lowest roof, and room above the top roof."""
    ridges = []
    for doc, basis, mem in zip(docs, bases, memory):
        ridge_roof = roofs_mod.fma_roof(doc, "fp64") or (roofs_mod.compute_roofs(doc) or [None])[0]
        peak = ridge_roof.gflops_per_s if ridge_roof else _top(doc)
        if peak:
            ridges += [peak / e["gbytes_per_s"] for e in mem if (e.get("precision"), e.get("access")) == basis]
    ridges = ridges or [1.0]
    x_low, x_high = decade_below(min(ridges) / 10), decade_above(max(ridges) * 10)
    bandwidths = [e["gbytes_per_s"] for group in memory + transfers for e in group] or [1.0]
    y_low = min(bandwidths) * x_low * 0.7  # the slowest roof starts just above the corner
    peaks = [e["gflops_per_s"] for group in compute for e in group]
    peaks += [e["rated"]["gflops_per_s"] for group in compute for e in group
              if isinstance(e.get("rated"), dict) and e["rated"].get("gflops_per_s")]
    y_high = max(peaks or [max(bandwidths) * x_high / 3]) * 3
    return x_low, x_high, y_low, y_high


def _memory_groups(memory, bases) -> dict[tuple, tuple[str, str, bool, str]]:
    """(precision, access) -> (tag, legend text, on, dash): the first files' roof kernel is on, the rest off."""
    keys: list[tuple] = []
    for basis in bases:
        if basis is not None and basis not in keys:
            keys.append(basis)
    for group in memory:
        for e in group:
            key = (e.get("precision"), e.get("access"))
            if key not in keys:
                keys.append(key)
    on = {b for b in bases if b is not None}
    return {key: (f"mem-{key[0] or 'any'}-{key[1] or 'any'}", f"memory: {roofs_mod.basis_label(*key)}", key in on,
                  GROUP_DASHES[min(i, len(GROUP_DASHES) - 1)] if i else "")
            for i, key in enumerate(keys)}


def _draw_memory(chart: Chart, entries, groups, basis, *, top, machine_index, machine, single) -> None:
    ordered = sorted(entries, key=lambda e: (e.get("wss_bytes") or [0])[0])
    basis_levels = [e for e in ordered if (e.get("precision"), e.get("access")) == basis]
    for e in ordered:
        key = (e.get("precision"), e.get("access"))
        tag, _, _, dash = groups[key]
        index = next((k for k, b in enumerate(basis_levels) if b["level"] == e["level"]), len(basis_levels))
        color = MACHINE_COLORS[machine_index % 8] if not single else level_color(e["level"], index)
        tags = [f"machine{machine_index}", tag]
        value = e["gbytes_per_s"]
        body = chart.polyline(_slant(chart, value, top), color=color, width=2.2, dash=dash)
        if key == basis:  # labelled along the line, staggered so labels of near roofs do not stack
            x_at = chart.x_low * 1.5 * (2.2 ** index) * (1.25 ** machine_index)
            if value * x_at < top and value * x_at > chart.y_low:
                # Every other label below its line: neighbouring roofs (L1 and L2) keep readable labels.
                words = f"{e['level']} {format_rate(value)}{tips.disturbed_mark(e)} GB/s"
                for dy in ((-6, 15) if index % 2 == 0 else (15, -6)):
                    placed = chart.label(x_at, value * x_at, words, color=color, dy=dy, angle=chart.slope_angle(),
                                         size=11, avoid=True)
                    if placed:
                        body += placed
                        break
        chart.add(chart.group(body, tags=tags, tip=tips.memory_tip(e, machine=machine), cls="roof",
                              data={"roof": "memory", "machine": machine_index, "level": e["level"],
                                    "precision": e.get("precision") or "", "access": e.get("access") or "",
                                    "value": value}))
        rated = (e.get("rated") or {}).get("gbytes_per_s") if isinstance(e.get("rated"), dict) else None
        if rated:
            faint = chart.polyline(_slant(chart, rated, top), color=color, width=1.4, dash=RATED_DASH, opacity=0.45)
            chart.add(chart.group(faint, tags=tags + ["rated"], tip=tips.rated_tip(e, "GB/s", machine=machine),
                                  cls="rated"), under=True)


def _slant(chart: Chart, gbytes_per_s: float, top: float) -> list[tuple[float, float]]:
    x_end = min(chart.x_high, top / gbytes_per_s)
    return [(chart.x_low, gbytes_per_s * chart.x_low), (x_end, gbytes_per_s * x_end)]


def _draw_transfers(chart: Chart, entries, *, top, machine_index, machine, single) -> None:
    """Links, peers and the network: slanted like memory roofs (FLOPs per byte that crosses them), dash-dotted,
    labelled towards their right end (their left end is below the chart for a slow network)."""
    for i, e in enumerate(sorted(entries, key=lambda e: -e["gbytes_per_s"])):
        chart.toggle("transfer", "links / network", color=TRANSFER_COLOR, dash="8 3 2 3")
        color = TRANSFER_COLOR if single else MACHINE_COLORS[machine_index % 8]
        line = _slant(chart, e["gbytes_per_s"], top)
        body = chart.polyline(line, color=color, width=1.8, dash="8 3 2 3")
        x_at = line[1][0] / (4.0 * 1.7 ** (i % 4))
        if e["gbytes_per_s"] * x_at > chart.y_low * 1.5:
            body += chart.label(x_at, e["gbytes_per_s"] * x_at, f"{tips.memory_name(e)} {format_rate(e['gbytes_per_s'])} "
                                f"GB/s", color=color, dy=-6, angle=chart.slope_angle(), size=10, avoid=True)
        chart.add(chart.group(body, tags=[f"machine{machine_index}", "transfer"], tip=tips.memory_tip(e, machine=machine),
                              cls="roof", data={"roof": "transfer", "machine": machine_index, "level": e["level"],
                                                "value": e["gbytes_per_s"]}))


def _compute_tag(e: dict) -> tuple[str, str, str]:
    """(tag, legend text, colour) of a compute roof's series: vector FP by precision, the rest by group."""
    if roofs_mod.is_vector_fp(e):
        p = e["precision"]
        return f"cmp-{p}", f"compute: {p.upper()}", PRECISION_COLORS.get(p, "#333")
    group = "tensor" if e.get("pipe") == "tensor" else "mix" if e.get("mix") else "integer"
    return f"cmp-{group}", f"compute: {group}", EXTRA_COLORS[group]


def _draw_compute(chart: Chart, entries, *, fastest, machine_index, machine, single) -> None:
    for e in sorted(entries, key=lambda e: -e["gflops_per_s"]):
        tag, legend, color = _compute_tag(e)
        chart.toggle(tag, legend, color=color if single else "#777")  # several machines: colour is the machine
        color = color if single else MACHINE_COLORS[machine_index % 8]
        dash = "" if e.get("fma", True) or e.get("pipe") == "tensor" else NO_FMA_DASH
        value = e["gflops_per_s"]
        x_start = max(chart.x_low, value / fastest)
        body = chart.polyline([(x_start, value), (chart.x_high, value)], color=color, width=2.2, dash=dash)
        words = f"{tips.compute_name(e)} {format_rate(value)}{tips.disturbed_mark(e)} {_compute_unit(e)}"
        # At the right end, else just after the roof's start, else below it: close peaks keep readable labels.
        for at, anchor, dx, dy in ((chart.x_high, "end", -6, -5), (x_start * 1.15, "start", 0, -5),
                                   (chart.x_high, "end", -6, 14)):
            placed = chart.label(at, value, words, color=color, anchor=anchor, dx=dx, dy=dy, size=11, avoid=True)
            if placed:
                body += placed
                break
        chart.add(chart.group(body, tags=[f"machine{machine_index}", tag], tip=tips.compute_tip(e, machine=machine),
                              cls="roof", data={"roof": "compute", "machine": machine_index,
                                                "precision": e.get("precision", ""), "fma": str(bool(e.get("fma"))),
                                                "value": value}))
        rated = (e.get("rated") or {}).get("gflops_per_s") if isinstance(e.get("rated"), dict) else None
        if rated:
            faint = chart.polyline([(max(chart.x_low, rated / fastest), rated), (chart.x_high, rated)], color=color,
                                   width=1.4, dash=RATED_DASH, opacity=0.45)
            chart.add(chart.group(faint, tags=[f"machine{machine_index}", tag, "rated"],
                                  tip=tips.rated_tip(e, _compute_unit(e), machine=machine), cls="rated"), under=True)


def _draw_ridges(chart: Chart, doc, memory, basis, *, tag, machine_index, machine) -> None:
    ridge_roof = roofs_mod.fma_roof(doc, "fp64") or (roofs_mod.compute_roofs(doc) or [None])[0]
    if ridge_roof is None:
        return
    peak = ridge_roof.gflops_per_s
    for e in memory:
        if (e.get("precision"), e.get("access")) != basis:
            continue
        x = peak / e["gbytes_per_s"]
        px, py = chart.px(x, peak)
        tip = (f"{machine + chr(10) if machine else ''}ridge point of {e['level']} and {ridge_roof.name}: "
               f"{x:.3g} FLOP/byte\n(a kernel below this intensity is bound by {e['level']} bandwidth)")
        chart.add(chart.group(f'<circle class="ridge" cx="{px}" cy="{py}" r="4.5"/>',
                              tags=[f"machine{machine_index}", tag, f"cmp-{ridge_roof.precision}"], tip=tip))
