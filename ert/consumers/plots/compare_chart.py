"""`ert compare --plot`: each paired ceiling of several machines (or hosts) as a bar of its ratio to the first."""

from __future__ import annotations

from ert.consumers.compare.compare import comparison_rows, format_value
from ert.consumers.plots.plot import _pyplot, save_figure
from ert.consumers.report_rows import DISTURBED_NOTE


def plot_comparison(docs: list[dict], labels: list[str], out_path) -> None:
    """Horizontal bars: each paired ceiling of every machine relative to the first (1.0 = equal)."""
    plt = _pyplot()
    rows = [r for r in comparison_rows(docs) if r.paired and r.kind != "transfer-latency"]  # bars: higher is better
    if not rows:
        from ert.errors import ErtError

        raise ErtError("no ceiling is present in every file: nothing to chart", key="--plot")
    n_other = len(docs) - 1
    height = 0.8 / max(n_other, 1)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) * max(n_other, 1) + 1.8))
    from matplotlib.patches import Patch

    handles = []  # plain swatches: the legend of a machine whose first bar is hatched stays unhatched
    for j in range(1, len(docs)):
        ys = [i + (j - 1) * height for i in range(len(rows))]
        ratios = [r.ratios()[j] for r in rows]
        bars = ax.barh(ys, ratios, height=height, color=f"C{j - 1}")
        handles.append(Patch(color=f"C{j - 1}", label=f"{labels[j]} / {labels[0]}"))
        for bar, ratio, row in zip(bars, ratios, rows):
            if row.mark(0) or row.mark(j):  # a ratio with a ceiling measured while its host was disturbed
                bar.set_hatch("///")
                bar.set_alpha(0.55)
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {ratio:.2f}x ({format_value(row.values[j])}{row.mark(j)} vs "
                    f"{format_value(row.values[0])}{row.mark(0)} {row.unit})", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + (n_other - 1) * height / 2 for i in range(len(rows))], [r.label for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"ratio to {labels[0]} (higher is faster)")
    ax.set_xlim(0, max(max(r.ratios()[1:]) for r in rows) * 1.45)
    ax.set_title("Ceilings compared: " + " vs ".join(labels), fontsize=11)
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if any(any(r.disturbed) for r in rows):
        fig.text(0.01, 0.005, DISTURBED_NOTE + "; hatched: a ratio with one", fontsize=8, color="#b03a2e",
                 ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save_figure(fig, out_path)
