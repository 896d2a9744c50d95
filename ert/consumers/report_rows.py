"""The report model's rows: one typed row per memory level, compute peak and rated value, and the ``Table`` they fill.

Each row keeps its values as the file has them and its cells (``cells``: column key -> text, formatted once in
``ert.consumers.cells``); ``Table`` is a titled list of rows under named columns. ``ert.consumers.report_model``
assembles the tables of a document; the terminal report and the HTML page lay them out and build no row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ert.consumers.cells import (MISSING, compute_name, format_bytes, format_count, format_flag, format_rate,
                                 format_spread, format_wss_range, is_int_entry, unit_of)
from ert.hardware import NO_RATED


@dataclass(frozen=True)
class Column:
    """One column of a table: its cell key, its heading, and how the renderers treat it."""

    key: str
    header: str
    numeric: bool = False    # right-aligned on the screen, class=num on the page
    optional: bool = False   # left out where no row fills it (no rated value anywhere, no confirmation)
    footnote: bool = False   # its cells hold a derivation's text: each renderer shows the number of its note


@dataclass(frozen=True)
class Table:
    """A titled table: typed rows (each with ``cells``) under columns, and note lines under it (unindented).

    A table without columns is its title alone ("Compute: none measured")."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple = ()
    notes: tuple[str, ...] = ()
    key: str = ""            # which table: memory, curve, compute, tensor, integer, mix, links, rated, ...

    @property
    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def cells(self) -> list[list[str]]:
        """Every row's cells in column order (a footnote column holds the derivation's text, or "")."""
        return [[r.cells.get(c.key, MISSING) for c in self.columns] for r in self.rows]

    def shown(self) -> "Table":
        """The optional columns that some row fills (a cell other than "-" and ""); the others left out."""
        filled = [c for i, c in enumerate(self.columns)
                  if not c.optional or any(row[i] not in (MISSING, "") for row in self.cells())]
        return replace(self, columns=tuple(filled))

    def without(self, *keys: str) -> "Table":
        return replace(self, columns=tuple(c for c in self.columns if c.key not in keys))


@dataclass(frozen=True)
class Rated:
    """A ceiling's rated value (schema 1.2 ``rated``): the value, measured/rated, and how it was derived."""

    value: float | None
    ratio: float | None
    derivation: str

    @classmethod
    def of(cls, e: dict, key: str) -> "Rated":
        rated = e.get("rated") if isinstance(e.get("rated"), dict) else {}
        return cls(rated.get(key), rated.get("ratio"), str(rated.get("derivation", "")))

    def cells(self, numbered: set[str]) -> dict[str, str]:
        """rated, of rated, and from: the derivation where it has a note (``numbered``), else ""."""
        return {"rated": format_rate(self.value) if isinstance(self.value, (int, float)) else MISSING,
                "of_rated": f"{self.ratio:.0%}" if isinstance(self.ratio, (int, float)) else MISSING,
                "from": self.derivation if self.derivation in numbered else ""}


RATED_COLUMNS = (Column("rated", "rated", True, True), Column("of_rated", "of rated", True, True),
                 Column("from", "from", False, True, True))


# ----------------------------------------------------------------------------------------- memory levels
@dataclass(frozen=True)
class Confirmation:
    """How a level's roof was confirmed (schema 1.10 ``confirmed``): the rate, where, how and how often."""

    gbytes_per_s: float
    wss_bytes: Any
    by: Any           # "measured again", or by its neighbours
    times: Any

    @property
    def cell(self) -> str:
        """``2 re``: measured again twice; ``3 nb``: three neighbours agree."""
        return f"{format_count(self.times)} {'re' if self.by == 'measured again' else 'nb'}"


@dataclass(frozen=True)
class MemoryRow:
    """One memory level of one curve (precision, access): its roof and the evidence behind it."""

    level: str
    precision: str
    access: str
    gbytes_per_s: float | None
    spread: Any
    wss_bytes: Any
    n_points: Any
    noisy_points: Any
    confirmation: Confirmation | None
    rated: Rated
    confirmation_note: str | None   # the roof confirmed, how often, and the slower stretches
    regimes_note: str | None        # an unconfirmed level's regimes (rule 6)
    cells: dict = field(default_factory=dict)
    disturbed: bool = False         # measured while the host was disturbed (schema 1.11): "L3*"

    @property
    def curve(self) -> tuple[str, str]:
        return self.precision, self.access


def memory_notes(rows, *, curve: bool = False) -> tuple[str, ...]:
    """The confirmations of ``rows``' levels, then their regimes: the lines under a memory table (``curve``: each
    line led by its level's curve, "fp64 rw L2: ...", under a table of several curves)."""
    notes = ([(r, r.confirmation_note) for r in rows if r.confirmation_note]
             + [(r, r.regimes_note) for r in rows if r.regimes_note])
    flagged = (DISTURBED_NOTE,) if any(r.disturbed for r in rows) else ()
    return tuple(f"{r.cells['curve']} {note}" if curve else note for r, note in notes) + flagged


# The note under a memory table with a level measured while the host was disturbed (its level cell: "L3*").
DISTURBED_NOTE = "* measured while the host was disturbed: not the machine's ceiling (the host's weather)"


def disturbed_mark(flagged: bool) -> str:
    """The mark after a ceiling measured while the host was disturbed (``DISTURBED_NOTE``), on every table and chart."""
    return "*" if flagged else ""


def memory_row(e: dict, numbered: set[str]) -> MemoryRow:
    c = e.get("confirmed")
    confirmation = (Confirmation(c["gbytes_per_s"], c.get("wss_bytes"), c.get("by", MISSING), c.get("times"))
                    if isinstance(c, dict) and isinstance(c.get("gbytes_per_s"), (int, float)) else None)
    rated = Rated.of(e, "gbytes_per_s")
    precision, access = e.get("precision", ""), e.get("access", "rw")
    value = e["gbytes_per_s"] if "gbytes_per_s" in e else None
    disturbed = e.get("disturbed") is True
    cells = {"level": str(e.get("level", MISSING)) + disturbed_mark(disturbed),
             "curve": " ".join(x for x in (precision, access) if x),
             "gbytes": format_rate(value) if "gbytes_per_s" in e else MISSING, "spread": format_spread(e.get("spread")),
             "wss": format_wss_range(e.get("wss_bytes")), "points": format_count(e.get("n_points")),
             "noisy": format_count(e.get("noisy_points")), "conf": confirmation.cell if confirmation else MISSING,
             **rated.cells(numbered)}
    return MemoryRow(str(e.get("level", MISSING)), precision, access, value, e.get("spread"), e.get("wss_bytes"),
                     e.get("n_points"), e.get("noisy_points"), confirmation, rated,
                     confirmation_note(e, confirmation) if confirmation else None, regimes_note(e), cells, disturbed)


def confirmation_note(e: dict, c: Confirmation) -> str:
    """The roof the run confirmed, how many times, and the level's slower stretches (or its spread of rates)."""
    text = (f"{e.get('level', MISSING)}: confirmed {format_rate(c.gbytes_per_s)} GB/s at "
            f"{format_bytes(c.wss_bytes)} ({c.by}), {format_count(c.times)} time(s)")
    roof = e.get("gbytes_per_s")
    slower = [r for r in e.get("regimes") or [] if isinstance(r, dict) and isinstance(r.get("gbytes_per_s"),
              (int, float)) and isinstance(roof, (int, float)) and r["gbytes_per_s"] < 0.95 * roof]
    span = e.get("range_gbytes_per_s")
    if slower:
        text += "; slower: " + "; ".join(f"{format_rate(r['gbytes_per_s'])} GB/s at "
                                         f"{format_wss_range(r.get('wss_bytes'))} "
                                         f"({format_count(r.get('n_points'))} points)" for r in slower)
    elif isinstance(span, list) and len(span) == 2 and isinstance(roof, (int, float)) and span[0] < 0.95 * roof:
        text += f"; its points read {format_rate(span[0])} - {format_rate(span[1])} GB/s"
    if isinstance(roof, (int, float)) and roof > c.gbytes_per_s * 1.0001:
        text += f"; the roof, {format_rate(roof)} GB/s, is its fast mode"
    return text


def regimes_note(e: dict) -> str | None:
    """A cache level with several regimes inside its cache (rule 6), unconfirmed: its range and each regime."""
    if isinstance(e.get("confirmed"), dict):
        return None  # confirmation_note names its slower stretches
    regimes, span = e.get("regimes"), e.get("range_gbytes_per_s")
    if not isinstance(regimes, list) or len(regimes) < 2 or not isinstance(span, list) or len(span) != 2:
        return None
    parts = [f"{format_rate(r.get('gbytes_per_s'))} at {format_wss_range(r.get('wss_bytes'))} "
             f"({format_count(r.get('n_points'))} points)" for r in regimes if isinstance(r, dict)]
    return (f"{e.get('level', MISSING)}: {format_rate(span[0])} - {format_rate(span[1])} GB/s over its points; "
            f"regimes " + "; ".join(parts) + "; the roof is the fastest")


MEMORY_COLUMNS = (Column("level", "level"), Column("curve", "curve"), Column("gbytes", "GB/s", True),
                  Column("spread", "spread", True), Column("wss", "working set"), Column("points", "points", True),
                  Column("noisy", "noisy", True), Column("conf", "conf", optional=True)) + RATED_COLUMNS


# ----------------------------------------------------------------------------------------- compute peaks
@dataclass(frozen=True)
class ComputeRow:
    """One compute peak: ``kind`` float (a vector FP peak), tensor, integer or mix, each with its own columns."""

    kind: str
    name: str               # "fp64 FMA peak", as the rated table names it
    unit: str
    gflops_per_s: float | None
    rated: Rated
    note: str | None        # a tensor roof's note
    integer: bool           # its rate counts integer operations (GIOP/s)
    wgmma: bool             # a tensor roof of Hopper's warpgroup instruction
    cells: dict = field(default_factory=dict)
    disturbed: bool = False  # measured while the host was disturbed: its first cell marked "*"


def compute_row(e: dict, numbered: set[str]) -> ComputeRow:
    kind = ("mix" if e.get("mix") else "tensor" if e.get("pipe") == "tensor" else "integer" if is_int_entry(e)
            else "float")
    precision = e.get("precision", MISSING)
    common = {"spread": format_spread(e.get("spread")), "noisy": format_flag(e.get("noisy")),
              "wss": format_bytes(e.get("wss_bytes")), "unit": unit_of(e)}
    rated = Rated.of(e, "gflops_per_s")
    if kind == "float":
        cells = {"precision": str(precision), "fma": format_flag(e.get("fma")),
                 "rate": format_rate(e["gflops_per_s"]) if "gflops_per_s" in e else MISSING,
                 "per": format_count(e.get("flops_per_element")), **rated.cells(numbered)}
    elif kind == "tensor":
        cells = {"precision": str(precision), "input": str(e.get("input_type", MISSING)),
                 "accumulate": str(e.get("accumulate", MISSING)),
                 "shape": str(e.get("mma_shape", MISSING)) + (" wgmma" if e.get("instruction") == "wgmma" else ""),
                 "rate": format_rate(e.get("gflops_per_s")),
                 "per": format_count(e.get("flops_per_mma", e.get("flops_per_element")))}
    elif kind == "integer":
        cells = {"kernel": f"{precision} {'add' if e.get('op') == 'add' else 'multiply-add'}",
                 "rate": format_rate(e.get("gflops_per_s")), "per": format_count(e.get("flops_per_element"))}
    else:
        cells = {"mix": f"{precision} {e.get('mix')}", "ratio": str(e.get("mix_ratio", MISSING)),
                 "rate": format_rate(e.get("gflops_per_s"))}
    note = f"{precision} {e.get('mma_shape', '')}: {e['note']}" if kind == "tensor" and e.get("note") else None
    disturbed = e.get("disturbed") is True
    if disturbed:  # the first column of its table: "fp64*", as a memory level's "L3*"
        first = next(iter(cells))
        cells[first] += disturbed_mark(True)
    return ComputeRow(kind, compute_name(e), unit_of(e), e.get("gflops_per_s"), rated, note, is_int_entry(e),
                      e.get("instruction") == "wgmma", {**common, **cells}, disturbed)


def _flagged(rows) -> tuple[str, ...]:
    return (DISTURBED_NOTE,) if any(r.disturbed for r in rows) else ()


def compute_tables(rows: list[ComputeRow]) -> list[Table]:
    """The floating-point peaks (with their rated columns), then tensor, integer and mixes: a table each."""
    if not rows:
        return [Table("Compute: none measured", (), key="compute")]
    of = {kind: [r for r in rows if r.kind == kind] for kind in ("float", "tensor", "integer", "mix")}
    tables = []
    if of["float"]:
        tables.append(Table("Compute", (
            Column("precision", "precision"), Column("fma", "FMA"), Column("rate", "GFLOP/s", True),
            Column("spread", "spread", True), Column("per", "FLOPs/element", True), Column("wss", "working set"),
            Column("noisy", "noisy")) + RATED_COLUMNS, tuple(of["float"]), _flagged(of["float"]), key="compute"))
    if of["tensor"]:
        tensor = of["tensor"]
        wgmma, integer = any(r.wgmma for r in tensor), any(r.integer for r in tensor)
        title = ("Tensor-core compute (warp-level MMA" + (", warpgroup wgmma on Hopper" if wgmma else "")
                 + "; a multiply-add is 2 FLOPs" + ("; int8: 2 integer ops, GIOP/s" if integer else "") + ")")
        # int8 (s32 accumulate) rates are integer operations: one unit column says which
        columns = (Column("precision", "precision"), Column("input", "input"), Column("accumulate", "accumulate"),
                   Column("shape", "shape"), Column("rate", "rate" if integer else "GFLOP/s", True))
        columns += ((Column("unit", "unit"),) if integer else ()) + (
            Column("spread", "spread", True), Column("per", "ops/MMA" if integer else "FLOPs/MMA", True),
            Column("noisy", "noisy"))
        tables.append(Table(title, columns, tuple(tensor), tuple(r.note for r in tensor if r.note) + _flagged(tensor),
                            "tensor"))
    if of["integer"]:
        tables.append(Table("Integer compute (wrapping; a multiply and an add are 2 ops, an add 1)", (
            Column("kernel", "kernel"), Column("rate", "GIOP/s", True), Column("spread", "spread", True),
            Column("per", "ops/element", True), Column("wss", "working set"), Column("noisy", "noisy")),
            tuple(of["integer"]), _flagged(of["integer"]), key="integer"))
    if of["mix"]:
        tables.append(Table("Measured mixes (every operation of both halves counted)", (
            Column("mix", "mix"), Column("ratio", "ratio"), Column("rate", "rate", True), Column("unit", "unit"),
            Column("spread", "spread", True), Column("wss", "working set"), Column("noisy", "noisy")),
            tuple(of["mix"]), _flagged(of["mix"]), key="mix"))
    return tables


# ----------------------------------------------------------------------------------------- rated values
@dataclass(frozen=True)
class RatedRow:
    """One ceiling beside its rated value (the rated table); ``on_screen``: the screen's own tables show it."""

    name: str
    unit: str
    measured: float | None
    rated: Rated
    on_screen: bool
    cells: dict = field(default_factory=dict)


RATED_TABLE_COLUMNS = (Column("ceiling", "ceiling"), Column("measured", "measured", True),
                       Column("rated", "rated", True), Column("of_rated", "of rated", True),
                       Column("from", "from", footnote=True))


def rated_row(e: dict, key: str, unit: str, name: str, numbered: set[str]) -> RatedRow:
    rated = Rated.of(e, key)
    cells = {"ceiling": f"{name} {unit}", "measured": format_rate(e.get(key))}
    if rated.value is None:  # no value: the reason it has none is its note
        how = rated.derivation
        cells.update(rated=MISSING, of_rated=MISSING, **{"from": how if how.startswith(NO_RATED) and how in numbered
                                                         else ""})
    else:
        cells.update(rated.cells(numbered))
        cells["rated"] = format_rate(rated.value)
    if "gbytes_per_s" in e or "level" in e:  # a memory level, on the screen's memory table; a link is not
        on_screen = e.get("kind") is None
    else:  # a floating-point peak, on the screen's compute table; integer, mix and tensor peaks are not
        on_screen = not (is_int_entry(e) or e.get("mix") or e.get("pipe") == "tensor")
    return RatedRow(f"{name} {unit}", unit, e.get(key), rated, on_screen, cells)
