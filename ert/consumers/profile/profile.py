"""Place application kernels on the hierarchical roofline: AI per level, the binding ceiling, % of attainable."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ert.consumers import roofs as roofs_mod
from ert.interop.kernel_data import KernelData
from ert.errors import ErtError


def fma_ratio_ceiling(*, fma_ratio: float, fma_peak_gflops_per_s: float) -> float:
    """The FMA-ratio ceiling: (2f + 1 - f)/2 x peak.

    f = fma / (add + mul + fma), counted in instructions; peak is the FMA peak
    of that precision (every instruction an FMA). With f FMAs among the
    instructions, each FMA issues 2 FLOPs and every other instruction 1, so
    the reachable share of the FMA peak is (2f + (1 - f)) / 2.
    """
    if not 0.0 <= fma_ratio <= 1.0:
        raise ErtError(f"FMA ratio must be from 0 to 1, got {fma_ratio}", key="--fma-ratio")
    return (2 * fma_ratio + 1 - fma_ratio) / 2 * fma_peak_gflops_per_s


@dataclass
class LevelResult:
    """One memory level of one kernel: its bytes, its AI, the roof it moves through and the bound it sets."""

    level: str
    bytes: float
    ai_flops_per_byte: float
    roof_level: str | None
    roof_gbytes_per_s: float | None
    bound_gflops_per_s: float | None  # AI x bandwidth: the most this level lets the kernel reach


@dataclass
class PrecisionResult:
    """One precision of one kernel on the roofline."""

    precision: str
    flops: float
    gflops_per_s: float
    levels: list[LevelResult]
    compute_ceiling: str | None
    compute_gflops_per_s: float | None
    fma_peak_gflops_per_s: float | None
    fma_ratio: float | None
    fma_ratio_source: str | None  # "--fma-ratio", "instruction counts", "file"
    attainable_gflops_per_s: float | None
    binding: str | None
    percent_of_attainable: float | None
    notes: list[str] = field(default_factory=list)
    unit: str = "GFLOP/s"  # GIOP/s for integer operations (``int32``)


@dataclass
class KernelProfile:
    name: str
    seconds: float
    launches: int
    results: list[PrecisionResult]
    device: str | None = None
    notes: list[str] = field(default_factory=list)


def profile_kernel(kernel: KernelData, doc: dict, *, access: str = "rw",
                   fma_ratio: float | None = None) -> KernelProfile:
    """The hierarchical roofline of one kernel against one ceilings document.

    Attainable GFLOP/s = min(compute ceiling, AI_level x bandwidth_level over
    every level with bytes): the superposition of one roofline per level
    (Yang et al., "Hierarchical Roofline Analysis for GPUs"). The binding ceiling is whichever term is smallest.
    """
    results = []
    for precision in sorted(kernel.flops, key=lambda p: -kernel.flops[p]):
        flops = kernel.flops[precision]
        notes = []
        if precision.startswith("tensor-") or precision in ("int32", "int64"):
            results.append(_extra_result(kernel, doc, precision, flops, access=access))
            continue
        mem_roofs, basis = roofs_mod.memory_roofs(doc, precision=precision, access=access)
        levels, disturbed = [], set()
        for level, nbytes in kernel.bytes.items():
            roof = roofs_mod.match_level(level, mem_roofs)
            if roof is not None and roof.disturbed:
                disturbed.add(f"{roof.level} bandwidth")
            if level.strip().upper() in roofs_mod.SYSTEM_MEMORY_ALIASES:
                link = roofs_mod.system_memory_roof(doc)
                roof = roofs_mod.MemoryRoof(level=link.name, gbytes_per_s=link.gbytes_per_s, precision=None,
                                            access=None, wss_bytes=(0, 0), spread=link.spread) if link else None
                if link is not None:
                    notes.append(f"{level} bytes (Nsight Compute lts__t_sectors_aperture_sysmem: L2 sectors to "
                                 f"and from host memory) are bound by the host link roof {link.name}")
                else:
                    notes.append(f"no host link level (link-h2d) in the ceilings file: {level} bytes do not "
                                 f"bound this kernel here (measure one with ert-run --levels links on the GPU)")
                    roof = None
            ai = flops / nbytes
            if roof is None and level.strip().upper() not in roofs_mod.SYSTEM_MEMORY_ALIASES:
                notes.append(f"no {level} ceiling in the ceilings file: {level} bytes do not bound this kernel here")
            levels.append(LevelResult(level=level, bytes=nbytes, ai_flops_per_byte=ai,
                                      roof_level=roof.level if roof else None,
                                      roof_gbytes_per_s=roof.gbytes_per_s if roof else None,
                                      bound_gflops_per_s=ai * roof.gbytes_per_s if roof else None))
        peak = roofs_mod.fma_roof(doc, precision)
        f = fma_ratio if fma_ratio is not None else kernel.fma_ratio.get(precision)
        source = "--fma-ratio" if fma_ratio is not None else (kernel.fma_ratio_source if f is not None else None)
        compute_name = compute_value = short_name = None
        if peak is None:
            notes.append(f"no {precision} compute ceiling in the ceilings file: only memory bounds apply")
        elif f is not None:
            compute_value = fma_ratio_ceiling(fma_ratio=f, fma_peak_gflops_per_s=peak.gflops_per_s)
            short_name = f"{precision.upper()} FMA-ratio ceiling"
            compute_name = f"{short_name} (f = {f:.0%}: {(1 + f) / 2:.3g} x {peak.name} {_num(peak.gflops_per_s)})"
        else:
            compute_value, compute_name = peak.gflops_per_s, f"{peak.name} peak"
            short_name = compute_name
        if peak is not None and peak.disturbed:
            disturbed.add(short_name)
        bounds = [(lv.bound_gflops_per_s, f"{lv.roof_level} bandwidth") for lv in levels
                  if lv.bound_gflops_per_s is not None]
        if compute_value is not None:
            bounds.append((compute_value, short_name))
        attainable, binding = min(bounds, key=lambda b: b[0]) if bounds else (None, None)
        gflops = flops / kernel.seconds / 1e9
        if attainable and gflops > attainable * 1.005:
            notes.insert(0, f"WARNING: achieved {_num(gflops)} GFLOP/s exceeds the attainable {_num(attainable)} "
                            f"GFLOP/s ({binding}): these ceilings do not describe the device this kernel ran on, "
                            f"or a byte count is missing")
        if binding in disturbed:
            notes.insert(0, DISTURBED_BINDING.format(binding=binding))
        results.append(PrecisionResult(
            precision=precision, flops=flops, gflops_per_s=gflops, levels=levels, compute_ceiling=compute_name,
            compute_gflops_per_s=compute_value, fma_peak_gflops_per_s=peak.gflops_per_s if peak else None,
            fma_ratio=f, fma_ratio_source=source, attainable_gflops_per_s=attainable, binding=binding,
            percent_of_attainable=100.0 * gflops / attainable if attainable else None,
            notes=[f"memory roofs: {basis}"] + notes + list(kernel.notes)))
    kernel_notes = [] if results else ["no floating-point work (its FLOP counts are 0): not placed on the roofline"]
    return KernelProfile(name=kernel.name, seconds=kernel.seconds, launches=kernel.launches, results=results,
                         device=kernel.device, notes=kernel_notes + _device_notes(kernel, doc))


# The binding ceiling was measured while the host was disturbed (``disturbed: true``): the attainable rate is low.
DISTURBED_BINDING = ("the binding ceiling ({binding}) was measured while the host was disturbed: not the machine's, "
                     "so the attainable rate is understated and the share of it overstated (measure on a quiet host)")


def _extra_result(kernel: KernelData, doc: dict, key: str, ops: float, *, access: str) -> PrecisionResult:
    """Tensor FLOPs (``tensor-fp16``, ``tensor-fp64``) under the tensor roof of that input type, or integer
    operations (``int32``) under the integer multiply-add roof (GIOP/s), with the memory levels' bounds."""
    tensor = key.startswith("tensor-")
    base = key.split("-", 1)[1] if tensor else key
    roof = roofs_mod.tensor_roof(doc, base) if tensor else roofs_mod.integer_roof(doc, base)
    mem_roofs, basis = roofs_mod.memory_roofs(doc, precision=base, access=access)
    notes, levels = [], []
    for level, nbytes in kernel.bytes.items():
        mroof = roofs_mod.match_level(level, mem_roofs)
        ai = ops / nbytes
        if mroof is None:
            notes.append(f"no {level} ceiling in the ceilings file: {level} bytes do not bound this kernel here")
        levels.append(LevelResult(level=level, bytes=nbytes, ai_flops_per_byte=ai,
                                  roof_level=mroof.level if mroof else None,
                                  roof_gbytes_per_s=mroof.gbytes_per_s if mroof else None,
                                  bound_gflops_per_s=ai * mroof.gbytes_per_s if mroof else None))
    name = f"{roof.name} peak" if roof else None
    if roof is None:
        what = f"{base} tensor" if tensor else f"{base} integer"
        notes.append(f"no {what} ceiling in the ceilings file (measure it: "
                     f"{'ert-run configs/gpu-tensor.yaml' if tensor else 'ert-run configs/integer-cpu.yaml'}): "
                     f"only memory bounds apply")
    bounds = [(lv.bound_gflops_per_s, f"{lv.roof_level} bandwidth") for lv in levels
              if lv.bound_gflops_per_s is not None]
    if roof is not None:
        bounds.append((roof.value, name))
    attainable, binding = min(bounds, key=lambda b: b[0]) if bounds else (None, None)
    rate = ops / kernel.seconds / 1e9
    if attainable and rate > attainable * 1.005:
        notes.insert(0, f"WARNING: achieved {_num(rate)} exceeds the attainable {_num(attainable)} ({binding}): "
                        f"these ceilings do not describe the device this kernel ran on, or a count is missing")
    return PrecisionResult(precision=key, flops=ops, gflops_per_s=rate, levels=levels, compute_ceiling=name,
                           compute_gflops_per_s=roof.value if roof else None, fma_peak_gflops_per_s=None,
                           fma_ratio=None, fma_ratio_source=None, attainable_gflops_per_s=attainable,
                           binding=binding, percent_of_attainable=100.0 * rate / attainable if attainable else None,
                           notes=[f"memory roofs: {basis}"] + notes + list(kernel.notes), unit=_unit(key))


def _unit(key: str) -> str:
    return "GIOP/s" if key in ("int32", "int64", "tensor-int8") else "GFLOP/s"


_CPU_BACKENDS = ("numba-cpu", "cpu", "cpu-rated")


def _device_notes(kernel: KernelData, doc: dict) -> list[str]:
    """A warning when the profiled GPU is not the device the ceilings describe."""
    if not kernel.device:
        return []
    meta = doc.get("metadata", {})
    ceiling_device = str(meta.get("device") or "")
    backend = str(meta.get("backend") or "")
    if not ceiling_device or backend in _CPU_BACKENDS or (meta.get("tool") == "ERT" and backend != "ERT GPU"):
        return [f"WARNING: profiled on a GPU ({kernel.device}) but the ceilings describe "
                f"{roofs_mod.machine_label(doc)}, not that GPU"]
    if "Device" in kernel.device and not any(w in kernel.device for w in ceiling_device.split() if len(w) > 2):
        return [f"note: profiled device ({kernel.device}) is not named as the ceilings' device ({ceiling_device}); "
                f"check they are the same GPU"]
    return []


def profile_all(kernels: list[KernelData], doc: dict, *, access: str = "rw",
                fma_ratio: float | None = None) -> list[KernelProfile]:
    return [profile_kernel(k, doc, access=access, fma_ratio=fma_ratio) for k in kernels]


# ----------------------------------------------------------------------------------------- output
def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 1e7 or abs(value) < 1e-3:
        return f"{value:.3g}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _bytes(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def format_profiles(profiles: list[KernelProfile], doc: dict) -> str:
    """One block per kernel and precision: a table of levels, then the binding ceiling and % of attainable."""
    lines = [f"ceilings: {roofs_mod.machine_label(doc)}"]
    for prof in profiles:
        if not prof.results:
            lines += ["", f"kernel {prof.name}  ({_num(prof.seconds * 1e3)} ms)"]
        for res in prof.results:
            launches = f", {prof.launches} launches" if prof.launches > 1 else ""
            lines += ["", f"kernel {prof.name}  ({res.precision}, {_num(prof.seconds * 1e3)} ms{launches})"]
            unit = res.unit
            op = "IOP" if unit == "GIOP/s" else "FLOP"
            header = ("level", "bytes", f"AI {op}/byte", "roof GB/s", f"bound {unit}")
            rows = [(lv.level if lv.roof_level in (None, lv.level) else f"{lv.level} ({lv.roof_level})",
                     _bytes(lv.bytes), _num(lv.ai_flops_per_byte), _num(lv.roof_gbytes_per_s),
                     _num(lv.bound_gflops_per_s)) for lv in res.levels]
            widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
            for row in (header, *rows):
                lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                              for i, (c, w) in enumerate(zip(row, widths))))
            if res.compute_ceiling:
                lines.append(f"  compute ceiling: {res.compute_ceiling} = {_num(res.compute_gflops_per_s)} {unit}")
            lines.append(f"  achieved {_num(res.gflops_per_s)} {unit}; attainable {_num(res.attainable_gflops_per_s)}"
                         f" {unit}, bound by {res.binding or '-'}; "
                         f"{_num(res.percent_of_attainable, 3)}% of attainable")
            lines += [f"  note: {n}" for n in res.notes]
        lines += [f"  {n}" for n in prof.notes]
    return "\n".join(lines)


def to_json(profiles: list[KernelProfile], doc: dict) -> dict:
    """Machine-readable profile (what `ert profile --json` prints)."""
    return {"ceilings_machine": roofs_mod.machine_label(doc),
            "kernels": [asdict(p) for p in profiles]}
