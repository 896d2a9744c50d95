"""Export ceilings in formats other roofline tools read: ERT 1.1's roofline.json, NERSC's plot data, CSV."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

from ert.consumers import roofs as roofs_mod
from ert.errors import ErtError

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
    # Tensor roofs (schema 1.5) are FLOP roofs: rows "FP16 Tensor GFLOPs" beside ERT's, as users extend
    # gflops with named rows ("FP64 Vector GFLOPs FMA"); ERT's plot draws every row.  Their shapes and
    # types sit in gflops.metadata.TENSOR.  Integer roofs are not FLOPs: gflops.metadata.INTEGER_GIOPS only,
    # the int8 tensor roof (GIOP/s) too, as "INT8 Tensor", its shape in TENSOR under the same name.
    tensor_meta, integer_meta = {}, {}
    for extra in roofs_mod.extra_roofs(doc):
        if extra.group == "tensor" and extra.unit == "GIOP/s":
            row = f"{extra.precision.upper()} Tensor"
            if row not in integer_meta:
                integer_meta[row] = round(extra.value, 2)
                tensor_meta[row] = {"unit": "GIOP/s", **{k: extra.entry[k] for k in (
                    "mma_shape", "input_type", "accumulate", "flops_per_mma") if k in extra.entry}}
        elif extra.group == "tensor":
            row = f"{extra.precision.upper()} Tensor GFLOPs"
            if row not in tensor_meta:
                gflops_data.append([row, round(extra.value, 2)])
                tensor_meta[row] = {k: extra.entry[k] for k in ("mma_shape", "input_type", "accumulate",
                                                                "flops_per_mma") if k in extra.entry}
        elif extra.group == "integer":
            integer_meta[extra.precision.upper()] = round(extra.value, 2)
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
    if tensor_meta:
        gflops_meta["TENSOR"] = tensor_meta
    if integer_meta:
        gflops_meta["INTEGER_GIOPS"] = integer_meta
    gbytes_meta = {"FLOPS": 1, "KERNEL": basis,
                   "WORKING_SET_BYTES": {row[0]: list(r.wss_bytes) for row, r in zip(gbytes_data, mem)}}
    return {"empirical": {"metadata": shared,
                          "gflops": {"data": gflops_data, "metadata": gflops_meta},
                          "gbytes": {"data": gbytes_data, "metadata": gbytes_meta}},
            "spec": {"gflops": {"data": []}, "gbytes": {"data": []}}}


# NERSC's readers (and mperf's port) test each line for these words anywhere in
# it, in no particular order; a name or label containing one would be parsed as
# that line, so such a word inside a name is written in lower case.
_NERSC_KEYS = ("mem_roof_names", "comp_roof_names", "memroofs", "comproofs", "labels", "FLOPS", "AI")


def _quoted(names: list[str]) -> str:
    """Names for a NERSC data line: single-quoted (their reader splits on quotes), free of the readers' keys."""
    out = []
    for name in names:
        name = name.replace("'", "`")
        for key in _NERSC_KEYS:
            name = name.replace(key, key.lower())
        out.append("'" + name + "'")
    return " ".join(out)


def to_nersc(doc: dict, *, precision: str = "fp64", access: str = "rw", kernels: list | None = None,
             layout: str = "flat", level: str | None = None) -> str:
    """The space-delimited data file of NERSC's roofline plotting scripts (their data.txt), and mperf's port.

    Roofs: ``memroofs``/``mem_roof_names`` (GB/s per level, or only ``level``)
    and ``comproofs``/``comp_roof_names`` (GFLOP/s).  Kernels (``kernels``:
    (label, {level: AI}, GFLOP/s) per kernel), in one of two layouts:

    * ``flat`` (NERSC's plot_roofline.py, mperf's plot_roofline.py): ``AI``
      and ``FLOPS`` lines, one value per kernel, the AI at ``level`` (default:
      the last memory level, DRAM or HBM);
    * ``hierarchical`` (plot_roofline_hierarchical.py of both): one
      ``AI_<level>`` line per memory level and one ``FLOPS`` value per kernel.
      mperf's port reads ``FLOPS`` as one value per level instead, so a single
      kernel's value is repeated once per level, which both read correctly.

    NERSC's scripts take the first memory roof as the one their compute roofs
    meet, so with ``level`` the file holds that single roof.
    """
    mem, _ = roofs_mod.memory_roofs(doc, precision=precision, access=access)
    if level is not None:
        chosen = [r for r in mem if r.level == level]
        if not chosen:
            raise ErtError(f"no {level} level in these ceilings (levels: {', '.join(r.level for r in mem)})",
                           key="--level")
        mem = chosen
    comp = roofs_mod.compute_roofs(doc)
    lines = ["# all data is space delimited",
             "memroofs " + " ".join(f"{r.gbytes_per_s:.6g}" for r in mem),
             "mem_roof_names " + _quoted([r.level for r in mem]),
             "comproofs " + " ".join(f"{r.gflops_per_s:.6g}" for r in comp),
             "comp_roof_names " + _quoted([r.name for r in comp])]
    if not kernels:
        return "\n".join(lines) + "\n"
    lines.append("")
    levels = [r.level for r in mem]
    if layout == "flat":
        at = level or levels[-1]
        missing = [name for name, ai, _ in kernels if at not in ai]
        if missing:
            raise ErtError(f"kernel {missing[0]!r} has no bytes at {at}; choose a level it has with --level",
                           key="--level")
        lines += ["AI " + " ".join(f"{ai[at]:.6g}" for _, ai, _ in kernels),
                  "FLOPS " + " ".join(f"{g:.6g}" for _, _, g in kernels)]
    else:
        for lv in levels:
            values = [ai.get(lv) for _, ai, _ in kernels]
            if all(v is not None for v in values):
                lines.append(f"AI_{lv} " + " ".join(f"{v:.6g}" for v in values))
        flops = [g for _, _, g in kernels]
        if len(flops) == 1:
            flops = flops * len(levels)
        lines.append("FLOPS " + " ".join(f"{g:.6g}" for g in flops))
    lines.append("labels " + _quoted([name for name, _, _ in kernels]))
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("kind", "name", "level", "precision", "access", "fma", "value", "unit", "spread",
               "wss_low_bytes", "wss_high_bytes", "flops_per_element", "n_points", "disturbed")


def to_csv(doc: dict) -> str:
    """One row per ceiling, memory then compute, every precision and access pattern.

    Link, peer and network levels (schema 1.6) are rows of their own kind; ERT's roofline.json and NERSC's
    data file have no place for them and leave them out.  ``disturbed``: measured while the host was disturbed.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for e in doc["ceilings"]["memory"]:
        low, high = e["wss_bytes"]
        if e.get("kind") is not None:
            # Links, peers, the network (schema 1.6): kind link/peer/network, value GB/s, sizes as the range.
            writer.writerow([e["kind"], f"{e['level']} {e.get('variant', '')}".strip(), e["level"], "", "", "",
                             e["gbytes_per_s"], "GB/s", e["spread"], low, high, "", e["n_points"], _flag(e)])
            continue
        name = f"{e['level']} {roofs_mod.basis_label(e.get('precision'), e.get('access'))}"
        writer.writerow(["memory", name, e["level"], e.get("precision", ""), e.get("access", ""), "",
                         e["gbytes_per_s"], "GB/s", e["spread"], low, high, e.get("flops_per_element", 1),
                         e["n_points"], _flag(e)])
    extra = {id(r.entry): r for r in roofs_mod.extra_roofs(doc)}
    for e in doc["ceilings"]["compute"]:
        name = extra[id(e)].name if id(e) in extra else f"{e['precision'].upper()} {'FMA' if e['fma'] else 'no-FMA'}"
        unit = extra[id(e)].unit if id(e) in extra else "GFLOP/s"
        writer.writerow(["compute", name, "", e["precision"], "", str(bool(e["fma"])).lower(), e["gflops_per_s"],
                         unit, e["spread"], e.get("wss_bytes", ""), e.get("wss_bytes", ""),
                         e.get("flops_per_element", ""), "", _flag(e)])
    return out.getvalue()


def _flag(entry: dict) -> str:
    """The ``disturbed`` column: true where the ceiling was measured while the host was disturbed."""
    return "true" if entry.get("disturbed") is True else "false"


def kernel_rows(kernels, doc: dict, *, access: str = "rw") -> list[tuple[str, dict, float]]:
    """(label, {roof level: AI}, GFLOP/s) per kernel with floating-point work: the roofline's dots."""
    from ert.consumers.profile.profile import profile_all

    rows = []
    for prof in profile_all(kernels, doc, access=access):
        if not prof.results:
            continue  # no floating-point work: not a point on a FLOP roofline
        res = prof.results[0]  # the kernel's main precision
        ai = {(lv.roof_level or lv.level): lv.ai_flops_per_byte for lv in res.levels}
        rows.append((prof.name, ai, res.gflops_per_s))
    return rows


def export_text(doc: dict, *, fmt: str, precision: str = "fp64", access: str = "rw", kernels=None,
                layout: str = "flat", level: str | None = None) -> str:
    if fmt == "ert":
        return json.dumps(to_ert(doc, precision=precision, access=access), indent=3) + "\n"
    if fmt == "nersc":
        rows = kernel_rows(kernels, doc, access=access) if kernels else None
        return to_nersc(doc, precision=precision, access=access, kernels=rows, layout=layout, level=level)
    return to_csv(doc)
