"""The run header (the first record of raw.jsonl): its metadata block, built by small collector functions.

``run_header`` assembles it, in this one place: the host and libraries, the
backend's description with its rated values (a CPU's DRAM from
``ert.hardware.dram``, a device's links), the ranks' placement and warnings,
the network's nodes and pairs, and the planned size of the sweep.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata

import ert
from ert.hardware import hwinfo
from ert.records.warning_codes import code_of

_LIBRARIES = ("numpy", "numba", "llvmlite", "pyyaml", "pydantic", "jsonschema", "mpi4py")


def libraries() -> dict:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return versions


def caches_reported() -> list[dict]:
    out = []
    for c in hwinfo.read_cpu_caches():
        entry = {"level": c.level, "kind": c.kind, "size_bytes": c.size_bytes, "shared_cpu_count": c.shared_cpu_count}
        # Geometry (schema 1.8), where sysfs gives it: what a cache simulator (kerncraft's) needs.
        entry.update({k: v for k, v in (("ways", c.ways), ("sets", c.sets), ("line_bytes", c.line_bytes)) if v})
        out.append(entry)
    return out


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def collect(*, config, backend_info: dict, ranks: int, threads_per_rank: int, hosts: list[str]) -> dict:
    """Everything a reader needs to trust and compare a result, except the measurements."""
    return {
        "tool": "ert",
        "tool_version": ert.__version__,
        "host": socket.gethostname(),
        "hosts": hosts,
        "cpu_model": hwinfo.cpu_model(),
        "platform": platform.platform(),
        "backend": backend_info.get("backend", config.backend),
        "device": backend_info.get("device", ""),
        "backend_info": backend_info,
        "caches_reported": caches_reported(),
        "libraries": libraries(),
        "ranks": ranks,
        "threads_per_rank": threads_per_rank,
        "date": now_iso(),
        "config": config.to_dict(),
        "config_sha256": config.sha256(),
        **load_average(),
    }


def load_average() -> dict:
    """The host's 1-minute load average and usable cpus when the run started: other work shows here."""
    try:
        load1 = os.getloadavg()[0]
    except (AttributeError, OSError):
        return {}
    return {"load_average_at_start": {"load1": round(load1, 2), "cpus": os.cpu_count() or 1}}  # the whole host


@functools.lru_cache(maxsize=None)
def usable_cpus() -> int:
    """The cpus this process may run on (its affinity mask; the whole host where there is none).

    Read once, before a backend starts threads (``ert-run`` asks first thing, after placing the rank): an
    OpenMP runtime binds the calling thread to one cpu, and the mask then reads 1.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_header(cfg, *, backend, comm, placement, rank_warnings: list, planned_points: int) -> dict:
    """The header of a new run: {"metadata", "planned_points", ...} (``ert.records.rawio.header_record`` adds its type).

    Collective: every rank calls it (host names, placements, nodes and
    interfaces are gathered); every rank gets the same header.
    ``planned_points``: the points of the run's own sweep.
    """
    hosts = comm.allgather(socket.gethostname())
    placements = comm.allgather(placement.to_dict() if placement else None)
    meta = collect(config=cfg, backend_info=backend.describe(), ranks=comm.size, threads_per_rank=cfg.threads,
                   hosts=sorted(set(hosts)))
    meta["ranks_per_host"] = {h: hosts.count(h) for h in sorted(set(hosts))}
    # The fewest cpus any rank may use: more threads than this take turns (the analysis says so, schema 1.10).
    meta["cpus_usable"] = min(comm.allgather(usable_cpus()))
    if comm.size > 1:
        meta["mpi_library"] = comm.library()
        meta["placement"] = placements
    if rank_warnings:
        # Texts, and their codes beside them (raw.jsonl keeps no code inside a string; analysis: with_codes).
        meta["rank_warnings"] = [str(w) for w in rank_warnings]
        meta["rank_warning_codes"] = [code_of(w) for w in rank_warnings]
    _rate_links(cfg, backend, meta)
    if "network" in cfg.levels and comm.size > 1:
        meta["network"] = network_metadata(cfg, comm)
    _rate_dram(cfg, meta)
    header: dict = {"metadata": meta, "planned_points": planned_points}
    if cfg.thread_counts:
        from ert.measure.modes import plan_for, thread_counts

        counts = thread_counts(cfg)
        header.update(planned_points=sum(len(plan_for(cfg, backend, comm, t)) for t in counts),
                      thread_counts=counts)
    if cfg.sweep == "adaptive":
        header.update(planned_points=None, sweep="adaptive")  # its size is known at each sweep's end
    return header


def _rate_links(cfg, backend, meta: dict) -> None:
    """A device backend's rated links beside its other rated values (``LinkBackend.link_rated``)."""
    from ert.backends import LinkBackend
    from ert.measure.transfers import host_copy_reference

    if "links" not in cfg.levels or not isinstance(backend, LinkBackend):
        return
    try:
        # Measured only if the backend sets its links beside it (a CPU device's "links" are memory copies).
        rated = backend.link_rated(lambda: host_copy_reference(min(cfg.transfer.max_bytes, 256 << 20)))
    except Exception as exc:  # noqa: BLE001 - a rated table is a nicety; the levels still run
        meta["link_rated_error"] = f"{type(exc).__name__}: {exc}"
        return
    meta["backend_info"] = {**meta.get("backend_info", {}), "link_rated": rated}


def _rate_dram(cfg, meta: dict) -> None:
    """A CPU backend's rated values get the host's DRAM (ert.hardware.dram): the user's, SMBIOS's, or why none."""
    from ert.hardware import dram as dram_rated

    rated = (meta.get("backend_info") or {}).get("rated")
    if not isinstance(rated, dict) or not rated.get("per_core"):
        return  # a device backend rates its own memory
    if rated.get("emulated"):  # an emulator's memory rate is not the DIMMs': no rated DRAM either
        why = next((c["derivation"] for c in rated.get("compute", [])), "no rated value: the CPU is emulated")
        rated.setdefault("memory", []).append({"level": "DRAM", "access": None, "scope": "host",
                                               "gbytes_per_s": None, "derivation": why})
        return
    user = cfg.rated.dram_gbytes_per_s if cfg.rated else None
    text, why = dram_rated.read_smbios()  # named beside a user's value too
    rated.setdefault("memory", []).append(dram_rated.dram_entry(user_gbps=user, smbios_text=text, smbios_why=why))


def network_metadata(cfg, comm) -> dict:
    """The network block (collective): every rank's node, the pairs measured, the NICs and the route between
    the nodes of the inter-node pair (where their subnets meet)."""
    from ert.measure import network

    override = network.node_override()
    nodes = comm.allgather(network.node_id(comm.rank, comm.size, network.processor_name(socket.gethostname()),
                                           override))
    pairs = network.plan_pairs(nodes)
    ifaces = comm.allgather(hwinfo.interfaces())
    route = None
    if pairs["inter"] and not override:
        route = hwinfo.route_between(ifaces[0], ifaces[pairs["inter"][1]])
        if route:
            route = {**route, "from": nodes[0], "to": nodes[pairs["inter"][1]]}
    return {"nodes": nodes, "pairs": pairs, "nics": hwinfo.read_nics(), "route": route, "node_override": override,
            "cuda_aware": network.cuda_aware(cfg.backend)}
