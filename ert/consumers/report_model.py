"""The report model: a ceilings document as the typed rows and tables that `ert show` and `ert report` both render.

``Report(doc)`` builds every row once (``ert.consumers.report_rows``, ``ert.consumers.report_sections``): the
header, the memory levels with their confirmations and rated shares, the compute peaks, links, held values,
thread counts, the hosts and the warnings by group. Its tables carry their titles, columns and cells; ``ert
show`` lays them out as aligned columns and ``ert report`` as HTML tables, and each numbers the rated values'
derivations (``derivations``) its own way, so the two cannot show different values. A new section is one row
type and its table (``report_sections``), one attribute of ``Report``, and one renderer in each product.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from ert.consumers.cells import MISSING, compute_name, format_rate, is_transfer_entry, memory_name, unit_of
from ert.consumers.compare.ceiling_values import ceiling_values
from ert.consumers.report_rows import (MEMORY_COLUMNS, RATED_TABLE_COLUMNS, Column, Table, compute_row,
                                       compute_tables, memory_notes, memory_row, rated_row)
from ert.consumers.report_sections import links_table, scaling_table, sustained_table, transfer_row, weather_table
from ert.hardware import NO_RATED
from ert.records.warning_codes import GROUPS, Coded, coded_warnings
from ert.spec import ACCESS_NAMES, SLOW_HOST_THRESHOLD, access_name


@dataclass(frozen=True)
class Header:
    """Who measured what: host(s), CPU/device, backend, ranks and threads, date, tool, points, wall time, clock."""

    host: Any
    hosts: tuple[str, ...]          # every host of the run, each once
    machine: str                    # "CPU / device", or the one of them there is
    backend: Any
    ranks: Any
    threads: Any
    date: str
    tool: str                       # "ert 0.1.0"
    points: dict                    # planned, measured, noisy, invalid
    wall_seconds: float | None
    clock: str                      # the clock the run measured, else the one it recorded, else "-"
    config_sha: str | None
    ranks_per_host: dict
    schema_version: Any

    @classmethod
    def of(cls, meta: dict, doc: dict | None = None) -> "Header":
        cpu, device = meta.get("cpu_model") or "", meta.get("device") or ""
        # The CPU backends describe the device as the CPU plus a thread count: the model name once.
        machine = f"{cpu} / {device}" if device and cpu and cpu not in device else (device or cpu or MISSING)
        wall = meta.get("wall_seconds")
        config_sha = meta.get("config_sha256") or meta.get("config_hash")
        per_host = meta.get("ranks_per_host")
        return cls(meta.get("host", MISSING), tuple(dict.fromkeys(meta.get("hosts") or [])), machine,
                   meta.get("backend", MISSING), meta.get("ranks", MISSING), meta.get("threads_per_rank", MISSING),
                   str(meta.get("date", MISSING)), f"{meta.get('tool', 'ert')} {meta.get('tool_version', '')}".strip(),
                   meta.get("points") if isinstance(meta.get("points"), dict) else {},
                   wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None,
                   clock_text(meta), str(config_sha) if config_sha else None,
                   per_host if isinstance(per_host, dict) else {}, (doc or {}).get("schema_version", MISSING))


def clock_text(meta: dict) -> str:
    """The clock the run measured (CPU: a dependent FMA chain), else the one it recorded, else '-'."""
    info = meta.get("backend_info") or {}
    rated = info.get("rated") if isinstance(info.get("rated"), dict) else {}
    clock = rated.get("clock") if isinstance(rated.get("clock"), dict) else {}
    if isinstance(clock.get("vector_ghz"), (int, float)):
        return f"{clock['vector_ghz']:.2f} GHz (measured: dependent FMA chain)"
    if isinstance(rated.get("clock_ghz"), (int, float)):
        return f"{rated['clock_ghz']:.2f} GHz ({rated.get('clock_source') or 'recorded'})"
    for key, word in (("sm_clock_mhz", "SM clock"), ("max_clock_mhz", "max clock")):
        value = info.get(key)
        if isinstance(value, dict) and isinstance(value.get("max"), (int, float)):
            return f"{value['max']:.0f} MHz ({word}, measured)"
        if isinstance(value, (int, float)):
            return f"{value:.0f} MHz ({word})"
    return MISSING


def derivations(doc: dict) -> list[str]:
    """Every rated value's derivation once, in the ceilings' order (compute, then memory), then the reasons some
    ceilings have none ("no rated value: ..."): the notes both reports number."""
    ceilings = doc.get("ceilings", {})
    found, reasons = [], []
    for e in ceilings.get("compute", []) + ceilings.get("memory", []):
        r = e.get("rated") if isinstance(e, dict) and isinstance(e.get("rated"), dict) else {}
        how = str(r.get("derivation") or "")
        if how:
            (reasons if r.get("gflops_per_s", r.get("gbytes_per_s")) is None else found).append(how)
    return list(dict.fromkeys(found + [r for r in reasons if r.startswith(NO_RATED)]))


@dataclass(frozen=True)
class WarningGroup:
    """The warnings of one group (act on it, the kernel or the machine, bookkeeping), each with its code."""

    group: str
    heading: str
    warnings: tuple[Coded, ...]


@dataclass
class HostGrid:
    """Every ceiling (row) of every host (column), with the median of the hosts per ceiling (schema 1.10 ``hosts``)."""

    hosts: list[str]
    ranks: list[list[int]]
    names: list[str]                     # "L1 fp64 read+write GB/s", ...
    values: list[list[float | None]]     # [ceiling][host]
    medians: list[float | None]
    threshold: float = SLOW_HOST_THRESHOLD  # slow_host_threshold: a ratio below 1 - threshold is marked

    def ratio(self, i: int, j: int) -> float | None:
        v, m = self.values[i][j], self.medians[i]
        return None if v is None or not m else v / m

    @staticmethod
    def value_cell(value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.4g}" if value < 1000 else f"{value:.0f}"

    def ratio_cell(self, r: float | None) -> str:
        """A ratio to the median, marked "*" below 1 - threshold."""
        if r is None:
            return "-"
        return f"{r:.2f}" + ("*" if r < 1.0 - self.threshold else "")


def host_threshold(doc: dict) -> float:
    """The run's slow_host_threshold, the default where its file records none."""
    config = (doc.get("metadata") or {}).get("config") or {}
    value = config.get("slow_host_threshold", SLOW_HOST_THRESHOLD)
    return float(value) if isinstance(value, (int, float)) else SLOW_HOST_THRESHOLD


def host_grid(doc: dict) -> HostGrid | None:
    """The grid of a document's ``hosts`` section; None when it has none (a run on one host, or before 1.10)."""
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, dict) and isinstance(h.get("ceilings"), dict)]
    if not hosts:
        return None
    per_host = [ceiling_values(h["ceilings"]) for h in hosts]
    names: list[str] = []
    for values in per_host:
        names += [n for n in values if n not in names]
    grid = [[values.get(n) for values in per_host] for n in names]
    medians = [statistics.median(present) if (present := [v for v in row if v is not None]) else None
               for row in grid]
    return HostGrid([str(h.get("host", "?")) for h in hosts], [list(h.get("ranks") or []) for h in hosts],
                    names, grid, medians, host_threshold(doc))


class Report:
    """Every row of a ceilings document's report, built once; the tables of each section from them."""

    def __init__(self, doc: dict):
        self.doc = doc
        ceilings = doc.get("ceilings", {})
        self.header = Header.of(doc.get("metadata", {}), doc)
        self.derivations = derivations(doc)
        numbered = set(self.derivations)
        memory = ceilings.get("memory", [])
        self.memory = [memory_row(e, numbered) for e in _screen_order([e for e in memory
                                                                        if not is_transfer_entry(e)])]
        self.transfers = [transfer_row(e) for e in memory if is_transfer_entry(e)]
        self.compute = [compute_row(e, numbered) for e in ceilings.get("compute", [])]
        entries = [(e, "gflops_per_s", unit_of(e), compute_name(e)) for e in ceilings.get("compute", [])]
        entries += [(e, "gbytes_per_s", "GB/s", memory_name(e)) for e in memory]
        # Files from before 1.2 carry rated peaks only in metadata.backend_info.rated (legacy_rated_table).
        self.rated_legacy = not any(isinstance(e.get("rated"), dict) for e, *_ in entries)
        self.rated = [] if self.rated_legacy else [rated_row(e, key, unit, name, numbered)
                                                    for e, key, unit, name in entries]
        self.sustained = sustained_table(ceilings)
        self.scaling = scaling_table(doc.get("scaling"))
        self.weather = weather_table(doc)  # the host's weather (schema 1.11), None without sentinels
        self.hosts = host_grid(doc)
        coded = coded_warnings(doc)
        self.warning_count = len(coded)
        self.warnings = [WarningGroup(g, heading, tuple(w for w in coded if w.group == g))
                         for g, heading in GROUPS.items() if any(w.group == g for w in coded)]

    def memory_table(self) -> Table:
        """Every curve's levels in one table, each beside its confirmation and rated value; columns no level
        fills (no rated value for any level, no ``confirmed`` in a file before 1.10) are left out."""
        if not self.memory:
            return Table("Memory bandwidth: none measured", (), key="memory")
        table = Table("", MEMORY_COLUMNS, tuple(self.memory), memory_notes(self.memory, curve=True),
                      "memory").shown()
        title = "Memory bandwidth (" + ", ".join(f"{code} {name}" for code, name in ACCESS_NAMES.items())
        title += "; conf: N times confirmed, re again or nb neighbours)" if "conf" in table.headers else ")"
        return replace(table, title=title)

    def curve_tables(self) -> list[Table]:
        """One table per curve (read+write first, then read-only), its levels from L1 outwards, with the
        confirmations, slower stretches and regimes of its levels under it."""
        if not self.memory:
            return [Table("Memory bandwidth: none measured", (), key="curve")]
        tables = []
        for curve in dict.fromkeys(r.curve for r in self.memory):
            rows = tuple(r for r in self.memory if r.curve == curve)
            precision, access = curve
            title = f"Memory bandwidth, {access_name(access)}" + (f", {precision}" if precision else "")
            tables.append(Table(title, tuple(c for c in MEMORY_COLUMNS if c.key not in (
                "curve", "conf", "rated", "of_rated", "from")), rows, memory_notes(rows), "curve"))
        return tables

    def compute_tables(self, *, rated: bool = True) -> list[Table]:
        """The floating-point peaks (with their rated columns where filled, unless not ``rated``), tensor,
        integer and mixes."""
        tables = compute_tables(self.compute)
        if tables[0].key == "compute":
            tables[0] = tables[0].shown() if rated else tables[0].without("rated", "of_rated", "from")
        return tables

    def links_table(self, *, derivations: bool = True) -> Table | None:
        return links_table(self.transfers, derivations=derivations)

    def rated_table(self, *, screen: bool = False) -> Table:
        """Every ceiling beside its rated value; ``screen``: only those the screen's own tables do not show."""
        rows = tuple(r for r in self.rated if not (screen and r.on_screen))
        return Table("Measured against rated (what the hardware can physically do)", RATED_TABLE_COLUMNS, rows,
                     key="rated")

    def legacy_rated_table(self) -> Table | None:
        """Rated peaks of a pre-1.2 file (metadata.backend_info.rated) beside the measured ceilings."""
        rated = (self.doc.get("metadata", {}).get("backend_info") or {}).get("rated")
        if not self.rated_legacy or not isinstance(rated, dict):
            return None
        rows = _legacy_rows(self.doc.get("ceilings", {}), rated)
        if not rows:
            return None
        return Table("Measured against rated peaks (derived from the device's properties)", RATED_TABLE_COLUMNS[:4]
                     + (Column("how", "rated from"),), tuple(rows), key="rated-legacy")


@dataclass(frozen=True)
class LegacyRow:
    """A pre-1.2 rated peak matched to its measured ceiling (the derivation is a cell, not a note)."""

    cells: dict


def _legacy_rows(ceilings: dict, rated: dict) -> list[LegacyRow]:
    rows = []
    for r in rated.get("compute", []):
        measured = [c["gflops_per_s"] for c in ceilings.get("compute", [])
                    if c.get("precision") == r.get("precision") and c.get("fma") == r.get("fma")]
        if measured and r.get("gflops_per_s"):
            name = f"{r['precision']} {'FMA' if r['fma'] else 'no-FMA'} GFLOP/s"
            rows.append(LegacyRow({"ceiling": name, "measured": format_rate(measured[0]),
                                   "rated": format_rate(r["gflops_per_s"]),
                                   "of_rated": f"{measured[0] / r['gflops_per_s']:.0%}",
                                   "how": str(r.get("derivation", ""))}))
    for r in rated.get("memory", []):
        levels = [m for m in ceilings.get("memory", []) if m.get("level") == r.get("level")]
        if levels and r.get("gbytes_per_s"):
            best = max(levels, key=lambda m: m["gbytes_per_s"])
            name = f"{r['level']} GB/s ({best.get('access', '')} {best.get('precision', '')})"
            rows.append(LegacyRow({"ceiling": name, "measured": format_rate(best["gbytes_per_s"]),
                                   "rated": format_rate(r["gbytes_per_s"]),
                                   "of_rated": f"{best['gbytes_per_s'] / r['gbytes_per_s']:.0%}",
                                   "how": str(r.get("derivation", ""))}))
    return rows


def _screen_order(entries: list[dict]) -> list[dict]:
    """Read+write curves first (the ERT kernel, the usual roofline), then read-only; a curve's levels together,
    in the document's order (from L1 outwards)."""
    order = {"rw": 0, "ro": 1}
    ranked = sorted(entries, key=lambda e: order.get(e.get("access", "rw"), 2))
    curves = list(dict.fromkeys((e.get("precision", ""), e.get("access", "rw")) for e in ranked))
    return [e for curve in curves for e in ranked if (e.get("precision", ""), e.get("access", "rw")) == curve]
