"""The original ERT's roofline.json read as a ceilings document (schema 1.x).

ERT 1.1 writes ``{"empirical": {"gflops": {"data": [[name, GFLOP/s], ...]},
"gbytes": {"data": [[level, GB/s], ...]}, "metadata": {...}}, "spec": ...}``.
Real files differ in small ways, all read here:

* metadata as a dict (ERT 1.1), or as a ``""`` key holding a list of
  ``"KEY  value"`` strings (values in Python's repr);
* compute names ``GFLOPs`` (ERT before precisions: FP64), ``FP64 GFLOPs``,
  ``FP32 GFLOPs``, and user-extended ``FP64 Vector GFLOPs FMA`` /
  ``FP64 Scalar GFLOPs``: the highest per precision and FMA/no-FMA becomes the
  roof, the others are listed in the warnings;
* levels named by count (L1..L4), the memory ``DRAM`` or a hand-renamed
  ``STREAM HBM`` (read as HBM), or DRAM alone.

ERT keeps neither working sets nor spreads: the levels keep the file's order
(working sets [0, 0]) and spreads are 0. ``metadata.tool`` is ``ERT`` and
``metadata.source`` names the file, so every consumer can say which tool a
ceiling came from.
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import json
import re

from ert.errors import ErtError, parse_user_json, read_user_text
from ert.records.ceilings_io import SCHEMA_VERSION, validate
from ert.records.warning_codes import warn

_PRECISION_RE = re.compile(r"\b(FP64|FP32|FP16|DP|SP|HP)\b", re.IGNORECASE)
_PRECISION_NAMES = {"FP64": "fp64", "DP": "fp64", "FP32": "fp32", "SP": "fp32", "FP16": "fp16", "HP": "fp16"}
_TENSOR_RE = re.compile(r"\b(FP64|FP16|BF16|TF32|FP8)\b", re.IGNORECASE)  # ert's "FP16 Tensor GFLOPs" rows
_ERT_PRECISION = {"FP64": "fp64", "FP32": "fp32", "FP16": "fp16"}
_GCC_NAMES = ("g++", "gcc", "mpic++", "mpicc", "mpicxx", "mpiCC", "c++", "cc", "CC")


def is_ert_roofline(doc: object) -> bool:
    """True for a document in ERT's roofline.json layout (no schema_version, an ``empirical`` object)."""
    return isinstance(doc, dict) and "schema_version" not in doc and isinstance(doc.get("empirical"), dict)


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _metadata_dict(meta: object) -> dict:
    """ERT's metadata as a dict, from either real layout."""
    if not isinstance(meta, dict):
        return {}
    out = {k: v for k, v in meta.items() if k != ""}
    lines = meta.get("")
    if isinstance(lines, list):
        for line in lines:
            if not isinstance(line, str):
                continue
            key, _, value = line.strip().partition(" ")
            if key and value.strip():
                out.setdefault(key, _literal(value.strip()))
    return out


def _scalar(value):
    """ERT stores one value per merged section as a list: take the first (or the latest timestamp)."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value


def _config_value(config: dict, key: str) -> list:
    value = config.get(key, [])
    return value if isinstance(value, list) else [value]


def _pairs(section: object, where: str, path: object) -> list[tuple[str, float, int]]:
    data = section.get("data") if isinstance(section, dict) else None
    if not isinstance(data, list):
        raise ErtError("missing (expected a list of [name, value] pairs)", path=path, key=f"{where}.data")
    out = []
    for i, row in enumerate(data):
        if (not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str)
                or isinstance(row[1], bool) or not isinstance(row[1], (int, float))):
            raise ErtError(f"expected [name, number], got {json.dumps(row)[:60]}", path=path, key=f"{where}.data[{i}]")
        if not row[1] > 0 or row[1] != row[1] or row[1] == float("inf"):
            raise ErtError(f"must be a positive finite number, got {row[1]}", path=path, key=f"{where}.data[{i}][1]")
        out.append((row[0].strip(), float(row[1]), i))
    return out


def _level_name(name: str) -> str:
    """'L1' stays; 'STREAM HBM' is HBM; 'DRAM' stays; anything else is kept as written."""
    words = name.upper().split()
    for alias in ("HBM", "DRAM", "MCDRAM", "DDR"):
        if alias in words:
            return "HBM" if alias == "HBM" else ("MCDRAM" if alias == "MCDRAM" else "DRAM")
    return name


def _date(meta: dict, sections: list[dict]) -> str:
    stamps = []
    for m in [meta] + sections:
        for key in ("TIMESTAMP_DATA", "TIMESTAMP_DB"):
            value = m.get(key)
            values = value if isinstance(value, (list, tuple)) else [value]
            # A stamp past year 9999 (1e300) or NaN is no date: skipped, as a missing one is.
            stamps += [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                       and 0 < v < 253402300800]
    if not stamps:
        return "1970-01-01T00:00:00+00:00"
    when = _dt.datetime.fromtimestamp(max(stamps), tz=_dt.timezone.utc).replace(microsecond=0)
    return when.isoformat()


def gcc_o3_warning(config: dict) -> str | None:
    """A warning when ERT's config built the kernel with -O3 by a GCC-like compiler (unroll-and-jam)."""
    cflags = [str(f) for f in _config_value(config, "ERT_CFLAGS")]
    cc = " ".join(str(c) for c in _config_value(config, "ERT_CC"))
    if not any(f in ("-O3", "-Ofast") for f in cflags):
        return None
    base = cc.split("/")[-1].split()[0] if cc.strip() else ""
    if base and base not in _GCC_NAMES and not base.startswith(("g++", "gcc")):
        return None
    return warn("backend", f"ERT kernel built with {cc or 'an unnamed compiler'} "
                           f"{' '.join(f for f in cflags if f.startswith('-O'))}: GCC 8+ unroll-and-jam at -O3 fuses "
                           f"consecutive trials, so ERT's L1/L2 bandwidths can read up to ~2x too high (rebuild with "
                           f"-O2 or -fno-unroll-and-jam to check)")


def to_ceilings(doc: dict, *, path: object = None, text: str | None = None,
                schema_version: str = "1.2") -> dict:
    """A ceilings document (schema 1.x) from ERT's roofline.json ``doc``; faults name file and key."""
    emp = doc["empirical"]
    gflops = _pairs(emp.get("gflops"), "empirical.gflops", path)
    gbytes = _pairs(emp.get("gbytes"), "empirical.gbytes", path)
    if not gbytes and not gflops:
        raise ErtError("ERT roofline.json with no gflops and no gbytes data", path=path, key="empirical")
    sections = [_metadata_dict(emp.get(s, {}).get("metadata")) if isinstance(emp.get(s), dict) else {}
                for s in ("gflops", "gbytes")]
    meta = _metadata_dict(emp.get("metadata"))
    merged = {}
    for m in sections[::-1] + [meta]:
        merged.update(m)
    config = merged.get("CONFIG") if isinstance(merged.get("CONFIG"), dict) else {}
    default_precision = _ERT_PRECISION.get(str(_scalar(_config_value(config, "ERT_PRECISION")) or "").upper(), "fp64")
    warnings = [warn("imported", f"read from ERT's roofline.json ({path}): ERT keeps no working sets or spreads; "
                                 f"levels keep the file's order")]

    memory = []
    for name, value, _ in gbytes:
        level = _level_name(name)
        if level != name:
            warnings.append(warn("imported", f"ERT level {name!r} read as {level}"))
        memory.append({"level": level, "gbytes_per_s": value, "spread": 0.0, "wss_bytes": [0, 0], "n_points": 1,
                       "precision": default_precision, "access": "rw", "basis": f"ERT gbytes {name!r}"})

    best: dict[tuple[str, bool], tuple[float, str]] = {}
    tensor = []
    tensor_meta = sections[0].get("TENSOR") if isinstance(sections[0].get("TENSOR"), dict) else {}
    for name, value, _ in gflops:
        match = _PRECISION_RE.search(name)
        if "TENSOR" in name.upper():
            # ert's export: "FP16 Tensor GFLOPs" is a tensor-core roof, never a vector one.
            extra = tensor_meta.get(name) if isinstance(tensor_meta.get(name), dict) else {}
            kind = _TENSOR_RE.search(name)
            tensor.append({"precision": kind.group(1).lower() if kind else "fp16", "fma": True, "gflops_per_s": value, "spread": 0.0,
                           "pipe": "tensor", "unit": "GFLOP/s", **extra})
            continue
        precision = _PRECISION_NAMES[match.group(1).upper()] if match else default_precision
        upper = name.upper()
        # Plain "GFLOPs"/"FP64 GFLOPs" is ERT's FMA-contracted kernel; a user-extended row says FMA or not.
        fma = "FMA" in upper or not any(w in upper for w in ("VECTOR", "SCALAR", "NO FMA", "NOFMA", "NO-FMA"))
        if "NO FMA" in upper or "NO-FMA" in upper or "NOFMA" in upper:
            fma = False
        key = (precision, fma)
        if key in best:
            kept, dropped = (best[key], (value, name)) if best[key][0] >= value else ((value, name), best[key])
            best[key] = kept
            warnings.append(warn("imported", f"ERT compute row {dropped[1]!r} ({dropped[0]:g} GFLOP/s) is below "
                                             f"{kept[1]!r} ({kept[0]:g}); the higher is the {precision} "
                                             f"{'FMA' if fma else 'no-FMA'} roof"))
        else:
            best[key] = (value, name)
    # ert's own export puts the int8 tensor roof (integer operations, GIOP/s) in INTEGER_GIOPS as "INT8 Tensor".
    integer = sections[0].get("INTEGER_GIOPS") if isinstance(sections[0].get("INTEGER_GIOPS"), dict) else {}
    for name, value in integer.items():
        if "TENSOR" in str(name).upper() and "INT8" in str(name).upper() and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and value > 0:
            extra = tensor_meta.get(name) if isinstance(tensor_meta.get(name), dict) else {}
            tensor.append({"precision": "int8", "fma": True, "gflops_per_s": float(value), "spread": 0.0,
                           "pipe": "tensor", **extra, "unit": "GIOP/s", "giops_per_s": float(value)})
    no_fma = sections[0].get("NO_FMA_GFLOPS")  # ert's own export keeps the no-FMA peaks here
    if isinstance(no_fma, dict):
        for prec_name, value in no_fma.items():
            precision = _PRECISION_NAMES.get(str(prec_name).upper())
            if precision and isinstance(value, (int, float)) and value > 0 and (precision, False) not in best:
                best[(precision, False)] = (float(value), f"NO_FMA_GFLOPS {prec_name}")
    compute = [{"precision": p, "fma": fma, "gflops_per_s": v, "spread": 0.0}
               for (p, fma), (v, _) in best.items()] + tensor

    host = _scalar(merged.get("HOSTNAME")) or "unknown (ERT)"
    ranks = _scalar(merged.get("MPI_PROCS"))
    threads = _scalar(merged.get("OPENMP_THREADS"))
    device = _scalar(merged.get("DEVICE"))
    warning = gcc_o3_warning(config)
    if warning:
        warnings.append(warning)
    metadata = {
        "tool": "ERT",
        "tool_version": str(_scalar(merged.get("ERT_VERSION")) or "1.1.0"),
        "source": f"ERT roofline.json: {path}" if path is not None else "ERT roofline.json",
        "host": str(host),
        "cpu_model": "",
        "caches_reported": [],
        "libraries": {},
        "ranks": ranks if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks > 0 else 1,
        "threads_per_rank": threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else 1,
        "date": _date(merged, sections),
        "config": config,
        "config_sha256": hashlib.sha256((text or json.dumps(doc, sort_keys=True)).encode("utf-8")).hexdigest(),
    }
    if device:
        metadata["device"] = str(device)
    if merged.get("GENERATOR"):
        metadata["generator"] = str(merged["GENERATOR"])
    if any(str(_scalar(_config_value(config, k))) in ("True", "true") for k in ("ERT_GPU", "ERT_OCL", "ERT_HIP",
                                                                                 "ERT_SYCL")):
        metadata["backend"] = "ERT GPU"
    return {"schema_version": schema_version, "metadata": metadata, "raw": "(none: ERT roofline.json)",
            "ceilings": {"memory": memory, "compute": compute}, "warnings": warnings}


def load_any_ceilings(path) -> dict:
    """A ceilings file read wherever one is expected: ert's own, or ERT's roofline.json converted (its
    ``metadata.tool`` says ERT); validated either way, faults are ErtErrors naming the file."""
    text = read_user_text(path, expected="a ceilings JSON file")
    doc = parse_user_json(text, path=path)
    if is_ert_roofline(doc):
        doc = to_ceilings(doc, path=path, text=text, schema_version=SCHEMA_VERSION)
    validate(doc, path=path)
    return doc


__all__ = ["is_ert_roofline", "to_ceilings", "gcc_o3_warning", "load_any_ceilings"]

