"""The report model's rows beside the sweep's tables: links and network, sustained versus burst, thread scaling,
the host's weather.

Each row keeps its values and its cells, as ``ert.consumers.report_rows``' do; each function here builds one
table of ``ert.consumers.report_model.Report``, or None where the document has no such section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ert.consumers.cells import (MISSING, compute_name, format_count, format_rate, format_spread, format_wss_range,
                                 memory_name, unit_of)
from ert.consumers.report_rows import Column, Rated, Table

@dataclass(frozen=True)
class TransferRow:
    """A link, peer or network level (one per level and variant): its plateau, latency, sizes, rated and pairs."""

    name: str                                 # "net-inter-node ping-pong"
    gbytes_per_s: float | None
    latency_us: float | None
    rated: Rated
    notes: tuple[tuple[str, bool], ...]       # (text, is the rated value's derivation), in the order shown
    cells: dict = field(default_factory=dict)


def transfer_row(e: dict) -> TransferRow:
    rated = Rated.of(e, "gbytes_per_s")
    latency, pairs = e.get("latency_us"), e.get("pairs") or []
    cells = {"level": str(e.get("level", MISSING)), "kind": str(e.get("kind", MISSING)),
             "variant": str(e.get("variant", MISSING)),
             "gbytes": format_rate(e["gbytes_per_s"]) if "gbytes_per_s" in e else MISSING,
             "spread": format_spread(e.get("spread")),
             "latency": f"{latency:.2f}" if isinstance(latency, (int, float)) else MISSING,
             "sizes": format_wss_range(e.get("wss_bytes")), "points": format_count(e.get("n_points")),
             "of_rated": f"{rated.ratio:.0%}" if isinstance(rated.ratio, (int, float)) else MISSING,
             "pairs": ",".join(f"{a}-{b}" for a, b in pairs[:4]) + (" ..." if len(pairs) > 4 else "") or MISSING}
    # What carried the bytes, the rated value's derivation, CUDA-aware MPI, a peer matrix.
    notes = [(str(e["transport"]), False)] if e.get("transport") else []
    raw = e.get("rated") if isinstance(e.get("rated"), dict) else {}
    if raw.get("derivation"):
        notes.append((f"rated: {raw['derivation']}" if raw.get("ratio") is not None else str(raw["derivation"]), True))
    if e.get("cuda_aware"):
        notes.append(("CUDA-aware MPI (device buffers)", False))
    matrix = e.get("matrix")
    if isinstance(matrix, dict) and matrix.get("devices"):
        grid = matrix.get("gbytes_per_s") or []
        pair_cells = "; ".join(f"{matrix['devices'][i]}->{matrix['devices'][j]} {format_rate(v)}"
                               for i, row in enumerate(grid) for j, v in enumerate(row) if isinstance(v, (int, float)))
        notes.append((f"pairs GB/s: {pair_cells}", False))
    return TransferRow(f"{e.get('level')} {e.get('variant', '')}".strip(), e.get("gbytes_per_s"), latency, rated,
                       tuple(notes), cells)


def links_table(rows: list[TransferRow], *, derivations: bool = True) -> Table | None:
    """Links and network; each note once, with the levels it applies to (``derivations`` False: the rated values'
    derivations left to the rated table's footnotes)."""
    if not rows:
        return None
    grouped: dict[str, list[str]] = {}
    for row in rows:
        for note, is_derivation in row.notes:
            if derivations or not is_derivation:
                grouped.setdefault(note, []).append(row.name)
    return Table("Links and network (plateau of the largest transfers; latency at the smallest)", (
        Column("level", "level"), Column("kind", "kind"), Column("variant", "variant"),
        Column("gbytes", "GB/s", True), Column("spread", "spread", True), Column("latency", "latency us", True),
        Column("sizes", "sizes"), Column("points", "points", True), Column("of_rated", "of rated", True),
        Column("pairs", "pairs")), tuple(rows), tuple(f"{', '.join(names)}: {note}" for note, names in grouped.items()),
        "links")


@dataclass(frozen=True)
class HeldRow:
    """A ceiling held for seconds after the sweep (``sustained``): its burst value beside the held ones."""

    name: str
    unit: str
    burst: float
    sustained: float | None
    cells: dict = field(default_factory=dict)


def sustained_table(ceilings: dict) -> Table | None:
    """Burst (sweep) value beside the sustained one for every ceiling that was held."""
    rows = []
    for kind, unit, key, name in (("compute", "GFLOP/s", "gflops_per_s", compute_name),
                                  ("memory", "GB/s", "gbytes_per_s", memory_name)):
        for e in ceilings.get(kind, []):
            held = e.get("sustained")
            if not isinstance(held, dict):
                continue
            values = [held.get(key), held.get(f"first_{key}"), held.get(f"last_{key}"), held.get(f"min_region_{key}")]
            cells = dict(zip(("sustained", "first", "last", "slowest"),
                             (format_rate(v) if isinstance(v, (int, float)) else MISSING for v in values)))
            cells.update(ceiling=name(e), unit=unit_of(e) if kind == "compute" else unit, burst=format_rate(e[key]),
                         held=f"{held.get('hold_seconds', 0):.0f} s", ratio=f"{held.get('ratio_to_burst', 0):.3f}")
            rows.append(HeldRow(cells["ceiling"], cells["unit"], e[key], values[0], cells))
    if not rows:
        return None
    return Table("Sustained versus burst", (Column("ceiling", "ceiling"), Column("unit", "unit")) + tuple(
        Column(k, h, True) for k, h in (("burst", "burst"), ("sustained", "sustained"), ("first", "first 10%"),
                                        ("last", "last 10%"), ("slowest", "slowest"), ("held", "held"),
                                        ("ratio", "sustained/burst"))), tuple(rows), key="sustained")


@dataclass(frozen=True)
class ScalingRow:
    """One ceiling at each thread count of a scaling run, and the largest count's ratio to the smallest."""

    name: str
    unit: str
    values: tuple
    cells: dict = field(default_factory=dict)


def scaling_table(scaling: Any) -> Table | None:
    """One row per ceiling, one column per thread count, and the largest count's ratio to the smallest."""
    counts = scaling.get("by_threads") if isinstance(scaling, dict) else None
    counts = [c for c in counts or [] if isinstance(c, dict)]
    if not counts:
        return None
    by_name: dict[tuple, list] = {}
    for k, entry in enumerate(counts):
        ceilings = entry.get("ceilings", {})
        for e in ceilings.get("memory", []):
            by_name.setdefault((0, memory_name(e), "GB/s"), [None] * len(counts))[k] = e.get("gbytes_per_s")
        for e in ceilings.get("compute", []):
            by_name.setdefault((1, compute_name(e), unit_of(e)), [None] * len(counts))[k] = e.get("gflops_per_s")
    rows = []
    for (_, name, unit), values in by_name.items():
        cells = {"ceiling": name, "unit": unit, "ratio": (
            f"{values[-1] / values[0]:.2f}x" if isinstance(values[0], (int, float)) and values[0]
            and isinstance(values[-1], (int, float)) else MISSING)}
        cells.update({f"t{k}": format_rate(v) if isinstance(v, (int, float)) else MISSING
                      for k, v in enumerate(values)})
        rows.append(ScalingRow(name, unit, tuple(values), cells))
    first, last = counts[0].get("threads_per_rank"), counts[-1].get("threads_per_rank")
    columns = (Column("ceiling", "ceiling"), Column("unit", "unit")) + tuple(
        Column(f"t{k}", f"{c.get('threads_per_rank', MISSING)} thr", True) for k, c in enumerate(counts))
    return Table("Thread scaling (threads per rank)", columns + (Column("ratio", f"{last}/{first}", True),),
                 tuple(rows), key="scaling")


@dataclass(frozen=True)
class WeatherRow:
    """One sentinel level of the host's weather (schema 1.11 ``weather.levels``): its readings and their shares."""

    level: str
    readings: Any
    best_gbytes_per_s: Any
    lowest: Any
    cells: dict = field(default_factory=dict)


def _share(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else MISSING


def _seconds(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return MISSING
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def flagged_names(ceilings: dict) -> list[str]:
    """The ceilings measured while the host was disturbed (``disturbed: true``)."""
    return ([memory_name(e) for e in ceilings.get("memory", []) if isinstance(e, dict) and e.get("disturbed") is True]
            + [compute_name(e) for e in ceilings.get("compute", [])
               if isinstance(e, dict) and e.get("disturbed") is True])


def weather_table(doc: dict) -> Table | None:
    """The host's weather: one row per sentinel level; under it how long the host was disturbed, each stretch, and
    the ceilings measured while disturbed. None for a run without sentinels."""
    weather = doc.get("weather")
    if not isinstance(weather, dict):
        return None
    levels = weather.get("levels") if isinstance(weather.get("levels"), dict) else {}
    rows = tuple(WeatherRow(str(level), v.get("readings"), v.get("best_gbytes_per_s"), v.get("lowest"), {
        "level": str(level), "readings": format_count(v.get("readings")), "best": format_rate(v.get("best_gbytes_per_s")),
        "median": _share(v.get("median")), "lowest": _share(v.get("lowest"))})
        for level, v in levels.items() if isinstance(v, dict))
    points = weather.get("points") if isinstance(weather.get("points"), dict) else {}
    notes = [f"disturbed {_seconds(weather.get('disturbed_seconds'))} of {_seconds(weather.get('seconds'))} s; "
             f"{format_count(points.get('measured_again'))} point(s) measured again, "
             f"{format_count(points.get('suspect'))} left suspect"]
    for s in weather.get("stretches", []):
        if not isinstance(s, dict):
            continue
        ends = s.get("open") if isinstance(s.get("open"), list) and len(s["open"]) == 2 else [False, False]
        start = "the start" if ends[0] else f"{_seconds(s.get('start_s'))} s"
        end = "the end" if ends[1] else f"{_seconds(s.get('end_s'))} s"
        notes.append(f"disturbed from {start} to {end}: {', '.join(str(x) for x in s.get('levels', []))} low, "
                     f"{s.get('lowest_level', MISSING)} down to {_share(s.get('lowest'))} of its best")
    flagged = flagged_names(doc.get("ceilings", {}))
    if flagged:
        notes.append("measured while disturbed (flagged): " + ", ".join(flagged))
    threshold = weather.get("noise_threshold")
    title = "Host weather (sentinels between the points" + (
        f"; disturbed: below the level's best by more than {threshold:.0%})"
        if isinstance(threshold, (int, float)) else ")")
    return Table(title, (Column("level", "sentinel"), Column("readings", "readings", True),
                         Column("best", "best GB/s", True), Column("median", "median", True),
                         Column("lowest", "lowest", True)), rows, tuple(notes), "weather")
