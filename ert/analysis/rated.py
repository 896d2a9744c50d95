"""Measured against rated: each ceiling beside what the hardware can physically do.

The backend records its rated ceilings in ``metadata.backend_info.rated`` (a
CPU's per-core figures x clock x cores, a GPU's from its properties).  Here
they are scaled to the workers a set of records ran on and applied:

* a point faster than ``ABOVE_RATED`` x its rated ceiling is **invalid**: the
  hardware cannot do that, so work was removed (a compiler fusing trials, a
  kernel skipping elements).  Bandwidth points are held to the fastest level's
  rated value (the L1), since no level is faster;
* a bandwidth point measured well inside a lower level (L2, L3, DRAM: see
  ``inside_level``) is also held to that level's rated value;
* a compute, L1, L2, L3 or DRAM ceiling below ``BELOW_RATED`` x its rated
  value gets a warning naming the ceiling, the rated value and how it was
  derived: the kernel (or, for DRAM, other work on a shared host) is then the
  limit;
* every ceiling carries ``rated``: the value, measured/rated, and the
  derivation, or the reason there is none.
"""

from __future__ import annotations

from ert.spec import access_name, is_integer, ops_unit
from ert.hardware import no_rated_text
from ert.records import warning_codes

ABOVE_RATED = 1.05
BELOW_RATED = 0.75
# A point is "inside" a cache level when its working set per thread is at least this many times the
# level above's share (so no line of it stays in the faster cache) and at most the level's own share.
PAST_ABOVE = 2.0
# ... and inside DRAM past this many times the last cache's aggregate capacity: a VM may report a host's
# cache, and victim caches add the L2s, so the last break can lie well past the hint (issue 21).
PAST_LAST_CACHE = 8.0
_WARNED_LEVELS = ("L1", "L2", "L3")


def occupied_cores(placements: list | None, cores_per_rank: int) -> int | None:
    """Physical cores the run's threads occupy, counting a core shared by ranks of one host once; None if unknown.

    ``placements``: the header's per-rank placement (host, cpus, cores).
    """
    known = [p for p in placements or [] if isinstance(p, dict) and p.get("cpus") and p.get("host")]
    if not known or len(known) != len(placements):
        return None
    by_host: dict[str, list[dict]] = {}
    for p in known:
        by_host.setdefault(str(p["host"]), []).append(p)
    total = 0
    for ranks in by_host.values():
        cpus = set().union(*(set(p["cpus"]) for p in ranks))
        per_core = max(1, len(ranks[0]["cpus"]) // max(1, int(ranks[0].get("cores") or 1)))
        total += min(len(ranks) * cores_per_rank, max(1, len(cpus) // per_core))
    return total


def scaled_rated(meta: dict, *, threads_per_rank: int) -> dict | None:
    """The backend's rated ceilings for ``threads_per_rank`` threads on every rank, or None without any.

    CPU backends rate per core (``per_core``): the values are rescaled from
    the cores the backend described to the cores these threads occupy.
    Device backends rate one device per rank.
    """
    rated = (meta.get("backend_info") or {}).get("rated")
    if not isinstance(rated, dict):
        return None
    ranks = int(meta.get("ranks", 1))
    factor = float(ranks)
    note = f" ({ranks} ranks)" if ranks > 1 else ""
    if rated.get("per_core"):
        described = int(rated.get("cores_per_rank") or 1)
        cores = min(threads_per_rank, described)  # one thread per core, as the backend pins them
        factor *= cores / described
        clocks = rated.get("clock_ghz_by_threads") or {}
        clock, own = clocks.get(str(cores)), rated.get("clock_ghz")
        if clock and own and cores != described:
            factor *= clock / own  # the clock this many busy cores reach, measured
        if cores != described or ranks > 1:
            at = f" at {clock:.2f} GHz" if clock and cores != described else ""
            note = f" (for {cores} core(s) per rank{at}{', x %d ranks' % ranks if ranks > 1 else ''})"
        occupied = occupied_cores(meta.get("placement"), cores)
        if occupied is not None and occupied < ranks * cores:
            # More ranks than cores on a host: they take turns on the same cores, which do the work once.
            factor *= occupied / (ranks * cores)
            note = (f" (for {occupied} core(s) in all: {ranks} ranks x {cores} core(s), but ranks of one host "
                    f"share cores)")
    cpus = meta.get("cpus_usable")
    # More threads than cpus: they took turns, so a ceiling below rated says nothing of the kernel or the chip.
    over = (f"{threads_per_rank} threads took turns on {cpus} cpus (oversubscribed), so this is not the "
            f"hardware's limit; measure with at most {cpus} threads"
            if rated.get("per_core") and isinstance(cpus, int) and 0 < cpus < threads_per_rank else None)
    out = {"compute": {}, "memory": {}}
    for entry in rated.get("compute", []):
        value = entry.get("gflops_per_s")
        out["compute"][compute_key(entry)] = {
            "gflops_per_s": round(value * factor, 1) if value else None,
            "derivation": _rescaled(entry, factor, note), "oversubscribed": over}
    # Tensor-core peaks: one GPU per rank, keyed by the MMA's input type.
    out["tensor"] = {}
    for entry in rated.get("tensor", []):
        value = entry.get("gflops_per_s")
        out["tensor"][entry.get("precision")] = {**entry, "gflops_per_s": round(value * factor, 1) if value else None,
                                                "derivation": _rescaled(entry, factor, note), "ranks": ranks}
    hosts = max(len(meta.get("hosts") or []), 1)
    for entry in rated.get("memory", []):
        value = entry.get("gbytes_per_s")
        # DRAM is the host's, whatever cores the run uses: one per host.
        scale, why = ((hosts, f" ({hosts} hosts)" if hosts > 1 else "") if entry.get("scope") == "host"
                      else (factor, note))
        out["memory"][(entry.get("level"), entry.get("access"))] = {
            "gbytes_per_s": round(value * scale, 1) if value else None,
            "derivation": _rescaled(entry, scale, why), "scope": entry.get("scope"), "oversubscribed": over}
    return out


def _rescaled(entry: dict, factor: float, note: str) -> str:
    text = str(entry.get("derivation", ""))
    value = entry.get("gflops_per_s", entry.get("gbytes_per_s"))
    if not note or not value:
        return text
    return f"{text}; scaled x {factor:g}{note}"


def compute_name(entry: dict) -> str:
    """``fp64 FMA``, ``fp32 no-FMA``, ``int32 multiply-add``, ``int64 add``, ``fp64 fma+add mix``, ``fp16 tensor``."""
    if entry.get("pipe") == "tensor":
        instruction = entry.get("instruction")
        return f"{entry['precision']} tensor" + (f" ({instruction})" if instruction else "")
    if entry.get("mix"):
        return f"{entry['precision']} {entry['mix']} mix"
    if is_integer(entry["precision"]):
        return f"{entry['precision']} {'add' if entry.get('op') == 'add' else 'multiply-add'}"
    return f"{entry['precision']} {'FMA' if entry['fma'] else 'no-FMA'}"


_compute_name = compute_name


def compute_key(entry: dict) -> tuple:
    """The rated table's key of a compute ceiling or kernel spec: (precision, FMA) for FMA/no-FMA and the
    integer multiply-add, with the op or the mix appended for the others."""
    key = (entry.get("precision"), bool(entry.get("fma")))
    if entry.get("mix"):
        return key + ("mix", entry["mix"])
    if entry.get("op", "madd") != "madd":
        return key + ("op", entry["op"])
    return key


def _memory_rated(rated: dict, level: str, access: str | None) -> dict | None:
    base = level.rstrip("abcdefghijklmnopqrstuvwxyz") or level  # L2b, a second plateau of L2, is L2's
    return (rated["memory"].get((level, access)) or rated["memory"].get((level, None))
            or rated["memory"].get((base, access)) or rated["memory"].get((base, None)))


def inside_level(rec: dict, caches: list | None, memory_name: str = "DRAM") -> str | None:
    """The level (L2, L3 ... or ``memory_name``) whose range a point's working set lies well inside, or None.

    ``caches`` are the run's cache hints (ert.hardware.hwinfo.CacheInfo) for the
    point's access pattern.  L1 is not named: every point is held to it already.
    """
    from ert.hardware.hwinfo import aggregate_capacity_bytes

    if not caches:
        return None
    threads = max(int(rec.get("threads") or rec.get("threads_per_rank") or 1) * int(rec.get("ranks", 1)), 1)
    by_level = {}
    for c in caches:
        if c.kind != "Instruction" and (c.level not in by_level or c.kind == "Data"):
            by_level[c.level] = c
    levels = sorted(by_level)
    wss = rec["wss_bytes"]
    for above, level in zip(levels, levels[1:]):
        lo = PAST_ABOVE * aggregate_capacity_bytes(by_level[above], threads)
        if lo <= wss <= aggregate_capacity_bytes(by_level[level], threads):
            return f"L{level}"
    if levels and wss >= PAST_LAST_CACHE * aggregate_capacity_bytes(by_level[levels[-1]], threads):
        return memory_name
    return None


def invalidate_above_rated(points: list[dict], rated: dict | None, *, caches=None,
                           memory_name: str = "DRAM") -> tuple[list[dict], list[str]]:
    """Points above ABOVE_RATED x rated marked invalid (copies), and one warning per kind of excess.

    ``caches`` (per access pattern, as ert.analysis.memory.caches_by_access
    gives them) let a point inside L2, L3 or DRAM be held to that level's rated
    value too; without them only the compute and L1 limits apply.
    """
    from ert.spec import rates

    if not rated:
        return points, []
    out, flagged = [], {}
    for rec in points:
        if not rec["valid"]:
            out.append(rec)
            continue
        spec = rec["spec"]
        gbs, gflops = rates(rec)
        limit, what, measured = None, "", 0.0
        if spec.get("pipe", "vector") == "tensor":
            compute = rated.get("tensor", {}).get(spec["precision"])
        else:
            compute = rated["compute"].get(compute_key(spec))
        if spec["flops_per_element"] > 1 and compute and compute["gflops_per_s"]:
            unit = ops_unit(spec["precision"], spec.get("mix"), spec.get("pipe", "vector"))
            limit, what, measured = compute["gflops_per_s"], f"{compute_name(spec)} {unit}", gflops
        l1 = _memory_rated(rated, "L1", spec["access"])
        if limit is None or not (measured > ABOVE_RATED * limit):
            if l1 and l1["gbytes_per_s"] and gbs > ABOVE_RATED * l1["gbytes_per_s"]:
                limit, what, measured = l1["gbytes_per_s"], f"{spec['access']} GB/s (the L1's rate)", gbs
        if limit is None or not (measured > ABOVE_RATED * limit):
            hints = caches.get(spec["access"], caches.get(None)) if isinstance(caches, dict) else caches
            level = inside_level(rec, hints, memory_name)
            own = _memory_rated(rated, level, spec["access"]) if level else None
            if own and own["gbytes_per_s"] and gbs > ABOVE_RATED * own["gbytes_per_s"]:
                limit, what, measured = (own["gbytes_per_s"], f"{spec['access']} GB/s of {level} (a point inside "
                                         f"it; {own['derivation']})", gbs)
        if limit and measured > ABOVE_RATED * limit:
            rec = dict(rec, valid=False,
                       check=f"{measured:.4g} is {measured / limit:.2f}x the rated {what} {limit:.4g}: "
                             f"more than the hardware can do, so work was removed")
            flagged.setdefault(what, []).append(rec["id"])
        out.append(rec)
    warnings = [warning_codes.warn("above-rated",
                                    f"{len(ids)} point(s) measured above {ABOVE_RATED:.2f} x the rated {what} and "
                                    f"were not used (work was removed), e.g. {ids[0]}") for what, ids in flagged.items()]
    return out, warnings


def attach_rated(memory: list[dict], compute: list[dict], rated: dict | None) -> list[str]:
    """Put ``rated`` on every ceiling; warnings for compute, L1-L3 and DRAM ceilings below BELOW_RATED x rated."""
    warnings = []
    for c in compute:
        if c.get("pipe") == "tensor":
            r = tensor_rated(c, (rated or {}).get("tensor", {}).get(c["precision"]))
        else:
            r = (rated or {"compute": {}})["compute"].get(compute_key(c))
        name = f"{_compute_name(c)} peak"
        unit = ops_unit(c["precision"], c.get("mix"), c.get("pipe", "vector"))
        warnings += _attach(c, r, "gflops_per_s", name, unit, warn=not c.get("note"))
        ratio = c["rated"].get("ratio")
        if c.get("note") and ratio is not None and ratio < BELOW_RATED:
            # A tensor roof that is not the architecture's full rate by design (mma.sync on sm_90).
            warnings.append(warning_codes.warn("below-rated",
                            f"{name}: {c['gflops_per_s']:.4g} {unit} is {ratio:.0%} of the rated "
                            f"{c['rated']['gflops_per_s']:.4g} {unit}: {c['note']} (the instruction, not the "
                            f"hardware, limits it)"))
    for m in memory:
        r = _memory_rated(rated, m["level"], m.get("access")) if rated else None
        access = access_name(m.get("access") or "")
        name = f"{m.get('precision', '')} {access} {m['level']}".strip()
        base = m["level"].rstrip("abcdefghijklmnopqrstuvwxyz") or m["level"]
        warn = base in _WARNED_LEVELS or bool(r and r.get("scope") == "host")
        warnings += _attach(m, r, "gbytes_per_s", name, "GB/s", warn=warn)
    return warnings


def tensor_rated(ceiling: dict, entry: dict | None) -> dict | None:
    """A tensor ceiling's rated value: NVIDIA's dense per-SM rate x SMs x the SM clock measured during its point.

    The clock is the highest NVML reading taken right after the point's timed
    regions (``sm_clock_mhz``); without one, the device's maximum clock, and
    the derivation says which.
    """
    if entry is None:
        return {"gflops_per_s": None, "derivation": "no rated tensor value: the backend recorded none"}
    per_sm, sms = entry.get("flops_per_cycle_per_sm"), entry.get("sm_count")
    clock = (ceiling.get("sm_clock_mhz") or {}).get("max")
    if not entry.get("gflops_per_s") or not per_sm or not sms or not clock:
        return entry
    ranks = int(entry.get("ranks", 1))
    value = round(ranks * sms * clock * 1e6 * per_sm / 1e9, 1)
    where = f" x {ranks} ranks" if ranks > 1 else ""
    return {"gflops_per_s": value,
            "derivation": f"{sms} SMs x {clock:.0f} MHz (SM clock measured by NVML during the point; maximum "
                          f"{entry.get('clock_mhz')} MHz) x {per_sm} dense {ceiling['precision'].upper()} tensor "
                          f"{'integer op' if entry.get('unit') == 'GIOP/s' else 'FLOP'}/cycle/SM "
                          f"({entry.get('arch', '')}, NVIDIA's published dense figures, a "
                          f"multiply-add counted as 2){where}"}


def _attach(ceiling: dict, rated_entry: dict | None, key: str, name: str, unit: str, *, warn: bool) -> list[str]:
    if rated_entry is None:
        ceiling["rated"] = {key: None, "ratio": None, "derivation": no_rated_text("the backend gives none for this ceiling")}
        return []
    value = rated_entry.get(key)
    ratio = round(ceiling[key] / value, 4) if value else None
    ceiling["rated"] = {key: value, "ratio": ratio, "derivation": rated_entry.get("derivation", "")}
    if warn and ratio is not None and ratio < BELOW_RATED:
        noisy = ceiling.get("noisy") or (ceiling.get("noisy_points", 0) * 2 > ceiling.get("n_points", 1))
        cause = rated_entry.get("oversubscribed") or (
                 "most of its points stayed noisy: other work sharing the cores may be the limit; measure again"
                 if noisy else "other work sharing the host's memory (a shared or virtual host?) or the kernel "
                 "limits it" if rated_entry.get("scope") == "host" else "the kernel, not the hardware, limits it")
        return [warning_codes.warn("below-rated",
                                    f"{name}: {ceiling[key]:.4g} {unit} is {ratio:.0%} of the rated {value:.4g} {unit} "
                                    f"({rated_entry.get('derivation', '')}): {cause}")]
    return []
