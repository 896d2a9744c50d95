"""The ceiling document from raw records: compute peaks here, memory levels (ert.analysis.memory), and the rest."""

from __future__ import annotations

import copy
import statistics

from ert.analysis.hosts import host_ceilings
from ert.analysis.roof_confirm import DEFAULT_NOISE_THRESHOLD, mark_not_reproduced, noise_threshold
from ert.analysis.memory import PRECISION_ORDER, caches_by_access, memory_ceilings
from ert.analysis.rated import attach_rated, compute_name, invalidate_above_rated, scaled_rated
from ert.analysis.transfers import transfer_ceilings
from ert.analysis.weather import (below_earlier, disturbed_throughout, flag_below_earlier, flag_disturbed,
                                  flag_memory_below_earlier, memory_below_earlier, memory_earlier, mostly_disturbed,
                                  flag_throughout, stretches_of, throughout_warning, weather_block, weather_warning)
from ert.records.ceilings_io import SCHEMA_VERSION  # one constant for writer and reader
from ert.analysis.mode_results import attach_sustained, by_thread_count, planned_points, scaling_section
from ert.records.rawio import RAW_NAME, RawData, best_launches
from ert.spec import is_integer, ops_unit, peak_spread, rates
from ert.records.warning_codes import codes_of, warn, with_codes

# A run in which at least this share of the points stayed noisy was measured on a busy machine.
BUSY_NOISY_SHARE = 0.5


# A tensor ceiling's shape and types, from the MMA it ran (ert.spec.SHAPES).
TENSOR_TYPES = {"fp16": ("f16", "f32"), "bf16": ("bf16", "f32"), "tf32": ("tf32", "f32"), "fp64": ("f64", "f64"),
                "fp8": ("e4m3", "f32"), "int8": ("s8", "s32")}


def compute_ceilings(points: list[dict]) -> tuple[list[dict], list[str]]:
    """The highest median GFLOP/s over all multiply-add points, per precision, FMA or not, and pipe."""
    best: dict[tuple, tuple[float, dict]] = {}
    for rec in points:
        spec = rec["spec"]
        if not rec["valid"] or spec["access"] != "rw" or spec["flops_per_element"] < 2:
            continue
        key = (spec["precision"], spec["fma"], spec.get("op", "madd"), spec.get("mix", ""), spec.get("pipe", "vector"),
               spec.get("instruction", ""))
        gflops = rates(rec).gflops_per_s
        if key not in best or gflops > best[key][0]:
            best[key] = (gflops, rec)
    ceilings, warnings = [], []
    for key in sorted(best, key=lambda k: (k[4] != "vector", bool(k[3]), PRECISION_ORDER.get(k[0], 9), not k[1],
                                           k[2], k[3], k[5] != "wgmma")):
        precision, fma, op, mix, pipe, _ = key
        gflops, rec = best[key]
        ceilings.append({
            "precision": precision,
            "fma": fma,
            "gflops_per_s": round(gflops, 4),
            "spread": round(peak_spread(rec["seconds"]), 4),
            "flops_per_element": rec["spec"]["flops_per_element"],
            "wss_bytes": rec["wss_bytes"],
            "noisy": rec["noisy"],
            "evidence": {"point_id": rec["id"], "trials": rec["trials"], "seconds": rec["seconds"]},
        })
        if is_integer(precision):
            # An integer roof's gflops_per_s holds GIOP/s (integer operations, a
            # multiply and an add being 2); giops_per_s and unit say so for readers that know.
            ceilings[-1].update(giops_per_s=ceilings[-1]["gflops_per_s"], unit="GIOP/s")
            # Which integer kernel (multiply-add, or the add-only roof).
            ceilings[-1]["op"] = op
        if mix:
            # A measured mix; its rate counts every operation of both halves.
            ceilings[-1].update(mix=mix, mix_ratio=MIX_RATIO[mix], unit=ops_unit(precision, mix))
        if pipe == "tensor":
            # A tensor-core roof.  flops_per_element is the FLOPs of one warp-level MMA.
            input_type, acc = TENSOR_TYPES[precision]
            mma = (rec.get("device") or {}).get("mma", "")
            shape = next((part for part in mma.split(".") if part.startswith("m") and "n" in part and "k" in part),
                         None)
            device = rec.get("device") or {}
            # INT8 (s32 accumulate): integer operations, GIOP/s in gflops_per_s and giops_per_s, as for the
            # integer roofs; flops_per_mma counts its 2MNK integer operations.
            unit = ops_unit(precision, pipe="tensor")
            ceilings[-1].update(pipe="tensor", unit=unit, input_type=input_type, accumulate=acc,
                                flops_per_mma=rec["spec"]["flops_per_element"],
                                instruction=rec["spec"].get("instruction") or "mma.sync")
            if unit == "GIOP/s":
                ceilings[-1]["giops_per_s"] = ceilings[-1]["gflops_per_s"]
            if device.get("note"):  # e.g. "mma.sync, below Hopper's wgmma rate"
                ceilings[-1]["note"] = device["note"]
            if isinstance(device.get("sass"), dict) and device["sass"].get("detail"):
                ceilings[-1]["sass"] = device["sass"]["detail"]
            if shape:
                ceilings[-1]["mma_shape"] = shape
            if rec.get("launch"):
                ceilings[-1]["launch"] = rec["launch"]
            clock = (rec.get("device") or {}).get("sm_clock_mhz")
            if clock:
                ceilings[-1]["sm_clock_mhz"] = {"min": clock["min"], "max": clock["max"]}
        if rec["noisy"]:
            warnings.append(warn("noisy-peak",
                    f"{compute_name(ceilings[-1])} peak comes from a noisy point ({rec['id']})"))
    return ceilings, warnings


# What each mix interleaves, in instructions (ert.spec.MIXES).
MIX_RATIO = {"fma+add": "1 FMA : 1 add", "int32+fp32": "1 int32 multiply-add : 1 fp32 FMA",
             "int64+fp64": "1 int64 multiply-add : 1 fp64 FMA"}


def _peak_at_edge(points: list[dict], compute: list[dict]) -> list[str]:
    """Warn when GFLOP/s was still rising at the largest FLOPs per element swept."""
    warnings = []
    for c in compute:
        if c.get("pipe", "vector") != "vector":
            continue  # one MMA shape per tensor kernel: nothing was swept
        by_flops: dict[int, float] = {}
        for r in points:
            s = r["spec"]
            if (r["valid"] and s["access"] == "rw" and s["precision"] == c["precision"] and s["fma"] == c["fma"]
                    and s.get("op", "madd") == c.get("op", "madd") and s.get("mix", "") == c.get("mix", "")
                    and s.get("pipe", "vector") == "vector"):
                fpe = s["flops_per_element"]
                by_flops[fpe] = max(by_flops.get(fpe, 0.0), rates(r).gflops_per_s)
        counts = sorted(by_flops)
        if len(counts) >= 2 and c["flops_per_element"] == counts[-1] and by_flops[counts[-1]] > 1.05 * by_flops[counts[-2]]:
            warnings.append(warn("peak-at-edge",
                            f"{compute_name(c)} {ops_unit(c['precision'], c.get('mix'))} still rose >5 % at the "
                            f"largest FLOPs per element swept ({counts[-1]}); the peak may be higher"))
    return warnings


def _load_note(meta: dict) -> str:
    load = meta.get("load_average_at_start")
    if not isinstance(load, dict) or "load1" not in load:
        return ""
    return f" (load average {load['load1']:g} on {load.get('cpus', '?')} cpu(s) when it started)"


def build(raw: RawData) -> dict:
    """The ceiling document from a raw file's records alone."""
    header = raw.header
    meta = dict(header["metadata"])
    workers = int(meta["threads_per_rank"]) * int(meta["ranks"])  # threads over every rank
    # A device backend reports its own caches (e.g. a GPU's L1 and L2) and memory
    # name (HBM); otherwise the host CPU's caches name the levels.
    cache_list = meta.get("backend_info", {}).get("caches", meta.get("caches_reported", []))
    caches = caches_by_access(cache_list)
    # A point its re-measurement did not reproduce is noisy for every rule below (ert.analysis.roof_confirm).
    threshold = noise_threshold(meta)
    # The host's weather: points measured inside a disturbed stretch confirm nothing (ert.analysis.weather).
    sentinels = raw.sentinels
    stretches = stretches_of(sentinels, threshold)
    points, unreproduced = mark_not_reproduced(raw.points, raw.confirms, threshold=threshold, stretches=stretches)
    memory_name = meta.get("backend_info", {}).get("memory_name", meta.get("memory_name", "DRAM"))
    groups = by_thread_count(points)
    ranks = int(meta["ranks"])
    own = int(meta["threads_per_rank"])
    # Points above their rated ceiling are invalid (work was removed): checked
    # once per thread count, against that count's rated values, before anything uses them.
    checked: dict[int, tuple[list[dict], list[str], dict | None]] = {}
    for count, recs in groups.items():
        rated = scaled_rated(meta, threads_per_rank=count or own)
        valid_recs, rated_warnings = invalidate_above_rated(recs, rated, caches=caches, memory_name=memory_name)
        checked[count] = (valid_recs, rated_warnings, rated)
    per_count = {}
    if len(groups) > 1:
        # A thread-scaling run: ceilings per thread count; the top level is the run's own count.
        for count, (recs, rated_warnings, rated) in checked.items():
            per_count[count] = _ceilings_of(recs, caches, workers=count * ranks, memory_name=memory_name,
                                            rated=rated, rated_warnings=rated_warnings, confirms=raw.confirms,
                                            threshold=threshold, stretches=stretches)
        memory, compute, warnings = copy.deepcopy(per_count.get(own, per_count[max(per_count)]))
    else:
        recs, rated_warnings, rated = next(iter(checked.values()), ([], [], scaled_rated(meta, threads_per_rank=own)))
        memory, compute, warnings = _ceilings_of(recs, caches, workers=workers, memory_name=memory_name,
                                                 rated=rated, rated_warnings=rated_warnings, confirms=raw.confirms,
                                                 threshold=threshold, stretches=stretches)
    warnings += unreproduced
    # Each host's own ceilings (runs on 2+ hosts), from the points of the top-level ceilings' thread count.
    own_recs = (checked.get(own) or checked[max(checked)])[0] if checked else []
    hosts, host_warnings = host_ceilings(own_recs, memory, compute, meta)
    warnings += host_warnings
    points = [rec for recs, _, _ in checked.values() for rec in recs]
    warnings += attach_sustained(memory, compute, raw.sustained)
    # Links, peers and the network, each (level, variant) a memory entry with a `kind`.
    transfer_entries, transfer_warnings = transfer_ceilings(raw.transfers, meta)
    memory += transfer_entries
    warnings += transfer_warnings
    # Runs made before the backends' warnings went through rank_warnings kept
    # rank 0's in backend_info.caveats (an OpenCL driver on a CPU, say): classified from their text.
    warnings += [str(c) for c in meta.get("backend_info", {}).get("caveats", [])]
    # What every rank reported while setting up: its backend's warnings,
    # skipped precisions, shared cores or devices, with the codes they were raised with.
    warnings += with_codes(meta.get("rank_warnings", []), meta.get("rank_warning_codes"))

    weather = weather_block(sentinels, stretches, points, raw.confirms, threshold, memory_earlier(raw.ends))
    whole = disturbed_throughout(weather, scaled_rated(meta, threads_per_rank=own))
    if whole:
        disturbed = throughout_warning(*whole, flag_throughout(memory + compute))
    else:
        flagged = flag_disturbed(memory + compute, {r["id"]: r for r in points}, stretches, mostly_disturbed(weather))
        low = below_earlier(weather, threshold)
        low_memory = memory_below_earlier(weather, memory, threshold)
        for more in (flag_below_earlier(memory, low), flag_memory_below_earlier(low_memory)):
            flagged += [e for e in more if all(e is not f for f in flagged)]  # each entry named once
        disturbed = weather_warning(weather, stretches, flagged, low, low_memory)
    if disturbed:
        warnings.insert(0, disturbed)

    planned, complete = planned_points(header, raw.ends, len(points))
    invalid = [r for r in points if not r["valid"]]
    noisy = [r for r in points if r["noisy"]]
    if invalid:
        warnings.append(warn("output-check-failed",
                        f"{len(invalid)} point(s) failed the output check and were not used, "
                        f"e.g. {invalid[0]['id']}: {invalid[0]['check']}"))
    if noisy:
        warnings.append(warn("noisy-points", f"{len(noisy)} of {len(points)} point(s) stayed noisy after re-measuring "
                        f"(spread above {threshold:.0%})"))
    serialized = [r for r in points if r.get("serialized_regions")]
    if serialized:
        warnings.append(warn("oversubscribed",
                        f"{len(serialized)} of {len(points)} point(s): the ranks of one host took turns instead of "
                        f"running together (more ranks than cores?), so those regions were timed over the host's "
                        f"whole span, first start to last end, e.g. {serialized[0]['id']}; per-rank rates there are "
                        f"shares of the same cores"))
    if points and len(noisy) >= BUSY_NOISY_SHARE * len(points):
        # First, so that nobody reads the table without it: these are the machine's ceilings under load.
        warnings.insert(0, warn("busy-machine",
                           f"busy machine: {len(noisy)} of {len(points)} points ({len(noisy) / len(points):.0%}) "
                           "stayed noisy, so other work shared these cores during the run; every ceiling here "
                           "is what was left over, not what the hardware sustains: measure again on a quiet machine"
                           + _load_note(meta)))
    if len(points) < planned or not complete:
        warnings.append(warn("partial-run", f"partial run: {len(points)} of {planned} points measured; "
                        f"finish it with `ert-run --resume RUN_DIR`"))
    # Each warning's code and group, beside the warnings (schema 1.10; ert.records.warning_codes).
    meta["warning_codes"] = codes_of(warnings)
    meta["wall_seconds"] = round(sum(e.get("wall_seconds", 0.0) for e in raw.ends), 3)
    meta["points"] = {"planned": planned, "measured": len(points), "noisy": len(noisy), "invalid": len(invalid)}
    if raw.transfers:
        meta["transfers"] = {"measured": len(raw.transfers),
                             "invalid": sum(1 for r in raw.transfers if not r.get("valid"))}
    if points:
        meta["median_point_spread"] = round(statistics.median(r["spread"] for r in points), 4)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "metadata": meta,
        "raw": RAW_NAME,
        "ceilings": {"memory": memory, "compute": compute},
        "warnings": warnings,
    }
    if hosts:
        doc["hosts"] = hosts
    if weather:
        doc["weather"] = weather
    if per_count:
        doc["scaling"] = scaling_section(per_count, ranks=ranks)
    return doc


def _ceilings_of(points: list[dict], caches, *, workers: int, memory_name: str, rated: dict | None = None,
                 rated_warnings: list[str] = (), confirms: list[dict] = (),
                 threshold: float = DEFAULT_NOISE_THRESHOLD,
                 stretches: list = ()) -> tuple[list[dict], list[dict], list[str]]:
    """(memory, compute, warnings) of one set of records measured by ``workers`` threads over every rank.

    ``points`` have been checked against ``rated`` already (invalidate_above_rated,
    whose warnings come in ``rated_warnings``); every ceiling then carries its
    rated value and ratio (ert.analysis.rated).
    """
    rated_warnings = list(rated_warnings)
    used = best_launches(points)
    memory, warnings = memory_ceilings(used, caches, workers=workers, memory_name=memory_name, confirms=confirms,
                                       threshold=threshold, stretches=stretches)
    compute, compute_warnings = compute_ceilings(used)
    rated_warnings += attach_rated(memory, compute, rated)
    return memory, compute, warnings + compute_warnings + _peak_at_edge(used, compute) + rated_warnings
