"""ERT's raw results (``Run.NNN/FLOPS.NNN/MPI.NNNN/OpenMP.NNNN/{max,sum}``) as ert raw records, for ``ert analyze``.

ERT's ``max`` file has one line per working set::

    WSS_BYTES  TRIALS  USEC_MIN USEC_MED USEC_MAX  GBS x3  GFLOPS x3

(times of the timed region in microseconds; ERT's GB/s counts a load and a
store of every byte, as ert's read+write kernel does).  Each line becomes one
point record of an FP64 (or ``ERT_PRECISION``) read+write kernel with the
directory's FLOPs per element (fused multiply-adds above 1: ERT's kernel
``b = b*a + c`` built with GCC's default contraction), so ert's rate formula
gives ERT's own numbers back, and ert's plateau fit and level naming
re-derive the levels that ERT's histogram named by count.  ``sum`` supplies
the metadata (ranks, threads, ERT's version and config).  Nothing here was
checked by ert: the records say so, and a GCC ``-O3`` build gets its warning.
"""

from __future__ import annotations

import math

import re
from pathlib import Path

from ert.interop.ert_results import _literal, gcc_o3_warning
from ert.errors import ErtError
from ert.records.ceilings_io import out_of_range
from ert.records.rawcheck import fault, shaped
from ert.records.rawio import RawData, header_record
from ert.records.warning_codes import code_of, warn
from ert.spec import KernelSpec

_NUMBER = {"flops": re.compile(r"FLOPS\.?(\d+)", re.IGNORECASE), "mpi": re.compile(r"MPI\.?(\d+)"),
           "openmp": re.compile(r"OpenMP\.?(\d+)", re.IGNORECASE)}


def looks_like_ert_results(path: Path) -> bool:
    """A ``max`` file, a directory holding one, or an ERT run directory with ``FLOPS.*`` below it."""
    path = Path(path)
    if path.is_file():
        return path.name == "max"
    return path.is_dir() and not (path / "raw.jsonl").exists() and bool(_max_files(path))


def iso_date(stamp: float) -> str | None:
    """ERT's TIMESTAMP_DATA (seconds since 1970) as an ISO date, or None where it is no date (1e300, negative)."""
    import datetime as _dt

    if not (isinstance(stamp, (int, float)) and 0 <= stamp < 253402300800):  # year 10000: datetime's end
        return None
    return _dt.datetime.fromtimestamp(stamp, tz=_dt.timezone.utc).replace(microsecond=0).isoformat()


def _max_files(path: Path) -> list[Path]:
    if (path / "max").is_file():
        return [path / "max"]
    return sorted(p for p in path.rglob("max") if p.is_file() and _NUMBER["flops"].search(str(p.relative_to(path.parent))))


def _numbers(path: Path) -> dict:
    text = str(path)
    out = {}
    for key, pattern in _NUMBER.items():
        found = pattern.findall(text)
        out[key] = int(found[-1]) if found else None
    return out


def _meta_from_sum(path: Path) -> dict:
    """``KEY value`` lines after META_DATA in ERT's ``sum`` (or ``max``) file, values as Python literals where they parse."""
    meta: dict = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return meta
    started = False
    for line in lines:
        if line.strip() == "META_DATA":
            started = True
            continue
        if started and line.strip():
            key, _, value = line.strip().partition(" ")
            meta.setdefault(key, _literal(value.strip()))
    return meta


def _records(max_file: Path, spec: KernelSpec) -> list[dict]:
    out = []
    for number, line in enumerate(max_file.read_text(errors="replace").splitlines(), 1):
        fields = line.split()
        if fields == ["META_DATA"]:
            break  # ERT appends its metadata block after the curve
        if not fields:
            continue
        try:
            wss, trials = int(fields[0]), int(fields[1])
            usec = sorted(float(f) for f in fields[2:5])
        except (ValueError, IndexError):
            raise ErtError("expected WSS_BYTES TRIALS USEC_MIN USEC_MED USEC_MAX ...", path=max_file,
                           key=f"line {number}") from None
        if wss < spec.itemsize or trials < 1 or usec[0] <= 0 or not math.isfinite(usec[-1]) \
                or wss >= 1 << 63 or trials >= 1 << 63:
            raise ErtError("working set, trials and times must be positive and finite", path=max_file,
                           key=f"line {number}")
        seconds = {"min": usec[0] / 1e6, "median": usec[1] / 1e6, "max": usec[2] / 1e6}
        out.append(shaped({"type": "point", "id": f"{spec.key}-w{wss}", "spec": spec.to_dict(), "wss_bytes": wss,
                           "elements": wss // spec.itemsize, "trials": trials, "seconds": seconds,
                           "spread": round((seconds["max"] - seconds["min"]) / seconds["min"], 6), "noisy": False,
                           "valid": True, "check": "measured by ERT (not checked by ert)", "remeasured": 0}))
        bad = fault(out[-1])  # the ranges every raw record is read with (1e-300 us is no time)
        if bad:
            raise ErtError(f"{bad[0]}: {bad[1]}", path=max_file, key=f"line {number}")
    return out


def read_ert_results(path: str | Path) -> RawData:
    """The raw data of an ERT results run, the layout (ranks x threads) with the most workers."""
    path = Path(path)
    files = [path] if path.is_file() else _max_files(path)
    if not files:
        raise ErtError("no ERT results here (no FLOPS.*/MPI.*/OpenMP.*/max file)", path=path)
    layouts: dict[tuple, list[Path]] = {}
    for f in files:
        n = _numbers(f.parent if f.name == "max" else f)
        layouts.setdefault((n["mpi"] or 1, n["openmp"] or 1), []).append(f)
    (ranks, threads), chosen = max(layouts.items(), key=lambda kv: (kv[0][0] * kv[0][1], kv[0]))
    meta_file = chosen[0].with_name("sum")
    meta_ert = _meta_from_sum(meta_file)
    if not meta_ert:
        meta_file, meta_ert = chosen[0], _meta_from_sum(chosen[0])
    bad = out_of_range(meta_ert)  # the consumers' rule: TIMESTAMP_DATA 1e300 is no number ert reads
    if bad:
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in bad[0]).lstrip(".")
        raise ErtError(bad[1], path=meta_file, key=key)
    config_ert = meta_ert.get("CONFIG") if isinstance(meta_ert.get("CONFIG"), dict) else {}
    precision = str((config_ert.get("ERT_PRECISION") or ["FP64"])[0]).lower()
    precision = precision if precision in ("fp64", "fp32", "fp16") else "fp64"
    points = []
    for f in chosen:
        flops = _numbers(f.parent)["flops"] or 1
        try:
            spec = KernelSpec(precision, flops, flops > 1)
        except ValueError as exc:
            raise ErtError(f"FLOPS.{flops:03d}: {exc}", path=f) from None
        points += _records(f, spec)
    if not points:
        raise ErtError("the ERT results hold no measurements", path=path)
    flops_list = sorted({p["spec"]["flops_per_element"] for p in points})
    from ert.config.schema import from_dict  # pydantic: only ERT's results need it, not ert analyze's own runs

    config = from_dict({"backend": "numba-cpu", "precisions": [precision], "flops_per_element": flops_list,
                        "fma": "on" if any(f > 1 for f in flops_list) else "both", "access": ["rw"],
                        "threads": threads, "sweep": "dense"}, source=path)
    warnings = [warn("imported", f"ERT results from {path}: {len(layouts)} layout(s) of ranks x threads; analysed "
                                 f"{ranks} rank(s) x {threads} thread(s), the most workers")] if len(layouts) > 1 else []
    o3 = gcc_o3_warning(config_ert)
    if o3:
        warnings.append(o3)
    metadata = {"tool": "ERT", "tool_version": str(meta_ert.get("ERT_VERSION", "1.1.0")),
                "host": str((meta_ert.get("HOSTNAME") or ("unknown",))[0]
                            if isinstance(meta_ert.get("HOSTNAME"), (list, tuple)) else meta_ert.get("HOSTNAME", "unknown")),
                "cpu_model": "", "caches_reported": [], "libraries": {}, "ranks": ranks,
                "threads_per_rank": threads, "date": "1970-01-01T00:00:00+00:00",
                "config": config.to_dict(), "config_sha256": config.sha256(), "backend": "ERT",
                "device": "", "backend_info": {"backend": "ERT"},
                "source": {"tool": "ERT", "path": str(path)}}
    stamp = meta_ert.get("TIMESTAMP_DATA")
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        metadata["date"] = iso_date(stamp) or metadata["date"]
        if iso_date(stamp) is None:
            warnings.append(warn("imported", f"TIMESTAMP_DATA {str(stamp)[:40]} is not a date: the run's date is "
                                             f"unknown (1970)"))
    if warnings:  # as a run's rank_warnings: each with its code (ert.records.warning_codes.with_codes)
        metadata.update(rank_warnings=[str(w) for w in warnings], rank_warning_codes=[code_of(w) for w in warnings])
    return RawData(path, header_record({"metadata": metadata, "planned_points": len(points)}), points)
