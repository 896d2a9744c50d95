"""Log-scale charts as inline SVG text for the HTML report: axes, ticks, and tagged, hoverable elements.

Nothing here knows about ceilings: ``html_charts`` draws roofs and points
with it. Every element that can be switched off carries ``data-tags`` (the
legend's buttons name one tag each; an element is hidden when any of its tags
is off), and every element that explains itself on hover carries ``data-tip``
(plain text; the report's script shows it). The state a chart opens in is
written into the SVG (class ``off``), so a page without its script, and a
screenshot, look the same as the page after its script ran.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable


def attr(value: object) -> str:
    """An attribute value, escaped; newlines kept as character references so tips keep their lines."""
    return html.escape(str(value), quote=True).replace("\n", "&#10;")


def text(value: object) -> str:
    return html.escape(str(value), quote=False)


@dataclass(frozen=True)
class LogAxis:
    """A logarithmic axis from ``low`` to ``high`` (data units) onto pixels ``start`` to ``end``."""

    low: float
    high: float
    start: float
    end: float
    base: float = 10.0

    def at(self, value: float) -> float:
        value = max(value, self.low * 1e-6)  # a zero never reaches the log; it lands far off the axis
        span = math.log(self.high) - math.log(self.low)
        return self.start + (self.end - self.start) * (math.log(value) - math.log(self.low)) / span

    def ticks(self, most: int = 10) -> list[float]:
        """Whole powers of the base inside the axis (every second, fourth... when there are too many);
        on a log10 axis spanning under two decades, also 2x and 5x of each decade."""
        first = math.ceil(math.log(self.low, self.base) - 1e-9)
        last = math.floor(math.log(self.high, self.base) + 1e-9)
        powers = list(range(first, last + 1))
        step = max(1, math.ceil(len(powers) / most))
        out = [self.base ** p for p in powers if p % step == 0]
        if self.base == 10 and last - first < 2:
            steps = (1, 2, 5) if last - first >= 1 else (1, 2, 3, 5)
            out = sorted({m * 10.0 ** p for p in range(first - 1, last + 1) for m in steps
                          if self.low <= m * 10.0 ** p <= self.high})
        return out


def decade_below(x: float) -> float:
    return 10.0 ** math.floor(math.log10(x))


def decade_above(x: float) -> float:
    return 10.0 ** math.ceil(math.log10(x))


def tick_number(value: float) -> str:
    """1000 -> '1000', 0.01 -> '0.01', 2e5 -> '2e5': short tick labels."""
    if value >= 1e5 or value < 1e-3:
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:g}"


def bytes_tick(value: float) -> str:
    """16384 -> '16KiB': a working-set tick label."""
    from ert.units import human_bytes

    return human_bytes(int(round(value))).replace(" ", "")


@dataclass
class Chart:
    """One log-log chart: its axes, a clipped data layer, and the legend's toggles (rendered beside it in HTML)."""

    chart_id: str
    x_low: float
    x_high: float
    y_low: float
    y_high: float
    x_label: str
    y_label: str
    x_base: float = 10.0
    x_format: Callable[[float], str] = tick_number
    y_format: Callable[[float], str] = tick_number
    width: int = 960
    height: int = 540
    margin: tuple[int, int, int, int] = (18, 24, 58, 78)  # top, right, bottom, left
    layers: list[str] = field(default_factory=list)
    under: list[str] = field(default_factory=list)  # drawn first: faint reference lines under the data
    toggles: list[tuple[str, str, str, bool, str]] = field(default_factory=list)  # tag, label, colour, on, dash
    placed: list[list[tuple[float, float]]] = field(default_factory=list)  # labels placed with avoid=True

    def __post_init__(self) -> None:
        top, right, bottom, left = self.margin
        self.x = LogAxis(self.x_low, self.x_high, left, self.width - right, self.x_base)
        self.y = LogAxis(self.y_low, self.y_high, self.height - bottom, top)

    # ------------------------------------------------------------------ drawing
    def px(self, x: float, y: float) -> tuple[float, float]:
        return round(self.x.at(x), 1), round(self.y.at(y), 1)

    def path(self, points: Iterable[tuple[float, float]]) -> str:
        """An SVG path through data points (``d`` attribute)."""
        return "M" + " L".join(f"{px},{py}" for px, py in (self.px(x, y) for x, y in points))

    def add(self, svg: str, *, under: bool = False) -> None:
        """Draw ``svg`` over what is drawn so far; ``under``: beneath every element not drawn ``under``."""
        (self.under if under else self.layers).append(svg)

    def toggle(self, tag: str, label: str, *, color: str = "#555", on: bool = True, dash: str = "") -> None:
        """A legend button that shows and hides every element tagged ``tag`` (once per tag)."""
        if all(t[0] != tag for t in self.toggles):
            self.toggles.append((tag, label, color, on, dash))

    def hidden(self, tags: Iterable[str]) -> bool:
        """Whether an element with ``tags`` starts hidden (one of its toggles starts off)."""
        off = {t[0] for t in self.toggles if not t[3]}
        return any(t in off for t in tags)

    def group(self, body: str, *, tags: Iterable[str], tip: str | None = None, cls: str = "",
              data: dict[str, object] | None = None) -> str:
        """``<g>`` around ``body`` with its tags, tip and data attributes; hidden when a toggle of it is off."""
        tags = list(tags)
        classes = " ".join(c for c in (cls, "off" if self.hidden(tags) else "") if c)
        attrs = [f'class="{classes}"' if classes else "", f'data-tags="{attr(" ".join(tags))}"']
        if tip:
            attrs.append(f'data-tip="{attr(tip)}"')
        attrs += [f'data-{k}="{attr(v)}"' for k, v in (data or {}).items()]
        return f"<g {' '.join(a for a in attrs if a)}>{body}</g>"

    def polyline(self, points: list[tuple[float, float]], *, color: str, width: float = 2.0, dash: str = "",
                 opacity: float = 1.0, hit: bool = True) -> str:
        """A visible line and, under it, a wide transparent one that catches the pointer (thin lines are hard
        to hover)."""
        d = self.path(points)
        style = f'stroke="{color}" stroke-width="{width}"' + (f' stroke-dasharray="{dash}"' if dash else "")
        style += f' stroke-opacity="{opacity}"' if opacity < 1 else ""
        hit_path = f'<path class="hit" d="{d}"/>' if hit else ""
        return f'{hit_path}<path class="vis" d="{d}" fill="none" {style}/>'

    def label(self, x: float, y: float, words: str, *, color: str, anchor: str = "start", dx: float = 0,
              dy: float = 0, angle: float = 0.0, size: int = 12, avoid: bool = False) -> str:
        """A text at data point (x, y) moved by (dx, dy) pixels; with ``avoid``, nothing ('') when it would
        cross a label placed before it with ``avoid`` (its value is in the hover text and tables anyway)."""
        px, py = self.px(x, y)
        px, py = px + dx, py + dy
        if avoid:
            samples = self._samples(px, py, len(words) * size * 0.58, angle, anchor, size)
            if any(math.dist(a, b) < size * 1.05 for placed in self.placed for a in placed for b in samples):
                return ""
            self.placed.append(samples)
        rotate = f' transform="rotate({angle:.1f} {px} {py})"' if angle else ""
        return (f'<text class="lbl" x="{px}" y="{py}" fill="{color}" font-size="{size}" '
                f'text-anchor="{anchor}"{rotate}>{text(words)}</text>')

    @staticmethod
    def _samples(px: float, py: float, length: float, angle: float, anchor: str, size: int) -> list:
        """Points along a text's middle line, about one every half character height."""
        rad = math.radians(angle)
        start = {"start": 0.0, "middle": -length / 2, "end": -length}[anchor]
        n = max(2, int(length / (size * 0.5)))
        return [(px + math.cos(rad) * (start + length * k / n) + math.sin(rad) * size * 0.35,
                 py + math.sin(rad) * (start + length * k / n) - math.cos(rad) * size * 0.35) for k in range(n + 1)]

    def slope_angle(self) -> float:
        """Screen angle (degrees) of a line of slope 1 in log-log data space (a memory roof)."""
        x_px = (self.x.end - self.x.start) / math.log10(self.x.high / self.x.low)
        y_px = (self.y.start - self.y.end) / math.log10(self.y.high / self.y.low)
        return -math.degrees(math.atan2(y_px, x_px))

    # ------------------------------------------------------------------ output
    def _axes(self) -> str:
        top, right, bottom, left = self.margin
        parts = []
        for value in self.x.ticks():
            px = round(self.x.at(value), 1)
            parts.append(f'<line class="grid" x1="{px}" y1="{top}" x2="{px}" y2="{self.height - bottom}"/>'
                         f'<text class="tick" x="{px}" y="{self.height - bottom + 18}" '
                         f'text-anchor="middle">{text(self.x_format(value))}</text>')
        for value in self.y.ticks():
            py = round(self.y.at(value), 1)
            parts.append(f'<line class="grid" x1="{left}" y1="{py}" x2="{self.width - right}" y2="{py}"/>'
                         f'<text class="tick" x="{left - 8}" y="{py + 4}" text-anchor="end">'
                         f'{text(self.y_format(value))}</text>')
        parts.append(f'<rect class="frame" x="{left}" y="{top}" width="{self.width - left - right}" '
                     f'height="{self.height - top - bottom}"/>')
        parts.append(f'<text class="axis" x="{(left + self.width - right) / 2}" y="{self.height - 14}" '
                     f'text-anchor="middle">{text(self.x_label)}</text>')
        mid = (top + self.height - bottom) / 2
        parts.append(f'<text class="axis" x="18" y="{mid}" text-anchor="middle" '
                     f'transform="rotate(-90 18 {mid})">{text(self.y_label)}</text>')
        return "".join(parts)

    def svg(self) -> str:
        top, right, bottom, left = self.margin
        clip = f"clip-{self.chart_id}"
        return (f'<svg class="plot" id="{attr(self.chart_id)}" viewBox="0 0 {self.width} {self.height}" '
                f'xmlns="http://www.w3.org/2000/svg" role="img">'
                f'<defs><clipPath id="{clip}"><rect x="{left}" y="{top}" width="{self.width - left - right}" '
                f'height="{self.height - top - bottom}"/></clipPath></defs>'
                f'{self._axes()}<g clip-path="url(#{clip})">{"".join(self.under)}{"".join(self.layers)}</g></svg>')

    def legend(self) -> str:
        buttons = []
        for tag, label, color, on, dash in self.toggles:
            swatch = (f'<svg class="sw" viewBox="0 0 24 8" width="24" height="8"><line x1="0" y1="4" x2="24" y2="4" '
                      f'stroke="{color}" stroke-width="3"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>'
                      f'</svg>')
            buttons.append(f'<button type="button" class="tog" data-tag="{attr(tag)}" '
                           f'aria-pressed="{"true" if on else "false"}">{swatch}{text(label)}</button>')
        return f'<div class="legend">{"".join(buttons)}</div>'

    def figure(self, *, title: str, caption: str, kind: str) -> str:
        """The chart as an HTML ``<figure>``: title, legend (the toggles), the SVG and a caption."""
        return (f'<figure class="chart" data-chart="{attr(kind)}"><figcaption class="title">{text(title)}'
                f'</figcaption>{self.legend()}{self.svg()}<p class="caption">{text(caption)}</p></figure>')
