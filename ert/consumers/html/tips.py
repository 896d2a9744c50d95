"""What the report says about one roof, rated value or measured point: names, units and the hover text.

The hover text is plain text, one fact per line: the value, the working set,
the spread, and the points the value rests on (its evidence point ids).
"""

from __future__ import annotations

from ert.consumers import roofs as roofs_mod
from ert.consumers import report_rows
from ert.consumers.cells import format_rate
from ert.spec import ops_unit
from ert.units import human_bytes

EVIDENCE_SHOWN = 8  # ids listed in a tip; the rest are counted


def compute_unit(e: dict) -> str:
    if e.get("unit") in ("GIOP/s", "GOP/s"):
        return e["unit"]
    return ops_unit(str(e.get("precision", "")), e.get("mix"), e.get("pipe", "vector"))


def compute_name(e: dict) -> str:
    """'FP64 FMA', 'FP32 no-FMA', 'INT32 multiply-add', 'FP16 tensor m16n8k16', 'FP32 fma+add mix'."""
    p = str(e.get("precision", "?")).upper()
    if e.get("pipe") == "tensor":
        return f"{p} tensor" + "".join(f" {x}" for x in (e.get("instruction") if e.get("instruction") == "wgmma"
                                                         else None, e.get("mma_shape")) if x)
    if e.get("mix"):
        return f"{p} {e['mix']} mix"
    if e.get("unit") == "GIOP/s" or e.get("precision") in ("int32", "int64"):
        return f"{p} {'add' if e.get('op') == 'add' else 'multiply-add'}"
    return f"{p} {'FMA' if e.get('fma') else 'no-FMA'}"


def memory_name(e: dict) -> str:
    """'L1 fp64 read+write', or a link/network level with its variant."""
    if e.get("kind") is not None:
        return f"{e.get('level')} {e.get('variant', '')}".strip()
    return f"{e.get('level')} {roofs_mod.basis_label(e.get('precision'), e.get('access'))}"


def spread_text(spread) -> str:
    if not isinstance(spread, (int, float)) or isinstance(spread, bool):
        return "not recorded"
    return "<0.1%" if 0 < spread < 0.001 else f"{spread * 100:.1f}%"


def _spread_of(e: dict) -> str:
    """A ceiling's spread; ERT's roofline.json keeps none (read as 0 with no working set): 'not recorded'."""
    if e.get("spread") == 0 and wss_text(e.get("wss_bytes")) == "not recorded":
        return "not recorded"
    return spread_text(e.get("spread"))


def wss_text(wss) -> str:
    """A working-set range or size; ERT's roofline.json keeps none (written as 0)."""
    if isinstance(wss, (list, tuple)) and len(wss) == 2:
        low, high = wss
        if not high:
            return "not recorded"
        return human_bytes(int(low)) if low == high else f"{human_bytes(int(low))} - {human_bytes(int(high))}"
    if isinstance(wss, (int, float)) and wss:
        return human_bytes(int(wss))
    return "not recorded"


def evidence_ids(e: dict) -> list[str]:
    ev = e.get("evidence") if isinstance(e.get("evidence"), dict) else {}
    ids = ev.get("point_ids") or ([ev["point_id"]] if ev.get("point_id") else [])
    return [str(i) for i in ids]


def _evidence_line(e: dict) -> str:
    ids = evidence_ids(e)
    if not ids:
        return "evidence: no point ids recorded"
    shown = ", ".join(ids[:EVIDENCE_SHOWN])
    more = f" (+{len(ids) - EVIDENCE_SHOWN} more)" if len(ids) > EVIDENCE_SHOWN else ""
    return f"evidence ({len(ids)} point{'s' if len(ids) != 1 else ''}): {shown}{more}"


def _rated_line(e: dict, key: str, unit: str) -> str | None:
    rated = e.get("rated") if isinstance(e.get("rated"), dict) else None
    if not rated:
        return None
    if rated.get(key) is None:
        return "rated: none (" + str(rated.get("derivation", "")).split(":", 1)[-1].strip() + ")"
    ratio = rated.get("ratio")
    share = f" ({ratio:.0%} of rated)" if isinstance(ratio, (int, float)) else ""
    return f"rated {format_rate(rated[key])} {unit}{share}"


def disturbed_mark(e: dict) -> str:
    """The mark after the value of a ceiling measured while the host was disturbed."""
    return report_rows.disturbed_mark(e.get("disturbed") is True)


def _disturbed_line(e: dict) -> list[str]:
    return ["measured while the host was disturbed: not the machine's ceiling"] if e.get("disturbed") is True else []


def memory_tip(e: dict, *, machine: str | None = None) -> str:
    """A memory, link or network level: value, spread, working set, points, rated, regimes, evidence."""
    lines = [machine] if machine else []
    lines.append(f"{memory_name(e)}: {format_rate(e['gbytes_per_s'])} GB/s")
    counts = ""
    if isinstance(e.get("n_points"), int):
        counts = f", {e['n_points']} point{'s' if e['n_points'] != 1 else ''}" + (
            f" ({e['noisy_points']} noisy)" if e.get("noisy_points") else "")
    size_word = "sizes" if e.get("kind") is not None else "working set"
    lines.append(f"spread {_spread_of(e)}; {size_word} {wss_text(e.get('wss_bytes'))}{counts}")
    if isinstance(e.get("latency_us"), (int, float)):
        lines.append(f"latency {e['latency_us']:.2f} us")
    rated = _rated_line(e, "gbytes_per_s", "GB/s")
    if rated:
        lines.append(rated)
    regimes = e.get("regimes")
    if isinstance(regimes, list) and len(regimes) > 1:
        lines.append("regimes: " + "; ".join(f"{format_rate(r.get('gbytes_per_s', 0))} GB/s at "
                                             f"{wss_text(r.get('wss_bytes'))}" for r in regimes if isinstance(r, dict))
                     + " (the roof is the fastest)")
    if e.get("basis"):
        lines.append(f"level: {e['basis']}")
    lines.append(_evidence_line(e))
    return "\n".join(lines + _disturbed_line(e))


def compute_tip(e: dict, *, machine: str | None = None) -> str:
    """A compute peak: value, spread, working set, FLOPs per element, noisy, rated, evidence (with trials)."""
    lines = [machine] if machine else []
    unit = compute_unit(e)
    lines.append(f"{compute_name(e)} peak: {format_rate(e['gflops_per_s'])} {unit}")
    per = e.get("flops_per_mma") or e.get("flops_per_element")
    per_text = f"; {per} {'FLOPs/MMA' if e.get('flops_per_mma') else 'FLOPs/element'}" if per else ""
    noisy = "; noisy" if e.get("noisy") else ""
    lines.append(f"spread {_spread_of(e)}; working set {wss_text(e.get('wss_bytes'))}{per_text}{noisy}")
    rated = _rated_line(e, "gflops_per_s", unit)
    if rated:
        lines.append(rated)
    line = _evidence_line(e)
    trials = (e.get("evidence") or {}).get("trials") if isinstance(e.get("evidence"), dict) else None
    lines.append(line + (f" ({trials} trials)" if trials else ""))
    return "\n".join(lines + _disturbed_line(e))


def rated_tip(e: dict, unit: str, *, machine: str | None = None) -> str:
    """A rated (physical) value: what it is, the measured ceiling beside it, and how it was derived."""
    rated = e["rated"]
    key = "gbytes_per_s" if unit == "GB/s" else "gflops_per_s"
    name = memory_name(e) if key == "gbytes_per_s" else f"{compute_name(e)} peak"
    lines = [machine] if machine else []
    lines.append(f"rated {name}: {format_rate(rated[key])} {unit} (measured {format_rate(e[key])})")
    if rated.get("derivation"):
        lines.append(str(rated["derivation"]))
    return "\n".join(lines)


def point_tip(rec: dict, *, gbytes_per_s: float, gflops_per_s: float, unit: str, roles: list[str]) -> str:
    """One measured point of raw.jsonl: id, rates, working set, spread, trials, noisy/invalid, which roofs it backs."""
    spec = rec["spec"]
    lines = [str(rec["id"]),
             f"{format_rate(gbytes_per_s)} GB/s; {format_rate(gflops_per_s)} {unit}",
             f"working set {human_bytes(int(rec['wss_bytes']))} (all threads); "
             f"{spec.get('flops_per_element', 1)} FLOPs/element"
             + (f"; {rec['threads_per_rank']} threads/rank" if rec.get("threads_per_rank") else "")]
    spread = rec.get("spread")
    median = rec["seconds"].get("median")
    lines.append(f"spread {spread_text(spread)}; {rec.get('trials')} trials; median "
                 f"{median * 1e3:.3g} ms" if isinstance(median, (int, float)) else f"spread {spread_text(spread)}")
    launch = rec.get("launch")
    if isinstance(launch, dict) and launch:
        what = ", ".join(f"{k} {v}" for k, v in launch.items())
        lines.append(f"launch: {what}" + (" (slower than another launch at this working set: not used)"
                                          if rec.get("_slower_launch") else ""))
    if rec.get("noisy"):
        lines.append("noisy: its timings spread past the noise threshold" + (
            f" after {rec['remeasured']} remeasure(s)" if rec.get("remeasured") else ""))
    if not rec.get("valid", True):
        lines.append(f"invalid: {rec.get('check') or 'its result check failed'} (not used for any ceiling)")
    if roles:
        lines.append("evidence of: " + "; ".join(roles))
    return "\n".join(lines)
