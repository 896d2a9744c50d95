"""The sweep behind the ceilings, charted: GB/s against working set with the plateaus shaded and the caches
marked, GFLOP/s against FLOPs per element (``ert plot --sweep``)."""

from __future__ import annotations

import math

from ert.consumers import roofs as roofs_mod
from ert.consumers.plots.plot import PRECISION_COLORS, _fmt_rate, _pyplot, check_output, save_figure
from ert.errors import ErtError
from ert.spec import access_name


def _cache_hints(meta: dict) -> list[tuple[str, int]]:
    """(label, aggregate bytes) per cache level the run could fill: where a plateau should end."""
    from ert.hardware.hwinfo import CacheInfo, aggregate_capacity_bytes

    threads = int(meta.get("threads_per_rank", 1)) * int(meta.get("ranks", 1))
    caches = meta.get("backend_info", {}).get("caches", meta.get("caches_reported", []))
    hints = {}
    for c in caches:
        if c.get("kind") == "Instruction":
            continue
        info = CacheInfo(level=c["level"], kind=c.get("kind", "Unified"), size_bytes=c["size_bytes"],
                         shared_cpu_count=c.get("shared_cpu_count", 1))
        hints[c["level"]] = (f"L{c['level']}", aggregate_capacity_bytes(info, threads))
    return [hints[k] for k in sorted(hints)]


def plot_sweep(raw, doc: dict, out_path) -> None:
    """Why each ceiling is what it is: GB/s vs working set with plateaus shaded, GFLOP/s vs FLOPs per element.

    ``raw``: the run's raw records (ert.records.rawio.RawData); ``doc``: its ceilings (the CLI reads ceilings.json,
    or builds them when a run was cut before it was written).
    """
    plt = _pyplot()
    check_output(out_path)
    from ert.spec import rates
    from ert.records.rawio import best_launches
    from ert.units import human_bytes

    points = [r for r in best_launches(raw.points) if r["valid"]]
    if not points:
        raise ErtError("has no valid measured points to plot", path=raw.path)
    accesses = [a for a in ("rw", "ro") if any(r["spec"]["access"] == a and r["spec"]["flops_per_element"] == 1
                                               for r in points)]
    fig, axes = plt.subplots(1, len(accesses) + 1, figsize=(6.2 * (len(accesses) + 1), 5.4), squeeze=False)
    axes = axes[0]
    hints = _cache_hints(doc["metadata"])
    level_colors = plt.get_cmap("Pastel1")
    for ax, access in zip(axes, accesses):
        ax.set_xscale("log")
        ax.set_xlabel("working set [bytes, all threads]")
        ax.set_ylabel("bandwidth [GB/s]")
        ax.set_title(f"bandwidth, {access_name(access)} (FLOPs/element = 1)", fontsize=10)
        curves = {}
        for r in points:
            if r["spec"]["access"] == access and r["spec"]["flops_per_element"] == 1:
                curves.setdefault(r["spec"]["precision"], []).append(r)
        ymax = 0.0
        for p, curve in curves.items():
            curve.sort(key=lambda r: r["wss_bytes"])
            xs = [r["wss_bytes"] for r in curve]
            ys = [rates(r).gbytes_per_s for r in curve]
            ymax = max(ymax, max(ys))
            color = PRECISION_COLORS.get(p, "black")
            ax.plot(xs, ys, color=color, linewidth=1, alpha=0.8, label=p)
            clean = [(x, y) for x, y, r in zip(xs, ys, curve) if not r["noisy"]]
            noisy = [(x, y) for x, y, r in zip(xs, ys, curve) if r["noisy"]]
            ax.plot([x for x, _ in clean], [y for _, y in clean], "o", color=color, markersize=3.5)
            if noisy:
                ax.plot([x for x, _ in noisy], [y for _, y in noisy], "o", markerfacecolor="white",
                        markeredgecolor=color, markersize=5, label=f"{p} noisy point")
            # Measured again, later, to confirm a window's roof: on a disturbed run, the roof's own evidence.
            again = [(r["wss_bytes"], rates(r).gbytes_per_s) for r in raw.confirms
                     if r["spec"].get("precision") == p and r["spec"].get("access") == access
                     and r["spec"].get("flops_per_element") == 1 and r.get("valid", True)]
            if again:
                ymax = max(ymax, max(y for _, y in again))
                ax.plot([x for x, _ in again], [y for _, y in again], "D", color=color, alpha=0.6,
                        markeredgecolor="black", markeredgewidth=0.6, markersize=4.5,
                        label=f"{p} measured again (confirms)")
        ax.set_ylim(0, ymax * 1.22)
        shade_precision = "fp64" if "fp64" in curves else next(iter(curves), None)
        for e in doc["ceilings"]["memory"]:
            if e.get("access") != access:
                continue
            low, high = e["wss_bytes"]
            color = PRECISION_COLORS.get(e.get("precision"), "black")
            ax.plot([low, high], [e["gbytes_per_s"]] * 2, color=color, linewidth=3, alpha=0.55,
                    solid_capstyle="butt")
            if e.get("precision") == shade_precision:
                level_index = int(e["level"][1]) - 1 if roofs_mod.is_cache_level(e["level"]) else 4
                ax.axvspan(low, max(high, low * 1.05), color=level_colors(level_index % 9), alpha=0.6, zorder=0)
                ax.text(math.sqrt(low * max(high, low * 1.05)), ymax * 1.17,
                        f"{e['level']}\n{_fmt_rate(e['gbytes_per_s'])}", ha="center", va="top", fontsize=8)
        for label, size in hints:
            ax.axvline(size, color="gray", linestyle=":", linewidth=1)
            ax.text(size * 1.04, ymax * 0.03, f"{label} {human_bytes(size)}", rotation=90, fontsize=7,
                    color="dimgray", va="bottom")
        ax.legend(loc="center right", fontsize=8, framealpha=0.85)
        ax.grid(alpha=0.3)
    _compute_panel(axes[-1], points, doc, rates)
    fig.suptitle(f"Sweep behind the ceilings: {roofs_mod.machine_label(doc)}  (shaded: plateaus of "
                 f"{shade_precision if accesses else ''}, bars: plateau values, dotted: cache sizes x threads)",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_path)


def _compute_panel(ax, points, doc, rates) -> None:
    """Best GFLOP/s per FLOPs-per-element value, per precision and FMA, with the reported peak."""
    series: dict[tuple[str, bool], dict[int, float]] = {}
    for r in points:
        spec = r["spec"]
        if spec["access"] != "rw" or spec.get("pipe", "vector") != "vector":
            continue  # tensor points (one MMA shape each) are not a FLOPs-per-element sweep
        fpe = spec["flops_per_element"]
        # 1 FLOP/element is one add, the start of both the FMA and the no-FMA series.
        for fma in ([True, False] if fpe == 1 else [bool(spec["fma"])]):
            best = series.setdefault((spec["precision"], fma), {})
            best[fpe] = max(best.get(fpe, 0.0), rates(r).gflops_per_s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    for (p, fma), best in sorted(series.items()):
        xs = sorted(best)
        color = PRECISION_COLORS.get(p, "black")
        ax.plot(xs, [best[x] for x in xs], marker="o" if fma else "s", color=color,
                linestyle="-" if fma else "--", label=f"{p} {'FMA' if fma else 'no-FMA'}")
    for e in doc["ceilings"]["compute"]:
        if e.get("pipe", "vector") != "vector":
            continue  # tensor roofs: on the roofline (ert plot), not on this sweep
        color = PRECISION_COLORS.get(e["precision"], "black")
        ax.axhline(e["gflops_per_s"], color=color, linewidth=0.8, alpha=0.5,
                   linestyle="-" if e["fma"] else (0, (5, 3)))
        if e.get("flops_per_element"):
            integer = e.get("unit") == "GIOP/s" or e["precision"] in ("int32", "int64")
            text = "multiply-add peak" if integer else ("FMA peak" if e["fma"] else "no-FMA peak")
            ax.annotate(f"{e['precision']} {text} {_fmt_rate(e['gflops_per_s'])}{' GIOP/s' if integer else ''}",
                        (e["flops_per_element"], e["gflops_per_s"]), textcoords="offset points",
                        xytext=(-6, 6 if e["fma"] else -12), ha="right", fontsize=7, color=color)
    ax.set_xlabel("FLOPs per element")
    ax.set_ylabel("GFLOP/s (best over working sets)")
    ax.set_title("compute: GFLOP/s (integers: GIOP/s) vs FLOPs per element", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3, which="both")
