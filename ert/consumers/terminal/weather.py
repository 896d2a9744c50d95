"""The host's weather in the plain-text report (``ert show --verbose``): the sentinels, the disturbed stretches.

Reads ceilings.json's ``weather`` block (schema 1.11) and the ``disturbed``
flags of the ceilings; a file without them prints nothing.
"""

from __future__ import annotations

from ert.consumers.terminal.report_cells import MISSING, aligned_table, format_count, format_rate

# Characters of the timeline: one per slice of the run.
TIMELINE_WIDTH = 60


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _share(value) -> str:
    v = _number(value)
    return f"{v:.2f}" if v is not None else MISSING


def _seconds(value) -> str:
    v = _number(value)
    return MISSING if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _timeline(total: float, stretches: list[dict], width: int) -> str:
    """``|----####-----|``: '#' where the host was disturbed, '-' where calm, one character per slice."""
    cells = []
    for k in range(width):
        lo, hi = total * k / width, total * (k + 1) / width
        hit = any(isinstance(s, dict) and _number(s.get("start_s")) is not None and _number(s.get("end_s")) is not None
                  and s["start_s"] < hi and s["end_s"] > lo for s in stretches)
        cells.append("#" if hit else "-")
    return "|" + "".join(cells) + "|"


def flagged_names(doc: dict) -> list[str]:
    """The ceilings measured only while the host was disturbed (``disturbed: true``)."""
    out = []
    for e in doc.get("ceilings", {}).get("memory", []):
        if isinstance(e, dict) and e.get("disturbed") is True:
            access = {"rw": "read+write", "ro": "read-only"}.get(e.get("access"), e.get("access", ""))
            out.append(f"{e.get('precision', '')} {access} {e.get('level', MISSING)}".strip())
    for e in doc.get("ceilings", {}).get("compute", []):
        if isinstance(e, dict) and e.get("disturbed") is True:
            out.append(f"{e.get('precision', '')} {'FMA' if e.get('fma') else 'no-FMA'} peak".strip())
    return out


def weather_section(doc: dict, *, width: int = 100) -> list[str]:
    """The weather's lines: how long the host was disturbed, each sentinel level, the stretches, a timeline."""
    weather = doc.get("weather")
    if not isinstance(weather, dict):
        return []
    total = _number(weather.get("seconds")) or 0.0
    stretches = [s for s in weather.get("stretches", []) if isinstance(s, dict)]
    points = weather.get("points") if isinstance(weather.get("points"), dict) else {}
    threshold = _number(weather.get("noise_threshold"))
    lines = [f"Host weather (sentinels between the points; disturbed: below the level's best by more than "
             f"{threshold:.0%})" if threshold is not None else "Host weather"]
    lines.append(f"  disturbed {_seconds(weather.get('disturbed_seconds'))} of {_seconds(total)} s; "
                 f"{format_count(points.get('measured_again'))} point(s) measured again, "
                 f"{format_count(points.get('suspect'))} left suspect")
    levels = weather.get("levels") if isinstance(weather.get("levels"), dict) else {}
    rows = [[str(level), format_count(v.get("readings")), format_rate(v.get("best_gbytes_per_s")),
             _share(v.get("median")), _share(v.get("lowest"))]
            for level, v in levels.items() if isinstance(v, dict)]
    if rows:
        lines += aligned_table(["sentinel", "readings", "best GB/s", "median", "lowest"], rows,
                               [False, True, True, True, True])
    for s in stretches:
        ends = s.get("open") if isinstance(s.get("open"), list) else [False, False]
        start = "the start" if ends and ends[0] else f"{_seconds(s.get('start_s'))} s"
        end = "the end" if len(ends) > 1 and ends[1] else f"{_seconds(s.get('end_s'))} s"
        levels_low = ", ".join(str(x) for x in s.get("levels", []))
        lines.append(f"  disturbed from {start} to {end}: {levels_low} low, {s.get('lowest_level', MISSING)} down "
                     f"to {_share(s.get('lowest'))} of its best")
    if total > 0:
        bar = _timeline(total, stretches, max(10, min(TIMELINE_WIDTH, width - 20)))
        lines.append(f"  0 s {bar} {_seconds(total)} s  (# disturbed)")
    flagged = flagged_names(doc)
    if flagged:
        lines.append("  measured only while disturbed (flagged): " + ", ".join(flagged))
    return lines
