"""The sweep behind a run's ceilings, as report charts: every measured point of raw.jsonl, each level's
window, plateau and regimes, noisy and invalid points marked.

One chart per access pattern (GB/s versus working set, FLOPs/element = 1) and
one for compute (GFLOP/s versus FLOPs per element, every other point), each
with the ceilings drawn over the points they came from.
"""

from __future__ import annotations

from ert.consumers.html import tips
from ert.consumers import roofs as roofs_mod
from ert.consumers.html.charts import NO_FMA_DASH, PRECISION_COLORS
from ert.consumers.cells import format_rate
from ert.consumers.html.svg_chart import Chart, bytes_tick
from ert.records.rawio import best_launches
from ert.spec import access_name, ops_unit, rates
from ert.units import human_bytes

WINDOW_FILLS = ("#fde0dd", "#fee8c8", "#fff7bc", "#e5f5e0", "#deebf7")  # L1.. L4, memory
INVALID_COLOR = "#e41a1c"


def _rates(rec: dict) -> tuple[float, float]:
    try:
        r = rates(rec)
        return r.gbytes_per_s, r.gflops_per_s
    except (ArithmeticError, KeyError, ValueError, TypeError):  # a point timed at 0 s: no rate to draw
        return 0.0, 0.0


def _roles(doc: dict) -> dict[str, list[str]]:
    """point id -> the ceilings it is evidence of."""
    out: dict[str, list[str]] = {}
    for e in doc["ceilings"].get("memory", []):
        for pid in tips.evidence_ids(e):
            out.setdefault(pid, []).append(tips.memory_name(e))
    for e in doc["ceilings"].get("compute", []):
        for pid in tips.evidence_ids(e):
            out.setdefault(pid, []).append(f"{tips.compute_name(e)} peak")
    return out


def _is_bandwidth_point(rec: dict) -> bool:
    spec = rec["spec"]
    return (spec.get("flops_per_element", 1) == 1 and spec.get("pipe", "vector") == "vector"
            and not spec.get("mix") and spec.get("op", "madd") == "madd" and spec.get("access", "rw") in ("rw", "ro"))


def sweep_charts(raw, doc: dict, *, chart_id: str) -> list[str]:
    """The sweep's figures: bandwidth per access pattern, then compute. ``raw``: ert.records.rawio.RawData."""
    # Every point is drawn; where a working set was measured at several launch geometries (chain counts,
    # blocks x threads) the ceilings use the fastest, and the others start hidden behind a toggle.
    # A thread-scaling run's top-level ceilings are its own thread count's: the other counts' points start
    # hidden, one toggle per count (their ceilings are in the thread-scaling table).
    points = [dict(r) for r in raw.points]  # marked below; the caller's records stay as read
    own = int(doc["metadata"].get("threads_per_rank") or 0)
    counts = sorted({int(r.get("threads_per_rank") or 0) for r in points})
    best: set[int] = set()
    for count in counts:
        best |= {id(r) for r in best_launches([r for r in points if int(r.get("threads_per_rank") or 0) == count])}
    for r in points:
        r["_slower_launch"] = id(r) not in best
        count = int(r.get("threads_per_rank") or 0)
        r["_other_threads"] = count if len(counts) > 1 and count != own else None
    roles = _roles(doc)
    figures = []
    for access in ("rw", "ro"):
        chosen = [r for r in points if _is_bandwidth_point(r) and r["spec"].get("access", "rw") == access]
        again = [r for r in raw.confirms if _is_bandwidth_point(r)
                 and r["spec"].get("access", "rw") == access and r.get("valid", True)]
        if chosen:
            figures.append(_bandwidth_chart(chosen, doc, access, roles, again=again,
                                            chart_id=f"{chart_id}-{access}"))
    others = [r for r in points if not _is_bandwidth_point(r)]
    if others or doc["ceilings"].get("compute"):
        figures.append(_compute_chart(others, doc, roles, chart_id=f"{chart_id}-compute"))
    return figures


def _marker(chart: Chart, x: float, y: float, *, color: str, noisy: bool, valid: bool, square: bool,
            small: bool = False) -> str:
    px, py = chart.px(x, y)
    if small and valid:
        return f'<circle class="pt" cx="{px}" cy="{py}" r="2.2" fill="{color}" fill-opacity="0.35"/>'
    if not valid:
        d = f"M{px - 4},{py - 4} L{px + 4},{py + 4} M{px - 4},{py + 4} L{px + 4},{py - 4}"
        return f'<path class="pt" d="{d}" stroke="{INVALID_COLOR}" stroke-width="2"/>'
    fill = "#fff" if noisy else color
    r = 4.2 if noisy else 3.4
    if square:
        return (f'<rect class="pt" x="{px - r}" y="{py - r}" width="{2 * r}" height="{2 * r}" fill="{fill}" '
                f'stroke="{color}" stroke-width="1.4"/>')
    return f'<circle class="pt" cx="{px}" cy="{py}" r="{r}" fill="{fill}" stroke="{color}" stroke-width="1.4"/>'


def _diamond(chart: Chart, x: float, y: float, *, color: str) -> str:
    px, py = chart.px(x, y)
    r = 4.6
    return (f'<path class="pt" d="M{px},{py - r} L{px + r},{py} L{px},{py + r} L{px - r},{py} Z" fill="{color}" '
            f'fill-opacity="0.55" stroke="#222" stroke-width="1"/>')


def _draw_again(chart: Chart, again: list[dict], roles, *, precision: str, color: str) -> None:
    """The measurements taken again, later, to confirm a window's roof (``confirm`` records): where a run was
    disturbed they are the fastest evidence of a roof, above every point of its first pass."""
    for r in again:
        if r["spec"]["precision"] != precision:
            continue
        gbs, gfs = _rates(r)
        if gbs <= 0:
            continue
        tip = tips.point_tip(r, gbytes_per_s=gbs, gflops_per_s=gfs, unit=ops_unit(precision),
                             roles=roles.get(r.get("point_id"), []))
        tip += f"\nre-measurement {r.get('again', '?')} of {r.get('point_id', 'a point')}"
        chart.add(chart.group(_diamond(chart, r["wss_bytes"], gbs, color=color), tags=["again", f"pt-{precision}"],
                              tip=tip, cls="again", data={"id": r["id"]}))


def _point_tags(rec: dict, series: str) -> list[str]:
    return ([series] + (["noisy"] if rec.get("noisy") else []) + ([] if rec.get("valid", True) else ["invalid"])
            + (["launches"] if rec.get("_slower_launch") else [])
            + ([f"threads-{rec['_other_threads']}"] if rec.get("_other_threads") is not None else []))


def _status_toggles(chart: Chart, recs: list[dict]) -> None:
    for count in sorted({r["_other_threads"] for r in recs if r.get("_other_threads") is not None}):
        n = sum(1 for r in recs if r.get("_other_threads") == count)
        chart.toggle(f"threads-{count}", f"points at {count} threads/rank ({n})", color="#bbb", on=False)
    slower = sum(1 for r in recs if r.get("_slower_launch"))
    if slower:
        chart.toggle("launches", f"slower launch geometries (small, {slower})", color="#aaa", on=False)
    if any(r.get("noisy") for r in recs):
        chart.toggle("noisy", f"noisy points (hollow, {sum(1 for r in recs if r.get('noisy'))})", color="#777")
    if any(not r.get("valid", True) for r in recs):
        chart.toggle("invalid", f"invalid points (red x, {sum(1 for r in recs if not r.get('valid', True))})",
                     color=INVALID_COLOR)


def _cache_sizes(doc: dict) -> list[tuple[str, int]]:
    """(label, bytes all threads can hold) per data cache: where a level's window should end."""
    from ert.hardware.hwinfo import CacheInfo, aggregate_capacity_bytes

    meta = doc["metadata"]
    threads = int(meta.get("threads_per_rank", 1) or 1) * int(meta.get("ranks", 1) or 1)
    caches = (meta.get("backend_info") or {}).get("caches") or meta.get("caches_reported") or []
    out = {}
    for c in caches:
        if not isinstance(c, dict) or c.get("kind") == "Instruction" or not c.get("size_bytes"):
            continue
        info = CacheInfo(level=int(c["level"]), kind=c.get("kind", "Unified"), size_bytes=int(c["size_bytes"]),
                         shared_cpu_count=int(c.get("shared_cpu_count", 1) or 1))
        out[info.level] = (f"L{info.level} x {threads} threads", aggregate_capacity_bytes(info, threads))
    return [out[k] for k in sorted(out)]


def _bandwidth_chart(recs: list[dict], doc: dict, access: str, roles, *, again: list[dict] = (),
                     chart_id: str) -> str:
    values = {id(r): _rates(r) for r in recs}
    entries = [e for e in doc["ceilings"].get("memory", []) if e.get("kind") is None and e.get("access") == access]
    ys = ([v[0] for v in values.values() if v[0] > 0] + [e["gbytes_per_s"] for e in entries]
          + [g for g in (_rates(r)[0] for r in again) if g > 0])
    xs = [r["wss_bytes"] for r in recs] + [w for e in entries for w in e.get("wss_bytes", []) if w]
    chart = Chart(chart_id=chart_id, x_low=min(xs) / 1.4, x_high=max(xs) * 1.4, y_low=min(ys) / 1.5,
                  y_high=max(ys) * 1.6, x_label="working set [bytes, all threads]", y_label="bandwidth [GB/s]",
                  x_base=2, x_format=bytes_tick, height=480)
    precisions = list(dict.fromkeys(r["spec"]["precision"] for r in recs))
    shaded = "fp64" if "fp64" in precisions else precisions[0]
    for p in precisions:
        chart.toggle(f"pt-{p}", f"{p} points and plateaus", color=PRECISION_COLORS.get(p, "#333"))
    chart.toggle("windows", f"level windows ({shaded})", color="#f4c9a8")
    _status_toggles(chart, recs)
    if again:
        chart.toggle("again", f"measured again to confirm a roof (diamonds, {len(again)})", color="#555")
    _draw_windows(chart, [e for e in entries if e.get("precision") == shaded])
    for label, size in _cache_sizes(doc):
        if chart.x_low < size < chart.x_high:
            chart.toggle("caches", "cache sizes (dotted)", color="#999", dash="2 3")
            px = round(chart.x.at(size), 1)
            body = (f'<line class="cache" x1="{px}" y1="{chart.y.end}" x2="{px}" y2="{chart.y.start}"/>'
                    + chart.label(size, chart.y_low * 1.15, f"{label}: {human_bytes(size)}", color="#666",
                                  dx=-4, angle=-90, size=10))
            chart.add(chart.group(body, tags=["caches"], tip=f"{label}: {human_bytes(size)} of cache in all"))
    for p in precisions:
        color = PRECISION_COLORS.get(p, "#333")
        curve = sorted((r for r in recs if r["spec"]["precision"] == p), key=lambda r: r["wss_bytes"])
        line = [(r["wss_bytes"], values[id(r)][0]) for r in curve
                if r.get("valid", True) and values[id(r)][0] and not r.get("_slower_launch")
                and r.get("_other_threads") is None]
        if len(line) > 1:
            chart.add(chart.group(f'<path class="curve" d="{chart.path(line)}" stroke="{color}"/>',
                                  tags=[f"pt-{p}"]))
        for e in entries:
            if e.get("precision") == p:
                _draw_plateau(chart, e, color, below=precisions.index(p) % 2 == 1)
        for r in curve:
            gbs, gfs = values[id(r)]
            if gbs <= 0:
                continue
            tip = tips.point_tip(r, gbytes_per_s=gbs, gflops_per_s=gfs, unit=ops_unit(p), roles=roles.get(r["id"], []))
            chart.add(chart.group(_marker(chart, r["wss_bytes"], gbs, color=color, noisy=bool(r.get("noisy")),
                                          valid=r.get("valid", True), square=False,
                                          small=bool(r.get("_slower_launch"))),
                                  tags=_point_tags(r, f"pt-{p}"), tip=tip, cls="point", data={"id": r["id"]}))
        _draw_again(chart, again, roles, precision=p, color=color)
    name = access_name(access)
    caption = (f"Every {name} point (FLOPs/element = 1): filled clean, hollow noisy, red x invalid"
               + ("; diamonds: measured again, later, to confirm a window's roof" if again else "") + ". Shaded: each "
               f"level's window ({shaded}); thick bars: the level's plateau (its roof), dashed bars: regimes "
               f"inside a cache; dotted: cache sizes x threads. Hover a point for its id, rate, spread and trials.")
    return chart.figure(title=f"Sweep: bandwidth, {name}", caption=caption, kind="sweep")


def _draw_windows(chart: Chart, entries: list[dict]) -> None:
    cache_index = 0
    for e in sorted(entries, key=lambda e: e["wss_bytes"][0]):
        low, high = e["wss_bytes"]
        if not high:
            continue
        fill = WINDOW_FILLS[min(cache_index, 3)] if roofs_mod.is_cache_level(e["level"]) else WINDOW_FILLS[4]
        cache_index += 1
        x0, x1 = round(chart.x.at(low / 1.04), 1), round(chart.x.at(high * 1.04), 1)
        body = (f'<rect class="window" x="{x0}" y="{chart.y.end}" width="{max(x1 - x0, 3)}" '
                f'height="{chart.y.start - chart.y.end}" fill="{fill}"/>'
                f'<text class="wlabel" x="{(x0 + x1) / 2}" y="{chart.y.end + 14}" text-anchor="middle">'
                f'{e["level"]}</text>')
        tip = (f"{tips.memory_name(e)} window: {tips.wss_text(e['wss_bytes'])}, {e.get('n_points', '?')} points"
               + (f"\n{e['basis']}" if e.get("basis") else ""))
        chart.add(chart.group(body, tags=["windows"], tip=tip))


def _draw_plateau(chart: Chart, e: dict, color: str, *, below: bool) -> None:
    """The level's roof over its window (a thick bar), and its regimes (dashed) when a cache holds several."""
    low, high = e.get("wss_bytes") or [0, 0]
    low, high = (low, high) if high else (chart.x_low, chart.x_high)
    body = chart.polyline([(max(low, chart.x_low), e["gbytes_per_s"]), (max(high, low * 1.05), e["gbytes_per_s"])],
                          color=color, width=5, opacity=0.55)
    body += chart.label(max(low, chart.x_low), e["gbytes_per_s"], f"{e['level']} {format_rate(e['gbytes_per_s'])}",
                        color=color, dy=16 if below else -7, size=10)
    chart.add(chart.group(body, tags=[f"pt-{e.get('precision')}"], tip=tips.memory_tip(e), cls="roof",
                          data={"roof": "memory", "level": e["level"], "precision": e.get("precision") or "",
                                "access": e.get("access") or "", "value": e["gbytes_per_s"]}))
    regimes = e.get("regimes")
    if isinstance(regimes, list) and len(regimes) > 1:
        chart.toggle("regimes", "regimes inside a cache (dashed)", color="#555", dash="4 3")
        for r in regimes:
            if not isinstance(r, dict) or not r.get("wss_bytes"):
                continue
            a, b = r["wss_bytes"]
            bar = chart.polyline([(a, r["gbytes_per_s"]), (max(b, a * 1.05), r["gbytes_per_s"])], color=color,
                                 width=2, dash="4 3")
            tip = (f"regime of {tips.memory_name(e)}: {format_rate(r['gbytes_per_s'])} GB/s at "
                   f"{tips.wss_text(r['wss_bytes'])} ({r.get('n_points', '?')} points); the roof is the fastest")
            chart.add(chart.group(bar, tags=[f"pt-{e.get('precision')}", "regimes"], tip=tip, cls="regime"))


def _compute_chart(recs: list[dict], doc: dict, roles, *, chart_id: str) -> str:
    values = {id(r): _rates(r) for r in recs}
    entries = doc["ceilings"].get("compute", [])
    ys = [v[1] for v in values.values() if v[1] > 0] + [e["gflops_per_s"] for e in entries]
    xs = [r["spec"].get("flops_per_element", 1) for r in recs] + [e.get("flops_per_element") or 1 for e in entries]
    chart = Chart(chart_id=chart_id, x_low=min(xs) / 1.5, x_high=max(xs) * 1.5, y_low=min(ys) / 1.6,
                  y_high=max(ys) * 1.8, x_label="FLOPs per element", y_label="GFLOP/s (integers: GIOP/s)",
                  x_base=2, height=440)
    _status_toggles(chart, recs)
    series = {}
    for r in recs:
        spec = r["spec"]
        key = (spec["precision"], bool(spec.get("fma")), spec.get("mix") or "", spec.get("pipe", "vector"))
        series.setdefault(key, []).append(r)
    for e in entries:
        key = (e["precision"], bool(e.get("fma")), e.get("mix") or "", e.get("pipe", "vector"))
        series.setdefault(key, [])
    for (p, fma, mix, pipe), group in series.items():
        tag = f"c-{p}-{'fma' if fma else 'nofma'}-{mix or pipe}".replace("+", "_")
        words = " ".join(x for x in (p, mix or ("tensor" if pipe == "tensor" else "FMA" if fma else "no-FMA")) if x)
        color = PRECISION_COLORS.get(p, "#333")
        chart.toggle(tag, words, color=color, dash="" if fma else NO_FMA_DASH)
        for e in entries:
            if (e["precision"], bool(e.get("fma")), e.get("mix") or "", e.get("pipe", "vector")) == (p, fma, mix, pipe):
                body = chart.polyline([(chart.x_low, e["gflops_per_s"]), (chart.x_high, e["gflops_per_s"])],
                                      color=color, width=1.6, dash="" if fma else NO_FMA_DASH, opacity=0.7)
                words = f"{tips.compute_name(e)} peak {format_rate(e['gflops_per_s'])}"
                # FMA peaks labelled at the right, no-FMA at the left: the two are often within a line's height.
                body += (chart.label(chart.x_high, e["gflops_per_s"], words, color=color, anchor="end", dx=-6, dy=-5,
                                     size=10) if fma else
                         chart.label(chart.x_low, e["gflops_per_s"], words, color=color, dx=6, dy=-5, size=10))
                chart.add(chart.group(body, tags=[tag], tip=tips.compute_tip(e), cls="roof",
                                      data={"roof": "compute", "precision": p, "value": e["gflops_per_s"]}))
        for r in group:
            gbs, gfs = values[id(r)]
            if gfs <= 0:
                continue
            unit = ops_unit(p, mix or None, pipe)
            tip = tips.point_tip(r, gbytes_per_s=gbs, gflops_per_s=gfs, unit=unit, roles=roles.get(r["id"], []))
            chart.add(chart.group(_marker(chart, r["spec"].get("flops_per_element", 1), gfs, color=color,
                                          noisy=bool(r.get("noisy")), valid=r.get("valid", True), square=not fma,
                                          small=bool(r.get("_slower_launch"))),
                                  tags=_point_tags(r, tag), tip=tip, cls="point", data={"id": r["id"]}))
    caption = ("Every compute point (each working set at each FLOPs per element; the FLOPs/element = 1 points are "
               "in the bandwidth charts): circles FMA, squares no-FMA, hollow noisy, red x invalid; lines: the peaks.")
    return chart.figure(title="Sweep: compute", caption=caption, kind="sweep")
