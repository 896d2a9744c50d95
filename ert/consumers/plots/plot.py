"""Charts of the ceilings: the (hierarchical) roofline with application kernels, and what every chart shares
(the sweep behind the ceilings is ``ert.consumers.plots.plot_sweep``)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

from ert.consumers import roofs as roofs_mod
from ert.consumers.report_rows import DISTURBED_NOTE, disturbed_mark
from ert.records.files import write_bytes_atomic
from ert.errors import ErtError

FORMATS = ("png", "svg", "pdf")
LEVEL_MARKERS = {"L1": "o", "L2": "s", "L3": "D", "L4": "p"}
MEMORY_MARKER = "^"
PRECISION_COLORS = {"fp64": "#1f3b73", "fp32": "#6a3d9a", "fp16": "#8c510a"}
KERNEL_COLORS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324",
                 "#469990", "#808000")


def _pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed); imported only when a chart is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    # SVG text stays text (searchable, editable in a report), not outlines.
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def check_output(path) -> str:
    """The image format of ``path`` from its suffix; ErtError before any work when it is not one we write."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ErtError(f"unknown image format {suffix or '(none)'!r}: use .png, .svg or .pdf", path=path, key="-o")
    return suffix


def save_figure(fig, path) -> None:
    """Render ``fig`` fully in memory, then replace ``path`` in one rename: never a half-written image."""
    plt = _pyplot()
    fmt = check_output(path)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata={"Creator": "ert"}
                    if fmt != "png" else {"Software": "ert"})
    finally:
        plt.close(fig)
    write_bytes_atomic(buffer.getvalue(), path)


def _decade_below(x: float) -> float:
    # 10.0, not 10: 10 ** 40 is a Python int that numpy (the axis limits) cannot take.
    return 10.0 ** math.floor(math.log10(x))


def _decade_above(x: float) -> float:
    return 10.0 ** math.ceil(math.log10(x))


def _fmt_rate(value: float) -> str:
    return f"{value:.4g}" if value < 1000 else f"{value:,.0f}"


def _slope_angle(ax, x0: float, y0: float, x1: float, y1: float) -> float:
    (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
    return math.degrees(math.atan2(py1 - py0, px1 - px0))


# ----------------------------------------------------------------------------------------- roofline
def plot_roofline(doc: dict, out_path, *, kernels=None, precision: str = "fp64", access: str = "rw") -> None:
    """Log-log roofline: a slanted roof per memory level, a flat roof per compute ceiling, ridge points marked.

    Memory roofs are the bandwidths of one kernel (``precision`` ``access``,
    see roofs.choose_basis); kernels, when given, get one marker per memory
    level (hierarchical roofline) and one colour each.
    """
    plt = _pyplot()
    check_output(out_path)
    r = _roofline_roofs(doc, precision=precision, access=access)

    from ert.consumers.profile.profile import profile_all

    profiles = profile_all(kernels, doc, access=access) if kernels else []
    box = _roofline_box(r, profiles)
    fig, ax = _log_axes(plt, box)
    _draw_memory_roofs(ax, plt.get_cmap("autumn"), r, box)
    _label_memory_roofs(ax, r.mem, box)
    _draw_transfer_roofs(ax, plt.get_cmap("winter"), r, box)
    _draw_compute_roofs(ax, r, box)
    _label_compute_roofs(ax, _compute_labels(r.comp), r.fastest, box)
    _draw_ridges(ax, r)
    _draw_kernels(ax, profiles)
    _draw_extra_roofs(ax, r, box)
    fig.suptitle(f"Roofline: {roofs_mod.machine_label(doc)}", fontsize=12)
    links = "; link/peer/network roofs: blue, dash-dotted" if r.transfers else ""
    ax.set_title(f"memory roofs: {r.basis} bandwidth per level; compute roofs: FMA solid, no-FMA dashed{links}",
                 fontsize=9, color="dimgray")
    if any(m.disturbed for m in r.mem) or any(c.disturbed for c in r.comp):
        # Below the axes, in the colour of a warning: a disturbed roof is not the machine's.
        ax.text(0.0, -0.1, DISTURBED_NOTE + "; memory roofs so measured are dotted", transform=ax.transAxes,
                ha="left", va="top", fontsize=9, color="#b03a2e")
    save_figure(fig, out_path)


@dataclass(frozen=True)
class _Roofs:
    """What a roofline draws from a ceilings document."""

    mem: list  # memory roofs, one per level
    basis: str  # the kernel their bandwidths come from
    comp: list  # compute roofs
    ridge_roof: object  # the compute roof the ridge points sit on
    top: float  # the highest compute roof, GFLOP/s (tensor and integer roofs included)
    fastest: float  # the highest memory roof, GB/s
    ridges: list[float]  # where each memory roof meets the ridge roof, FLOP/byte
    extra: tuple = ()  # the integer, tensor and mix roofs drawn (EXTRA_PER_GROUP at most per group)
    transfers: list = ()  # link, peer and network roofs: FLOP per byte that crosses them


@dataclass(frozen=True)
class _Box:
    """The axes' limits."""

    xmin: float
    xmax: float
    ymin: float
    ymax: float


def _roofline_roofs(doc: dict, *, precision: str, access: str) -> _Roofs:
    """The memory and compute roofs, and the roof of the ridge points (FMA of ``precision``, else the highest)."""
    mem, basis = roofs_mod.memory_roofs(doc, precision=precision, access=access)
    comp = roofs_mod.compute_roofs(doc)
    if not comp:
        raise ErtError("has no compute ceilings to draw", key="ceilings.compute")
    ridge_roof = roofs_mod.fma_roof(doc, precision) or max(comp, key=lambda r: r.gflops_per_s)
    extra = _extra_to_draw(doc)
    return _Roofs(mem=mem, basis=basis, comp=comp, ridge_roof=ridge_roof,
                  top=max([r.gflops_per_s for r in comp] + [e.value for e in extra]),
                  fastest=max(r.gbytes_per_s for r in mem),
                  ridges=[ridge_roof.gflops_per_s / r.gbytes_per_s for r in mem], extra=tuple(extra),
                  transfers=roofs_mod.transfer_roofs(doc))


# Extra roofs (integer, tensor, mix) drawn per group, the fastest first: the chart stays readable.
EXTRA_PER_GROUP = 3
EXTRA_STYLES = {  # group: (colours, line style, legend title)
    "tensor": (("#b2182b", "#d6604d", "#f4a582"), (0, (8, 2, 2, 2)), "tensor cores (GFLOP/s)"),
    "integer": (("#1b7837", "#5aae61", "#a6dba0"), (0, (1, 2)), "integer (GIOP/s)"),
    "mix": (("#636363", "#969696", "#bdbdbd"), (0, (3, 1, 1, 1, 1, 1)), "measured mixes"),
}


def _extra_to_draw(doc: dict) -> list:
    out, seen = [], {}
    for roof in roofs_mod.extra_roofs(doc):
        seen[roof.group] = seen.get(roof.group, 0) + 1
        if seen[roof.group] <= EXTRA_PER_GROUP:
            out.append(roof)
    return out


def _draw_extra_roofs(ax, r: _Roofs, box: _Box) -> None:
    """Integer, tensor and mix roofs: one style per group, one legend (outside the axes, below the kernels')."""
    if not r.extra:
        return
    handles, counts = [], {}
    for group in roofs_mod.EXTRA_GROUPS:
        roofs = [e for e in r.extra if e.group == group]
        if not roofs:
            continue
        colors, style, title = EXTRA_STYLES[group]
        if group == "tensor" and any(e.unit == "GIOP/s" for e in roofs):
            title = "tensor cores (GFLOP/s; int8 GIOP/s)"
        handles.append(ax.plot([], [], linestyle="none", label=title)[0])
        for i, roof in enumerate(roofs):
            color = colors[i % len(colors)]
            ax.plot([roof.value / r.fastest, box.xmax], [roof.value] * 2, color=color, linewidth=2, linestyle=style)
            handles.append(ax.plot([], [], color=color, linewidth=2, linestyle=style,
                                   label=f"  {roof.name} {_fmt_rate(roof.value)} {roof.unit}")[0])
        counts[group] = len(roofs)
    # A figure legend placed in axes coordinates: the kernels' legend stays the axes' own, and both
    # count for the saved image's tight bounding box.
    ax.figure.legend(handles=handles, title="more compute roofs", loc="lower left", bbox_to_anchor=(1.01, 0.0),
                     bbox_transform=ax.transAxes, fontsize=8, title_fontsize=8)
    if "integer" in counts or any(e.unit == "GIOP/s" for e in r.extra):
        ax.set_ylabel("Performance [GFLOP/s; integer roofs GIOP/s]")


def _roofline_box(r: _Roofs, profiles) -> _Box:
    """Whole decades around the ridge points, the lowest roof and the kernels, with room above the top roof."""
    app_x = [lv.ai_flops_per_byte for p in profiles for lv in p.results[0].levels]
    app_y = [p.results[0].gflops_per_s for p in profiles]
    xmin = _decade_below(min([min(r.ridges) / 30] + [x / 3 for x in app_x]))
    xmax = _decade_above(max([max(r.ridges) * 30] + [x * 3 for x in app_x]))
    lowest = min([m.gbytes_per_s for m in r.mem] + [t.gbytes_per_s for t in r.transfers])
    ymin = _decade_below(min([lowest * xmin * 2] + [y / 3 for y in app_y]))
    ymax = max([r.top * 3] + [y * 3 for y in app_y])
    return _Box(xmin, xmax, ymin, ymax)


def _log_axes(plt, box: _Box):
    """(figure, axes): log-log, gridded, labelled, its transforms fixed."""
    fig, ax = plt.subplots(figsize=(10, 6.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(box.xmin, box.xmax)
    ax.set_ylim(box.ymin, box.ymax)
    ax.grid(which="major", alpha=0.35)
    ax.grid(which="minor", alpha=0.12)
    ax.set_xlabel("Arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("Performance [GFLOP/s]")
    fig.canvas.draw()  # fixes the transforms, so label angles follow the drawn slope
    return fig, ax


def _draw_memory_roofs(ax, cmap, r: _Roofs, box: _Box) -> None:
    """One slanted line per memory level, from the left edge up to the top compute roof."""
    for i, roof in enumerate(r.mem):
        x_end = r.top / roof.gbytes_per_s
        color = cmap(0.75 * i / max(len(r.mem) - 1, 1))
        ax.plot([box.xmin, x_end], [roof.gbytes_per_s * box.xmin, r.top], color=color, linewidth=2,
                solid_capstyle="butt", linestyle=(0, (1, 1.5)) if roof.disturbed else "-")


def _draw_transfer_roofs(ax, cmap, r: _Roofs, box: _Box) -> None:
    """Links, peers and the network: slanted like memory roofs -- the bound is FLOPs per byte that
    crosses the link times its bandwidth -- but dash-dotted, in blues, each labelled at its right end."""
    for i, roof in enumerate(sorted(r.transfers, key=lambda t: -t.gbytes_per_s)):
        x_end = min(box.xmax, r.top / roof.gbytes_per_s)
        color = cmap(0.85 * i / max(len(r.transfers) - 1, 1))
        ax.plot([box.xmin, x_end], [roof.gbytes_per_s * box.xmin, roof.gbytes_per_s * x_end], color=color,
                linewidth=1.6, linestyle="-.", solid_capstyle="butt")
        x_label = x_end / (3.0 * (1.6 ** (i % 4)))
        if roof.gbytes_per_s * x_label > box.ymin:
            angle = _slope_angle(ax, box.xmin, roof.gbytes_per_s * box.xmin, box.xmax, roof.gbytes_per_s * box.xmax)
            ax.annotate(f"{roof.name} {_fmt_rate(roof.gbytes_per_s)} GB/s", (x_label, roof.gbytes_per_s * x_label),
                        xytext=(4, -4), textcoords="offset points", rotation=angle, rotation_mode="anchor",
                        fontsize=8, color=color, ha="left", va="top",
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.2})


def _mark(roof) -> str:
    """'*' after the value of a roof measured while the host was disturbed (DISTURBED_NOTE)."""
    return disturbed_mark(roof.disturbed)


def _near_roofs(mem: list, ratio: float) -> list[list]:
    """Memory roofs, fastest first, grouped while each is within ``ratio`` of the previous one."""
    groups: list[list] = []
    for roof in sorted(mem, key=lambda r: -r.gbytes_per_s):
        if groups and groups[-1][-1].gbytes_per_s / roof.gbytes_per_s < ratio:
            groups[-1].append(roof)
        else:
            groups.append([roof])
    return groups


def _label_memory_roofs(ax, mem: list, box: _Box) -> None:
    """Roofs within 5 % of each other (L2 and L3 read+write on Zen 4) share one label; labels step
    right so they do not stack (each starts past the end of the one before: roofs 1.2x apart put two labels
    between near lines), the top one sits above its roof and the others below theirs."""
    renderer = ax.figure.canvas.get_renderer()
    right = box.xmin  # where the label before ends, data x
    for i, group in enumerate(_near_roofs(mem, 1.05)):
        anchor = group[-1] if i else group[0]
        x_label = max(box.xmin * 1.5 * (2.5 ** i), box.ymin * 1.5 / anchor.gbytes_per_s, right * 1.1)
        x_label = min(x_label, box.ymax / 3 / anchor.gbytes_per_s / 4)  # on its line, short of the top roof
        angle = _slope_angle(ax, box.xmin, anchor.gbytes_per_s * box.xmin, box.xmax, anchor.gbytes_per_s * box.xmax)
        text = " / ".join(f"{r.level} {_fmt_rate(r.gbytes_per_s)}{_mark(r)}" for r in group) + " GB/s"
        label = ax.annotate(text, (x_label, anchor.gbytes_per_s * x_label), xytext=(2, 4) if i == 0 else (4, -4),
                            textcoords="offset points", rotation=angle, rotation_mode="anchor", fontsize=9,
                            ha="left", va="bottom" if i == 0 else "top",
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.3})
        right = float(ax.transData.inverted().transform((label.get_window_extent(renderer).x1, 0.0))[0])


def _by_precision(comp: list) -> dict[str, list]:
    by_precision: dict[str, list] = {}
    for roof in comp:
        by_precision.setdefault(roof.precision, []).append(roof)
    return by_precision


def _draw_compute_roofs(ax, r: _Roofs, box: _Box) -> None:
    """One flat line per compute ceiling from where the fastest memory roof meets it; FMA solid, no-FMA dashed."""
    for p, group in _by_precision(r.comp).items():
        color = PRECISION_COLORS.get(p, "black")
        for roof in group:
            x_start = roof.gflops_per_s / r.fastest
            ax.plot([x_start, box.xmax], [roof.gflops_per_s] * 2, color=color, linewidth=2,
                    linestyle="-" if roof.fma else (0, (5, 3)))


def _compute_labels(comp: list) -> list[tuple[float, str, str]]:
    """(value, text, colour) per label: FMA and no-FMA peaks within 3 % share one (Zen 4: separate add pipes
    reach the FMA rate)."""
    labels = []
    for p, group in _by_precision(comp).items():
        color = PRECISION_COLORS.get(p, "black")
        group = sorted(group, key=lambda r: -r.gflops_per_s)
        if len(group) == 2 and group[0].gflops_per_s / group[1].gflops_per_s < 1.03:
            text = " / ".join(f"{'FMA' if r.fma else 'no-FMA'} {_fmt_rate(r.gflops_per_s)}{_mark(r)}" for r in group)
            labels.append((group[0].gflops_per_s, f"{p.upper()} {text} GFLOP/s", color))
        else:
            labels += [(r.gflops_per_s, f"{p.upper()} {'FMA' if r.fma else 'no-FMA'} {_fmt_rate(r.gflops_per_s)}"
                                        f"{_mark(r)} GFLOP/s", color) for r in group]
    return labels


def _label_compute_roofs(ax, labels: list, fastest: float, box: _Box) -> None:
    """Labels sit just above their roofs; neighbours alternate between the right end and the start of
    their roof, so roofs closer than a text line (86 vs 112 GFLOP/s) keep readable labels."""
    for i, (value, text, color) in enumerate(sorted(labels, key=lambda t: -t[0])):
        at_end = i % 2 == 0
        ax.annotate(text, (box.xmax if at_end else value / fastest * 1.4, value), xytext=(-6 if at_end else 0, 3),
                    textcoords="offset points", ha="right" if at_end else "left", va="bottom", fontsize=9,
                    color=color, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.3})


def _draw_ridges(ax, r: _Roofs) -> None:
    """A circle where each memory roof meets the ridge roof, and their intensities in the corner."""
    for ridge in r.ridges:
        ax.plot([ridge], [r.ridge_roof.gflops_per_s], marker="o", markersize=7, markerfacecolor="white",
                markeredgecolor="black", zorder=5)
    ridge_text = ", ".join(f"{m.level} {x:.2g}" for m, x in zip(r.mem, r.ridges))
    ax.text(0.99, 0.02, f"ridge points (○) on {r.ridge_roof.name}, FLOP/byte: {ridge_text}",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="dimgray")


def _draw_kernels(ax, profiles) -> None:
    """Each kernel in its colour, one marker per memory level on a line at its rate; then the legend."""
    handles = []
    for k, prof in enumerate(profiles):
        res = prof.results[0]
        color = KERNEL_COLORS[k % len(KERNEL_COLORS)]
        xs = [lv.ai_flops_per_byte for lv in res.levels]
        ax.plot(xs, [res.gflops_per_s] * len(xs), color=color, linewidth=1, alpha=0.6, zorder=6)
        for lv in res.levels:
            marker = LEVEL_MARKERS.get(lv.roof_level or lv.level, MEMORY_MARKER)
            ax.plot([lv.ai_flops_per_byte], [res.gflops_per_s], marker=marker, markersize=9, color=color,
                    markeredgecolor="black", linestyle="none", zorder=7)
        handles.append(ax.plot([], [], color=color, marker="o", linestyle="-", markersize=8,
                               label=f"{prof.name} ({res.precision}, {_fmt_rate(res.gflops_per_s)} GFLOP/s, "
                                     f"{res.percent_of_attainable:.0f}% of attainable)"
                               if res.percent_of_attainable else prof.name)[0])
    if profiles:
        _kernel_legend(ax, handles, _profiled_levels(profiles))


def _profiled_levels(profiles) -> list[str]:
    """The memory levels the kernels are placed at, in first-seen order."""
    levels = []
    for p in profiles:
        for lv in p.results[0].levels:
            name = lv.roof_level or lv.level
            if name not in levels:
                levels.append(name)
    return levels


def _kernel_legend(ax, handles: list, levels: list[str]) -> None:
    """One legend outside the axes (never over data): kernels by colour, then levels by marker."""
    level_handles = [ax.plot([], [], marker=LEVEL_MARKERS.get(n, MEMORY_MARKER), color="gray",
                             markeredgecolor="black", linestyle="none", label=f"AI at {n}")[0] for n in levels]
    spacer = ax.plot([], [], linestyle="none", label=" ")[0]
    ax.legend(handles=handles + [spacer] + level_handles, title="kernels (colour) and AI per level (marker)",
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title_fontsize=8)
