"""Where each rank runs: its own cores on its node, threads = cores / ranks, pinned.

Under MPI several ranks share a node.  Left alone, every rank would start one
thread per cpu of the node and they would fight over cores, and a rank's
per-core caches would be shared with another rank's threads.  So each rank
takes a contiguous slice of the node's physical cores (its index among the
node's ranks, from a shared-memory split, picks the slice), pins itself there
and tells OpenMP (Numba's threading layer) to bind one thread per core of the
slice.  A launcher that already bound the ranks (``srun --cpu-bind``,
``mpiexec -bind-to core``) is respected: a rank whose mask differs from its
node peers keeps its mask.

Everything here is computed from plain values so it is testable without MPI;
``place(comm)`` gathers those values and ``apply()`` sets the process state.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from ert.hardware.hwinfo import SYSFS_CPU, physical_cores  # noqa: F401  (placement's unit of cores)
from ert.records.warning_codes import warn



@dataclass
class Placement:
    """One rank's cpus and how they were chosen."""

    host: str
    rank: int
    local_rank: int
    local_size: int
    cpus: list[int]              # logical cpus this rank runs on
    cores: list[list[int]]       # the same cpus grouped by physical core
    how: str                     # "whole node", "split", "launcher", "shared"
    warnings: list[str] = field(default_factory=list)
    threads: int = 0             # threads per rank for `threads: auto` (same on every rank)

    def omp_places(self) -> str:
        """OMP_PLACES naming one place per physical core of this rank, e.g. ``{2},{3}``."""
        return ",".join("{" + ",".join(str(c) for c in core) + "}" for core in self.cores)

    def to_dict(self) -> dict:
        return {"host": self.host, "rank": self.rank, "local_rank": self.local_rank,
                "local_size": self.local_size, "cpus": self.cpus, "cores": len(self.cores), "how": self.how,
                "pinning": {k: os.environ.get(k, "") for k in ("OMP_PLACES", "OMP_PROC_BIND")}}


def split_cores(cores: list[list[int]], *, local_rank: int, local_size: int) -> tuple[list[list[int]], str | None]:
    """This rank's contiguous slice of the node's cores, and a warning if the node is oversubscribed.

    With C cores and R ranks, rank i gets cores [i*C//R, (i+1)*C//R): the
    slices differ by at most one core.  With fewer cores than ranks, ranks
    share cores round-robin (and the warning says the numbers are not per-core).
    """
    if local_size < 1 or not 0 <= local_rank < local_size:
        raise ValueError(f"bad local rank {local_rank} of {local_size}")
    n = len(cores)
    if n == 0:
        return [], warn("oversubscribed", "no cpus in the affinity mask")
    if n < local_size:
        return [cores[local_rank % n]], warn("oversubscribed",
                                             f"{local_size} ranks on a node with {n} usable core(s): ranks share "
                                             f"cores and take turns on them (points are timed over the turns, "
                                             f"and rated for the cores, not the ranks)")
    lo, hi = local_rank * n // local_size, (local_rank + 1) * n // local_size
    return cores[lo:hi], None


def decide(*, host: str, rank: int, local_rank: int, local_size: int, mask: list[int],
           peer_masks: list[list[int]], sysfs_root: str = SYSFS_CPU) -> Placement:
    """This rank's placement from its mask and the masks of the ranks on its node (itself included)."""
    cores = physical_cores(mask, sysfs_root)
    if local_size == 1:
        return Placement(host, rank, local_rank, local_size, sorted(mask), cores, "whole node")
    if any(sorted(m) != sorted(mask) for m in peer_masks):
        # The launcher bound each rank somewhere; take what it gave.
        shared = [m for m in peer_masks if set(m) & set(mask)]
        warnings = []
        if len(shared) > 1:
            warnings.append(warn("oversubscribed", f"the launcher's cpu binding overlaps {len(shared) - 1} other "
                                                   f"rank(s) on {host}: cpus {sorted(mask)}"))
        return Placement(host, rank, local_rank, local_size, sorted(mask), cores, "launcher", warnings)
    mine, warning = split_cores(cores, local_rank=local_rank, local_size=local_size)
    cpus = sorted(c for core in mine for c in core)
    return Placement(host, rank, local_rank, local_size, cpus, mine, "shared" if warning else "split",
                     [warning] if warning else [])


def current_mask() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def place(comm) -> Placement:
    """Decide this rank's placement with its node peers (one allgather)."""
    host = socket.gethostname()
    mask = current_mask()
    everyone = comm.allgather((host, mask))
    peers = [m for h, m in everyone if h == host]
    placement = decide(host=host, rank=comm.rank, local_rank=comm.local_rank, local_size=comm.local_size,
                       mask=mask, peer_masks=peers)
    # Every rank runs the same plan, so the same thread count: the fewest cores any rank got.
    placement.threads = max(1, min(comm.allgather(len(placement.cores))))
    if placement.threads < len(placement.cores):
        placement.warnings.append(warn("oversubscribed", f"uses {placement.threads} of its {len(placement.cores)} "
                                                         f"cores: every rank runs the same thread count, and another "
                                                         f"rank got fewer cores"))
    return placement


def apply(placement: Placement) -> str:
    """Pin this process to its cpus and tell OpenMP to bind one thread per core; return a description.

    Must run before Numba starts its thread pool.  OMP_* values the user or a
    job script set are left alone (and said so).
    """
    if placement.how in ("split", "shared") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, placement.cpus)
    # PoCL's CPU device starts one thread per cpu of the machine unless told;
    # under MPI each rank's OpenCL device gets only the rank's cores.
    os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", str(max(1, len(placement.cores))))
    if "OMP_PLACES" in os.environ or "OMP_PROC_BIND" in os.environ:
        return (f"cpus {placement.cpus} ({placement.how}); OMP_PLACES={os.environ.get('OMP_PLACES', '')} "
                f"OMP_PROC_BIND={os.environ.get('OMP_PROC_BIND', '')} as set by the user")
    if placement.how == "whole node":
        return f"cpus {placement.cpus} (whole node)"  # the backend's default binding applies
    os.environ["OMP_PLACES"] = placement.omp_places()
    os.environ["OMP_PROC_BIND"] = "close"
    return f"cpus {placement.cpus} ({placement.how}); OMP_PLACES={os.environ['OMP_PLACES']} OMP_PROC_BIND=close"
