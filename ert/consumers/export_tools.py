"""Ceilings for the roofline tools users already have: Nsight Compute, rocprof-compute, kerncraft and CARM.

Each format is written from that tool's documented input (its section schema,
its reader's columns, its machine-file keys, its JSONL records), never copied
from the tool. Every function takes a ceilings document and returns text (or
files by name); the CLI writes them atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re

from ert.consumers import roofs as roofs_mod
from ert.errors import ErtError

TOOL_FORMATS = ("ncu-section", "rocprof-compute", "kerncraft", "carm")


# ----------------------------------------------------------------------------- shared helpers
def machine_id(doc: dict, label: str | None = None) -> str:
    """A name for the machine, safe in identifiers and file names: the label, else host and device."""
    meta = doc.get("metadata", {})
    text = label or "_".join(str(p) for p in (meta.get("host"), meta.get("backend")) if p) or "machine"
    ident = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")
    return ident or "machine"


def _run_cores(doc: dict) -> int:
    meta = doc.get("metadata", {})
    return max(1, int(meta.get("threads_per_rank") or 1) * int(meta.get("ranks") or 1))


def _rated_info(doc: dict) -> dict:
    rated = doc.get("metadata", {}).get("backend_info", {}).get("rated")
    return rated if isinstance(rated, dict) else {}


def _clock_ghz(doc: dict) -> float | None:
    rated = _rated_info(doc)
    value = rated.get("clock_ghz") or (rated.get("clock") or {}).get("vector_ghz")
    return float(value) if value else None


def _is_cpu_run(doc: dict) -> bool:
    meta = doc.get("metadata", {})
    info = meta.get("backend_info", {})
    if meta.get("backend") == "numba-cpu":
        return True
    return str(info.get("device_type", "")).upper() == "CPU"


def _memory_level_name(level: str) -> str:
    return level if roofs_mod.is_cache_level(level) else "DRAM"


# ----------------------------------------------------------------------------- Nsight Compute section
# ncu's own counters for the achieved point: FLOPs from the SASS instruction counts of the precision
# (FMA counted twice), traffic per level (the metrics NERSC's hierarchical roofline method uses).
_NCU_OPS = {"fp64": "d", "fp32": "f", "fp16": "h"}
_NCU_TRAFFIC = (("L1", "l1tex__t_bytes.sum.per_second", "L1/TEX cache"),
                ("L2", "lts__t_bytes.sum.per_second", "L2 cache"),
                ("MEMORY", "dram__bytes.sum.per_second", "device memory"))


def _pb_string(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _g(value: float) -> str:
    """4 significant digits without an exponent: 10000, 436.8, 0.5."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _pb_number(value: float) -> str:
    return repr(float(value))


def _ncu_section(doc: dict, precision: str, *, ident: str, access: str) -> str:
    mem, basis = roofs_mod.memory_roofs(doc, precision=precision, access=access)
    compute = [r for r in roofs_mod.compute_roofs(doc) if r.precision == precision]
    tensor = [r for r in roofs_mod.extra_roofs(doc) if r.group == "tensor" and r.precision == precision]
    section_id = f"ert_{ident}_{precision}_roofline"
    p = _NCU_OPS.get(precision)
    meta = doc.get("metadata", {})
    out = [f"# Written by ert {meta.get('tool_version', '?')} from the measured ceilings of "
           f"{roofs_mod.machine_label(doc)}.",
           f"# Memory roofs: {basis}. Load it with: ncu --section-folder DIR --section {section_id} ...",
           f"Identifier: {_pb_string(section_id)}",
           f"DisplayName: {_pb_string(f'ert roofline {precision.upper()} ({ident})')}",
           f"Description: {_pb_string(f'Measured (ert) {precision.upper()} roofs of {roofs_mod.machine_label(doc)}: memory levels {basis}, compute peaks; the achieved point is this kernel from ncu counters.')}",
           "Order: 90"]
    if p:
        out += ["MetricDefinitions {",
                "  MetricDefinitions {",
                f"    Name: {_pb_string(f'derived__{section_id}__fma_x2')}",
                f"    Expression: {_pb_string(f'smsp__sass_thread_inst_executed_op_{p}fma_pred_on.sum.per_cycle_elapsed * 2')}",
                "  }",
                "}"]
    out += ["Body {", f"  DisplayName: {_pb_string(f'ert measured roofs, {precision.upper()}')}", "  Items {",
            "    RooflineChart {",
            f"      Label: {_pb_string(f'{precision.upper()} roofline, measured by ert ({ident})')}",
            '      AxisIntensity {\n        Label: "Arithmetic Intensity [FLOP/byte]"\n      }',
            '      AxisWork {\n        Label: "Performance [FLOP/s]"\n      }']
    peaks = [(r.name, r.gflops_per_s) for r in compute] + [(t.name, t.value) for t in tensor]
    for roof in mem:
        for name, gflops in peaks:
            out += ["      Rooflines {",
                    f"        PeakWork {{\n          Constant: {_pb_number(gflops * 1e9)}\n        }}",
                    f"        PeakTraffic {{\n          Constant: {_pb_number(roof.gbytes_per_s * 1e9)}\n        }}",
                    f"        Options {{\n          Label: {_pb_string(f'{roof.level} {_g(roof.gbytes_per_s)} GB/s, {name} {_g(gflops)} GFLOP/s (ert)')}\n        }}",
                    "      }"]
    if p:
        work = ["        AchievedWork {", "          ValueCyclesPerSecondExpression {"]
        for op in ("add", "mul"):
            work += ["            ValuePerCycleMetrics {",
                     f"              Label: {_pb_string(f'{precision.upper()} {op} per cycle')}",
                     f"              Name: {_pb_string(f'smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum.per_cycle_elapsed')}",
                     "            }"]
        work += ["            ValuePerCycleMetrics {",
                 f"              Label: {_pb_string(f'{precision.upper()} FMA operations per cycle')}",
                 f"              Name: {_pb_string(f'derived__{section_id}__fma_x2')}",
                 "            }",
                 '            CyclesPerSecondMetric {\n              Label: "SM frequency"\n'
                 '              Name: "smsp__cycles_elapsed.avg.per_second"\n            }',
                 "          }", "        }"]
        for level, metric, label in _NCU_TRAFFIC:
            if level != "MEMORY" and not any(r.level == level for r in mem):
                continue
            out += ["      AchievedValues {", *work,
                    "        AchievedTraffic {",
                    f"          Metric {{\n            Label: {_pb_string(label + ' bandwidth')}\n"
                    f"            Name: {_pb_string(metric)}\n          }}",
                    "        }",
                    f"        Options {{\n          Label: {_pb_string(f'achieved, {label}')}\n        }}",
                    "      }"]
    out += ["    }", "  }", "}"]
    return "\n".join(out) + "\n"


def to_ncu_sections(doc: dict, *, label: str | None = None, access: str = "rw") -> dict[str, str]:
    """One Nsight Compute section file per precision with compute roofs: {file name: text}.

    Every memory level (L1, L2, device memory; a CPU run's L3 too) against every
    compute roof of the precision (FMA, no-FMA, tensor where measured) as a
    Constant roofline; the achieved point is the profiled kernel's own FLOP and
    traffic counters. The identifier holds ``label`` so that several machines'
    sections load side by side.
    """
    ident = machine_id(doc, label)
    precisions = []
    for roof in roofs_mod.compute_roofs(doc):
        if roof.precision not in precisions:
            precisions.append(roof.precision)
    if not precisions:
        raise ErtError("has no floating-point compute ceilings to draw a roofline against", key="ceilings.compute")
    return {f"ert_{ident}_{p}.section": _ncu_section(doc, p, ident=ident, access=access) for p in precisions}


# ----------------------------------------------------------------------------- rocprof-compute roofline.csv
# The columns rocprof-compute's roofline reader takes by name (after its first, device-id, column), in
# GB/s and GFLOP/s (GOP/s for integers). ert measures the HBM/L2/L1 bandwidths and the vector peaks; LDS
# and the matrix (MFMA) units are not measured.
ROCPROF_COLUMNS = ("HBMBw", "L2Bw", "L1Bw", "LDSBw",
                   "FP16Flops", "FP32Flops", "FP64Flops", "I8Ops", "I32Ops", "I64Ops",
                   "MFMAF4Flops", "MFMAF6Flops", "MFMAF8Flops", "MFMAF16Flops", "MFMABF16Flops",
                   "MFMAF32Flops", "MFMAF64Flops", "MFMAI8Ops")
ROCPROF_ABSENT = "nan"  # its reader float()s every value it plots; nan draws no line


def _is_amd_gpu(doc: dict) -> bool:
    meta = doc.get("metadata", {})
    info = meta.get("backend_info", {})
    vendor = " ".join(str(info.get(k, "")) for k in ("device_vendor", "platform_vendor", "vendor")).lower()
    text = str(meta.get("device", "")).lower()
    gpu = str(info.get("device_type", "")).upper() == "GPU" or meta.get("backend") in ("hip", "rocm")
    amd = any(w in vendor for w in ("advanced micro devices", "amd")) or \
        any(w in text for w in ("radeon", "instinct", " mi2", " mi3", "gfx9"))
    return gpu and amd


def _rocprof_values(doc: dict, access: str) -> dict[str, float]:
    mem, _ = roofs_mod.memory_roofs(doc, precision="fp64", access=access)
    values: dict[str, float] = {}
    memory = [r for r in mem if not roofs_mod.is_cache_level(r.level)]
    if memory:
        values["HBMBw"] = memory[0].gbytes_per_s
    for r in mem:
        if r.level in ("L1", "L2"):
            values[f"{r.level}Bw"] = r.gbytes_per_s
    for prec in ("fp16", "fp32", "fp64"):
        peak = roofs_mod.fma_roof(doc, prec)
        if peak is not None:
            values[f"{prec.upper()}Flops"] = peak.gflops_per_s
    for prec in ("int32", "int64"):
        roof = roofs_mod.integer_roof(doc, prec)
        if roof is not None:
            values[f"I{prec[3:]}Ops"] = roof.value
    return values


def _read_rocprof(text: str, source: str) -> tuple[list[str], list[list[str]]]:
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if len(rows) < 2:
        raise ErtError(f"{source}: a roofline.csv needs a header and one row per device", key="--merge")
    header = rows[0]
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ErtError(f"{source}: line {n} has {len(row)} values for {len(header)} columns", key="--merge")
    return header, rows[1:]


def to_rocprof_csv(doc: dict, *, access: str = "rw", merge: str | None = None,
                   merge_source: str = "--merge file", device: int = 0) -> str:
    """rocprof-compute's ``roofline.csv`` from an AMD GPU run: ert's measured columns, the others kept or absent.

    With ``merge`` (the text of an existing roofline.csv, e.g. from
    rocprof-compute's own benchmark), every column ert does not measure (LDS,
    MFMA) keeps that file's value for ``device`` and the other devices' rows are
    kept as they are; without it those columns are ``nan``.
    """
    if not _is_amd_gpu(doc):
        meta = doc.get("metadata", {})
        what = "a CPU" if _is_cpu_run(doc) else "not an AMD GPU"
        raise ErtError(f"rocprof-compute reads the roofs of an AMD GPU; this is a {meta.get('backend', '?')} run "
                       f"of {meta.get('device') or meta.get('cpu_model') or '?'} ({what})", key="--format")
    values = _rocprof_values(doc, access)
    if merge is not None:
        header, rows = _read_rocprof(merge, merge_source)
    else:
        header, rows = ["devID", *ROCPROF_COLUMNS], [[str(device)] + [ROCPROF_ABSENT] * len(ROCPROF_COLUMNS)]
    for col in ROCPROF_COLUMNS:
        if col not in header:
            header.append(col)
            for row in rows:
                row.append(ROCPROF_ABSENT)
    ids = [row[0].strip() for row in rows]
    if str(device) not in ids:
        rows.append([str(device)] + [ROCPROF_ABSENT] * (len(header) - 1))
        ids.append(str(device))
    row = rows[ids.index(str(device))]
    for col, value in values.items():
        row[header.index(col)] = f"{value:.2f}"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


# ----------------------------------------------------------------------------- kerncraft machine file
_OSACA = {"zen 2": "ZEN2", "zen 3": "ZEN3", "zen 4": "ZEN4", "zen2": "ZEN2", "zen3": "ZEN3", "zen4": "ZEN4",
          "skylake-x": "SKX", "skylake server": "SKX", "cascade lake": "CSX", "ice lake server": "ICX",
          "sapphire rapids": "SPR", "neoverse n1": "N1", "neoverse v2": "V2", "a64fx": "A64FX"}


def _unit(value: float, unit: str) -> str:
    """kerncraft's prefixed-unit scalar: digits, one space, unit (no exponent: its parser takes none)."""
    return f"{value:.2f} {unit}"


def _yaml_str(text: str) -> str:
    return json.dumps(str(text))


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


def _series(doc: dict, access: str) -> list[tuple[int, dict[str, float]]]:
    """(cores, {level: GB/s}) per thread count: the run's scaling series, else its one count."""
    ranks = int(doc.get("metadata", {}).get("ranks") or 1)
    out = []
    scaling = doc.get("scaling")
    counts = scaling.get("by_threads") if isinstance(scaling, dict) else None
    entries = [(int(e["threads_per_rank"]) * int(e.get("ranks", ranks)), {"ceilings": e["ceilings"]})
               for e in counts or []] or [(_run_cores(doc), doc)]
    for cores, part in entries:
        mem, _ = roofs_mod.memory_roofs({"ceilings": part["ceilings"]}, precision="fp64", access=access)
        out.append((cores, {r.level: r for r in mem}))
    return out


def to_kerncraft(doc: dict) -> str:
    """A kerncraft machine file (YAML) from a CPU run: caches, clock, FLOPs per cycle, measured bandwidths.

    ert's read-only kernel is kerncraft's ``load`` and its read+write kernel
    kerncraft's ``update``: the measurements of each cache level and of memory
    (ert's DRAM is kerncraft's MEM) are the fp64 ceilings of each, per thread
    count of the run (``--threads 1,...,N`` gives the series; one count is
    written as that one count, so ``kerncraft -c`` must name it).
    """
    if not _is_cpu_run(doc):
        meta = doc.get("metadata", {})
        raise ErtError(f"kerncraft models CPUs; this is a {meta.get('backend', '?')} run of "
                       f"{meta.get('device') or '?'}", key="--format")
    meta = doc.get("metadata", {})
    rated = _rated_info(doc)
    clock = _clock_ghz(doc)
    if not clock:
        raise ErtError("has no clock (metadata.backend_info.rated.clock_ghz): kerncraft needs one", key="--format")
    cores = _run_cores(doc)
    caches, notes = _kerncraft_caches(doc, cores)
    if not caches:
        raise ErtError("has no caches in metadata.caches_reported: kerncraft's cache simulator needs them",
                       key="metadata.caches_reported")
    series = {acc: _series(doc, acc) for acc in ("ro", "rw")}
    levels = [c["level"] for c in caches] + ["MEM"]

    def find(by_level: dict, name: str):
        if name == "MEM":
            return next((r for lv, r in by_level.items() if not roofs_mod.is_cache_level(lv)), None)
        return by_level.get(name)

    counts = [n for n, _ in series["rw"]]
    for acc in ("ro", "rw"):
        for n, by_level in series[acc]:
            missing = [lv for lv in levels if find(by_level, lv) is None]
            if missing:
                raise ErtError(f"the {roofs_mod.ACCESS_NAMES[acc]} fp64 ceilings at {n} core(s) have no "
                               f"{', '.join(missing)} level: kerncraft needs every cache level and memory",
                               key="ceilings.memory")

    flops = {}
    for entry in rated.get("compute", []):
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

    uarch = str(rated.get("microarchitecture") or "")
    osaca = _OSACA.get(uarch.lower(), "INFORMATION_REQUIRED")
    isa = "aarch64" if "aarch64" in str(meta.get("platform", "")) or "arm" in str(meta.get("platform", "")) else "x86"
    L = []
    w = L.append
    w(f"# kerncraft machine file written by ert {meta.get('tool_version', '?')} from {roofs_mod.machine_label(doc)}.")
    w("# Measured by ert: the load (ert read-only) and update (ert read+write) bandwidths per level and core count.")
    w("# From ert's rated table: clock and FLOPs per cycle. From sysfs: cache sizes, sets and ways.")
    w("# Use: kerncraft -p RooflineFLOP -m THIS_FILE kernel.c -D N 1000000 -c CORES  (CORES one of: "
      + ", ".join(str(n) for n in counts) + ")")
    for note in notes:
        w(f"# note: {note}")
    w("kerncraft version: 0.8.18")
    w(f"model type: {_yaml_str(uarch or meta.get('cpu_model') or 'unknown')}")
    w(f"model name: {_yaml_str(meta.get('cpu_model') or meta.get('device') or 'unknown')}")
    w("sockets: 1")
    w(f"cores per socket: {cores}")
    w("threads per core: 1")
    w("NUMA domains per socket: 1")
    w(f"cores per NUMA domain: {cores}")
    w("transparent hugepage: null")
    w(f"clock: {_unit(clock, 'GHz')}")
    w("FLOPs per cycle:")
    for prec in ("SP", "DP"):
        f = flops[prec]
        total = f["FMA"]
        other = f.get("noFMA", total / 2)
        w(f"  {prec}: {{total: {total:g}, FMA: {total / 2:g}, ADD: {other / 2:g}, MUL: {other / 2:g}}}")
    w(f"isa: {isa}")
    w("in-core model: !!omap")
    w(f"  - OSACA: {osaca}")
    w("compiler: !!omap")
    w("  - gcc: -O3 -march=native -D_POSIX_C_SOURCE=200112L -fopenmp -lm")
    w("  - clang: -O3 -march=native -D_POSIX_C_SOURCE=200112L -fopenmp -lm")
    w(f"cacheline size: {_unit(caches[0]['line'], 'B')}")
    for model in ("overlapping model", "non-overlapping model"):
        w(f"{model}:")
        w("  ports:")
        w("    OSACA: INFORMATION_REQUIRED (only kerncraft's ECM models use ports; ert does not measure them)")
        w("  performance counter metric: INFORMATION_REQUIRED")
    rw_top = dict(series["rw"][-1][1])
    w("memory hierarchy:")
    for i, c in enumerate(caches):
        nxt = caches[i + 1]["level"] if i + 1 < len(caches) else None
        w(f"  - level: {c['level']}")
        w("    performance counter metrics:")
        w("      loads: INFORMATION_REQUIRED")
        w("      stores: INFORMATION_REQUIRED")
        w("      misses: INFORMATION_REQUIRED")
        w("      evicts: INFORMATION_REQUIRED")
        w("    cache per group:")
        w(f"      sets: {c['sets']}")
        w(f"      ways: {c['ways']}")
        w(f"      cl_size: {c['line']}")
        w("      replacement_policy: LRU")
        w("      write_allocate: true")
        w("      write_back: true")
        w(f"      load_from: {nxt or 'null'}")
        w(f"      store_to: {nxt or 'null'}")
        w(f"    cores per group: {c['shared']}")
        w(f"    threads per group: {c['shared']}")
        w(f"    groups: {max(1, cores // c['shared'])}")
        w(f"    size per group: {_unit(c['size'], 'B')}")
        if i == 0:
            w("    upstream throughput: [architecture code analyzer, [\"2D\", \"3D\"]]")
        else:
            roof = rw_top.get(c["level"])
            per_core = roof.gbytes_per_s / (clock * cores) if roof else 0.0
            w(f"    upstream throughput: [{_unit(per_core, 'B/cy')}, half-duplex]")
        w("    transfers overlap: false")
    w("  - level: MEM")
    w(f"    cores per group: {cores}")
    w(f"    threads per group: {cores}")
    w("    upstream throughput: [full socket memory bandwidth, half-duplex]")
    w("    penalty cycles per read stream: 0")
    w("    transfers overlap: false")
    w("    size per group: null")
    w("benchmarks:")
    w("  kernels:")
    w("    load:")
    w("      FLOPs per iteration: 0")
    w("      read streams: {bytes: 8.00 B, streams: 1}")
    w("      read+write streams: {bytes: 0.00 B, streams: 0}")
    w("      write streams: {bytes: 0.00 B, streams: 0}")
    w("    update:")
    w("      FLOPs per iteration: 0")
    w("      read streams: {bytes: 8.00 B, streams: 1}")
    w("      read+write streams: {bytes: 8.00 B, streams: 1}")
    w("      write streams: {bytes: 8.00 B, streams: 1}")
    w("  measurements:")
    for lv in levels:
        w(f"    {lv}:")
        w("      1:")
        w(f"        cores: [{', '.join(str(n) for n in counts)}]")
        w(f"        threads: [{', '.join(str(n) for n in counts)}]")
        w("        threads per core: 1")
        sizes = []
        for n, by_level in series["rw"]:
            low, high = find(by_level, lv).wss_bytes
            sizes.append(math.sqrt(max(low, 1) * max(high, 1)))
        w(f"        total size: [{', '.join(_unit(s, 'B') for s in sizes)}]")
        w(f"        size per core: [{', '.join(_unit(s / n, 'B') for s, n in zip(sizes, counts))}]")
        w(f"        size per thread: [{', '.join(_unit(s / n, 'B') for s, n in zip(sizes, counts))}]")
        w("        results:")
        for kernel, acc in (("load", "ro"), ("update", "rw")):
            vals = [find(by_level, lv).gbytes_per_s for _, by_level in series[acc]]
            w(f"          {kernel}: [{', '.join(_unit(v, 'GB/s') for v in vals)}]")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------- CARM benchmarks.jsonl
NO_FMA_OPERATION = "ert_no_fma"  # ert's no-FMA roof (adds and multiplies, unfused): not CARM's "add"
ERT_RECORD_PREFIX = "ert:"


def _carm_isa(doc: dict) -> str:
    meta = doc.get("metadata", {})
    info = meta.get("backend_info", {})
    bits = (info.get("numba_effective") or {}).get("vector_bits")
    plat = str(meta.get("platform", "")).lower()
    if "aarch64" in plat or "arm" in plat:
        return "arm_sve" if "sve" in str(info).lower() else "arm_neon"
    if "x86" in plat or "amd64" in plat or bits:
        return {512: "x86_avx512", 256: "x86_avx2", 128: "x86_sse"}.get(int(bits or 0), "x86")
    return f"ert_{meta.get('backend', 'device')}"


def carm_records(doc: dict, *, label: str | None = None) -> list[dict]:
    """CARM benchmark records: one memory record per level and access, one arithmetic record per peak."""
    meta = doc.get("metadata", {})
    machine = machine_id(doc, label)
    isa = _carm_isa(doc)
    threads = _run_cores(doc)
    clock = _clock_ghz(doc)
    common = {"isa": isa, "machine": machine, "num_threads": threads, "thread_affinity": [],
              "timestamp": str(meta.get("date", "")), "frequency_hz": (clock or 0.0) * 1e9,
              "frequency_overridden": False}
    out = []
    for entry in doc.get("ceilings", {}).get("memory", []):
        if entry.get("kind") is not None or entry.get("precision") not in ("fp64", "fp32"):
            continue
        acc = entry.get("access")
        if acc not in ("ro", "rw"):
            continue
        level = _memory_level_name(entry["level"])
        low, high = entry["wss_bytes"]
        ws = int(math.sqrt(max(low, 1) * max(high, 1)))
        out.append({**common, "type": "memory", "name": f"{ERT_RECORD_PREFIX}{entry['level']}_{entry['precision']}_{acc}",
                    "data_type": {"fp64": "f64", "fp32": "f32"}[entry["precision"]],
                    "load_store_ratio": "1:0" if acc == "ro" else "1:1",
                    "num_loads": 1, "num_stores": 0 if acc == "ro" else 1,
                    "cache_level": level, "memory_level_name": level,
                    "size_per_thread_bytes": ws // threads, "working_set_bytes": ws, "layout_mode": "single",
                    "bandwidth_gbps": float(entry["gbytes_per_s"]), "ert_spread": entry.get("spread")})
    for roof in roofs_mod.compute_roofs(doc):
        if roof.precision not in ("fp64", "fp32"):
            continue
        out.append({**common, "type": "arithmetic",
                    "name": f"{ERT_RECORD_PREFIX}{roof.precision}_{'fma' if roof.fma else 'no_fma'}",
                    "data_type": {"fp64": "f64", "fp32": "f32"}[roof.precision],
                    "operation": "fma" if roof.fma else NO_FMA_OPERATION,
                    "performance_gops": roof.gflops_per_s})
    if not out:
        raise ErtError("has no fp64 or fp32 ceilings for CARM", key="ceilings")
    return out


def to_carm(doc: dict, *, label: str | None = None, existing: str | None = None) -> str:
    """The machine's ``benchmarks.jsonl``: CARM's own records kept, earlier ert records of this machine replaced."""
    machine = machine_id(doc, label)
    kept = []
    for line in (existing or "").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            kept.append(line)
            continue
        if isinstance(rec, dict) and str(rec.get("name", "")).startswith(ERT_RECORD_PREFIX) \
                and rec.get("machine") == machine:
            continue
        kept.append(line)
    lines = [ln for ln in kept if ln.strip()] + [json.dumps(r, sort_keys=True) for r in carm_records(doc, label=label)]
    return "\n".join(lines) + "\n"
