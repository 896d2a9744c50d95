"""The host's weather under the sweep in ``ert report``: a timeline of the run's sentinels and disturbed stretches.

One linear chart across the run's seconds: each sentinel level's readings as
a share of its best, the line below which a reading is disturbed (the noise
threshold), the disturbed stretches shaded, and a band of ticks at the
bottom, one per measured point at the time it was written (red: measured
inside a stretch and never again; blue: measured again once the host was
calm).  Reads ceilings.json's ``weather`` (schema 1.11) and the raw records.
"""

from __future__ import annotations

from ert.consumers.html.svg_chart import attr, text
from ert.spec import NOISE_THRESHOLD

LEVEL_COLORS = {"L1": "#1b9e77", "L2": "#d95f02", "L3": "#7570b3"}
STRETCH_FILL = "#fbd3d3"
WIDTH, HEIGHT = 960, 250
TOP, RIGHT, BOTTOM, LEFT = 18, 24, 58, 78
BAND = 14  # the points' band at the bottom of the plot, pixels


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class _Axes:
    """Seconds across, share of the best up."""

    def __init__(self, seconds: float, low: float):
        self.seconds, self.low, self.high = max(seconds, 1e-3), low, 1.05

    def x(self, t: float) -> float:
        return round(LEFT + (WIDTH - LEFT - RIGHT) * min(max(t, 0.0), self.seconds) / self.seconds, 1)

    def y(self, share: float) -> float:
        bottom = HEIGHT - BOTTOM - BAND
        return round(bottom - (bottom - TOP) * (min(max(share, self.low), self.high) - self.low)
                     / (self.high - self.low), 1)


def _ticks(seconds: float) -> list[float]:
    step = next(s for s in (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600, float("inf"))
                if seconds / s <= 10)
    return [k * step for k in range(int(seconds / step) + 1)] if step != float("inf") else [0.0]


def _frame(ax: _Axes, threshold: float) -> list[str]:
    parts = []
    for t in _ticks(ax.seconds):
        px = ax.x(t)
        parts.append(f'<line class="grid" x1="{px}" y1="{TOP}" x2="{px}" y2="{HEIGHT - BOTTOM}"/>'
                     f'<text class="tick" x="{px}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{t:g}</text>')
    for share in (0.2, 0.4, 0.6, 0.8, 1.0):
        if ax.low <= share <= ax.high:
            py = ax.y(share)
            parts.append(f'<line class="grid" x1="{LEFT}" y1="{py}" x2="{WIDTH - RIGHT}" y2="{py}"/>'
                         f'<text class="tick" x="{LEFT - 8}" y="{py + 4}" text-anchor="end">{share:.1f}</text>')
    line = 1.0 / (1.0 + threshold)
    py = ax.y(line)
    tip = f"below {line:.2f} of its best (the noise threshold, {threshold:.0%}): a sentinel reading is disturbed"
    parts.append(f'<g class="limit" data-tip="{attr(tip)}">'
                 f'<line x1="{LEFT}" y1="{py}" x2="{WIDTH - RIGHT}" y2="{py}" stroke="#c00" stroke-dasharray="5 4"/>'
                 f'<line class="hit" x1="{LEFT}" y1="{py}" x2="{WIDTH - RIGHT}" y2="{py}"/></g>')
    parts.append(f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
                 f'height="{HEIGHT - TOP - BOTTOM}"/>')
    parts.append(f'<text class="axis" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
                 f'seconds into the run</text>')
    mid = (TOP + HEIGHT - BOTTOM) / 2
    parts.append(f'<text class="axis" x="18" y="{mid}" text-anchor="middle" transform="rotate(-90 18 {mid})">'
                 f'share of its best</text>')
    return parts


def _point_ticks(ax: _Axes, raw, start: float, stretches: list[dict]) -> list[str]:
    """One tick per point record at the time it was written: red when inside a stretch, blue when measured again."""
    parts = []
    bottom = HEIGHT - BOTTOM
    for rec in getattr(raw, "points", []) if raw is not None else []:
        t = _number(rec.get("time"))
        if t is None:
            continue
        t -= start
        inside = any(s["start_s"] < t < s["end_s"] for s in stretches)
        again = rec.get("remeasured_for") == "disturbed"
        color = "#c00" if inside else "#2166ac" if again else "#999"
        state = ("measured inside a disturbed stretch" if inside else
                 "measured again once the host was calm" if again else "measured calm")
        px, tip = ax.x(t), f"{rec.get('id', '?')} at {t:.1f} s: {state}"
        parts.append(f'<g class="ptick" data-tip="{attr(tip)}">'
                     f'<line x1="{px}" y1="{bottom - BAND + 2}" x2="{px}" y2="{bottom - 2}" stroke="{color}"/>'
                     f'<line class="hit" x1="{px}" y1="{bottom - BAND + 2}" x2="{px}" y2="{bottom - 2}"/></g>')
    return parts


def weather_timeline(doc: dict, raw=None, *, chart_id: str = "weather") -> str:
    """The timeline as an HTML figure, or '' for a run without a weather block."""
    weather = doc.get("weather")
    if not isinstance(weather, dict) or not isinstance(weather.get("series"), dict):
        return ""
    seconds = _number(weather.get("seconds")) or 0.0
    threshold = _number(weather.get("noise_threshold")) or NOISE_THRESHOLD
    start = _number(weather.get("start_time")) or 0.0
    series = {level: [(float(t), float(r)) for t, r in values]
              for level, values in weather["series"].items() if isinstance(values, list) and values}
    stretches = [s for s in weather.get("stretches", []) if isinstance(s, dict)
                 and _number(s.get("start_s")) is not None and _number(s.get("end_s")) is not None]
    lowest = min([r for values in series.values() for _, r in values] + [1.0 / (1.0 + threshold)])
    ax = _Axes(seconds, low=min(0.5, lowest - 0.05))
    parts = []
    for s in stretches:
        x0, x1 = ax.x(s["start_s"]), ax.x(s["end_s"])
        tip = (f"disturbed {s['start_s']:.1f} - {s['end_s']:.1f} s: {', '.join(map(str, s.get('levels', [])))} low, "
               f"{s.get('lowest_level', '?')} down to {_number(s.get('lowest')) or 0:.2f} of its best")
        parts.append(f'<g class="stretch" data-tip="{attr(tip)}"><rect x="{x0}" y="{TOP}" width="{max(x1 - x0, 2)}" '
                     f'height="{HEIGHT - TOP - BOTTOM}" fill="{STRETCH_FILL}"/></g>')
    parts += _frame(ax, threshold)
    for level, values in series.items():
        color = LEVEL_COLORS.get(level, "#333")
        d = "M" + " L".join(f"{ax.x(t)},{ax.y(r)}" for t, r in values)
        dots = "".join(f'<circle cx="{ax.x(t)}" cy="{ax.y(r)}" r="2.5" fill="{color}"/>' for t, r in values)
        tip = f"{level} sentinel: {len(values)} readings, lowest {min(r for _, r in values):.2f} of its best"
        parts.append(f'<g class="sentinel" data-tip="{attr(tip)}"><path class="hit" d="{d}"/>'
                     f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"/>{dots}</g>')
    parts += _point_ticks(ax, raw, start, stretches)
    legend = " ".join(f'<span style="color:{LEVEL_COLORS.get(level, "#333")}">&#9644; {text(level)}</span>'
                      for level in series)
    disturbed = _number(weather.get("disturbed_seconds")) or 0.0
    caption = (f"The host's weather: each cache level's sentinel kernel, read between the points, as a share of its "
               f"best reading of the run; below the dashed line (the noise threshold) a reading is disturbed, and the "
               f"shaded stretches ({disturbed:.1f} of {seconds:.1f} s) run from the calm reading before to the calm "
               f"one after. Ticks at the bottom: each point when it was written (red inside a stretch, blue measured "
               f"again once calm, grey calm).")
    svg = (f'<svg class="plot" id="{attr(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'xmlns="http://www.w3.org/2000/svg" role="img">{"".join(parts)}</svg>')
    return (f'<figure class="chart" data-chart="weather"><figcaption class="title">Host weather during the sweep'
            f'</figcaption><div class="legend">{legend}</div>{svg}<p class="caption">{text(caption)}</p></figure>')
