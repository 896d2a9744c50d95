"""OpenCL host<->device link levels: enqueue_copy from pageable and from mapped ALLOC_HOST_PTR host memory.

Levels ``link-h2d``, ``link-d2h`` and ``link-bidir`` (both at once on two
queues), each in two variants:

* ``copy``   clEnqueueWriteBuffer / clEnqueueReadBuffer between a numpy array
  (pageable host memory) and a device buffer;
* ``mapped`` the same from and to the host pointer of a mapped
  CL_MEM_ALLOC_HOST_PTR buffer: pinned host memory on GPU drivers (NVIDIA's and
  AMD's bandwidth tests' "pinned" mode).

Samples are timed by profiling events (first start to last end), the
destination is poisoned before each size and compared with the source in full
afterwards.  On a CPU device (PoCL) there is no bus: the records say so
(``transport``) and the rated value is replaced by numpy's host memory copy.
"""

from __future__ import annotations

import time

import numpy as np

from ert.hardware import links as hw_links
from ert.backends import links
from ert.hardware import no_rated_text

MAPPED_METHOD = "from the mapped host pointer of a CL_MEM_ALLOC_HOST_PTR buffer (pinned on GPU drivers)"
CPU_TRANSPORT = "memory copy on PoCL's CPU device, not a bus"
PROFILING_SOURCE = "OpenCL profiling events: first command's start to last command's end"


def _event_span(events) -> float | None:
    """Seconds from the first event's start to the last one's end; None where the driver gives no profile."""
    try:
        start = min(e.profile.start for e in events)
        end = max(e.profile.end for e in events)
    except Exception:  # a queue or driver without profiling information
        return None
    return (end - start) * 1e-9


class _Host:
    """Host memory of one variant: a numpy array (pageable) or the mapped pointer of an ALLOC_HOST_PTR buffer."""

    def __init__(self, cl, context, queue, nbytes: int, *, mapped: bool):
        self.buffer = None
        if mapped:
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
            self.buffer = cl.Buffer(context, flags, nbytes)
            self.array, event = cl.enqueue_map_buffer(queue, self.buffer, cl.map_flags.READ | cl.map_flags.WRITE,
                                                      0, (nbytes,), np.uint8)
            event.wait()
        else:
            self.array = np.empty(nbytes, dtype=np.uint8)

    def release(self, queue) -> None:
        if self.buffer is not None:
            self.array.base.release(queue)
            queue.finish()
            self.buffer.release()
            self.buffer = None
        self.array = None


class OpenCLTransfer:
    """One (level, variant) on one OpenCL device; see ``ert.backends.Transfer``."""

    kind = "link"

    def __init__(self, owner: "OpenCLLinks", *, level: str, variant: str):
        self.owner, self.level, self.variant = owner, level, variant
        self.directions = 2 if level == "link-bidir" else 1
        what = {"link-h2d": "clEnqueueWriteBuffer host to device",
                "link-d2h": "clEnqueueReadBuffer device to host",
                "link-bidir": "clEnqueueWriteBuffer and clEnqueueReadBuffer at once on two in-order queues"}[level]
        source = "from/to a numpy array (pageable host memory)" if variant == "copy" else MAPPED_METHOD
        self.method = f"{what}, {source}; {owner.timing}"
        self.extra = {"transport": CPU_TRANSPORT} if owner.is_cpu else {}
        self._nbytes = 0

    # The host and device sides of this variant.
    def _host_src(self):
        return self.owner.host[self.variant][0].array

    def _host_dst(self):
        return self.owner.host[self.variant][1].array

    def prepare(self, nbytes: int) -> None:
        owner, cl = self.owner, self.owner.cl
        self._nbytes = nbytes
        if self.level in ("link-h2d", "link-bidir"):
            cl.enqueue_fill_buffer(owner.queue, owner.device_in, np.uint8(links.POISON_BYTE), 0, nbytes).wait()
        if self.level in ("link-d2h", "link-bidir"):
            # The device side holds the pattern (written untimed from the source); the host side is poisoned.
            cl.enqueue_copy(owner.queue, owner.device_out, owner.source[:nbytes], is_blocking=True)
            self._host_dst()[:nbytes] = links.POISON_BYTE

    def _enqueue(self, queue, direction: str, count: int, wait_for=None) -> list:
        cl, owner, n = self.owner.cl, self.owner, self._nbytes
        events = []
        for i in range(count):
            if direction == "h2d":
                event = cl.enqueue_copy(queue, owner.device_in, self._host_src()[:n], is_blocking=False,
                                        wait_for=wait_for if i == 0 else None)
            else:
                event = cl.enqueue_copy(queue, self._host_dst()[:n], owner.device_out, is_blocking=False,
                                        wait_for=wait_for if i == 0 else None)
            events.append(event)
        return events

    def time(self, count: int) -> float:
        """Every copy waits on one user event, released once all are queued: the span then times the
        copies, not Python's enqueue rate (~5 us a call), and both queues of a bidirectional sample start together."""
        owner = self.owner
        gate = owner.cl.UserEvent(owner.context)
        events = []
        if self.level in ("link-h2d", "link-bidir"):
            events += self._enqueue(owner.queue, "h2d", count, wait_for=[gate])
        if self.level in ("link-d2h", "link-bidir"):
            queue = owner.queue2 if self.level == "link-bidir" else owner.queue
            events += self._enqueue(queue, "d2h", count, wait_for=[gate])
        wall_start = time.perf_counter()
        gate.set_status(owner.cl.command_execution_status.COMPLETE)
        owner.queue.finish()
        owner.queue2.finish()
        wall = time.perf_counter() - wall_start
        span = _event_span(events) if owner.profiling else None
        return span if span is not None and span > 0 else wall

    def check(self) -> tuple[bool, str]:
        owner, n = self.owner, self._nbytes
        results = []
        if self.level in ("link-h2d", "link-bidir"):
            back = owner.scratch[:n]
            owner.cl.enqueue_copy(owner.queue, back, owner.device_in, is_blocking=True)
            results.append(links.compare(back, owner.source[:n], what="device buffer after host-to-device"))
        if self.level in ("link-d2h", "link-bidir"):
            results.append(links.compare(self._host_dst()[:n], owner.source[:n],
                                         what="host memory after device-to-host"))
        return all(ok for ok, _ in results), "; ".join(text for _, text in results)


class OpenCLLinks:
    """Buffers for the link levels of one OpenCL device, at the largest size, held for one sweep."""

    def __init__(self, *, cl, context, device, max_bytes: int, profiling: bool = True):
        from ert.backends.opencl_devices import type_name

        self.cl, self.context, self.device = cl, context, device
        self.is_cpu = type_name(device) == "cpu"
        self.profiling = profiling
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        self.queue = cl.CommandQueue(context, properties=props)
        self.queue2 = cl.CommandQueue(context, properties=props)
        self.timing = PROFILING_SOURCE if profiling else "wall clock around the enqueues and clFinish"
        flags = cl.mem_flags.READ_WRITE
        self.device_in = cl.Buffer(context, flags, max_bytes)
        self.device_out = cl.Buffer(context, flags, max_bytes)
        self.source = links.pattern(max_bytes).copy()
        self.scratch = np.empty(max_bytes, dtype=np.uint8)
        self.host: dict[str, tuple[_Host, _Host]] = {}
        for variant, mapped in (("copy", False), ("mapped", True)):
            src = _Host(cl, context, self.queue, max_bytes, mapped=mapped)
            dst = _Host(cl, context, self.queue, max_bytes, mapped=mapped)
            src.array[:] = self.source
            dst.array[:] = 0  # first touch, untimed
            self.host[variant] = (src, dst)

    def transfers(self) -> list[OpenCLTransfer]:
        return [OpenCLTransfer(self, level=level, variant=variant)
                for variant in ("copy", "mapped") for level in ("link-h2d", "link-d2h", "link-bidir")]

    def close(self) -> None:
        for pair in self.host.values():
            for side in pair:
                side.release(self.queue)
        self.host = {}
        for buf in (self.device_in, self.device_out):
            buf.release()
        self.queue.finish()
        self.queue2.finish()


def pci_bus_id(device) -> str | None:
    """The device's PCI address (dddd:bb:dd.f) from NVIDIA's or AMD's OpenCL extension, or None."""
    extensions = set(device.extensions.split())
    try:
        if "cl_nv_device_attribute_query" in extensions:
            domain = int(getattr(device, "pci_domain_id_nv", 0) or 0)
            slot = int(device.pci_slot_id_nv)
            # NVIDIA packs the device number and function into the slot id: device << 3 | function.
            return hw_links.pci_address(domain, int(device.pci_bus_id_nv), slot >> 3, slot & 7)
        if "cl_amd_device_attribute_query" in extensions:
            topology = device.topology_amd
            return hw_links.pci_address(0, int(topology.bus), int(topology.device), int(topology.function))
    except Exception:  # an older driver without the query: the address stays unknown
        return None
    return None


def link_rated(device, *, reference: dict | None = None, sysfs_root: str = "/sys/bus/pci/devices") -> dict:
    """level -> {"gbytes_per_s", "derivation"[, "reference"]} for one OpenCL device.

    A CPU device moves host memory to host memory: no rated value, and the
    host's own numpy copy rate (``reference``) beside it for comparison.  A
    GPU: its PCIe link from sysfs, where the driver tells its PCI address.
    """
    from ert.backends.opencl_devices import type_name

    if type_name(device) == "cpu":
        why = no_rated_text("a CPU device's 'link' is a memory copy within host memory")
        out = {}
        for level in ("link-h2d", "link-d2h", "link-bidir"):
            entry = {"gbytes_per_s": None, "derivation": why}
            if reference:
                entry["reference"] = dict(reference)
                entry["derivation"] = (f"{why}; compare with this host's {reference['what']} of "
                                       f"{reference['bytes']} bytes: {reference['gbytes_per_s']:.1f} GB/s"
                                       + (" (one direction; bidirectional moves two copies at once)"
                                          if level == "link-bidir" else ""))
            out[level] = entry
        return out
    if bool(getattr(device, "host_unified_memory", False)):
        return hw_links.no_rated("an integrated device shares host memory (CL_DEVICE_HOST_UNIFIED_MEMORY): no link")
    return hw_links.pcie_rated_from_sysfs(pci_bus_id(device), root=sysfs_root)
