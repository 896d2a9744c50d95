"""Rated DRAM bandwidth: channels x MT/s x bytes per transfer, from SMBIOS memory devices or the user.

The machine's own word comes first where it gives one: SMBIOS type 17
("Memory Device") records, read with ``dmidecode -t 17`` (optional: without
dmidecode, or without permission, the reason is kept).  A value the user gives
(``rated: {dram_gbytes_per_s: ...}`` in the run config, or ``ert-run
--rated-dram``, which sets it) takes precedence, since the user may know what
SMBIOS cannot (a VM's share of the host, interleaving); the SMBIOS figure is
then named beside it.  Otherwise the entry says "no rated value" and why.

Each populated device is counted as one channel of ``Data Width`` bits (64
where not stated): two DIMMs on one channel do not add bandwidth, and SMBIOS
does not say reliably which channel a DIMM sits on, so the derivation states
the assumption.  The entry is per host (``scope: host``): the cores a run
uses do not change it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from ert.hardware import no_rated_text


@dataclass(frozen=True)
class MemoryDevice:
    """One populated SMBIOS type-17 record: where it sits, its transfer rate and its data width."""

    locator: str
    mts: int | None            # Configured Memory Speed, else Speed; None: "Unknown"
    data_width_bits: int | None


def parse_dmidecode(text: str) -> list[MemoryDevice]:
    """The populated memory devices of ``dmidecode -t 17`` output (empty slots, "No Module Installed", dropped)."""
    devices = []
    for block in re.split(r"\n(?=Handle 0x)", text):
        if "Memory Device" not in block:
            continue
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.strip().partition(":")
            if sep and key not in fields:
                fields[key.strip()] = value.strip()
        size = fields.get("Size", "")
        if not size or size.lower().startswith(("no module", "0", "unknown", "not installed")):
            continue
        speed = _mts(fields.get("Configured Memory Speed")) or _mts(fields.get("Configured Clock Speed")) \
            or _mts(fields.get("Speed"))
        width = re.match(r"(\d+)\s*bits", fields.get("Data Width", ""))
        devices.append(MemoryDevice(locator=fields.get("Locator", "?"), mts=speed,
                                    data_width_bits=int(width.group(1)) if width else None))
    return devices


def _mts(value: str | None) -> int | None:
    m = re.match(r"(\d+)\s*(MT/s|MHz)", value or "")
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def rate_devices(devices: list[MemoryDevice]) -> tuple[float | None, str]:
    """(GB/s, derivation) of populated devices, or (None, no_rated_text("why"))."""
    if not devices:
        return None, "dmidecode shows no populated memory devices (a VM guest?)"
    speeds = {d.mts for d in devices}
    if None in speeds:
        return None, (f"dmidecode shows {len(devices)} memory device(s) but not their transfer rate "
                      f"(Speed: Unknown; a VM guest?)")
    total = sum(d.mts * (d.data_width_bits or 64) / 8 for d in devices) / 1000
    mts = "/".join(str(s) for s in sorted(speeds))
    widths = {(d.data_width_bits or 64) // 8 for d in devices}
    width = "/".join(str(w) for w in sorted(widths))
    return round(total, 1), (f"{len(devices)} populated memory device(s) x {mts} MT/s x {width} B per transfer "
                             f"(SMBIOS type 17 via dmidecode; one channel per device assumed)")


def read_smbios(timeout_s: float = 5.0) -> tuple[str | None, str]:
    """(``dmidecode -t 17`` text, "") or (None, why it could not be read)."""
    try:
        done = subprocess.run(["dmidecode", "-t", "17"], capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError:
        return None, "dmidecode is not installed"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"dmidecode failed: {type(exc).__name__}"
    if done.returncode != 0 or "Memory Device" not in done.stdout:
        problem = (done.stderr.strip().splitlines() or ["no SMBIOS memory devices"])[-1]
        return None, f"dmidecode shows no memory devices ({problem}; a VM guest or no permission?)"
    return done.stdout, ""


def dram_entry(*, user_gbps: float | None, smbios_text: str | None, smbios_why: str = "") -> dict:
    """``rated.memory``'s DRAM entry (per host): the user's value, else SMBIOS's, else None and why."""
    machine, machine_how = (None, smbios_why) if smbios_text is None else rate_devices(parse_dmidecode(smbios_text))
    entry = {"level": "DRAM", "access": None, "scope": "host"}
    if user_gbps is not None:
        beside = f"; SMBIOS gives {machine:g} GB/s ({machine_how})" if machine else ""
        return {**entry, "gbytes_per_s": round(float(user_gbps), 1),
                "derivation": f"{float(user_gbps):g} GB/s per host given by the user (rated.dram_gbytes_per_s in "
                              f"the run config, or ert-run --rated-dram){beside}"}
    if machine is not None:
        return {**entry, "gbytes_per_s": machine, "derivation": machine_how}
    return {**entry, "gbytes_per_s": None,
            "derivation": no_rated_text(f"{machine_how or 'SMBIOS was not read'} and the config has no "
                          f"rated.dram_gbytes_per_s (or pass ert-run --rated-dram GBPS)")}
