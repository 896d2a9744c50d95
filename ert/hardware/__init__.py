"""Hardware knowledge in one place: what a machine can physically do, and how each value was derived.

``cpu`` (microarchitecture tables: FLOPs, L1/L2/L3 bytes per cycle, the clock), ``dram`` (DIMMs from
SMBIOS), ``links`` (PCIe, NVLink, NVLink-C2C) and ``nvidia`` (SM and tensor-core tables); ``hwinfo`` reads this machine's hints (caches, CPU model,
cpus, network interfaces) from sysfs and procfs. Every
stage may read it (it imports no stage); a ceiling without a rated value says why in the one form
``no_rated_text`` writes.
"""

from __future__ import annotations

NO_RATED = "no rated value"


def no_rated_text(why: str) -> str:
    """'no rated value: <why>': the derivation of a ceiling that has no rated value, the same everywhere."""
    return f"{NO_RATED}: {why}"
