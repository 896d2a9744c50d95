"""Nsight Compute CSV read into application kernels: the long form and --page raw, one file or NERSC's two
passes merged, with the metrics `ert profile` reads (time, bytes per level, FLOPs, tensor and integer ops)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ert.interop.kernel_data import PRECISION_LETTERS, KernelData, parse_number, unit_scale
from ert.errors import ErtError

SECTOR_BYTES = 32  # one L1/L2/DRAM sector (the seeds' transaction size)

_FLOP_OPS = ("add", "mul", "fma")
# Time: gpu__time_duration.sum, or elapsed cycles over cycles per second (as in NERSC's
# "Roofline on NVIDIA GPUs" methodology for Nsight Compute).
TIME_METRIC = "gpu__time_duration.sum"
_CYCLE_PAIRS = (("sm__cycles_elapsed.avg", "sm__cycles_elapsed.avg.per_second"),
                ("smsp__cycles_elapsed.avg", "smsp__cycles_elapsed.avg.per_second"),
                ("smsp__cycles_elapsed.sum", "smsp__cycles_elapsed.sum.per_second"))
# Bytes per level: the total metric first, then read+write splits (bytes or 32-byte sectors).
LEVEL_METRICS = {
    "L1": [["l1tex__t_bytes.sum"], ["l1tex__t_sectors.sum"],
           ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"]],
    "L2": [["lts__t_bytes.sum"], ["lts__t_sectors.sum"], ["lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum"]],
    "DRAM": [["dram__bytes.sum"], ["dram__bytes_read.sum", "dram__bytes_write.sum"],
             ["dram__bytes_op_read.sum", "dram__bytes_op_write.sum"],  # ncu 2026
             ["dram__sectors_read.sum", "dram__sectors_write.sum"]],
    # System (host) memory reached through L2 (NERSC's hierarchical-roofline metric list); bytes are
    # 32-byte sectors.  Placed at the host link roof (ert-run's link-h2d level) by `ert profile`.
    "SYSMEM": [["lts__t_sectors_aperture_sysmem.sum"],
               ["lts__t_sectors_aperture_sysmem_op_read.sum", "lts__t_sectors_aperture_sysmem_op_write.sum"],
               ["lts__t_sectors_aperture_sysmem.op_read.sum", "lts__t_sectors_aperture_sysmem.op_write.sum"]],
}
# Tensor-pipe instructions (warp-level) by sub-pipe: the metric names ncu uses (Ampere+: _op_;
# Hopper/Blackwell sections also show _subpipe_), and the key the FLOPs are kept under.
TENSOR_METRICS = (
    ("hmma", ("sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__inst_executed_pipe_tensor_subpipe_hmma.sum"),
     "tensor-fp16"),
    ("dmma", ("sm__inst_executed_pipe_tensor_op_dmma.sum", "sm__inst_executed_pipe_tensor_subpipe_dmma.sum"),
     "tensor-fp64"),
)
# Volta/Turing have one tensor sub-pipe (HMMA): the pipe's total counts it.
TENSOR_TOTAL_METRIC = "sm__inst_executed_pipe_tensor.sum"
# FLOPs per warp-level tensor instruction, by compute capability and sub-pipe (a multiply-add counted as 2):
#   sm_70 (V100): 512 per HMMA instruction: NERSC's "Roofline on NVIDIA GPUs" (Nsight Compute metrics:
#     sm__inst_executed_pipe_tensor.sum x 512); V100's 125 TFLOP/s = 80 SMs x 1530 MHz x 1024 FLOP/cycle,
#     i.e. 2 HMMA instructions per SM per cycle.
#   sm_80, sm_86, sm_89, sm_90 (mma.sync SASS): HMMA.16816 (m16n8k16, FP16/BF16) = 2 x 16 x 8 x 16 = 4096;
#     DMMA.884 (m8n8k4, FP64) = 2 x 8 x 8 x 4 = 512 (PTX ISA, warp-level mma shapes).  The largest HMMA
#     shape is assumed: a kernel issuing HMMA.1688 (m16n8k8, TF32 or FP16) does half as many FLOPs per
#     instruction, so its FLOPs come out twice too high (stated in the kernel's notes).  Likewise sm_90's
#     DMMA.16x8x16 (m16n8k16, FP64) does 4096, 8x the DMMA.884 assumed (said in the notes).  Hopper's
#     wgmma (HGMMA) instructions are not covered by this table.
FLOPS_PER_TENSOR_INST = {
    (7, 0): {"hmma": 512},
    (8, 0): {"hmma": 4096, "dmma": 512}, (8, 6): {"hmma": 4096}, (8, 9): {"hmma": 4096},
    (9, 0): {"hmma": 4096, "dmma": 512},
}
# Integer instructions per thread (IMAD, IADD3, LOP3, shifts ...), each counted as one integer operation.
INTEGER_METRIC = "sm__sass_thread_inst_executed_op_integer_pred_on.sum"
_CC_RE = re.compile(r"\bCC\s*(\d+)\.(\d+)")


def _csv_rows(text: str, path) -> list[tuple[int, list[str]]]:
    """(line number, cells) of the CSV lines; ncu's ==PROF== lines and the application's output are skipped."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith('"'):
            if rows and '","' in line:
                # ncu quotes every cell: a line of quoted cells after the header that does not open with a
                # quote is a damaged row (a kernel's), not the application's output; dropping it would hide
                # a kernel.
                raise ErtError(f"a CSV row that lost its opening quote: {line[:60]!r}", path=path,
                               key=f"line {number}")
            continue
        try:
            cells = next(csv.reader([line]))
        except csv.Error as exc:
            raise ErtError(f"malformed CSV: {exc}", path=path, key=f"line {number}") from None
        rows.append((number, cells))
    return rows


def read_ncu_csv(text: str, *, path) -> list[KernelData]:
    """Both CSV layouts ncu writes: `--csv` (one metric per row) and `--csv --page raw` (one launch per row)."""
    return read_ncu_files([(text, path)])


_EURO_RE = re.compile(r"^[+-]?(\d{1,3}(\.\d{3}){2,}(,\d*)?|\d{1,3}(\.\d{3})+,\d*|\d+,(\d{1,2}|\d{4,}))$")


def _convention(text: str) -> str:
    """'decimal comma' when some quoted value can only be read that way (1.000.000, 65,77), else 'decimal point'."""
    for value in re.findall(r'(?<=")[0-9.,+-]+(?=")', text):
        if _EURO_RE.match(value):
            return "decimal comma"
    return "decimal point"


_NVPROF_RE = re.compile(r"^==\d+== NVPROF", re.MULTILINE)
# nvprof --csv --metrics: a header line of per-kernel Min/Max/Avg columns.
_NVPROF_HEADER_RE = re.compile(r'^"Device","Kernel","Invocations","Metric Name","Metric Description"', re.MULTILINE)


def _refuse_non_ncu(text: str, path) -> None:
    # nvprof announces itself as "==<pid>== NVPROF is profiling ..." at the start of a line.
    if _NVPROF_RE.search(text) or _NVPROF_HEADER_RE.search(text):
        raise ErtError("nvprof output is not supported (per-kernel Min/Max/Avg, no kernel time); profile with "
                       "Nsight Compute: ncu --csv --metrics <the NERSC set>", path=path)
    errors = [line.strip() for line in text.splitlines() if line.lstrip("\ufeff").startswith("==ERROR==")]
    if errors:
        raise ErtError(f"ncu wrote no kernel table: the profiled run failed ({errors[0]})", path=path)
    if re.search(r"^==PROF==", text, re.MULTILINE) and '"Kernel Name"' not in text:
        raise ErtError("ncu wrote no kernel table: no kernel was profiled (only ==PROF== lines)", path=path)


def _launches_of(text: str, path):
    _refuse_non_ncu(text, path)
    convention = _convention(text)
    rows = _csv_rows(text, path)
    for index, (number, cells) in enumerate(rows):
        if "Kernel Name" not in cells:
            continue
        if "Metric Name" in cells and "Metric Value" in cells:
            launches = _long_form(cells, rows[index + 1:], path)
        elif any("__" in c for c in cells):
            launches = _raw_form(cells, rows[index + 1:], path)
        else:
            break
        if not launches:
            raise ErtError("the ncu CSV has a header but no kernel rows", path=path, key=f"line {number}")
        return launches, convention
    raise ErtError('unknown ncu CSV layout: expected a header with "Kernel Name" and either "Metric Name", '
                   '"Metric Unit", "Metric Value" (ncu --csv) or metric columns (ncu --csv --page raw)', path=path)


def read_ncu_files(files) -> list[KernelData]:
    """Kernels of one or more ncu CSVs ((text, path) pairs), launches merged by (launch ID, kernel name)."""
    parsed = []
    for text, path in files:
        launches, convention = _launches_of(text, path)
        has_bytes = any(m.split(".")[0] in _BYTE_PREFIXES for _, _, metrics, _, _ in launches for m in metrics)
        parsed.append((not has_bytes, len(parsed), path, launches, convention))
    parsed.sort(key=lambda t: t[:2])  # files with byte metrics (the memory + time pass) first
    merged: dict[tuple[str, str], list] = {}
    for _, _, path, launches, convention in parsed:
        for launch_id, name, metrics, where, device in launches:
            entry = merged.setdefault((launch_id, name), [name, {}, where, device, path, convention])
            for metric, value in metrics.items():
                entry[1].setdefault(metric, value + (convention,))
            entry[3] = entry[3] or device
    path = parsed[0][2]
    all_metrics = {m for entry in merged.values() for m in entry[1]}
    if not any("sass_thread_inst_executed_op_" in m or m.startswith("sm__inst_executed_pipe_tensor")
               for m in all_metrics):
        raise ErtError("no FLOP counts in this file (no sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}"
                       "_pred_on.sum): a memory-only pass? give the FLOP pass too (ert profile MEM.csv FLOP.csv)",
                       path=path)
    kernels = [_kernel_of(name, metrics, where, p, device) for name, metrics, where, device, p, _ in merged.values()]
    notes = []
    if len(files) > 1:
        notes.append(f"merged {len(files)} ncu files by launch ID and kernel name")
    for _, _, p, _, convention in parsed:
        if convention == "decimal comma":
            notes.append(f"{Path(str(p)).name}: numbers read with a decimal comma (1.234,5)")
    out = _aggregate(kernels)
    for k in out:
        k.notes = notes + k.notes
    return out


_BYTE_PREFIXES = ("lts__t_sectors_aperture_sysmem", "dram__bytes", "dram__sectors_read", "dram__sectors_write", "lts__t_bytes", "lts__t_sectors",
                  "l1tex__t_bytes", "l1tex__t_sectors", "dram__bytes_op_read", "dram__bytes_op_write")


def _check_width(cells: list[str], width: int, number: int, path) -> None:
    if len(cells) != width:
        raise ErtError(f"CSV of the wrong shape: {len(cells)} fields where the header has {width}",
                       path=path, key=f"line {number}")


def _long_form(header: list[str], rows, path):
    col = {name: header.index(name) for name in ("Kernel Name", "Metric Name", "Metric Value")}
    id_col = header.index("ID") if "ID" in header else None
    unit_col = header.index("Metric Unit") if "Metric Unit" in header else None
    dev_cols = [header.index(c) for c in ("Device", "CC") if c in header]
    launches: dict[tuple[str, str], list] = {}
    needed = max(col.values()) + 1
    for number, cells in rows:
        if len(cells) < len(header) and len(cells) >= needed:
            cells = cells + [""] * (len(header) - len(cells))  # --section rule columns left empty on metric rows
        _check_width(cells, len(header), number, path)
        metric = cells[col["Metric Name"]]
        if not metric:  # a rule row of `--page details`: no metric
            continue
        launch_id = cells[id_col] if id_col is not None else cells[col["Kernel Name"]]
        name = cells[col["Kernel Name"]]
        device = ", ".join(f"{header[i]} {cells[i]}" for i in dev_cols if cells[i]) or None
        entry = launches.setdefault((launch_id, name), [launch_id, name, {}, f"ID {launch_id} (line {number})",
                                                        device])
        unit = cells[unit_col] if unit_col is not None else ""
        entry[2][metric] = (cells[col["Metric Value"]], unit, f"line {number}")
    return [tuple(v) for v in launches.values()]


def _raw_form(header: list[str], rows, path):
    name_col = header.index("Kernel Name")
    units = [""] * len(header)
    launches = []
    for position, (number, cells) in enumerate(rows):
        _check_width(cells, len(header), number, path)
        if position == 0 and not cells[0].strip():  # the units row: no ID, a unit under each metric
            units = cells
            continue
        metrics = {h: (cells[i], units[i], f"line {number}, column {h!r}") for i, h in enumerate(header) if "__" in h}
        device = metrics.get("device__attribute_display_name", ("",))[0] or None
        launches.append((cells[0], cells[name_col], metrics, f"ID {cells[0]} (line {number})", device))
    return launches


def _metric(metrics: dict, name: str, *, kinds: tuple[str, ...], path) -> float | None:
    """The value of one metric in base units (bytes, seconds, counts), or None when absent or n/a."""
    if name not in metrics:
        return None
    text, unit, where, *rest = metrics[name]
    value = parse_number(text, where=where, path=path, decimal_comma=bool(rest) and rest[0] == "decimal comma")
    if value is None:
        return None
    kind, factor = unit_scale(unit, where=where, path=path)
    if kind not in kinds:
        raise ErtError(f"metric {name} has unit {unit!r}; expected {' or '.join(kinds)}", path=path, key=where)
    return value * factor


def _seconds_of(metrics: dict, name: str, where: str, path) -> float:
    seconds = _metric(metrics, TIME_METRIC, kinds=("time",), path=path)
    if seconds is None:
        for cycles_name, rate_name in _CYCLE_PAIRS:
            cycles = _metric(metrics, cycles_name, kinds=("cycle", "count"), path=path)
            rate = _metric(metrics, rate_name, kinds=("cycle/time", "count/time"), path=path)
            if cycles is not None and rate:
                seconds = cycles / rate
                break
    if seconds is None or seconds <= 0:
        raise ErtError(f"kernel {name!r} has no time: missing metric {TIME_METRIC} (or "
                       f"{_CYCLE_PAIRS[0][0]} with {_CYCLE_PAIRS[0][1]})"
                       + _na_note(metrics, [TIME_METRIC] + [m for pair in _CYCLE_PAIRS for m in pair]),
                       path=path, key=where)
    return seconds


def _na_note(metrics: dict, names) -> str:
    """'; dram__bytes.sum is present but n/a' for the candidate metrics ncu listed without a value."""
    na = [m for m in dict.fromkeys(names) if m in metrics and metrics[m][0].strip() in ("", "n/a", "N/A", "(!) n/a", "-")]
    return f"; {', '.join(na)} {'is' if len(na) == 1 else 'are'} present but n/a" if na else ""


def _flops_of(metrics: dict, name: str, where: str, path) -> tuple[dict[str, float], dict[str, float]]:
    flops, ratios = {}, {}
    seen = False
    for precision, letter in PRECISION_LETTERS:
        counts = {}
        for op in _FLOP_OPS:
            for prefix in ("sm__", "smsp__"):
                metric = f"{prefix}sass_thread_inst_executed_op_{letter}{op}_pred_on.sum"
                if metric in metrics:
                    counts[op] = _metric(metrics, metric, kinds=("count",), path=path)
                    break
        if not counts:
            continue
        seen = True
        missing = [op for op in _FLOP_OPS if counts.get(op) is None]
        if missing:
            metric = f"sm__sass_thread_inst_executed_op_{letter}{missing[0]}_pred_on.sum"
            na = _na_note(metrics, [metric, "smsp__" + metric[4:]])
            raise ErtError(f"kernel {name!r}: {'metric is n/a' if na else 'missing metric'} {metric} "
                           f"({precision} FLOPs need add, mul and fma counts)", path=path, key=where)
        total = counts["add"] + counts["mul"] + 2 * counts["fma"]  # an FMA is two FLOPs
        if total > 0:
            flops[precision] = total
            ratios[precision] = counts["fma"] / (counts["add"] + counts["mul"] + counts["fma"])
    if not flops and seen:
        return {}, {}  # counted, and zero: a kernel without floating-point work (listed as such)
    if not flops:
        raise ErtError(f"kernel {name!r}: missing metric: no FLOP counts (need "
                       "sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum)", path=path, key=where)
    return flops, ratios


def _bytes_of(metrics: dict, name: str, where: str, path, seconds: float) -> dict[str, float]:
    out = {}
    for level, alternatives in LEVEL_METRICS.items():
        for names in alternatives:
            values = [_metric(metrics, m, kinds=("byte", "sector", "count"), path=path) for m in names]
            if all(v is not None for v in values):
                if level == "SYSMEM" and not sum(values):
                    break  # no host-memory traffic: not a level of this kernel
                out[level] = sum(values) * (SECTOR_BYTES if "sectors" in names[0] else 1)
                break
    if "DRAM" not in out:
        rate = _metric(metrics, "dram__bytes.sum.per_second", kinds=("byte/time",), path=path)
        if rate is not None:
            out["DRAM"] = rate * seconds  # a rate only (older ncu sets): bytes = rate x kernel time
    if not out:
        candidates = [m for alts in LEVEL_METRICS.values() for names in alts for m in names]
        raise ErtError(f"kernel {name!r}: missing metric: no bytes at any level (need dram__bytes.sum, "
                       "lts__t_bytes.sum or l1tex__t_bytes.sum)" + _na_note(metrics, candidates),
                       path=path, key=where)
    return out


def _compute_capability(metrics: dict, device: str | None, path) -> tuple[int, int] | None:
    major = _metric(metrics, "device__attribute_compute_capability_major", kinds=("count",), path=path)
    minor = _metric(metrics, "device__attribute_compute_capability_minor", kinds=("count",), path=path)
    if major is not None and minor is not None:
        return int(major), int(minor)
    m = _CC_RE.search(device or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _tensor_and_integer_ops(metrics: dict, name: str, path, device: str | None) -> tuple[dict[str, float], list[str]]:
    """Tensor FLOPs (by sub-pipe, from warp-level instruction counts x FLOPs per instruction) and integer ops."""
    out, notes = {}, []
    counts = {}
    for pipe, names, key in TENSOR_METRICS:
        value = next((v for m in names if (v := _metric(metrics, m, kinds=("count",), path=path)) is not None), None)
        if value:
            counts[pipe] = (value, next(m for m in names if m in metrics), key)
    if not counts:
        total = _metric(metrics, TENSOR_TOTAL_METRIC, kinds=("count",), path=path)
        if total:
            counts["hmma"] = (total, TENSOR_TOTAL_METRIC, "tensor-fp16")
    if counts:
        cc = _compute_capability(metrics, device, path)
        table = FLOPS_PER_TENSOR_INST.get(cc, {}) if cc else {}
        for pipe, (value, metric, key) in counts.items():
            per = table.get(pipe)
            if per is None:
                notes.append(f"{metric} = {value:.4g} tensor instructions not placed: no FLOPs per {pipe.upper()} "
                             f"instruction known for " + (f"sm_{cc[0]}{cc[1]}" if cc else
                                                          "this GPU (its compute capability is not in the file)"))
                continue
            out[key] = out.get(key, 0.0) + value * per
            assumed = " (the largest HMMA shape; HMMA.1688 does half)" if pipe == "hmma" and cc >= (8, 0) else ""
            if pipe == "dmma" and cc == (9, 0):  # sm_90 has a wider DMMA too (ert measures both shapes)
                assumed = " (DMMA.8x8x4; sm_90's DMMA.16x8x16, m16n8k16, does 8x as many: 4096)"
            notes.append(f"{key} FLOPs = {metric} x {per} FLOPs per warp-level {pipe.upper()} instruction "
                         f"(sm_{cc[0]}{cc[1]}{assumed})")
    integer = _metric(metrics, INTEGER_METRIC, kinds=("count",), path=path)
    if integer:
        out["int32"] = integer
        notes.append(f"int32 ops = {INTEGER_METRIC} (each integer instruction one operation; the integer roof "
                     f"counts a multiply-add as 2, so IMAD-heavy code sits up to 2x lower than its work)")
    return out, notes


def _kernel_of(name: str, metrics: dict, where: str, path, device: str | None = None) -> KernelData:
    seconds = _seconds_of(metrics, name, where, path)
    extra, notes = _tensor_and_integer_ops(metrics, name, path, device)
    if extra and not any("sass_thread_inst_executed_op_" in m and m != INTEGER_METRIC for m in metrics):
        flops, ratios = {}, {}  # tensor or integer counts only: no vector FP counts to read
    else:
        flops, ratios = _flops_of(metrics, name, where, path)
    flops = {**flops, **extra}
    if "DRAM" not in {lvl for lvl, alts in LEVEL_METRICS.items() for names in alts if all(m in metrics for m in names)} \
            and "dram__bytes.sum.per_second" in metrics:
        notes.append("DRAM bytes = dram__bytes.sum.per_second x kernel time")
    return KernelData(name=name, seconds=seconds, flops=flops, bytes=_bytes_of(metrics, name, where, path, seconds),
                      fma_ratio=ratios, fma_ratio_source="instruction counts", device=device, notes=notes)


def _aggregate(launches: list[KernelData]) -> list[KernelData]:
    """One entry per kernel name: times, FLOPs and bytes summed over its launches (first-seen order)."""
    by_name: dict[str, list[KernelData]] = {}
    for k in launches:
        by_name.setdefault(k.name, []).append(k)
    out = []
    for name, group in by_name.items():
        flops = {p: sum(k.flops.get(p, 0.0) for k in group) for p in {p for k in group for p in k.flops}}
        levels = [lvl for lvl in LEVEL_METRICS if all(lvl in k.bytes for k in group)]
        ratios = {}
        for p in flops:
            # FMA share of all launches' instructions: weight each launch's ratio by its instruction count.
            weights = [(k.fma_ratio[p], k.flops[p] / (1 + k.fma_ratio[p])) for k in group if p in k.fma_ratio]
            total = sum(w for _, w in weights)
            if total > 0:
                ratios[p] = sum(r * w for r, w in weights) / total
        out.append(KernelData(name=name, seconds=sum(k.seconds for k in group), flops=flops,
                              bytes={lvl: sum(k.bytes[lvl] for k in group) for lvl in levels},
                              fma_ratio=ratios, launches=len(group), fma_ratio_source=group[0].fma_ratio_source,
                              device=group[0].device, notes=list(dict.fromkeys(n for k in group for n in k.notes))))
    return out
