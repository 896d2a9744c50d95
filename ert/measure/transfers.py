"""The transfer stage: host<->device links (and peer GPUs) through a backend's hook, and the network under MPI.

Run by ert-run after the sweep (and after the sustained holds).  Every
measured size becomes one "transfer" record in raw.jsonl, appended as it is
measured (rank 0 writes); a resumed run skips the ids already there.

Links: a device backend with the links capability (``ert.backends.LinkBackend``)
hands over one ``Transfer`` per (level, variant) of rank 0's device; this
stage calibrates, samples, checks and records them through the one engine
(``ert.measure.timing``), with the config's noise policy.  numba-cpu has none:
the host is the host.

The network: MPI point-to-point ping-pong between a rank pair on one node
(``net-intra-node``) and a pair on two nodes (``net-inter-node``), and the
injection bandwidth (``net-injection``): every rank of rank 0's node streams
to a partner rank on another node at once.  Node identity is the MPI processor
name; the environment variable ``ERT_TEST_NODE_ID`` (TEST ONLY) overrides it
per rank -- ``rank%2`` or a comma list such as ``0,0,1`` -- so that ranks of
one machine play several nodes; a run that used it says so in its metadata
and warnings, and its "inter-node" levels went through shared memory.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

from ert.backends import LinkBackend
from ert.errors import ErtError
from ert.measure import timing
from ert.rawio import (RAW_NAME, RawWriter, read_raw, transfer_gbytes_per_s, transfer_id, transfer_latency_us,
                       transfer_record)

NODE_OVERRIDE_VAR = "ERT_TEST_NODE_ID"
# Link transfers per sample never exceed this: enqueueing one costs the host ~2-5 us (Python, driver), so
# more would spend seconds queueing 4 KiB copies that the device finishes in a fraction of that.
LINK_MAX_REPEATS = 4096
_EXPR_RE = re.compile(r"^\s*rank\s*(%|//)\s*([1-9][0-9]*)\s*$")


# ---------------------------------------------------------------------------- node identity
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


def header_metadata(cfg, backend, comm) -> dict:
    """What the stage adds to the header's metadata (collective): link rated values, nodes, NICs."""
    import socket

    out: dict = {}
    if "links" in cfg.levels and isinstance(backend, LinkBackend):
        try:
            # Measured only if the backend sets its links beside it (a CPU device's "links" are memory copies).
            out["link_rated"] = backend.link_rated(lambda: host_copy_reference(min(cfg.transfer.max_bytes, 256 << 20)))
        except Exception as exc:  # noqa: BLE001 - a rated table is a nicety; the levels still run
            out["link_rated_error"] = f"{type(exc).__name__}: {exc}"
    if "network" in cfg.levels and comm.size > 1:
        override = node_override()
        nodes = comm.allgather(node_id(comm.rank, comm.size, _processor_name(socket.gethostname()), override))
        pairs = plan_pairs(nodes)
        ifaces = comm.allgather(interfaces())
        route = None
        if pairs["inter"] and not override:
            route = route_between(ifaces[0], ifaces[pairs["inter"][1]])
            if route:
                route = {**route, "from": nodes[0], "to": nodes[pairs["inter"][1]]}
        out["network"] = {"nodes": nodes, "pairs": pairs, "nics": read_nics(), "route": route,
                          "node_override": override, "cuda_aware": _cuda_aware(cfg)}
    return out


def _processor_name(default: str) -> str:
    try:
        from mpi4py import MPI

        return MPI.Get_processor_name()
    except Exception:  # noqa: BLE001
        return default


def _cuda_aware(cfg) -> bool:
    """Whether MPI moves CuPy device buffers itself: only for the cuda backend, and only when MPI says so."""
    if cfg.backend != "cuda":
        return False
    try:
        from mpi4py import MPI

        query = getattr(MPI, "Query_cuda_support", None)
        return bool(query()) if query else False
    except Exception:  # noqa: BLE001
        return False


# ---------------------------------------------------------------------------- the stage
def run_transfers(*, cfg, run_dir: Path, backend, comm, progress=None) -> bool:
    """Measure the link and network levels the config asks for; True if interrupted."""
    want_links = "links" in cfg.levels and isinstance(backend, LinkBackend)
    want_network = "network" in cfg.levels and comm.size > 1
    if progress and comm.rank == 0:
        if "network" in cfg.levels and comm.size == 1:
            progress.say("network: not measured (one rank; run under mpiexec with 2 or more ranks)")
        if "links" in cfg.levels and not isinstance(backend, LinkBackend):
            progress.say(f"links: not measured ({cfg.backend} has no host<->device link: the host is the host)")
    if not (want_links or want_network):
        return False
    raw_path = run_dir / RAW_NAME
    done = None
    meta = None
    if comm.rank == 0:
        raw = read_raw(raw_path)
        done = {r["id"] for r in raw.transfers}
        meta = raw.header["metadata"]
    done, meta = comm.bcast((done, meta))
    writer = RawWriter(raw_path) if comm.rank == 0 else None
    say = progress.say if progress else (lambda text: None)
    started = time.perf_counter()
    try:
        if want_links:
            _links(cfg, backend, comm, writer, done, say)
        if want_network and "network" in meta:
            _network(cfg, comm, meta["network"], writer, done, say)
        if writer:
            # The stage's own end: its seconds join the run's wall time (a links-only run read 0.0 s).
            writer.append({"type": "end", "stage": "transfers", "wall_seconds": round(time.perf_counter() - started, 3),
                           "time": time.time()})
    except KeyboardInterrupt:
        return True
    finally:
        if writer:
            writer.close()
    return False


def _links(cfg, backend, comm, writer, done, say) -> None:
    """Rank 0's backend hands over its device's links; the other ranks wait without spinning."""
    if comm.rank == 0:
        sizes = cfg.transfer.sizes(cfg.transfer.max_bytes)
        say(f"links: {len(sizes)} sizes from {sizes[0]} B to {sizes[-1]} B")

        def emit(record: dict) -> None:
            if writer:
                writer.append(record)
            say(f"links: {record['level']} {record.get('variant', '')} {record['bytes']} B -> "
                f"{transfer_gbytes_per_s(record):.2f} GB/s" + ("" if record.get("valid") else " CHECK FAILED"))

        measure_transfers(backend.link_transfers(max(sizes)), sizes, min_seconds=cfg.transfer.min_seconds,
                          samples=cfg.transfer.samples, noise_threshold=cfg.timing.noise_threshold,
                          max_remeasure=cfg.timing.max_remeasure, emit=emit, skip=frozenset(done))
    _gentle_barrier(comm)


def measure_transfer(transfer, nbytes: int, *, min_seconds: float, samples: int, noise_threshold: float,
                     max_remeasure: int) -> dict:
    """The record of one (level, variant, size): prepare, calibrate, sample (the engine's noise policy), check."""
    transfer.prepare(nbytes)
    count, _ = timing.calibrate(transfer.time, min_seconds=min_seconds, max_count=LINK_MAX_REPEATS)
    got = timing.sample(transfer.time, count, samples=samples, noise_threshold=noise_threshold,
                        max_remeasure=max_remeasure)
    ok, text = transfer.check()
    extra = dict(transfer.extra)
    pair = extra.pop("pair", None)
    return transfer_record(level=transfer.level, kind=transfer.kind, variant=transfer.variant,
                           method=transfer.method, nbytes=nbytes, moved_bytes=nbytes * transfer.directions,
                           repeats=count, samples=got.seconds, valid=ok, check=text,
                           noise_threshold=noise_threshold, pair=pair, **extra)


def measure_transfers(transfers: list, sizes: list[int], *, min_seconds: float, samples: int,
                      noise_threshold: float, max_remeasure: int, emit, skip=frozenset()) -> int:
    """Every transfer at every size, smallest size first; ``emit`` each record as it is measured.

    Ids in ``skip`` (already in raw.jsonl: a resumed run) are not measured
    again.  Returns the number of records emitted.
    """
    emitted = 0
    for nbytes in sorted({int(s) for s in sizes}):
        for transfer in transfers:
            if transfer_id(transfer.level, transfer.variant, nbytes, transfer.extra.get("pair")) in skip:
                continue
            emit(measure_transfer(transfer, nbytes, min_seconds=min_seconds, samples=samples,
                                  noise_threshold=noise_threshold, max_remeasure=max_remeasure))
            emitted += 1
    return emitted


def host_copy_reference(nbytes: int, *, min_seconds: float = 0.02, samples: int = 5) -> dict:
    """numpy's copy of ``nbytes`` between two host arrays on this host (one thread): the memory-copy rate
    a CPU device's "link" is set beside.  {"what", "bytes", "gbytes_per_s"} at the best sample."""
    from ert.backends.links import pattern

    src = pattern(nbytes).copy()
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch, untimed

    def copies(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            np.copyto(dst, src)
        return time.perf_counter() - start

    count, _ = timing.calibrate(copies, min_seconds=min_seconds, jump=False)
    got = timing.sample(copies, count, samples=samples, noise_threshold=float("inf"), max_remeasure=0)
    return {"what": "numpy.copyto between two host arrays, one thread", "bytes": int(nbytes),
            "gbytes_per_s": round(nbytes * count / min(got.seconds) / 1e9, 3)}


def _gentle_barrier(comm) -> None:
    """A world barrier that sleeps while it waits (idle ranks must not steal a measured pair's cores)."""
    mpi = getattr(comm, "mpi", None)
    if mpi is None:
        return
    request = mpi.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def _network(cfg, comm, network: dict, writer, done, say) -> None:
    pairs = network["pairs"]
    sizes = cfg.transfer.sizes(cfg.transfer.network_max_bytes)
    override = network.get("node_override")
    common = {"cuda_aware": bool(network.get("cuda_aware"))}
    if override:
        common["node_override"] = override
    jobs = []
    if pairs.get("intra"):
        jobs.append(("net-intra-node", "p2p", [pairs["intra"]]))
    if pairs.get("inter"):
        jobs.append(("net-inter-node", "p2p", [pairs["inter"]]))
    if pairs.get("injection"):
        jobs.append(("net-injection", "stream", pairs["injection"]))
    if comm.rank == 0 and not jobs:
        say("network: one node and no two ranks on it: nothing to measure")
    for level, variant, job_pairs in jobs:
        members = sorted({r for pair in job_pairs for r in pair})
        if comm.rank == 0:
            say(f"network: {level} over rank pair(s) {', '.join(f'{a}-{b}' for a, b in job_pairs)}")
        if comm.rank in members:
            sub = comm.mpi.Split(0, comm.rank)
        else:
            comm.mpi.Split(_undefined(), comm.rank)
            sub = None
        if sub is not None:
            try:
                route = network.get("route") or {}
                iface = route.get("name") if level != "net-intra-node" and comm.rank == 0 else None
                _measure_job(cfg, sub, comm.rank, level, variant, job_pairs, sizes, writer, done, say, common,
                             iface=iface)
            finally:
                sub.Free()
        _gentle_barrier(comm)


def _undefined():
    from mpi4py import MPI

    return MPI.UNDEFINED


def _method(level: str, cuda_aware: bool) -> str:
    buffers = "CuPy device buffers (CUDA-aware MPI)" if cuda_aware else "numpy host buffers"
    if level == "net-injection":
        return (f"MPI_Send stream: every sender sends `repeats` messages to its partner at once, then waits for "
                f"a 1-byte ack; {buffers}; barrier before each sample, the slowest rank decides")
    return (f"MPI_Send/MPI_Recv ping-pong; repeats count one-way trips (2 per round trip); {buffers}; "
            f"barrier before each sample, the slower rank decides")


def iface_bytes(name: str, net_root: str = "/sys/class/net") -> int | None:
    """Bytes interface ``name`` has sent plus received so far (its kernel counters), or None."""
    try:
        stats = Path(net_root) / name / "statistics"
        return int((stats / "tx_bytes").read_text()) + int((stats / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def _measure_job(cfg, sub, world_rank, level, variant, pairs, sizes, writer, done, say, common,
                 iface: str | None = None) -> None:
    """Every size of one level among its member ranks (``sub``: their communicator, ordered by world rank).

    ``iface`` (rank 0, between nodes): the interface the hosts talk over; its
    byte counters, read around each size, show whether MPI's messages crossed it.
    """
    import numpy as np

    cuda_aware = common["cuda_aware"]
    xp = np
    if cuda_aware:
        import cupy as xp  # noqa: F811 - device buffers for a CUDA-aware MPI
    ranks = sorted({r for pair in pairs for r in pair})
    local = {r: i for i, r in enumerate(ranks)}  # world rank -> rank in sub
    partner, sending = None, False
    for a, b in pairs:
        if world_rank == a:
            partner, sending = local[b], True
        elif world_rank == b:
            partner, sending = local[a], False
    ping_pong = level != "net-injection"
    for size in sizes:
        rid = transfer_id(level, variant, size, pairs=pairs)
        if rid in done:
            continue
        pattern = ((np.arange(size, dtype=np.int64) * 7 + size) % 251).astype(np.uint8)
        sbuf = xp.asarray(pattern) if sending else xp.zeros(size, dtype=np.uint8)
        rbuf = xp.zeros(size, dtype=np.uint8)
        ack = np.zeros(1, dtype=np.uint8)

        payload = [0]  # bytes this rank's messages put through its host's interface, all calls

        def sample(n: int) -> float:
            payload[0] += (2 * n * size) if ping_pong else (n * size * len(pairs))
            if cuda_aware:
                xp.cuda.runtime.deviceSynchronize()
            sub.Barrier()
            t0 = time.perf_counter()
            if partner is not None:
                if ping_pong and sending:
                    for _ in range(n):
                        sub.Send(sbuf, dest=partner, tag=1)
                        sub.Recv(rbuf, source=partner, tag=2)
                elif ping_pong:
                    for _ in range(n):
                        sub.Recv(rbuf, source=partner, tag=1)
                        sub.Send(rbuf, dest=partner, tag=2)
                elif sending:
                    for _ in range(n):
                        sub.Send(sbuf, dest=partner, tag=3)
                    sub.Recv(ack, source=partner, tag=4)
                else:
                    for _ in range(n):
                        sub.Recv(rbuf, source=partner, tag=3)
                    sub.Send(ack, dest=partner, tag=4)
            return time.perf_counter() - t0

        # The engine: the slowest rank's seconds decide (every rank calibrates and samples in step, so
        # they agree on the count and on each attempt); each rank's own seconds are kept per call.
        rows: list[list[float]] = []

        def timed(n: int) -> float:
            rows.append(sub.allgather(sample(n)))
            return max(rows[-1])

        def clear() -> None:
            rbuf[...] = 0  # the checked sample starts from zeros: stale data cannot pass

        counted_before = iface_bytes(iface) if iface else None
        n, _ = timing.calibrate(timed, min_seconds=cfg.transfer.min_seconds)
        rows.clear()
        k = cfg.transfer.samples
        got = timing.sample(timed, n, samples=k, noise_threshold=cfg.timing.noise_threshold,
                            max_remeasure=cfg.timing.max_remeasure, before_last=clear)
        samples, per_rank = got.seconds, rows[got.calls[0]:got.calls[1]]
        # Check: ping-pong ranks see the pattern (echoed) in their receive buffer; stream receivers too.
        received = np.asarray(rbuf.get() if cuda_aware else rbuf)
        checks_here = partner is None or (not ping_pong and sending) or bool(np.array_equal(received, pattern))
        checks = sub.allgather((world_rank, checks_here))
        ok = all(good for _, good in checks)
        counted_after = iface_bytes(iface) if iface else None
        if sub.Get_rank() == 0:
            extra = dict(common)
            if counted_before is not None and counted_after is not None:
                extra["interface_bytes"] = {"interface": iface, "counted": counted_after - counted_before,
                                            "payload": payload[0]}
            record = _record(level, variant, pairs, size, n, samples, per_rank, ranks, ok, checks, ping_pong,
                             cfg, extra)
            if writer:
                writer.append(record)
            rate = transfer_gbytes_per_s(record)
            say(f"network: {level} {size} B -> {rate:.3f} GB/s, "
                f"{transfer_latency_us(record):.2f} us per transfer"
                + ("" if ok else " CHECK FAILED"))


def _record(level, variant, pairs, size, n, samples, per_rank, ranks, ok, checks, ping_pong, cfg, common) -> dict:
    extra = {"rank_seconds": {str(r): [row[i] for row in per_rank] for i, r in enumerate(ranks)}, **common}
    if ping_pong:
        extra["round_trips"] = n
    else:
        # Each sender's own time: the aggregate (slowest rank) can be set beside every pair's own rate.
        extra["pair_seconds_min"] = [min(row[ranks.index(a)] for row in per_rank) for a, _ in pairs]
    return transfer_record(
        level=level, kind="network", variant=variant, method=_method(level, common["cuda_aware"]), nbytes=size,
        # ping-pong: one message per one-way trip; injection: every sender's message, summed.
        moved_bytes=size if ping_pong else size * len(pairs), repeats=2 * n if ping_pong else n, samples=samples,
        valid=ok, check=("received data matched the sent pattern on every receiving rank" if ok else
                         "received data differed on rank(s) " + ", ".join(str(r) for r, good in checks if not good)),
        noise_threshold=cfg.timing.noise_threshold,
        pair=pairs[0] if ping_pong else None, pairs=None if ping_pong else pairs, **extra)
