"""Hardware hints read cheaply from sysfs and procfs: cache sizes, CPU model, usable cpus, network interfaces."""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from ert.hardware.arm import Description, parse_cpuinfo

SYSFS_CPU = "/sys/devices/system/cpu"

# Multipliers of the size suffixes sysfs uses ("32K", "1024K", "2M").
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class CacheInfo:
    """One data or unified cache as the OS reports it (a hint, not a measurement)."""

    level: int  # 1, 2, 3
    kind: str  # "Data" or "Unified"; instruction caches are skipped
    size_bytes: int  # size of one instance
    shared_cpu_count: int  # logical cpus sharing one instance (1 = private)
    ways: int | None = None  # associativity (sysfs ways_of_associativity), when the OS says
    sets: int | None = None  # number_of_sets
    line_bytes: int | None = None  # coherency_line_size


def parse_size_bytes(text: str) -> int:
    """Bytes in a sysfs cache size such as ``"32K"``, ``"2M"`` or ``"1048576"``.

    Raises ValueError for anything else.
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a cache size: {text!r}")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]


def parse_cpu_list(text: str) -> list[int]:
    """CPU ids in a kernel cpu list such as ``"0-3,8,10-11"`` (empty text: none)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            first, last = (int(x) for x in part.split("-", 1))
            if last < first:
                raise ValueError(f"bad cpu range: {part!r}")
            cpus.extend(range(first, last + 1))
        else:
            cpus.append(int(part))
    return cpus


def _count_cpu_map(text: str) -> int:
    """Set bits in a kernel cpu mask such as ``"00000000,00000003"``."""
    return sum(bin(int(word, 16)).count("1") for word in text.strip().split(",") if word)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_index(index_dir: Path) -> CacheInfo | None:
    """One ``cache/indexN`` directory as a CacheInfo; None if unreadable or an instruction cache."""
    kind = _read(index_dir / "type")
    level = _read(index_dir / "level")
    size = _read(index_dir / "size")
    if kind is None or level is None or size is None or kind == "Instruction":
        return None
    try:
        level_n = int(level)
        size_bytes = parse_size_bytes(size)
    except ValueError:
        return None
    if size_bytes <= 0:
        return None
    shared = 1
    cpu_list = _read(index_dir / "shared_cpu_list")
    cpu_map = _read(index_dir / "shared_cpu_map")
    try:
        if cpu_list:
            shared = len(set(parse_cpu_list(cpu_list)))
        elif cpu_map:
            shared = _count_cpu_map(cpu_map)
    except ValueError:
        shared = 1
    geometry = {}
    for key, name in (("ways", "ways_of_associativity"), ("sets", "number_of_sets"), ("line_bytes", "coherency_line_size")):
        try:
            value = int(_read(index_dir / name) or "")
        except ValueError:
            continue
        if value > 0:
            geometry[key] = value
    return CacheInfo(level=level_n, kind=kind, size_bytes=size_bytes, shared_cpu_count=max(shared, 1), **geometry)


def read_cpu_caches(sysfs_root: str = "/sys/devices/system/cpu") -> list[CacheInfo]:
    """Data and unified caches of cpu0, ordered by level (Data before Unified within one).

    Reads ``cpu0/cache/index*/{level,type,size,shared_cpu_list}`` (falling back
    to ``shared_cpu_map``).  Entries that cannot be read or parsed are skipped;
    a missing directory gives ``[]``.  The sizes are the OS's claim: a VM may
    report its host's caches, so callers treat them as hints.
    """
    cache_dir = Path(sysfs_root) / "cpu0" / "cache"
    try:
        index_dirs = [p for p in cache_dir.iterdir() if p.name.startswith("index")]
    except OSError:
        return []
    caches = [c for c in (_read_index(p) for p in index_dirs) if c is not None]
    caches.sort(key=lambda c: (c.level, c.kind != "Data", c.size_bytes))
    return caches


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's marketing name, from ``/proc/cpuinfo`` or else the platform module ("" if unknown)."""
    text = _read(Path(cpuinfo_path))
    if text:
        # x86 says "model name"; some ARM and other kernels say "Hardware" or "cpu model".
        for key in ("model name", "cpu model", "hardware", "processor name"):
            for line in text.splitlines():
                name, sep, value = line.partition(":")
                if sep and name.strip().lower() == key and value.strip():
                    return value.strip()
        arm = parse_cpuinfo(text)  # an Arm kernel names no model: the core its MIDR names ("Neoverse V2")
        if arm is not None:
            return arm.core
    return platform.processor() or platform.machine() or ""


def usable_cpus() -> int:
    """Logical cpus this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except OSError:
            pass
    return os.cpu_count() or 1


def aggregate_capacity_bytes(cache: CacheInfo, threads: int, *, cpus: int | None = None) -> int:
    """Total capacity of ``cache`` seen by ``threads`` threads pinned one per cpu.

    Every instance a thread runs on counts once: a private cache gives
    ``threads * size``, one shared by S cpus ``ceil(threads / S) * size``.
    With ``cpus`` (the logical cpus in the machine) the count is capped at the
    ``ceil(cpus / S)`` instances that exist, so oversubscribing threads adds
    nothing.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    share = max(cache.shared_cpu_count, 1)
    instances = math.ceil(threads / share)
    if cpus is not None:
        instances = min(instances, max(math.ceil(cpus / share), 1))
    return instances * cache.size_bytes



def process_cpus() -> list[int]:
    """Every cpu some thread of this process may run on (the union of its threads' affinities).

    An OpenMP runtime binds its master thread to one place once its pool
    starts, so the process's own affinity then shows one core; the union over
    ``/proc/self/task/*`` still shows every cpu the pool was given.
    """
    cpus: set[int] = set()
    try:
        for task in Path("/proc/self/task").iterdir():
            for line in (_read(task / "status") or "").splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    cpus.update(parse_cpu_list(line.split(":", 1)[1]))
    except (OSError, ValueError):
        pass
    if not cpus and hasattr(os, "sched_getaffinity"):
        cpus = set(os.sched_getaffinity(0))
    return sorted(cpus) or list(range(os.cpu_count() or 1))


def cores_in_use(threads: int) -> int:
    """Physical cores that ``threads`` threads, one per core, occupy: SMT siblings share one core's units."""
    if threads < 1:
        raise ValueError("threads must be at least 1")
    return max(1, min(threads, len(physical_cores(process_cpus()))))


def physical_cores(cpus: list[int], sysfs_root: str = SYSFS_CPU) -> list[list[int]]:
    """``cpus`` grouped by physical core (hyperthread siblings together), in core order.

    Reads ``cpuN/topology/{physical_package_id,core_id}``; a cpu whose topology
    cannot be read is its own core.
    """
    groups: dict[tuple, list[int]] = {}
    for cpu in sorted(set(cpus)):
        topo = Path(sysfs_root) / f"cpu{cpu}" / "topology"
        try:
            key = (int((topo / "physical_package_id").read_text()), int((topo / "core_id").read_text()))
        except (OSError, ValueError):
            key = ("cpu", cpu)
        groups.setdefault(key, []).append(cpu)
    return sorted(groups.values(), key=lambda g: g[0])


# ---------------------------------------------------------------------------- network interfaces
def read_nics(net_root: str = "/sys/class/net", ib_root: str = "/sys/class/infiniband") -> list[dict]:
    """NICs with a known link rate: Ethernet speed (Mb/s) and InfiniBand port rate (Gb/s), as GB/s."""
    nics = []
    net = Path(net_root)
    if net.is_dir():
        for dev in sorted(net.iterdir()):
            if dev.name == "lo" or not (dev / "device").exists():
                continue  # loopback, bridges, veth: no wire behind them
            try:
                mbit = int((dev / "speed").read_text().strip())
            except (OSError, ValueError):
                continue
            if mbit > 0:
                nics.append({"name": dev.name, "gbytes_per_s": mbit / 8000.0,
                             "source": f"{dev}/speed {mbit} Mb/s / 8"})
    ib = Path(ib_root)
    if ib.is_dir():
        for port in sorted(ib.glob("*/ports/*")):
            try:
                text = (port / "rate").read_text().strip()
                gbit = float(text.split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if gbit > 0:
                nics.append({"name": f"{port.parent.parent.name}:{port.name}", "gbytes_per_s": gbit / 8.0,
                             "source": f"{port}/rate '{text}' / 8"})
    return nics


def interfaces(net_root: str = "/sys/class/net") -> list[dict]:
    """This host's network interfaces with an IPv4 address: name, address/prefix, virtual or not, kind, speed.

    ``virtual`` is true for an interface with no device behind it (veth,
    bridge, tun, a VM's or container's virtual NIC): its ``speed`` file, where
    it has one, is a nominal figure (veth says 10000 Mb/s), not a line rate.
    """
    import ipaddress

    out = []
    net = Path(net_root)
    for name, addr in ipv4_addresses(net_root):
        dev = net / name
        try:
            real = os.path.realpath(dev)
        except OSError:
            real = str(dev)
        virtual = "/devices/virtual/" in real or not (dev / "device").exists()
        try:
            speed = int((dev / "speed").read_text().strip())
        except (OSError, ValueError):
            speed = None
        out.append({"name": name, "address": str(ipaddress.ip_interface(addr)), "virtual": virtual,
                    "kind": _link_kind(name) if virtual else "device",
                    "speed_mbit": speed if speed and speed > 0 else None})
    return out


def ipv4_addresses(net_root: str = "/sys/class/net") -> list[tuple[str, str]]:
    """(interface, ``a.b.c.d/prefix``) of this host's interfaces with an IPv4 address, loopback left out."""
    net = Path(net_root)
    if not net.is_dir():
        return []
    found = ((dev.name, _ipv4(dev.name)) for dev in sorted(net.iterdir()) if dev.name != "lo")
    return [(name, addr) for name, addr in found if addr]


def _ipv4(name: str) -> str | None:
    """``a.b.c.d/prefix`` of interface ``name`` (its primary IPv4 address), or None."""
    import fcntl
    import ipaddress
    import socket
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = struct.pack("256s", name.encode()[:15])
            addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, packed)[20:24])   # SIOCGIFADDR
            mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x891B, packed)[20:24])   # SIOCGIFNETMASK
    except OSError:
        return None
    return f"{addr}/{ipaddress.IPv4Network(f'0.0.0.0/{mask}').prefixlen}"


def _link_kind(name: str) -> str:
    """A virtual interface's kind (veth, bridge, tun, ...) from ``ip -d link``; "virtual" when it cannot tell."""
    import json
    import subprocess

    try:
        out = subprocess.run(["ip", "-j", "-d", "link", "show", name], capture_output=True, text=True, timeout=5)
        return str(json.loads(out.stdout)[0].get("linkinfo", {}).get("info_kind") or "virtual")
    except (OSError, ValueError, IndexError, KeyError, subprocess.SubprocessError, AttributeError):
        return "virtual"


def route_between(mine: list[dict], theirs: list[dict]) -> dict | None:
    """The interface of ``mine`` whose subnet holds an address of ``theirs``: where the two hosts talk.

    None when no subnet is shared (routed networks, InfiniBand without IPoIB):
    the rated value then falls back to the host's NICs.
    """
    import ipaddress

    for iface in mine:
        network = ipaddress.ip_interface(iface["address"]).network
        for other in theirs:
            if ipaddress.ip_interface(other["address"]).ip in network:
                return {**iface, "peer_address": other["address"]}
    return None


def iface_bytes(name: str, net_root: str = "/sys/class/net") -> int | None:
    """Bytes interface ``name`` has sent plus received so far (its kernel counters), or None."""
    try:
        stats = Path(net_root) / name / "statistics"
        return int((stats / "tx_bytes").read_text()) + int((stats / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def describe_arm(root: str | Path = "/") -> Description:
    """The Arm CPU (ert.hardware.arm), cpu0's caches and the highest clock the OS names, under ``root`` (a
    recorded machine's folder reads like this machine's "/")."""
    root = Path(root)
    try:
        cpu = parse_cpuinfo((root / "proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        cpu = None
    sysfs = root / "sys/devices/system/cpu"
    clock = None
    try:
        khz = int((sysfs / "cpu0/cpufreq/cpuinfo_max_freq").read_text().strip())
        clock = khz / 1e6 if khz > 0 else None
    except (OSError, ValueError):
        pass
    return Description(cpu=cpu, caches=read_cpu_caches(str(sysfs)), max_clock_ghz=clock, root=str(root))
