"""Export ceilings in formats other roofline tools read: ERT 1.1's roofline.json, NERSC's plot data, CSV."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

from ert.consumers import roofs as roofs_mod

FORMATS = ("ert", "nersc", "csv")
# The ERT release whose roofline.json layout the 'ert' format follows.
ERT_LAYOUT_VERSION = "1.1.0"


def _timestamp(doc: dict) -> float | None:
    try:
        return datetime.fromisoformat(str(doc["metadata"]["date"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return None


def _ert_level_name(roof: roofs_mod.MemoryRoof, first_memory: bool) -> str:
    # ERT names the level behind the last cache DRAM; consumers look for that name.
    if first_memory and not roofs_mod.is_cache_level(roof.level):
        return "DRAM"
    return roof.level


def to_ert(doc: dict, *, precision: str = "fp64", access: str = "rw") -> dict:
    """ERT 1.1's roofline.json: empirical gflops/gbytes as [name, value] pairs in units of 1e9, plus spec.

    gflops: one "FPxx GFLOPs" entry per precision, the FMA peak (ERT's kernel is
    built with FMA contraction); no-FMA peaks are kept in gflops.metadata.
    gbytes: one entry per level, fastest first, the bandwidth of ``precision``
    ``access`` (ERT's kernel is read+write), the memory level named DRAM.
    Metadata keys shared by both sections sit in empirical.metadata, the others
    in each section's metadata, as ERT's merge does.
    """
    meta = doc.get("metadata", {})
    mem, basis = roofs_mod.memory_roofs(doc, precision=precision, access=access)
    gbytes_data, named_memory = [], False
    for roof in mem:
        first_memory = not named_memory and not roofs_mod.is_cache_level(roof.level)
        named_memory = named_memory or first_memory
        gbytes_data.append([_ert_level_name(roof, first_memory), round(roof.gbytes_per_s, 2)])
    gflops_data, no_fma, flops_of_peak = [], {}, {}
    for roof in roofs_mod.compute_roofs(doc):
        if roof.fma:
            gflops_data.append([f"{roof.precision.upper()} GFLOPs", round(roof.gflops_per_s, 2)])
            flops_of_peak[roof.precision.upper()] = roof.flops_per_element
        else:
            no_fma[roof.precision.upper()] = round(roof.gflops_per_s, 2)
    for roof in roofs_mod.compute_roofs(doc):  # a precision measured without FMA only
        if not roof.fma and not any(d[0] == f"{roof.precision.upper()} GFLOPs" for d in gflops_data):
            gflops_data.append([f"{roof.precision.upper()} GFLOPs", round(roof.gflops_per_s, 2)])
    shared = {
        "ERT_VERSION": ERT_LAYOUT_VERSION,
        "GENERATOR": f"ert {meta.get('tool_version', '?')} (Python reimplementation of ERT)",
        "HOSTNAME": meta.get("host"),
        "MPI_PROCS": meta.get("ranks"),
        "OPENMP_THREADS": meta.get("threads_per_rank"),
        "BACKEND": meta.get("backend"),
        "DEVICE": meta.get("device") or meta.get("cpu_model"),
        "TIMESTAMP_DATA": _timestamp(doc),
        "CONFIG": meta.get("config", {}),
    }
    gflops_meta = {"FLOPS": flops_of_peak, "NO_FMA_GFLOPS": no_fma}
    gbytes_meta = {"FLOPS": 1, "KERNEL": basis,
                   "WORKING_SET_BYTES": {row[0]: list(r.wss_bytes) for row, r in zip(gbytes_data, mem)}}
    return {"empirical": {"metadata": shared,
                          "gflops": {"data": gflops_data, "metadata": gflops_meta},
                          "gbytes": {"data": gbytes_data, "metadata": gbytes_meta}},
            "spec": {"gflops": {"data": []}, "gbytes": {"data": []}}}


def _quoted(names: list[str]) -> str:
    # NERSC's reader splits these lines on single quotes, so a quote inside a name would split it.
    return " ".join("'" + n.replace("'", "`") + "'" for n in names)


def to_nersc(doc: dict, *, precision: str = "fp64", access: str = "rw", app_points=None) -> str:
    """The space-delimited data file of NERSC's roofline plotting scripts (their data.txt).

    memroofs/mem_roof_names: one bandwidth per level (GB/s); comproofs/comp_roof_names:
    every compute ceiling (GFLOP/s). ``app_points``: (label, AI, GFLOP/s) triples
    written as AI, GFLOPs and labels. NERSC's reader matches keywords anywhere in
    a line, so the one comment line is kept free of them.
    """
    mem, _ = roofs_mod.memory_roofs(doc, precision=precision, access=access)
    comp = roofs_mod.compute_roofs(doc)
    lines = ["# all data is space delimited",
             "memroofs " + " ".join(f"{r.gbytes_per_s:.6g}" for r in mem),
             "mem_roof_names " + _quoted([r.level for r in mem]),
             "comproofs " + " ".join(f"{r.gflops_per_s:.6g}" for r in comp),
             "comp_roof_names " + _quoted([r.name for r in comp])]
    if app_points:
        lines += ["",
                  "AI " + " ".join(f"{ai:.6g}" for _, ai, _ in app_points),
                  "GFLOPs " + " ".join(f"{g:.6g}" for _, _, g in app_points),
                  "labels " + _quoted([label for label, _, _ in app_points])]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("kind", "name", "level", "precision", "access", "fma", "value", "unit", "spread",
               "wss_low_bytes", "wss_high_bytes", "flops_per_element", "n_points")


def to_csv(doc: dict) -> str:
    """One row per ceiling, memory then compute, every precision and access pattern."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for e in doc["ceilings"]["memory"]:
        low, high = e["wss_bytes"]
        name = f"{e['level']} {roofs_mod.basis_label(e.get('precision'), e.get('access'))}"
        writer.writerow(["memory", name, e["level"], e.get("precision", ""), e.get("access", ""), "",
                         e["gbytes_per_s"], "GB/s", e["spread"], low, high, e.get("flops_per_element", 1),
                         e["n_points"]])
    for e in doc["ceilings"]["compute"]:
        name = f"{e['precision'].upper()} {'FMA' if e['fma'] else 'no-FMA'}"
        writer.writerow(["compute", name, "", e["precision"], "", str(bool(e["fma"])).lower(), e["gflops_per_s"],
                         "GFLOP/s", e["spread"], e.get("wss_bytes", ""), e.get("wss_bytes", ""),
                         e.get("flops_per_element", ""), ""])
    return out.getvalue()


def app_points(kernels, doc: dict, *, access: str = "rw") -> list[tuple[str, float, float]]:
    """(label, AI, GFLOP/s) per kernel and level with a ceiling: the hierarchical roofline's dots."""
    from ert.consumers.profile import profile_all

    points = []
    for prof in profile_all(kernels, doc, access=access):
        res = prof.results[0]  # the kernel's main precision
        for lv in res.levels:
            points.append((f"{prof.name} {lv.level}", lv.ai_flops_per_byte, res.gflops_per_s))
    return points


def export_text(doc: dict, *, fmt: str, precision: str = "fp64", access: str = "rw", kernels=None) -> str:
    if fmt == "ert":
        return json.dumps(to_ert(doc, precision=precision, access=access), indent=3) + "\n"
    if fmt == "nersc":
        points = app_points(kernels, doc, access=access) if kernels else None
        return to_nersc(doc, precision=precision, access=access, app_points=points)
    return to_csv(doc)
