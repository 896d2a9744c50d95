"""The hosts of one run side by side: `ert show`'s per-host table and `ert compare RUN --hosts`.

A run on 2+ hosts holds each host's ceilings in ``doc["hosts"]`` (schema
1.10, ``ert.analysis.hosts``); the report model's ``HostGrid`` names and pairs
them across hosts (``ert.consumers.compare.ceiling_values``, compare's labels)
and reads every value against the median of the hosts: a slow host shows as a
ratio below 1.
"""

from __future__ import annotations

from ert.consumers.report_model import HostGrid, host_grid


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
    """`ert show`'s per-host table of a document (``hosts_lines`` of its grid)."""
    return hosts_lines(host_grid(doc), width=width, verbose=verbose)


def hosts_lines(grid: HostGrid | None, *, width: int = 100, verbose: bool = False) -> list[str]:
    """Each host's value of every ceiling as a ratio to the median of the hosts (the report model's grid).

    One column per host while they fit ``width`` (always with ``verbose``);
    past that, the lowest and highest host of each ceiling, and how many hosts
    are below the threshold (``ert compare RUN --hosts`` lists them all).
    """
    if grid is None:
        return []
    low = 1.0 - grid.threshold
    n = len(grid.hosts)
    title = f"Hosts: each ceiling as a ratio to the median of {n} hosts (* more than {grid.threshold:.0%} below)"
    header = ["ceiling", "median"] + grid.hosts
    table = [[name, grid.value_cell(grid.medians[i])] + [grid.ratio_cell(grid.ratio(i, j)) for j in range(n)]
             for i, name in enumerate(grid.names)]
    lines = _lines(header, table)
    if verbose or max(len(line) for line in lines) <= width:
        return [title] + lines
    header = ["ceiling", "median", "lowest", "highest", "below"]
    table = []
    for i, name in enumerate(grid.names):
        ratios = [(r, grid.hosts[j]) for j in range(n) if (r := grid.ratio(i, j)) is not None]
        lo, hi = min(ratios, default=(None, "-")), max(ratios, default=(None, "-"))
        table.append([name, grid.value_cell(grid.medians[i]), f"{lo[1]} {grid.ratio_cell(lo[0])}",
                      f"{hi[1]} {grid.ratio_cell(hi[0])}", str(sum(1 for r, _ in ratios if r < low))])
    return [title, f"  ({n} hosts do not fit {width} columns: every host with --verbose or "
                   f"`ert compare RUN --hosts`)"] + _lines(header, table)


def format_hosts_comparison(doc: dict) -> str:
    """`ert compare RUN --hosts`: every host's values side by side, and each host's ratio to the median."""
    grid = host_grid(doc)
    if grid is None:
        return ""
    low = 1.0 - grid.threshold
    letters = [chr(65 + j) if j < 26 else str(j) for j in range(len(grid.hosts))]
    lines = [f"{letters[j]}: {h}  ({_ranks(grid.ranks[j])})" for j, h in enumerate(grid.hosts)]
    header = ["ceiling", "median"] + letters + [f"{x}/med" for x in letters]
    table = [[name, grid.value_cell(grid.medians[i])] + [grid.value_cell(v) for v in grid.values[i]]
             + [grid.ratio_cell(grid.ratio(i, j)) for j in range(len(grid.hosts))] for i, name in enumerate(grid.names)]
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
            "threshold": grid.threshold,
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
