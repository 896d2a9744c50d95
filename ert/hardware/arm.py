"""Arm CPUs as they describe themselves: the core named by its MIDR, vector extensions, caches, and emulation.

Linux on an Arm machine gives no marketing name in /proc/cpuinfo; it gives
each cpu's Main ID Register fields (``CPU implementer``, ``CPU part``,
``CPU variant``, ``CPU revision``) and its hardware capabilities
(``Features``).  The implementer and part name the core exactly (Arm's
Technical Reference Manuals list the part numbers: 0xd0c Neoverse N1, 0xd40
V1, 0xd49 N2, 0xd4f V2; Fujitsu's A64FX is implementer 0x46, part 0x001), so
ert finds its row of ert.hardware.cpu.TABLE from them even where the LLVM
that Numba uses is too old to know the core's name.

``describe`` reads a whole machine description (procfs and sysfs under any
root, so a recorded one in tests/data/arm/ reads like this machine's), and
``rated_from_description`` turns it into rated ceilings at a stated clock.

``emulation`` says whether this process runs on an emulated CPU (qemu-user):
an aarch64 process whose kernel's /proc/cpuinfo describes an x86 CPU (or the
reverse), or an MIDR whose implementer is 0x00, reserved for software use,
as qemu's own "max" CPU reports.  Such a CPU's rates are the emulator's, not
a machine's, and a run on one gets no rated values.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass, field
from pathlib import Path

IMPLEMENTERS = {0x00: "software (an emulator)", 0x41: "Arm", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu",
                0x48: "HiSilicon", 0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0xC0: "Ampere"}

# (implementer, part) -> (the core's name, its key in ert.hardware.cpu.TABLE or None where not rated).
PARTS: dict[tuple[int, int], tuple[str, str | None]] = {
    (0x41, 0xD0C): ("Neoverse N1", "neoverse-n1"),
    (0x41, 0xD40): ("Neoverse V1", "neoverse-v1"),
    (0x41, 0xD49): ("Neoverse N2", "neoverse-n2"),
    (0x41, 0xD4F): ("Neoverse V2", "neoverse-v2"),
    (0x41, 0xD8E): ("Neoverse N3", None),
    (0x41, 0xD84): ("Neoverse V3", None),
    (0x46, 0x001): ("A64FX", "a64fx"),
    (0xC0, 0xAC3): ("AmpereOne", None),
}

# AT_HWCAP / AT_HWCAP2 bits of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h).
_AT_HWCAP, _AT_HWCAP2 = 16, 26
_HWCAP_ASIMD, _HWCAP_SVE = 1 << 1, 1 << 22
_HWCAP2_SVE2 = 1 << 1
_PR_SVE_GET_VL = 51

_ARM_MACHINES = ("aarch64", "arm64")
_X86_MACHINES = ("x86_64", "amd64", "i386", "i686")


@dataclass(frozen=True)
class ArmCpu:
    """One Arm CPU as /proc/cpuinfo describes it (its first cpu's MIDR fields and features)."""

    implementer: int
    part: int
    variant: int = 0
    revision: int = 0
    features: tuple[str, ...] = ()
    cpus: int = 1

    @property
    def core(self) -> str:
        """The core's name from its MIDR ("Neoverse V2"), or what the MIDR says where ert does not know it."""
        known = PARTS.get((self.implementer, self.part))
        if known:
            return known[0]
        vendor = IMPLEMENTERS.get(self.implementer, f"implementer 0x{self.implementer:02x}")
        return f"{vendor} part 0x{self.part:03x}"

    @property
    def table_key(self) -> str | None:
        """The core's row in ert.hardware.cpu.TABLE (the LLVM CPU name), None where ert has none."""
        return PARTS.get((self.implementer, self.part), ("", None))[1]

    @property
    def midr(self) -> str:
        return (f"implementer 0x{self.implementer:02x}, part 0x{self.part:03x}, "
                f"r{self.variant}p{self.revision}")

    def vector_extensions(self) -> list[str]:
        return _extensions("asimd" in self.features, "sve" in self.features, "sve2" in self.features)


def _extensions(asimd: bool, sve: bool, sve2: bool) -> list[str]:
    return [name for name, has in (("NEON (ASIMD)", asimd), ("SVE", sve), ("SVE2", sve2)) if has]


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one ``{key: value}`` per cpu (keys lower-cased); lines before the first cpu count too."""
    blocks, current = [], {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if current:
                blocks.append(current)
                current = {}
            continue
        current[key.strip().lower()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def parse_cpuinfo(text: str) -> ArmCpu | None:
    """The Arm CPU an aarch64 kernel's /proc/cpuinfo describes; None when it describes no Arm CPU."""
    blocks = [b for b in cpuinfo_blocks(text) if "cpu implementer" in b and "cpu part" in b]
    if not blocks:
        return None
    first = blocks[0]
    implementer, part = _int(first["cpu implementer"]), _int(first["cpu part"])
    if implementer is None or part is None:
        return None
    cpus = sum(1 for b in cpuinfo_blocks(text) if "processor" in b) or len(blocks)
    return ArmCpu(implementer=implementer, part=part, variant=_int(first.get("cpu variant", "0")) or 0,
                  revision=_int(first.get("cpu revision", "0")) or 0,
                  features=tuple(first.get("features", "").split()), cpus=cpus)


def _describes_x86(text: str) -> str:
    """The x86 CPU a /proc/cpuinfo describes ("AuthenticAMD, AMD EPYC ..."), "" when it is not an x86 one."""
    block = next(iter(cpuinfo_blocks(text)), {})
    if "vendor_id" not in block and "flags" not in block:
        return ""
    return ", ".join(v for v in (block.get("vendor_id", ""), block.get("model name", "")) if v) or "an x86 CPU"


def emulation(*, machine: str | None = None, cpuinfo: str | None = None) -> str:
    """Why this process's CPU is emulated (one sentence), or "" when nothing says so."""
    machine = (machine or platform.machine()).lower()
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return ""
    if machine in _ARM_MACHINES:
        x86 = _describes_x86(cpuinfo)
        if x86:
            return (f"an {machine} process on a kernel whose /proc/cpuinfo describes {x86}: a user-mode "
                    f"emulator (qemu-user) runs it")
        arm = parse_cpuinfo(cpuinfo)
        if arm is not None and arm.implementer == 0x00:
            return ("the CPU's MIDR implementer is 0x00, reserved for software use: an emulator's CPU "
                    "(qemu's 'max')")
    elif machine in _X86_MACHINES and parse_cpuinfo(cpuinfo) is not None:
        return f"an {machine} process on a kernel whose /proc/cpuinfo describes an Arm CPU: an emulator runs it"
    return ""


def _auxval(kind: int) -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.getauxval.restype = ctypes.c_ulong
        libc.getauxval.argtypes = [ctypes.c_ulong]
        return int(libc.getauxval(kind))
    except (OSError, AttributeError):
        return 0


def sve_vector_bits() -> int | None:
    """This thread's SVE vector length in bits (prctl PR_SVE_GET_VL), None without SVE or off aarch64."""
    if platform.machine().lower() not in _ARM_MACHINES:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = libc.prctl(_PR_SVE_GET_VL, 0, 0, 0, 0)
    except (OSError, AttributeError):
        return None
    return (value & 0xFFFF) * 8 if value > 0 else None


def cpu_isa(vector_bits_used: int | None = None) -> dict:
    """``metadata.cpu_isa`` of an Arm process: the machine, the vector extensions this CPU offers (from the
    kernel's AT_HWCAP, which an emulator answers for its own CPU), SVE's vector length, and the width ert's
    kernels use.  {} off Arm."""
    machine = platform.machine().lower()
    if machine not in _ARM_MACHINES:
        return {}
    hwcap, hwcap2 = _auxval(_AT_HWCAP), _auxval(_AT_HWCAP2)
    out = {"machine": machine,
           "vector_extensions": _extensions(bool(hwcap & _HWCAP_ASIMD), bool(hwcap & _HWCAP_SVE),
                                            bool(hwcap2 & _HWCAP2_SVE2)),
           "source": "AT_HWCAP/AT_HWCAP2 (getauxval) and prctl(PR_SVE_GET_VL)"}
    sve = sve_vector_bits()
    if sve:
        out["sve_vector_bits"] = sve
    if vector_bits_used:
        out["kernels_use"] = (f"NEON, {vector_bits_used}-bit registers (LLVM's fixed-width vectors; "
                              f"SVE is not used)" if vector_bits_used == 128 else f"{vector_bits_used}-bit vectors")
    return out


# ---------------------------------------------------------------------------- recorded machine descriptions
@dataclass
class Description:
    """A machine's description read from procfs and sysfs under ``root`` (this machine's is "/")."""

    cpu: ArmCpu | None
    caches: list = field(default_factory=list)   # ert.hardware.hwinfo.CacheInfo of cpu0
    max_clock_ghz: float | None = None            # cpufreq's cpuinfo_max_freq, where the OS gives one
    root: str = "/"


def rated_from_description(desc: Description, *, clock_ghz: float | None = None, clock_how: str = "",
                           cores: int | None = None) -> dict:
    """Rated ceilings (ert.hardware.cpu.rated_ceilings) of a described machine: its core's table row, at
    ``clock_ghz`` (else the OS's highest clock), on ``cores`` (else every cpu; none of these cores has SMT)."""
    from ert.hardware import cpu as cpu_table
    from ert.hardware import no_rated_text

    if desc.cpu is None:
        arch, why = None, no_rated_text("the description names no Arm CPU (no CPU implementer/part)")
    elif desc.cpu.table_key is None:
        arch, why = None, no_rated_text(f"{desc.cpu.core} ({desc.cpu.midr}) is not in ert's table")
    else:
        arch, why = cpu_table.lookup(desc.cpu.table_key, desc.cpu.core)
    if clock_ghz is None and desc.max_clock_ghz:
        clock_ghz, clock_how = desc.max_clock_ghz, clock_how or "cpufreq cpuinfo_max_freq"
    return cpu_table.rated_ceilings(arch=arch, why_none=why, clock_ghz=clock_ghz, clock_how=clock_how or "stated",
                                    cores=cores or (desc.cpu.cpus if desc.cpu else 1))


def rated_value(rated: dict, *, precision: str = "fp64", fma: bool = True, level: str | None = None,
                access: str = "rw") -> dict | None:
    """One entry of a ``rated`` dict: a compute peak (precision, FMA) or a memory level (level, access)."""
    if level:
        return next((m for m in rated["memory"] if m["level"] == level and m["access"] == access), None)
    return next((c for c in rated["compute"] if c["precision"] == precision and c["fma"] == fma
                 and not c.get("mix") and not c.get("op") and c.get("unit") in (None, "GFLOP/s")), None)


__all__ = ["ArmCpu", "Description", "IMPLEMENTERS", "PARTS", "cpu_isa", "cpuinfo_blocks", "emulation",
           "parse_cpuinfo", "rated_from_description", "rated_value", "sve_vector_bits"]
