"""The metadata block of a run, built by small collector functions."""

from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata

import ert
from ert import hwinfo

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
