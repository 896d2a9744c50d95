"""CUDA host<->device link levels and peer GPU levels: copies on non-default streams timed by CUDA events.

Levels ``link-h2d``, ``link-d2h`` and ``link-bidir`` (H2D and D2H on two
streams at once) from ``pinned`` host memory (cudaHostAlloc through CuPy),
and ``link-h2d`` and ``link-d2h`` from ``pageable`` (numpy) host memory;
where this process sees two or more GPUs, ``peer-d2d`` between every ordered
pair, variant ``p2p`` (peer access enabled: the copy goes GPU to GPU, over
NVLink or PCIe) and ``staged`` (peer access disabled: the driver stages the
copy through host memory).

**The gate.**  The pinned and ``p2p`` copies of a sample wait behind a one-thread
kernel (kernels/ert_cuda_gate.cu) that spins on a word of mapped pinned host
memory; the host sets it once the batch is queued, so the copies run back to
back and the events time the link, not Python's enqueue cost (OpenCL's user
event does the same in ``ert.backends.opencl_links``).  A sample of more than
``GATE_BATCH`` copies runs as several gated batches whose event spans add up:
a stream queues a bounded number of commands before the enqueueing host
blocks.  Pageable and ``staged`` copies are not gated: cudaMemcpyAsync from
or to pageable memory holds the host (device to host until the copy is done,
host to device until its bytes are in the driver's staging buffers, which
only the stream's progress frees), so behind a closed gate the host would
wait for copies that wait for the host.  For the same reason there is no
pageable ``link-bidir``: from one host thread each device-to-host copy holds
the host, so the two directions would mostly take turns (the next
host-to-device copy is not even queued meanwhile) and the rate would be
neither one direction's nor both at once.

This module is the host logic, tested without a GPU: which transfers, the
topology, the rated rates, NVLink counts.  The gate and the copies themselves
(the order of gate, events and copies, and the classes ``CupyLinks`` /
``CupyTransfer`` / ``CupyPeerTransfer`` / ``CupyGate``, which need a GPU) are
``ert.backends.cuda_copies``.  Never run on a GPU yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ert.hardware import links as hw_links
from ert.backends import cuda_host as host
from ert.hardware import no_rated_text

LINK_LEVELS = ("link-h2d", "link-d2h", "link-bidir")
HOST_VARIANTS = ("pinned", "pageable")
# (level, variant) measured: no pageable link-bidir (see the module's docstring).
HOST_TRANSFERS = tuple((level, variant) for variant in HOST_VARIANTS for level in LINK_LEVELS
                       if not (variant == "pageable" and level == "link-bidir"))


# ----------------------------------------------------------------------------- host logic
@dataclass
class PeerTopology:
    """What one process sees of its GPUs: their count, who can access whom, and the link between each pair.

    ``link[a][b]`` is "NVLink", "PCIe" or "unknown"; ``nvlinks[a][b]`` the
    NVLink count from a to b (0 where none) and ``nvlink_version`` what
    nvmlDeviceGetNvLinkVersion answers: the enum nvmlNvlinkVersion_t
    (``ert.hardware.links.NVLINK_VERSIONS``; 0 where unknown); ``names`` the
    devices' names (a GeForce/RTX NVLink is a bridge).  Built from the CUDA
    runtime and NVML on a GPU machine (``read_topology``), or written out by a test.
    """

    devices: list[int]
    can_access: list[list[bool]]
    link: list[list[str]] = field(default_factory=list)
    nvlinks: list[list[int]] = field(default_factory=list)
    nvlink_version: int = 0
    names: list[str] = field(default_factory=list)

    def __post_init__(self):
        n = len(self.devices)
        if len(self.can_access) != n or any(len(row) != n for row in self.can_access):
            raise ValueError(f"can_access must be {n} x {n}")
        if not self.link:
            self.link = [["unknown"] * n for _ in range(n)]
        if not self.nvlinks:
            self.nvlinks = [[0] * n for _ in range(n)]


def peer_plan(topology: PeerTopology) -> list[tuple[int, int, bool]]:
    """(source, destination, peer access) for every ordered pair of distinct devices: peer access off for
    every pair, and on where the source can access the destination; [] under two devices."""
    plan = []
    for a in topology.devices:
        for b in topology.devices:
            if a == b:
                continue
            plan.append((a, b, False))
            ia, ib = topology.devices.index(a), topology.devices.index(b)
            if topology.can_access[ia][ib]:
                plan.append((a, b, True))
    return plan


def variant_of(peer_access: bool) -> str:
    return "p2p" if peer_access else "staged"


def peer_rated(topology: PeerTopology, *, host_rated: dict | None = None) -> dict:
    """The rated ``peer-d2d`` rate: the best pair's NVLinks, else PCIe (the host link's per-direction rate).

    Returns {"gbytes_per_s", "derivation", "pairs": [{"pair", "gbytes_per_s", "derivation"}, ...]}.
    """
    n = len(topology.devices)
    pairs = []
    for ia in range(n):
        for ib in range(n):
            if ia == ib:
                continue
            pair = [topology.devices[ia], topology.devices[ib]]
            count = topology.nvlinks[ia][ib]
            if count:
                name = topology.names[ia] if ia < len(topology.names) else ""
                rated = hw_links.nvlink_rated(version=topology.nvlink_version, links=count, source="NVML",
                                              device_name=name)
            elif topology.link[ia][ib] == "PCIe" and host_rated and host_rated.get("gbytes_per_s"):
                rated = {"gbytes_per_s": host_rated["gbytes_per_s"],
                         "derivation": f"over PCIe, as the host link: {host_rated['derivation']}"}
            else:
                rated = {"gbytes_per_s": None,
                         "derivation": no_rated_text(f"the link between GPUs {pair[0]} and {pair[1]} is "
                                       f"{topology.link[ia][ib]}")}
            pairs.append({"pair": pair, **rated})
    known = [p for p in pairs if p["gbytes_per_s"]]
    if not pairs:
        return {"gbytes_per_s": None, "derivation": no_rated_text("fewer than two GPUs"), "pairs": []}
    if not known:
        return {"gbytes_per_s": None, "derivation": pairs[0]["derivation"], "pairs": pairs}
    best = max(known, key=lambda p: p["gbytes_per_s"])
    return {"gbytes_per_s": best["gbytes_per_s"],
            "derivation": f"best pair {best['pair'][0]}->{best['pair'][1]}: {best['derivation']}", "pairs": pairs}


def nvlink_counts(link_states: list[dict], bus_ids: list[str]) -> list[int]:
    """Active NVLinks from one GPU to each GPU of ``bus_ids`` (by PCI bus id), from NVML's per-link answers
    [{"active": bool, "remote_bus_id": str}, ...]; links to NVSwitches count for every GPU (all-to-all)."""
    wanted = [b.lower() for b in bus_ids]
    counts = [0] * len(wanted)
    switched = 0
    for state in link_states:
        if not state.get("active"):
            continue
        remote = str(state.get("remote_bus_id", "")).lower()
        hits = [i for i, b in enumerate(wanted) if b and _same_bus(b, remote)]
        if hits:
            counts[hits[0]] += 1
        elif state.get("remote_is_switch"):
            switched += 1
    return [c + switched for c in counts]


def _same_bus(a: str, b: str) -> bool:
    """PCI bus ids compare without the domain's width (NVML pads to 8 digits, the runtime to 4)."""
    def norm(text: str) -> str:
        parts = text.split(":")
        if len(parts) == 3:
            parts[0] = f"{int(parts[0], 16):x}" if parts[0] else "0"
        return ":".join(parts).lower()
    try:
        return norm(a) == norm(b)
    except ValueError:
        return a == b


def link_rated_of(*, name: str, nvml_link: dict, pci_bus_id: str, sysfs_root: str = "/sys/bus/pci/devices") -> dict:
    """Rated link-h2d/d2h/bidir of one GPU.

    NVLink-C2C where NVML says C2C is on or the GPU is a Grace Hopper or
    Grace Blackwell (GH200, GB200); else PCIe generation x lanes from NVML's
    maximum for this GPU in this system (an idle GPU trains its link down, so
    the current generation can read low; it is named beside it); else sysfs.
    """
    upper = name.upper()
    if nvml_link.get("c2c_enabled") or "GH200" in upper or "GB200" in upper:
        why = "NVML reports C2C mode on" if nvml_link.get("c2c_enabled") else f"device name {name!r}"
        return hw_links.c2c_rated(source=why)
    gen, width = nvml_link.get("max_generation"), nvml_link.get("max_width")
    if gen and width:
        current = ""
        if nvml_link.get("current_generation"):
            current = (f"; current Gen{nvml_link['current_generation']} x{nvml_link.get('current_width')} "
                       f"when read (idle links train down)")
        rated = hw_links.pcie_rated(generation=int(gen), lanes=int(width),
                                    source=f"NVML maximum link generation and width of this GPU in this system{current}")
        return _with_current_link(rated, nvml_link, maximum=(int(gen), int(width)))
    return hw_links.pcie_rated_from_sysfs(pci_bus_id.lower() if pci_bus_id else None, root=sysfs_root)


def _with_current_link(rated: dict, nvml_link: dict, *, maximum: tuple[int, int]) -> dict:
    """``rated`` (from NVML's maximum link) with the rate of the link as last read beside it in each derivation.

    Inside a VM NVML's "maximum" can name a generation the slot never trains to; a plateau near the
    current link's rate and far below the maximum's says which one the copies ran on.
    """
    gen, width = nvml_link.get("current_generation"), nvml_link.get("current_width")
    if not gen or not width or (int(gen), int(width)) == maximum:
        return rated
    now = hw_links.pcie_rated(generation=int(gen), lanes=int(width), source="NVML current link")
    for level, entry in rated.items():
        value = now.get(level, {}).get("gbytes_per_s")
        if value is not None and entry.get("derivation"):
            entry["derivation"] += (f"; at the current link (Gen{gen} x{width} when read): {value:g} GB/s"
                                    + (" both ways" if level == "link-bidir" else " per direction"))
    return rated


def read_nvml_link(pci_bus_id: str) -> dict:
    """PCIe generation and width (current and maximum), C2C mode and NVLink states from NVML; {} without it."""
    def read(pynvml, handle, out: dict) -> None:
        for key, fn in (("current_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
                        ("current_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("max_generation", "nvmlDeviceGetMaxPcieLinkGeneration"),
                        ("max_width", "nvmlDeviceGetMaxPcieLinkWidth")):
            try:
                out[key] = int(getattr(pynvml, fn)(handle))
            except Exception:  # a field this GPU or driver does not report
                continue
        try:
            out["c2c_enabled"] = bool(pynvml.nvmlDeviceGetC2cModeInfoV(handle).isC2cEnabled)
        except Exception:  # older NVML, or no C2C
            pass
        states = list(_nvlink_states(pynvml, handle))
        if states:
            out["nvlinks"] = states

    return host.nvml_read(pci_bus_id, read)


def _nvlink_states(pynvml, handle):
    """Each NVLink of the GPU: active or not, and where readable its remote bus id, version enum and switch flag.

    Links are asked in order until NVML refuses one (no NVLink, or past the
    GPU's last).  A field NVML does not answer is left out and its error kept
    in ``unread`` (a run's metadata shows what could not be read).
    """
    for link in range(int(pynvml.NVML_NVLINK_MAX_LINKS)):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            return  # no NVLink here, or past the last link
        entry = {"link": link, "active": bool(active)}
        unread = {}
        try:
            entry["remote_bus_id"] = host.text_of(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except pynvml.NVMLError as exc:
            unread["remote_bus_id"] = str(exc)
        try:
            entry["version"] = int(pynvml.nvmlDeviceGetNvLinkVersion(handle, link))
        except pynvml.NVMLError as exc:
            unread["version"] = str(exc)
        try:
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            entry["remote_is_switch"] = kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        except (pynvml.NVMLError, AttributeError) as exc:  # AttributeError: an nvidia-ml-py older than the call
            unread["remote_is_switch"] = f"{type(exc).__name__}: {exc}"
        if unread:
            entry["unread"] = unread
        yield entry


def read_topology(runtime, *, bus_ids: list[str], nvml: list[dict], names: list[str] | None = None) -> PeerTopology:
    """The PeerTopology of the visible GPUs from the CUDA runtime (deviceCanAccessPeer) and NVML's NVLink states."""
    n = len(bus_ids)
    devices = list(range(n))
    can = [[a != b and bool(runtime.deviceCanAccessPeer(a, b)) for b in devices] for a in devices]
    counts = [nvlink_counts(nvml[a].get("nvlinks", []), bus_ids) for a in devices]
    link = [["self" if a == b else ("NVLink" if counts[a][b] else "PCIe") for b in devices] for a in devices]
    versions = [s.get("version", 0) for info in nvml for s in info.get("nvlinks", []) if s.get("active")]
    return PeerTopology(devices=devices, can_access=can, link=link, nvlinks=counts,
                        nvlink_version=max(versions) if versions else 0, names=list(names or []))


def visible_topology() -> PeerTopology | None:
    """The PeerTopology of the GPUs this process sees (CUDA runtime and NVML); None under two GPUs or without CUDA."""
    try:
        import cupy

        runtime = cupy.cuda.runtime
        count = runtime.getDeviceCount()
        if count < 2:
            return None
        bus_ids = [runtime.deviceGetPCIBusId(d) for d in range(count)]
        names = [host.text_of(runtime.getDeviceProperties(d)["name"]) for d in range(count)]
    except Exception:  # no CUDA here: no peers
        return None
    return read_topology(runtime, bus_ids=bus_ids, nvml=[read_nvml_link(b) for b in bus_ids], names=names)
