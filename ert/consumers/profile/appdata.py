"""Application data for rooflines: the kernels of Nsight Compute CSV files (read by ``ert.interop.ncu_csv``)
or of a hand-written YAML/JSON file (the data model and number reading are ``ert.interop.kernel_data``)."""

from __future__ import annotations

import math
from pathlib import Path

from ert.errors import ErtError, parse_user_json, read_user_text
from ert.records.ceilings_io import magnitude_fault
from ert.interop.kernel_data import PRECISION_LETTERS, KernelData


# ----------------------------------------------------------------------------------------- reading files
def _read_text(path: Path) -> str:
    return read_user_text(path, expected="an application data file")


def _is_profiler_output(path: Path, text: str) -> bool:
    suffix = path.suffix.lower()
    return suffix == ".csv" or (suffix not in (".yaml", ".yml", ".json") and any(
        mark in text for mark in ('"Kernel Name"', "==PROF==", "==ERROR==", "NVPROF", '"Metric Name"')))


def load_app(path, *more) -> list[KernelData]:
    """Kernels from ncu CSV files (either layout) or a hand-written YAML/JSON file; ErtError on any fault.

    Several ncu files (NERSC's two passes: memory + time, then FLOPs) are merged
    by kernel and launch ID before the kernels are built: for a metric in both,
    the first file that has byte metrics wins, so give the memory+time pass first.
    """
    paths = [Path(p) for p in (path, *more)]
    texts = [_read_text(p) for p in paths]
    if len(paths) == 1 and not _is_profiler_output(paths[0], texts[0]):
        suffix = paths[0].suffix.lower()
        return read_handwritten(texts[0], path=paths[0],
                                as_json=suffix == ".json" or texts[0].lstrip().startswith("{"))
    for p, t in zip(paths, texts):
        if not _is_profiler_output(p, t):
            raise ErtError("only Nsight Compute CSV files can be merged; a hand-written file comes alone", path=p)
    # Imported here: ncu_csv builds on this module's KernelData and units.
    from ert.interop.ncu_csv import read_ncu_files

    return read_ncu_files([(t, p) for t, p in zip(texts, paths)])


# ----------------------------------------------------------------------------------------- hand-written
_KERNEL_KEYS = {"name", "seconds", "flops", "bytes", "fma_ratio", "launches"}


def read_handwritten(text: str, *, path, as_json: bool) -> list[KernelData]:
    """YAML or JSON: {kernels: [{name, seconds, flops: {fp64: N}, bytes: {L1: N, L2: N, DRAM: N}, fma_ratio?}]}."""
    if as_json:
        doc = parse_user_json(text, path=path)
    else:
        import yaml

        from ert.config import yamlsafe

        try:
            doc = yamlsafe.load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ErtError(f"invalid YAML: {getattr(exc, 'problem', None) or exc}", path=path,
                           key=f"line {mark.line + 1}" if mark else None) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list) or not doc["kernels"]:
        raise ErtError("expected a mapping with a non-empty list 'kernels'", path=path, key="kernels")
    return [_handwritten_kernel(k, i, path) for i, k in enumerate(doc["kernels"])]


def _positive(value, key: str, path, *, allow_zero: bool = False) -> float:
    if isinstance(value, str):
        # YAML 1.1 reads 2.0e8 (no sign in the exponent) as a string; take it as the number it was meant to be.
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        # math.isfinite(10**400) raises OverflowError: no float holds it.
        raise ErtError(f"expected a positive number below 1e30, got an integer of {len(str(abs(value)))} digits",
                       path=path, key=key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero):
        raise ErtError(f"expected a positive number, got {value!r}", path=path, key=key)
    if magnitude_fault(value):
        # Ratios of such numbers (intensity, % of a roof) overflow to infinity or 0 in the plots.
        raise ErtError(magnitude_fault(value), path=path, key=key)
    return float(value)




def _handwritten_kernel(entry, index: int, path) -> KernelData:
    where = f"kernels[{index}]"
    if not isinstance(entry, dict):
        raise ErtError("expected a mapping", path=path, key=where)
    unknown = sorted(set(entry) - _KERNEL_KEYS)
    if unknown:
        raise ErtError(f"unknown key (allowed: {', '.join(sorted(_KERNEL_KEYS))})", path=path,
                       key=f"{where}.{unknown[0]}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ErtError("every kernel needs a name", path=path, key=f"{where}.name")
    if "seconds" not in entry:
        raise ErtError(f"kernel {name!r} has no time: give seconds", path=path, key=f"{where}.seconds")
    seconds = _positive(entry["seconds"], f"{where}.seconds", path)
    flops = entry.get("flops")
    if not isinstance(flops, dict) or not flops:
        raise ErtError(f"kernel {name!r}: give flops per precision, e.g. {{fp64: 1.0e9}}", path=path,
                       key=f"{where}.flops")
    for p in flops:
        if p not in dict(PRECISION_LETTERS):
            raise ErtError("unknown precision (fp64, fp32, fp16)", path=path, key=f"{where}.flops.{p}")
    flops = {p: _positive(v, f"{where}.flops.{p}", path, allow_zero=True) for p, v in flops.items()}
    if not any(flops.values()):
        raise ErtError(f"kernel {name!r} does no FLOPs", path=path, key=f"{where}.flops")
    levels = entry.get("bytes")
    if not isinstance(levels, dict) or not levels:
        raise ErtError(f"kernel {name!r}: give bytes per level, e.g. {{L1: ..., L2: ..., DRAM: ...}}", path=path,
                       key=f"{where}.bytes")
    levels = {str(k): _positive(v, f"{where}.bytes.{k}", path) for k, v in levels.items()}
    ratios = {}
    if "fma_ratio" in entry:
        f = entry["fma_ratio"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            raise ErtError(f"expected a fraction from 0 to 1, got {f!r}", path=path, key=f"{where}.fma_ratio")
        ratios = {p: float(f) for p in flops}
    launches = entry.get("launches", 1)
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise ErtError(f"expected a positive integer, got {launches!r}", path=path, key=f"{where}.launches")
    return KernelData(name=name, seconds=seconds, flops={p: v for p, v in flops.items() if v > 0}, bytes=levels,
                      fma_ratio=ratios, launches=launches)
