"""The network under MPI: which ranks are measured (node identity, pairs) and each level as one ``Transfer``.

Point-to-point ping-pong between a rank pair on one node (``net-intra-node``)
and a pair on two nodes (``net-inter-node``), and the injection bandwidth
(``net-injection``): every rank of rank 0's node streams to a partner rank on
another node at once.  Each level becomes one ``NetworkTransfer`` over the
communicator of its member ranks, shaped like a backend's link transfers, so
the transfer stage (``ert.measure.transfers``) measures both with one
``measure_transfer``.

Node identity is the MPI processor name; the environment variable
``ERT_TEST_NODE_ID`` (TEST ONLY) overrides it per rank -- ``rank%2`` or a comma
list such as ``0,0,1`` -- so that ranks of one machine play several nodes; a
run that used it says so in its metadata and warnings, and its "inter-node"
levels went through shared memory.
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable

import numpy as np

from ert.errors import ErtError
from ert.hardware.hwinfo import iface_bytes
from ert.measure.comm import gentle_barrier

NODE_OVERRIDE_VAR = "ERT_TEST_NODE_ID"
_EXPR_RE = re.compile(r"^\s*rank\s*(%|//)\s*([1-9][0-9]*)\s*$")


# ---------------------------------------------------------------------------- node identity and pairs
def node_override() -> str | None:
    """The test-only node identity override, or None."""
    return os.environ.get(NODE_OVERRIDE_VAR) or None


def node_id(rank: int, size: int, hostname: str, override: str | None) -> str:
    """This rank's node: its host name, or (TEST ONLY) the override's value for this rank."""
    if not override:
        return hostname
    match = _EXPR_RE.match(override)
    if match:
        op, n = match.group(1), int(match.group(2))
        return f"node{rank % n if op == '%' else rank // n}"
    parts = [p.strip() for p in override.split(",")]
    if len(parts) != size or not all(parts):
        raise ErtError(f"expected 'rank%N', 'rank//N' or a comma list of {size} node names (one per rank), "
                       f"got {override!r}", key=NODE_OVERRIDE_VAR)
    return f"node{parts[rank]}"


def plan_pairs(nodes: list[str]) -> dict:
    """Which ranks are measured: an intra-node pair, an inter-node pair and the injection pairs.

    ``nodes[r]`` is rank r's node.  Rank 0 is in every measurement (it
    writes the records): the intra pair is rank 0 and the next rank on its
    node (else the first node holding two ranks); the inter pair is rank 0 and
    the first rank on another node; injection pairs the ranks of rank 0's node
    in order with the ranks of that other node.
    """
    by_node: dict[str, list[int]] = {}
    for rank, node in enumerate(nodes):
        by_node.setdefault(node, []).append(rank)
    home = by_node[nodes[0]]
    out: dict = {"intra": None, "inter": None, "injection": None}
    if len(home) >= 2:
        out["intra"] = [home[0], home[1]]
    others = [ranks for node, ranks in by_node.items() if node != nodes[0]]
    if others:
        far = others[0]
        out["inter"] = [0, far[0]]
        out["injection"] = [[a, b] for a, b in zip(home, far)]
    return out


def processor_name(default: str) -> str:
    """MPI's name for this rank's node (the host name without MPI)."""
    try:
        from mpi4py import MPI

        return MPI.Get_processor_name()
    except Exception:  # noqa: BLE001
        return default


def cuda_aware(backend_name: str) -> bool:
    """Whether MPI moves CuPy device buffers itself: only for the cuda backend, and only when MPI says so."""
    if backend_name != "cuda":
        return False
    try:
        from mpi4py import MPI

        query = getattr(MPI, "Query_cuda_support", None)
        return bool(query()) if query else False
    except Exception:  # noqa: BLE001
        return False


# ---------------------------------------------------------------------------- one level as a Transfer
def _method(level: str, cuda_aware: bool) -> str:
    buffers = "CuPy device buffers (CUDA-aware MPI)" if cuda_aware else "numpy host buffers"
    if level == "net-injection":
        return (f"MPI_Send stream: every sender sends `repeats` messages to its partner at once, then waits for "
                f"a 1-byte ack; {buffers}; barrier before each sample, the slowest rank decides")
    return (f"MPI_Send/MPI_Recv ping-pong; repeats count one-way trips (2 per round trip); {buffers}; "
            f"barrier before each sample, the slower rank decides")


class NetworkTransfer:
    """One network level among its member ranks (``sub``: their communicator, ordered by world rank).

    Shaped like ``ert.backends.Transfer``, but collective over ``sub``:
    ``time(count)`` is the slowest member's seconds (every member calibrates
    and samples in step, so they agree on counts and attempts), and
    ``check()`` gathers every receiver's verdict.  ``trips`` (one-way
    transfers per count: a ping-pong's count is a round trip) and ``details``
    (record keys known only after sampling) go to ``measure_transfer``.  ``iface`` (rank 0,
    between nodes): the interface the hosts talk over; its byte counters,
    read around each size, show whether MPI's messages crossed it.
    """

    kind = "network"

    def __init__(self, *, level: str, variant: str, pairs: list[list[int]], sub, world_rank: int,
                 cuda_aware: bool, node_override: str | None, iface: str | None):
        self.level, self.variant, self.pairs, self.sub, self.iface = level, variant, pairs, sub, iface
        self.ping_pong = level != "net-injection"
        self.method = _method(level, cuda_aware)
        # moved_bytes = bytes x directions: one message per one-way trip; the injection's every sender at once.
        self.directions = 1 if self.ping_pong else len(pairs)
        self.trips = 2 if self.ping_pong else 1
        self.extra: dict = {"pair": pairs[0]} if self.ping_pong else {"pairs": pairs}
        self.extra["cuda_aware"] = cuda_aware
        if node_override:
            self.extra["node_override"] = node_override
        self.ranks = sorted({r for pair in pairs for r in pair})
        local = {r: i for i, r in enumerate(self.ranks)}  # world rank -> rank in sub
        self.partner, self.sending, self.world_rank = None, False, world_rank
        for a, b in pairs:
            if world_rank == a:
                self.partner, self.sending = local[b], True
            elif world_rank == b:
                self.partner, self.sending = local[a], False
        self.xp = np
        if cuda_aware:
            import cupy  # device buffers for a CUDA-aware MPI

            self.xp = cupy
        self.cuda_aware = cuda_aware

    def prepare(self, nbytes: int) -> None:
        xp = self.xp
        self.nbytes = nbytes
        self.pattern = ((np.arange(nbytes, dtype=np.int64) * 7 + nbytes) % 251).astype(np.uint8)
        self.sbuf = xp.asarray(self.pattern) if self.sending else xp.zeros(nbytes, dtype=np.uint8)
        self.rbuf = xp.zeros(nbytes, dtype=np.uint8)
        self.ack = np.zeros(1, dtype=np.uint8)
        self.payload = 0  # bytes this rank's messages put through its host's interface, all calls
        self.rows: list[list[float]] = []  # every member's seconds, per call of ``time``
        self.counted_before = iface_bytes(self.iface) if self.iface else None

    def time(self, count: int) -> float:
        self.rows.append(self.sub.allgather(self._sample(count)))
        return max(self.rows[-1])

    def _sample(self, n: int) -> float:
        sub, partner, sbuf, rbuf = self.sub, self.partner, self.sbuf, self.rbuf
        self.payload += (2 * n * self.nbytes) if self.ping_pong else (n * self.nbytes * len(self.pairs))
        rbuf[...] = 0  # untimed: the checked (last) sample starts from zeros, so stale data cannot pass
        if self.cuda_aware:
            self.xp.cuda.runtime.deviceSynchronize()
        sub.Barrier()
        t0 = time.perf_counter()
        if partner is not None:
            if self.ping_pong and self.sending:
                for _ in range(n):
                    sub.Send(sbuf, dest=partner, tag=1)
                    sub.Recv(rbuf, source=partner, tag=2)
            elif self.ping_pong:
                for _ in range(n):
                    sub.Recv(rbuf, source=partner, tag=1)
                    sub.Send(rbuf, dest=partner, tag=2)
            elif self.sending:
                for _ in range(n):
                    sub.Send(sbuf, dest=partner, tag=3)
                sub.Recv(self.ack, source=partner, tag=4)
            else:
                for _ in range(n):
                    sub.Recv(rbuf, source=partner, tag=3)
                sub.Send(self.ack, dest=partner, tag=4)
        return time.perf_counter() - t0

    def check(self) -> tuple[bool, str]:
        """Ping-pong ranks see the pattern (echoed) in their receive buffer; stream receivers too (collective)."""
        received = np.asarray(self.rbuf.get() if self.cuda_aware else self.rbuf)
        here = (self.partner is None or (not self.ping_pong and self.sending)
                or bool(np.array_equal(received, self.pattern)))
        checks = self.sub.allgather((self.world_rank, here))
        if all(good for _, good in checks):
            return True, "received data matched the sent pattern on every receiving rank"
        return False, "received data differed on rank(s) " + ", ".join(str(r) for r, good in checks if not good)

    def details(self, kept: range, count: int) -> dict:
        """Record keys from the kept samples (``kept``: their indexes among the calls of ``time``)."""
        rows = [self.rows[i] for i in kept]
        out: dict = {"rank_seconds": {str(r): [row[i] for row in rows] for i, r in enumerate(self.ranks)}}
        if self.ping_pong:
            out["round_trips"] = count
        else:
            # Each sender's own time: the aggregate (slowest rank) can be set beside every pair's own rate.
            out["pair_seconds_min"] = [min(row[self.ranks.index(a)] for row in rows) for a, _ in self.pairs]
        counted_after = iface_bytes(self.iface) if self.iface else None
        if self.counted_before is not None and counted_after is not None:
            out["interface_bytes"] = {"interface": self.iface, "counted": counted_after - self.counted_before,
                                      "payload": self.payload}
        return out


# ---------------------------------------------------------------------------- the levels of a run
def levels(network: dict) -> list[tuple[str, str, list[list[int]]]]:
    """(level, variant, pairs) of each level the header's ``network`` block can measure."""
    pairs = network["pairs"]
    jobs = []
    if pairs.get("intra"):
        jobs.append(("net-intra-node", "p2p", [pairs["intra"]]))
    if pairs.get("inter"):
        jobs.append(("net-inter-node", "p2p", [pairs["inter"]]))
    if pairs.get("injection"):
        jobs.append(("net-injection", "stream", pairs["injection"]))
    return jobs


def each_level(comm, network: dict, *, say: Callable[[str], None],
               measure: Callable[[NetworkTransfer], None]) -> None:
    """``measure`` each level's transfer on its member ranks (collective over ``comm``); the others wait."""
    jobs = levels(network)
    if comm.rank == 0 and not jobs:
        say("network: one node and no two ranks on it: nothing to measure")
    route = network.get("route") or {}
    for level, variant, pairs in jobs:
        members = sorted({r for pair in pairs for r in pair})
        if comm.rank == 0:
            say(f"network: {level} over rank pair(s) {', '.join(f'{a}-{b}' for a, b in pairs)}")
        sub = comm.mpi.Split(0 if comm.rank in members else _undefined(), comm.rank)
        if comm.rank in members:
            try:
                measure(NetworkTransfer(
                    level=level, variant=variant, pairs=pairs, sub=sub, world_rank=comm.rank,
                    cuda_aware=bool(network.get("cuda_aware")), node_override=network.get("node_override"),
                    iface=route.get("name") if level != "net-intra-node" and comm.rank == 0 else None))
            finally:
                sub.Free()
        gentle_barrier(comm)


def _undefined():
    from mpi4py import MPI

    return MPI.UNDEFINED
