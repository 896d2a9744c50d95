"""Ceilings for the roofline tools users already have: Nsight Compute, rocprof-compute and CARM (kerncraft's
machine file is ``ert.consumers.export.kerncraft``, which shares the helpers at the top of this module).

Each format is written from that tool's documented input (its section schema,
its reader's columns, its JSONL records), never copied from the tool. Every
function takes a ceilings document and returns text (or files by name); the CLI
writes them atomically.
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


def run_cores(doc: dict) -> int:
    """The cores the run measured on: threads per rank x ranks."""
    meta = doc.get("metadata", {})
    return max(1, int(meta.get("threads_per_rank") or 1) * int(meta.get("ranks") or 1))


def rated_info(doc: dict) -> dict:
    """The backend's rated block (metadata.backend_info.rated), or {}."""
    rated = doc.get("metadata", {}).get("backend_info", {}).get("rated")
    return rated if isinstance(rated, dict) else {}


def clock_ghz(doc: dict) -> float | None:
    """The clock the rated values were derived at, GHz, or None."""
    rated = rated_info(doc)
    value = rated.get("clock_ghz") or (rated.get("clock") or {}).get("vector_ghz")
    return float(value) if value else None


def is_cpu_run(doc: dict) -> bool:
    """Whether the run measured a CPU (numba-cpu, or an OpenCL CPU device)."""
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
        what = "a CPU" if is_cpu_run(doc) else "not an AMD GPU"
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
    threads = run_cores(doc)
    clock = clock_ghz(doc)
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
