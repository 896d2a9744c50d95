"""A kerncraft machine file (YAML) from a CPU run: caches, clock, FLOPs per cycle, measured bandwidths.

Written from kerncraft's documented machine-file keys (its version 0.8.18 reads
it), never copied from one of its files. ert's read-only kernel is kerncraft's
``load`` and its read+write kernel kerncraft's ``update``: the measurements of
each cache level and of memory (ert's DRAM is kerncraft's MEM) are the fp64
ceilings of each, per thread count of the run (``--threads 1,...,N`` gives the
series; one count is written as that one count, so ``kerncraft -c`` must name it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ert.consumers import roofs as roofs_mod
from ert.consumers.export.export_tools import clock_ghz, is_cpu_run, rated_info, run_cores
from ert.errors import ErtError
from ert.spec import access_name

# ert's microarchitecture names -> OSACA's (kerncraft's in-core model); others: INFORMATION_REQUIRED.
_OSACA = {"zen 2": "ZEN2", "zen 3": "ZEN3", "zen 4": "ZEN4", "zen2": "ZEN2", "zen3": "ZEN3", "zen4": "ZEN4",
          "skylake-x": "SKX", "skylake server": "SKX", "cascade lake": "CSX", "ice lake server": "ICX",
          "sapphire rapids": "SPR", "neoverse n1": "N1", "neoverse v2": "V2", "a64fx": "A64FX"}


def _unit(value: float, unit: str) -> str:
    """kerncraft's prefixed-unit scalar: digits, one space, unit (no exponent: its parser takes none)."""
    return f"{value:.2f} {unit}"


def _yaml_str(text: str) -> str:
    return json.dumps(str(text))


@dataclass
class _Machine:
    """What the file is written from, checked: every level has a ceiling at every core count."""

    doc: dict
    clock: float
    cores: int
    caches: list[dict]
    series: dict[str, list[tuple[int, dict]]]  # access -> [(cores, {level: roof})]
    flops: dict[str, dict[str, float]]  # "DP"/"SP" -> {"FMA": ..., "noFMA": ...} per cycle per core
    notes: list[str]

    @property
    def levels(self) -> list[str]:
        return [c["level"] for c in self.caches] + ["MEM"]

    @property
    def counts(self) -> list[int]:
        return [n for n, _ in self.series["rw"]]


def _find(by_level: dict, name: str):
    """The roof of level ``name`` ("MEM": the one memory level) among one core count's roofs, or None."""
    if name == "MEM":
        return next((r for lv, r in by_level.items() if not roofs_mod.is_cache_level(lv)), None)
    return by_level.get(name)


def _kerncraft_caches(doc: dict, cores: int) -> tuple[list[dict], list[str]]:
    notes = []
    caches = [c for c in doc.get("metadata", {}).get("caches_reported", [])
              if c.get("kind", "Unified") in ("Data", "Unified")]
    by_level: dict[int, dict] = {}
    for c in caches:
        by_level.setdefault(int(c["level"]), c)
    out = []
    for level in sorted(by_level):
        c = by_level[level]
        line = int(c.get("line_bytes") or 64)
        ways = c.get("ways")
        sets = c.get("sets")
        if not ways or not sets:
            ways = ways or 8
            sets = max(1, int(c["size_bytes"]) // (line * ways))
            notes.append(f"L{level}: the ceilings file has no cache geometry (ert before schema 1.8); "
                         f"{ways} ways and {line}-byte lines assumed")
        shared = max(1, min(int(c.get("shared_cpu_count") or 1), cores))
        out.append({"level": f"L{level}", "size": int(c["size_bytes"]), "sets": int(sets), "ways": int(ways),
                    "line": line, "shared": shared})
    return out, notes


def _series(doc: dict, access: str) -> list[tuple[int, dict]]:
    """(cores, {level: roof}) per thread count: the run's scaling series, else its one count."""
    ranks = int(doc.get("metadata", {}).get("ranks") or 1)
    out = []
    scaling = doc.get("scaling")
    counts = scaling.get("by_threads") if isinstance(scaling, dict) else None
    entries = [(int(e["threads_per_rank"]) * int(e.get("ranks", ranks)), {"ceilings": e["ceilings"]})
               for e in counts or []] or [(run_cores(doc), doc)]
    for cores, part in entries:
        mem, _ = roofs_mod.memory_roofs({"ceilings": part["ceilings"]}, precision="fp64", access=access)
        out.append((cores, {r.level: r for r in mem}))
    return out


def _flops_per_cycle(doc: dict, *, clock: float, cores: int, notes: list[str]) -> dict[str, dict[str, float]]:
    """FLOPs per cycle per core from the rated table, else the measured FMA peak over clock x cores (noted)."""
    flops: dict[str, dict[str, float]] = {}
    for entry in rated_info(doc).get("compute", []):
        prec = {"fp64": "DP", "fp32": "SP"}.get(entry.get("precision"))
        fpc = entry.get("flops_per_cycle_per_core")
        if prec and fpc and entry.get("unit", "GFLOP/s") == "GFLOP/s" \
                and not entry.get("op") and not entry.get("mix"):
            flops.setdefault(prec, {})["FMA" if entry.get("fma") else "noFMA"] = float(fpc)
    for prec, name in (("DP", "fp64"), ("SP", "fp32")):
        if "FMA" not in flops.get(prec, {}):
            roof = roofs_mod.fma_roof(doc, name)
            if roof is None:
                raise ErtError(f"has no {name} compute ceiling for kerncraft's FLOPs per cycle", key="ceilings.compute")
            flops.setdefault(prec, {})["FMA"] = roof.gflops_per_s / (clock * cores)
            notes.append(f"{prec} FLOPs per cycle: ert's measured {name} peak over clock x cores "
                         "(no rated table entry)")
    return flops


def _machine(doc: dict) -> _Machine:
    """The checked inputs, or an ErtError naming what kerncraft needs and the run lacks."""
    meta = doc.get("metadata", {})
    if not is_cpu_run(doc):
        raise ErtError(f"kerncraft models CPUs; this is a {meta.get('backend', '?')} run of "
                       f"{meta.get('device') or '?'}", key="--format")
    clock = clock_ghz(doc)
    if not clock:
        raise ErtError("has no clock (metadata.backend_info.rated.clock_ghz): kerncraft needs one", key="--format")
    cores = run_cores(doc)
    caches, notes = _kerncraft_caches(doc, cores)
    if not caches:
        raise ErtError("has no caches in metadata.caches_reported: kerncraft's cache simulator needs them",
                       key="metadata.caches_reported")
    series = {acc: _series(doc, acc) for acc in ("ro", "rw")}
    levels = [c["level"] for c in caches] + ["MEM"]
    for acc in ("ro", "rw"):
        for n, by_level in series[acc]:
            missing = [lv for lv in levels if _find(by_level, lv) is None]
            if missing:
                raise ErtError(f"the {access_name(acc)} fp64 ceilings at {n} core(s) have no "
                               f"{', '.join(missing)} level: kerncraft needs every cache level and memory",
                               key="ceilings.memory")
    flops = _flops_per_cycle(doc, clock=clock, cores=cores, notes=notes)
    return _Machine(doc=doc, clock=clock, cores=cores, caches=caches, series=series, flops=flops, notes=notes)


def _head_lines(m: _Machine) -> list[str]:
    """Comments, the machine's identity, clock, FLOPs per cycle, ISA and compilers."""
    meta = m.doc.get("metadata", {})
    uarch = str(rated_info(m.doc).get("microarchitecture") or "")
    platform = str(meta.get("platform", ""))
    isa = "aarch64" if "aarch64" in platform or "arm" in platform else "x86"
    lines = [
        f"# kerncraft machine file written by ert {meta.get('tool_version', '?')} from {roofs_mod.machine_label(m.doc)}.",
        "# Measured by ert: the load (ert read-only) and update (ert read+write) bandwidths per level and core count.",
        "# From ert's rated table: clock and FLOPs per cycle. From sysfs: cache sizes, sets and ways.",
        "# Use: kerncraft -p RooflineFLOP -m THIS_FILE kernel.c -D N 1000000 -c CORES  (CORES one of: "
        + ", ".join(str(n) for n in m.counts) + ")",
        *(f"# note: {note}" for note in m.notes),
        "kerncraft version: 0.8.18",
        f"model type: {_yaml_str(uarch or meta.get('cpu_model') or 'unknown')}",
        f"model name: {_yaml_str(meta.get('cpu_model') or meta.get('device') or 'unknown')}",
        "sockets: 1",
        f"cores per socket: {m.cores}",
        "threads per core: 1",
        "NUMA domains per socket: 1",
        f"cores per NUMA domain: {m.cores}",
        "transparent hugepage: null",
        f"clock: {_unit(m.clock, 'GHz')}",
        "FLOPs per cycle:",
    ]
    for prec in ("SP", "DP"):
        total = m.flops[prec]["FMA"]
        other = m.flops[prec].get("noFMA", total / 2)
        lines.append(f"  {prec}: {{total: {total:g}, FMA: {total / 2:g}, ADD: {other / 2:g}, MUL: {other / 2:g}}}")
    lines += [f"isa: {isa}", "in-core model: !!omap", f"  - OSACA: {_OSACA.get(uarch.lower(), 'INFORMATION_REQUIRED')}",
              "compiler: !!omap",
              "  - gcc: -O3 -march=native -D_POSIX_C_SOURCE=200112L -fopenmp -lm",
              "  - clang: -O3 -march=native -D_POSIX_C_SOURCE=200112L -fopenmp -lm",
              f"cacheline size: {_unit(m.caches[0]['line'], 'B')}"]
    for model in ("overlapping model", "non-overlapping model"):
        lines += [f"{model}:", "  ports:",
                  "    OSACA: INFORMATION_REQUIRED (only kerncraft's ECM models use ports; ert does not measure them)",
                  "  performance counter metric: INFORMATION_REQUIRED"]
    return lines


def _hierarchy_lines(m: _Machine) -> list[str]:
    """The memory hierarchy: each cache (geometry, sharing, the measured throughput from the level above) and MEM."""
    rw_top = dict(m.series["rw"][-1][1])
    lines = ["memory hierarchy:"]
    for i, c in enumerate(m.caches):
        nxt = m.caches[i + 1]["level"] if i + 1 < len(m.caches) else None
        lines += [f"  - level: {c['level']}", "    performance counter metrics:",
                  "      loads: INFORMATION_REQUIRED", "      stores: INFORMATION_REQUIRED",
                  "      misses: INFORMATION_REQUIRED", "      evicts: INFORMATION_REQUIRED",
                  "    cache per group:", f"      sets: {c['sets']}", f"      ways: {c['ways']}",
                  f"      cl_size: {c['line']}", "      replacement_policy: LRU", "      write_allocate: true",
                  "      write_back: true", f"      load_from: {nxt or 'null'}", f"      store_to: {nxt or 'null'}",
                  f"    cores per group: {c['shared']}", f"    threads per group: {c['shared']}",
                  f"    groups: {max(1, m.cores // c['shared'])}", f"    size per group: {_unit(c['size'], 'B')}"]
        if i == 0:
            lines.append("    upstream throughput: [architecture code analyzer, [\"2D\", \"3D\"]]")
        else:
            roof = rw_top.get(c["level"])
            per_core = roof.gbytes_per_s / (m.clock * m.cores) if roof else 0.0
            lines.append(f"    upstream throughput: [{_unit(per_core, 'B/cy')}, half-duplex]")
        lines.append("    transfers overlap: false")
    lines += ["  - level: MEM", f"    cores per group: {m.cores}", f"    threads per group: {m.cores}",
              "    upstream throughput: [full socket memory bandwidth, half-duplex]",
              "    penalty cycles per read stream: 0", "    transfers overlap: false", "    size per group: null"]
    return lines


def _benchmark_lines(m: _Machine) -> list[str]:
    """kerncraft's load and update kernels and ert's measurements of each level at every core count."""
    lines = ["benchmarks:", "  kernels:",
             "    load:", "      FLOPs per iteration: 0", "      read streams: {bytes: 8.00 B, streams: 1}",
             "      read+write streams: {bytes: 0.00 B, streams: 0}", "      write streams: {bytes: 0.00 B, streams: 0}",
             "    update:", "      FLOPs per iteration: 0", "      read streams: {bytes: 8.00 B, streams: 1}",
             "      read+write streams: {bytes: 8.00 B, streams: 1}", "      write streams: {bytes: 8.00 B, streams: 1}",
             "  measurements:"]
    counts = m.counts
    for lv in m.levels:
        # The level's size: the geometric middle of its working-set range at each count.
        sizes = []
        for _, by_level in m.series["rw"]:
            low, high = _find(by_level, lv).wss_bytes
            sizes.append(math.sqrt(max(low, 1) * max(high, 1)))
        lines += [f"    {lv}:", "      1:", f"        cores: [{', '.join(str(n) for n in counts)}]",
                  f"        threads: [{', '.join(str(n) for n in counts)}]", "        threads per core: 1",
                  f"        total size: [{', '.join(_unit(s, 'B') for s in sizes)}]",
                  f"        size per core: [{', '.join(_unit(s / n, 'B') for s, n in zip(sizes, counts))}]",
                  f"        size per thread: [{', '.join(_unit(s / n, 'B') for s, n in zip(sizes, counts))}]",
                  "        results:"]
        for kernel, acc in (("load", "ro"), ("update", "rw")):
            vals = [_find(by_level, lv).gbytes_per_s for _, by_level in m.series[acc]]
            lines.append(f"          {kernel}: [{', '.join(_unit(v, 'GB/s') for v in vals)}]")
    return lines


def to_kerncraft(doc: dict) -> str:
    """The machine file of a CPU run's ceilings; an ErtError where kerncraft needs what the run lacks."""
    m = _machine(doc)
    return "\n".join(_head_lines(m) + _hierarchy_lines(m) + _benchmark_lines(m)) + "\n"
