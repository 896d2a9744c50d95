"""Rated link rates: PCIe (per generation and width, from sysfs), NVLink-C2C and NVLink.

What a host<->device or device<->device link can physically move, with how the value was
derived; the backends (ert.backends.cuda_links, ert.backends.opencl_links) read the device's
link from the driver or sysfs and look it up here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ert.hardware import no_rated_text

# ----------------------------------------------------------------------------- rated link rates
# PCIe per lane: transfer rate (GT/s) and line-code efficiency by generation.  Gen1-2
# use 8b/10b, Gen3-5 128b/130b; Gen6-7 (PAM4) carry 242 payload bytes per 256-byte FLIT.
PCIE = {1: (2.5, 8 / 10, "8b/10b"), 2: (5.0, 8 / 10, "8b/10b"), 3: (8.0, 128 / 130, "128b/130b"),
        4: (16.0, 128 / 130, "128b/130b"), 5: (32.0, 128 / 130, "128b/130b"),
        6: (64.0, 242 / 256, "FLIT 242/256"), 7: (128.0, 242 / 256, "FLIT 242/256")}
# NVLink-C2C (Grace Hopper GH200, Grace Blackwell GB200): 900 GB/s in total, 450 GB/s each way (NVIDIA's figures).
C2C_GBYTES_PER_DIRECTION = 450.0
# NVLink per link and direction (GB/s) by the answer of NVML's nvmlDeviceGetNvLinkVersion, which is the enum
# nvmlNvlinkVersion_t (pynvml's NVML_NVLINK_VERSION_*), not a generation: 1 = NVLink 1.0, 2 = 2.0, 3 = 2.2,
# 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0, 8 = 6.0.  Each rate is a datasheet's total over its link count, halved
# for one direction: enum -> (version, GB/s per link and direction, where the rate comes from).
NVLINK_VERSIONS = {
    1: ("1.0", 20.0, "Tesla P100 datasheet: 4 links, 160 GB/s bidirectional in total"),
    2: ("2.0", 25.0, "Tesla V100 datasheet: 6 links, 300 GB/s bidirectional in total"),
    3: ("2.2", 25.0, "no datasheet gives NVLink 2.2 a rate of its own: taken as 2.0's (Tesla V100 datasheet: "
                     "6 links, 300 GB/s bidirectional in total)"),
    4: ("3.0", 25.0, "A100 datasheet: 12 links, 600 GB/s bidirectional in total"),
    5: ("3.1", 25.0, "A100 datasheet: 12 links, 600 GB/s bidirectional in total (NVML reports 3.1 on A100; "
                     "hwloc issue 658)"),
    6: ("4.0", 25.0, "H100 SXM datasheet: 18 links, 900 GB/s bidirectional in total"),
    7: ("5.0", 50.0, "B200 (DGX B200) datasheet: 18 links, 1.8 TB/s bidirectional in total"),
}
# The NVLink 3 bridges of GeForce RTX 3090 and RTX A-series cards (NVML reports 3.x like A100): the RTX
# A6000 datasheet gives 112.5 GB/s bidirectional over 4 links, 14.0625 GB/s per link and direction.
NVLINK_BRIDGE_GBYTES_PER_LINK = 14.0625
NVLINK_BRIDGE_SOURCE = "RTX A6000 datasheet: NVLink bridge, 4 links, 112.5 GB/s bidirectional in total"


def pcie_generation(gt_per_s: float) -> int | None:
    """The PCIe generation whose lane rate is ``gt_per_s`` (2.5 -> 1, ..., 64 -> 6), or None."""
    for gen, (rate, _, _) in PCIE.items():
        if abs(rate - gt_per_s) < 0.05:
            return gen
    return None


def parse_link_speed(text: str) -> float | None:
    """GT/s from sysfs's ``current_link_speed`` ("32.0 GT/s PCIe", "8 GT/s", "2.5 GT/s"); None if unknown."""
    match = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def pcie_rated(*, generation: int, lanes: int, source: str) -> dict:
    """Rated per-direction and bidirectional GB/s of a PCIe link, each with its arithmetic.

    Returns {"link-h2d": {...}, "link-d2h": {...}, "link-bidir": {...}}, each
    {"gbytes_per_s", "derivation"}.  The raw line rate after encoding; TLP
    headers and flow control take another ~10-20 % that no copy recovers.
    """
    if generation not in PCIE or lanes < 1:
        why = no_rated_text(f"PCIe generation {generation} x{lanes} is not in the table ({source})")
        return {level: {"gbytes_per_s": None, "derivation": why} for level in ("link-h2d", "link-d2h", "link-bidir")}
    rate, efficiency, code = PCIE[generation]
    one_way = lanes * rate * efficiency / 8
    base = (f"PCIe Gen{generation} x{lanes}: {lanes} lanes x {rate:g} GT/s x {code} / 8 = {one_way:.1f} GB/s "
            f"per direction ({source}; before packet overheads)")
    one = {"gbytes_per_s": round(one_way, 2), "derivation": base}
    return {"link-h2d": dict(one), "link-d2h": dict(one),
            "link-bidir": {"gbytes_per_s": round(2 * one_way, 2), "derivation": f"2 x {base}"}}


def c2c_rated(*, source: str) -> dict:
    """Rated NVLink-C2C (Grace Hopper / Grace Blackwell) host<->GPU rates."""
    one = {"gbytes_per_s": C2C_GBYTES_PER_DIRECTION,
           "derivation": f"NVLink-C2C: {C2C_GBYTES_PER_DIRECTION:.0f} GB/s per direction, 900 GB/s in total "
                         f"(NVIDIA's Grace Hopper figure; {source})"}
    return {"link-h2d": dict(one), "link-d2h": dict(one),
            "link-bidir": {"gbytes_per_s": 2 * C2C_GBYTES_PER_DIRECTION,
                           "derivation": f"2 x {one['derivation']}"}}


def nvlink_rated(*, version: int, links: int, source: str, device_name: str = "") -> dict:
    """Rated peer GB/s per direction over ``links`` NVLinks: {"gbytes_per_s", "derivation"}.

    ``version`` is NVML's nvmlNvlinkVersion_t (``NVLINK_VERSIONS``); a GeForce
    or RTX card's NVLink 3.x is its bridge (``NVLINK_BRIDGE_GBYTES_PER_LINK``).
    """
    known = NVLINK_VERSIONS.get(version)
    if known is None or links < 1:
        name = f"enum {version}" + (" (NVLink 6.0)" if version == 8 else "")
        return {"gbytes_per_s": None,
                "derivation": no_rated_text(f"NVLink version {name} x {links} links has no rate in the table "
                                            f"({source})")}
    label, per_link, why = known
    upper = device_name.upper()
    if version in (4, 5) and ("GEFORCE" in upper or "RTX" in upper):
        per_link, why = NVLINK_BRIDGE_GBYTES_PER_LINK, f"{NVLINK_BRIDGE_SOURCE}; device {device_name!r}"
    return {"gbytes_per_s": round(per_link * links, 2),
            "derivation": f"NVLink {label} (NVML version enum {version}): {links} links x {per_link:g} GB/s "
                          f"per direction ({why}; {source})"}


def no_rated(why: str) -> dict:
    """The same "no rated value" for every link level."""
    return {level: {"gbytes_per_s": None, "derivation": no_rated_text(why)}
            for level in ("link-h2d", "link-d2h", "link-bidir")}


@dataclass
class PcieLink:
    """What sysfs says about one PCI device's link: current and maximum speed and width, and the port above it."""

    bdf: str
    current_gt: float | None = None
    current_width: int | None = None
    max_gt: float | None = None
    max_width: int | None = None
    upstream_max_gt: float | None = None
    upstream_max_width: int | None = None
    notes: list[str] = field(default_factory=list)

    def capable(self) -> tuple[float | None, int | None, str]:
        """(GT/s, lanes, which): the link the device and its slot can both run, where known, else the current one.

        A GPU at idle often trains its link down (a lower generation, to save
        power) and back up under load, so the current speed read before or
        after a run can understate the link: the smaller of the device's and
        the upstream port's maxima is what the copies run at.
        """
        pairs = [(g, w) for g, w in ((self.max_gt, self.max_width), (self.upstream_max_gt, self.upstream_max_width))
                 if g and w]
        if pairs:
            gt = min(g for g, _ in pairs)
            width = min(w for _, w in pairs)
            which = "maximum of the device" + (" and its upstream port" if len(pairs) > 1 else "")
            if self.current_gt and self.current_width and (self.current_gt, self.current_width) != (gt, width):
                which += (f"; the link read {self.current_gt:g} GT/s x{self.current_width} at the time "
                          f"(idle links train down)")
            return gt, width, which
        if self.current_gt and self.current_width:
            return self.current_gt, self.current_width, "current link speed and width"
        return None, None, "no link speed or width readable"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _width(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_pcie_link(bdf: str, *, root: str | os.PathLike = "/sys/bus/pci/devices") -> PcieLink | None:
    """The PCIe link of device ``bdf`` ("0000:17:00.0") from sysfs; None where the device is not there."""
    device = Path(root) / bdf.lower()
    if not device.exists():
        return None
    link = PcieLink(bdf=bdf.lower(), current_gt=parse_link_speed(_read(device / "current_link_speed") or ""),
                    current_width=_width(_read(device / "current_link_width")),
                    max_gt=parse_link_speed(_read(device / "max_link_speed") or ""),
                    max_width=_width(_read(device / "max_link_width")))
    upstream = device.resolve().parent
    if (upstream / "max_link_speed").exists():
        link.upstream_max_gt = parse_link_speed(_read(upstream / "max_link_speed") or "")
        link.upstream_max_width = _width(_read(upstream / "max_link_width"))
    return link


def pcie_rated_from_sysfs(bdf: str | None, *, root: str | os.PathLike = "/sys/bus/pci/devices") -> dict:
    """Rated link levels of the PCI device ``bdf`` from sysfs, or "no rated value" with why."""
    if not bdf:
        return no_rated("the device's PCI address is unknown (its driver does not report it)")
    link = read_pcie_link(bdf, root=root)
    if link is None:
        return no_rated(f"PCI device {bdf} is not in {root}")
    gt, width, which = link.capable()
    if gt is None:
        return no_rated(f"sysfs shows no link speed or width for {bdf}")
    generation = pcie_generation(gt)
    if generation is None:
        return no_rated(f"{gt:g} GT/s (sysfs, {bdf}) is no known PCIe generation")
    return pcie_rated(generation=generation, lanes=width, source=f"sysfs {bdf}: {which}")


def pci_address(domain: int, bus: int, device: int, function: int = 0) -> str:
    """The sysfs name of a PCI function: dddd:bb:dd.f."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"
