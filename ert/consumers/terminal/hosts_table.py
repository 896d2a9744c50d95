"""The hosts of one run side by side: `ert show`'s per-host table and `ert compare RUN --hosts`.

A run on 2+ hosts holds each host's ceilings in ``doc["hosts"]`` (schema
1.10, ``ert.analysis.hosts``).  Ceilings are named and paired across hosts by
``ert.consumers.compare.ceiling_values`` (compare's labels), and every value is read
against the median of the hosts: a slow host shows as a ratio below 1.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ert.consumers.compare.ceiling_values import ceiling_values
from ert.spec import SLOW_HOST_THRESHOLD



@dataclass
class HostGrid:
    """Every ceiling (row) of every host (column), with the median of the hosts per ceiling."""

    hosts: list[str]
    ranks: list[list[int]]
    names: list[str]                     # "L1 fp64 read+write GB/s", ...
    values: list[list[float | None]]     # [ceiling][host]
    medians: list[float | None]

    def ratio(self, i: int, j: int) -> float | None:
        v, m = self.values[i][j], self.medians[i]
        return None if v is None or not m else v / m


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
                    names, grid, medians)


def threshold(doc: dict) -> float:
    """The run's slow_host_threshold, the default where its file records none (`ert show` and `ert report`)."""
    config = (doc.get("metadata") or {}).get("config") or {}
    value = config.get("slow_host_threshold", SLOW_HOST_THRESHOLD)
    return float(value) if isinstance(value, (int, float)) else SLOW_HOST_THRESHOLD


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if value < 1000 else f"{value:.0f}"


def _ratio(r: float | None, low: float) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}" + ("*" if r < low else "")


def _lines(header: list[str], table: list[list[str]]) -> list[str]:
    widths = [max(len(c) for c in col) for col in zip(header, *table)]
    return ["  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths)))
            for cells in [header] + table]


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return "ranks ?"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "rank " + ",".join(map(str, ranks)) if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def format_hosts_section(doc: dict, *, width: int = 100, verbose: bool = False) -> list[str]:
    """`ert show`'s per-host table: each host's value of every ceiling as a ratio to the median of the hosts.

    One column per host while they fit ``width`` (always with ``verbose``);
    past that, the lowest and highest host of each ceiling, and how many hosts
    are below the threshold (``ert compare RUN --hosts`` lists them all).
    """
    grid = host_grid(doc)
    if grid is None:
        return []
    low = 1.0 - threshold(doc)
    n = len(grid.hosts)
    title = f"Hosts: each ceiling as a ratio to the median of {n} hosts (* more than {threshold(doc):.0%} below)"
    header = ["ceiling", "median"] + grid.hosts
    table = [[name, _fmt(grid.medians[i])] + [_ratio(grid.ratio(i, j), low) for j in range(n)]
             for i, name in enumerate(grid.names)]
    lines = _lines(header, table)
    if verbose or max(len(line) for line in lines) <= width:
        return [title] + lines
    header = ["ceiling", "median", "lowest", "highest", "below"]
    table = []
    for i, name in enumerate(grid.names):
        ratios = [(r, grid.hosts[j]) for j in range(n) if (r := grid.ratio(i, j)) is not None]
        lo, hi = min(ratios, default=(None, "-")), max(ratios, default=(None, "-"))
        table.append([name, _fmt(grid.medians[i]), f"{lo[1]} {_ratio(lo[0], low)}", f"{hi[1]} {_ratio(hi[0], low)}",
                      str(sum(1 for r, _ in ratios if r < low))])
    return [title, f"  ({n} hosts do not fit {width} columns: every host with --verbose or "
                   f"`ert compare RUN --hosts`)"] + _lines(header, table)


def format_hosts_comparison(doc: dict) -> str:
    """`ert compare RUN --hosts`: every host's values side by side, and each host's ratio to the median."""
    grid = host_grid(doc)
    if grid is None:
        return ""
    low = 1.0 - threshold(doc)
    letters = [chr(65 + j) if j < 26 else str(j) for j in range(len(grid.hosts))]
    lines = [f"{letters[j]}: {h}  ({_ranks(grid.ranks[j])})" for j, h in enumerate(grid.hosts)]
    header = ["ceiling", "median"] + letters + [f"{x}/med" for x in letters]
    table = [[name, _fmt(grid.medians[i])] + [_fmt(v) for v in grid.values[i]]
             + [_ratio(grid.ratio(i, j), low) for j in range(len(grid.hosts))] for i, name in enumerate(grid.names)]
    lines += [""] + _lines(header, table)
    slow = [(grid.hosts[j], grid.names[i], r) for j in range(len(grid.hosts)) for i in range(len(grid.names))
            if (r := grid.ratio(i, j)) is not None and r < low]
    if slow:
        lines += ["", f"* more than {1 - low:.0%} below the median of the hosts (slow_host_threshold):"]
        lines += [f"  - {host}: {name} {r:.2f}" for host, name, r in slow]
        named = [str(h.get("host")) for h in doc.get("hosts") or [] if isinstance(h, dict) and h.get("slow")]
        lines.append(f"  named slow, beyond the scatter of the values (the slow-host warning): {', '.join(named)}"
                     if named else "  none beyond the scatter of the values (their spread): no host named slow")
    return "\n".join(lines)


def hosts_json(doc: dict) -> dict:
    """`ert compare RUN --hosts --json`: the same, machine-readable."""
    grid = host_grid(doc)
    if grid is None:
        return {"hosts": [], "ceilings": []}
    return {"hosts": [{"host": h, "ranks": r} for h, r in zip(grid.hosts, grid.ranks)],
            "threshold": threshold(doc),
            "ceilings": [{"ceiling": name, "median": grid.medians[i], "values": grid.values[i],
                          "ratios_to_median": [grid.ratio(i, j) for j in range(len(grid.hosts))]}
                         for i, name in enumerate(grid.names)]}


def host_docs(doc: dict) -> tuple[list[dict], list[str]]:
    """One ceilings document per host (its ``ceilings``; the run's metadata), for compare's chart."""
    docs, labels = [], []
    for h in doc.get("hosts") or []:
        docs.append({"metadata": doc.get("metadata", {}), "ceilings": h["ceilings"], "warnings": []})
        labels.append(str(h.get("host", "?")))
    return docs, labels
