"""The copies of the CUDA link and peer levels: the gate kernel and its batches, and the CuPy buffers and
transfers that ert.measure.transfers times (see ``ert.backends.cuda_links`` for the levels, the gate's why
and the host logic).

The order of gate, events and copies (``gated_seconds``, ``ungated_seconds``) is host logic, tested against
stand-ins for CuPy; ``CupyGate``, ``CupyLinks``, ``CupyTransfer`` and ``CupyPeerTransfer`` need a GPU.
Never run on a GPU yet.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from ert.backends import links
from ert.backends.cuda_links import HOST_TRANSFERS, peer_plan, variant_of, visible_topology

# cudaMemcpyKind
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2
EVENTS = "CUDA events on the copy stream(s): first start to last end"
GATED = ("every copy of a sample queued behind a gate kernel that the host opens once they are all queued "
         "(batches of at most {batch} copies, their event spans added)")
UNGATED = {"pageable": "not gated (a pageable copy holds the host until it is done or staged: a sample "
                       "includes the host's per-call cost)",
           "staged": "not gated (the driver stages the copy through host memory and may hold the host meanwhile)"}
# The gate (kernels/ert_cuda_gate.cu): its kernel, the copies queued behind one gate, how long it waits for
# the host before it opens by itself, and what its status word says.
GATE_KERNEL_FILE = "ert_cuda_gate.cu"
GATE_KERNEL = "ert_gate"
GATE_BATCH = 256
GATE_TIMEOUT_S = 1.0
GATE_RELEASED, GATE_TIMED_OUT = 1, 2


# ----------------------------------------------------------------------------- the gate (host logic)
def gate_source() -> str:
    """The text of kernels/ert_cuda_gate.cu (the gate kernel)."""
    return resources.files("ert.kernels").joinpath(GATE_KERNEL_FILE).read_text()


def gate_batches(count: int, batch: int = GATE_BATCH) -> list[int]:
    """Copies per gated batch for a sample of ``count`` copies: full batches of ``batch``, then the rest."""
    if count < 1 or batch < 1:
        raise ValueError(f"a gated sample needs count >= 1 and batch >= 1, got {count} and {batch}")
    full, rest = divmod(count, batch)
    return [batch] * full + ([rest] if rest else [])


def gated_seconds(cp, gate, stream, count: int, enqueue, *, others=(), batch: int = GATE_BATCH) -> tuple[float, int]:
    """(seconds, batches whose gate timed out) of ``count`` copies queued behind the gate, batch by batch.

    Per batch: the gate kernel closes ``stream``; the start event follows it
    (``others``, the streams of a bidirectional sample, wait on that event);
    ``enqueue(n)`` queues the batch's copies; the stop event follows them
    (and the others' work); only then does the host open the gate and wait.
    The batches' event spans add up: they time the copies, not their enqueueing.
    """
    seconds, timeouts = 0.0, 0
    for n in gate_batches(count, batch):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        gate.close_on(stream)
        start.record(stream)
        for other in others:
            other.wait_event(start)
        enqueue(n)
        for other in others:
            done = cp.cuda.Event()
            done.record(other)
            stream.wait_event(done)
        stop.record(stream)
        gate.release()
        seconds += _elapsed(cp, start, stop)
        timeouts += gate.opened() == GATE_TIMED_OUT
    return seconds, timeouts


def ungated_seconds(cp, stream, count: int, enqueue) -> float:
    """Seconds between events recorded before and after ``enqueue(count)`` on ``stream`` (pageable, staged)."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    enqueue(count)
    stop.record(stream)
    return _elapsed(cp, start, stop)


def _elapsed(cp, start, stop) -> float:
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / 1e3


# ----------------------------------------------------------------------------- on a GPU
class CupyGate:
    """The gate kernel and its two words of mapped pinned host memory (flag, status). Needs a GPU."""

    def __init__(self, cp):
        runtime = cp.cuda.runtime
        # Mapped (and portable: peer copies gate a stream of another GPU); under unified addressing the
        # kernels see the host pointer itself.
        self._memory = cp.cuda.PinnedMemory(64, runtime.hostAllocMapped | runtime.hostAllocPortable)
        self.words = np.frombuffer(cp.cuda.PinnedMemoryPointer(self._memory, 0), dtype=np.uint32, count=2)
        self.words[:] = 0
        self._kernel = cp.RawKernel(gate_source(), GATE_KERNEL)  # compiled for each device on first use
        self._timeout_ns = np.int64(int(GATE_TIMEOUT_S * 1e9))

    def close_on(self, stream) -> None:
        """Launch the gate on ``stream`` (of the current device): what follows waits until ``release``."""
        self.words[:] = 0
        ptr = self._memory.ptr
        with stream:  # RawKernel launches on the current stream
            self._kernel((1,), (1,), (np.uint64(ptr), np.uint64(ptr + 4), self._timeout_ns))

    def release(self) -> None:
        self.words[0] = 1

    def opened(self) -> int:
        """GATE_RELEASED or GATE_TIMED_OUT once the gate kernel has ended (0 before)."""
        return int(self.words[1])


class CupyLinks:
    """Buffers, streams and events for the link and peer levels of this rank's GPU (and its peers). Needs a GPU."""

    def __init__(self, *, index: int, max_bytes: int, peers: bool):
        import cupy

        self.cp, self.runtime, self.index = cupy, cupy.cuda.runtime, index
        self.source = links.pattern(max_bytes).copy()
        self.max_bytes = max_bytes
        with cupy.cuda.Device(index):
            self.device_in = cupy.empty(max_bytes, dtype=cupy.uint8)
            self.device_out = cupy.empty(max_bytes, dtype=cupy.uint8)
            self.streams = [cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)]
            self.device_out.set(self.source)
            self.gate = CupyGate(cupy)
        self._pinned = [cupy.cuda.alloc_pinned_memory(max_bytes) for _ in range(3)]
        pinned = [np.frombuffer(m, dtype=np.uint8, count=max_bytes) for m in self._pinned]
        self.host = {"pinned": (pinned[0], pinned[1]),
                     "pageable": (np.empty(max_bytes, dtype=np.uint8), np.empty(max_bytes, dtype=np.uint8))}
        for src, dst in self.host.values():
            src[:] = self.source
            dst[:] = 0  # first touch, untimed
        self.scratch = pinned[2]
        self.peer_buffers: dict[int, tuple] = {}
        self.topology = None
        if peers and self.runtime.getDeviceCount() >= 2:
            self.topology = visible_topology()
            for d in self.topology.devices:
                with cupy.cuda.Device(d):
                    src = cupy.empty(max_bytes, dtype=cupy.uint8)
                    src.set(self.source)
                    self.peer_buffers[d] = (src, cupy.empty(max_bytes, dtype=cupy.uint8),
                                            cupy.cuda.Stream(non_blocking=True))

    def transfers(self) -> list:
        out = [CupyTransfer(self, level=level, variant=variant) for level, variant in HOST_TRANSFERS]
        if self.topology is not None:
            out += [CupyPeerTransfer(self, src=a, dst=b, peer_access=on) for a, b, on in peer_plan(self.topology)]
        return out

    def set_peer_access(self, a: int, b: int, on: bool) -> None:
        """Peer access between GPUs a and b, both ways, on or off (an already-set state is no error)."""
        for x, y in ((a, b), (b, a)):
            if not self.runtime.deviceCanAccessPeer(x, y):
                continue
            with self.cp.cuda.Device(x):
                try:
                    (self.runtime.deviceEnablePeerAccess(y) if on else self.runtime.deviceDisablePeerAccess(y))
                except self.runtime.CUDARuntimeError:
                    pass  # already enabled / not enabled: the state asked for holds

    def close(self) -> None:
        for stream in self.streams:
            stream.synchronize()
        self.peer_buffers.clear()
        self.device_in = self.device_out = None
        self.host, self._pinned, self.scratch, self.gate = {}, [], None, None
        self.cp.get_default_memory_pool().free_all_blocks()


def _note_timeouts(transfer, timeouts: int) -> None:
    """Count the gate's timeouts of this size in the transfer's record (``gate_timeouts``)."""
    if timeouts:
        transfer.extra["gate_timeouts"] = transfer.extra.get("gate_timeouts", 0) + timeouts


class CupyTransfer:
    """One host<->device (level, variant) on one GPU; see ``ert.backends.Transfer``."""

    kind = "link"

    def __init__(self, owner: CupyLinks, *, level: str, variant: str):
        if (level, variant) not in HOST_TRANSFERS:
            raise ValueError(f"no {variant} {level}: {HOST_TRANSFERS}")
        self.owner, self.level, self.variant = owner, level, variant
        self.directions = 2 if level == "link-bidir" else 1
        self.gated = variant == "pinned"
        what = {"link-h2d": "cudaMemcpyAsync host to device on a non-default stream",
                "link-d2h": "cudaMemcpyAsync device to host on a non-default stream",
                "link-bidir": "cudaMemcpyAsync host to device and device to host at once on two streams"}[level]
        memory = "pinned host memory (cudaHostAlloc)" if variant == "pinned" else "pageable host memory (numpy)"
        gate = GATED.format(batch=GATE_BATCH) if self.gated else UNGATED[variant]
        self.method = f"{what}, {memory}; {gate}; {EVENTS}"
        self.extra = {"devices": [owner.index]}
        self._nbytes = 0

    def prepare(self, nbytes: int) -> None:
        owner = self.owner
        self._nbytes = nbytes
        self.extra.pop("gate_timeouts", None)
        with owner.cp.cuda.Device(owner.index):
            if self.level in ("link-h2d", "link-bidir"):
                owner.device_in[:nbytes].fill(links.POISON_BYTE)
            owner.cp.cuda.Device(owner.index).synchronize()
        if self.level in ("link-d2h", "link-bidir"):
            owner.host[self.variant][1][:nbytes] = links.POISON_BYTE

    def _enqueue(self, count: int) -> None:
        """Queue ``count`` repetitions: H2D on the first stream, D2H on the first (d2h) or the second (bidir)."""
        owner, runtime, n = self.owner, self.owner.runtime, self._nbytes
        src, dst = owner.host[self.variant]
        first, second = owner.streams
        for _ in range(count):
            if self.level in ("link-h2d", "link-bidir"):
                runtime.memcpyAsync(owner.device_in.data.ptr, src.ctypes.data, n, HOST_TO_DEVICE, first.ptr)
            if self.level == "link-d2h":
                runtime.memcpyAsync(dst.ctypes.data, owner.device_out.data.ptr, n, DEVICE_TO_HOST, first.ptr)
            if self.level == "link-bidir":
                runtime.memcpyAsync(dst.ctypes.data, owner.device_out.data.ptr, n, DEVICE_TO_HOST, second.ptr)

    def time(self, count: int) -> float:
        owner, cp = self.owner, self.owner.cp
        first, second = owner.streams
        with cp.cuda.Device(owner.index):
            if not self.gated:
                return ungated_seconds(cp, first, count, self._enqueue)
            seconds, timeouts = gated_seconds(cp, owner.gate, first, count, self._enqueue,
                                              others=(second,) if self.level == "link-bidir" else ())
        _note_timeouts(self, timeouts)
        return seconds

    def check(self) -> tuple[bool, str]:
        owner, n = self.owner, self._nbytes
        results = []
        if self.level in ("link-h2d", "link-bidir"):
            back = owner.scratch[:n]
            with owner.cp.cuda.Device(owner.index):
                owner.runtime.memcpy(back.ctypes.data, owner.device_in.data.ptr, n, DEVICE_TO_HOST)
            results.append(links.compare(back, owner.source[:n], what="device buffer after host-to-device"))
        if self.level in ("link-d2h", "link-bidir"):
            results.append(links.compare(owner.host[self.variant][1][:n], owner.source[:n],
                                         what="host memory after device-to-host"))
        return all(ok for ok, _ in results), "; ".join(text for _, text in results)


class CupyPeerTransfer:
    """Copies from GPU ``src`` to GPU ``dst`` (cudaMemcpyPeerAsync on a stream of ``src``), peer access on or off."""

    kind = "peer"
    level = "peer-d2d"
    directions = 1

    def __init__(self, owner: CupyLinks, *, src: int, dst: int, peer_access: bool):
        self.owner, self.src, self.dst, self.peer_access = owner, src, dst, peer_access
        self.variant = variant_of(peer_access)
        self.gated = peer_access
        how = ("peer access enabled: GPU to GPU" if peer_access
               else "peer access disabled: the driver stages through host memory")
        gate = GATED.format(batch=GATE_BATCH) if self.gated else UNGATED["staged"]
        self.method = (f"cudaMemcpyPeerAsync GPU {src} to GPU {dst} on a stream of GPU {src}, {how}; {gate}; "
                       f"{EVENTS}")
        ia, ib = owner.topology.devices.index(src), owner.topology.devices.index(dst)
        self.extra = {"pair": (src, dst), "peer_access": peer_access, "devices": [src, dst],
                      "transport": owner.topology.link[ia][ib] if peer_access else "host memory (staged)"}
        self._nbytes = 0

    def prepare(self, nbytes: int) -> None:
        owner = self.owner
        self._nbytes = nbytes
        self.extra.pop("gate_timeouts", None)
        owner.set_peer_access(self.src, self.dst, self.peer_access)
        with owner.cp.cuda.Device(self.dst):
            owner.peer_buffers[self.dst][1][:nbytes].fill(links.POISON_BYTE)
            owner.cp.cuda.Device(self.dst).synchronize()

    def _enqueue(self, count: int) -> None:
        owner, n = self.owner, self._nbytes
        src_buf, _, stream = owner.peer_buffers[self.src]
        dst_buf = owner.peer_buffers[self.dst][1]
        for _ in range(count):
            owner.runtime.memcpyPeerAsync(dst_buf.data.ptr, self.dst, src_buf.data.ptr, self.src, n, stream.ptr)

    def time(self, count: int) -> float:
        owner, cp = self.owner, self.owner.cp
        stream = owner.peer_buffers[self.src][2]
        with cp.cuda.Device(self.src):
            if not self.gated:
                return ungated_seconds(cp, stream, count, self._enqueue)
            seconds, timeouts = gated_seconds(cp, owner.gate, stream, count, self._enqueue)
        _note_timeouts(self, timeouts)
        return seconds

    def check(self) -> tuple[bool, str]:
        owner, n = self.owner, self._nbytes
        back = owner.scratch[:n]
        with owner.cp.cuda.Device(self.dst):
            owner.runtime.memcpy(back.ctypes.data, owner.peer_buffers[self.dst][1].data.ptr, n, DEVICE_TO_HOST)
        return links.compare(back, owner.source[:n], what=f"GPU {self.dst} buffer after the copy from GPU {self.src}")
