"""Communicators: mpi4py's world when the job has several ranks, a serial stand-in otherwise."""

from __future__ import annotations

import os
import sys
import time

from ert.records.warning_codes import relabel, warn

# Variables that MPI launchers (MPICH/Hydra, Open MPI, PMIx, PALS, srun steps) set on every rank.
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "PALS_SIZE",
              "SLURM_STEP_NUM_TASKS")


class SerialComm:
    """One rank, no MPI: the stand-in that lets every code path take a communicator."""

    rank = 0
    size = 1
    local_rank = 0   # index of this rank among the ranks on its node
    local_size = 1   # ranks on this node
    name = "serial"
    mpi = None       # the mpi4py communicator (None: no MPI)

    def barrier(self) -> None:
        pass

    def allgather(self, value):
        return [value]

    def bcast(self, value, root: int = 0):
        return value

    def abort(self, code: int = 1) -> None:
        sys.stderr.flush()
        os._exit(code)

    def library(self) -> str:
        return ""


class MpiComm:
    """A thin wrapper over an mpi4py communicator with the same small surface."""

    name = "mpi"

    def __init__(self, comm):
        self._comm = comm
        self.mpi = comm  # point-to-point stages (ert.measure.network) use mpi4py directly
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        # Ranks that share this node's memory: their count and this rank's index
        # among them pick its cores and its device.
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank = node.Get_rank()
        self.local_size = node.Get_size()
        node.Free()
        # Every rank's host (its clock and cores): a region's ranks are checked per host for running together.
        self.hosts = comm.allgather(MPI.Get_processor_name())

    def barrier(self) -> None:
        self._comm.Barrier()

    def allgather(self, value):
        return self._comm.allgather(value)

    def bcast(self, value, root: int = 0):
        return self._comm.bcast(value, root=root)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job.  Never returns.

        The pause lets the launcher forward this rank's last stderr line (the
        error) before the job is torn down; MPI_Abort may also return on some
        implementations, so the process then exits by itself.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.2)
        try:
            self._comm.Abort(code)
        finally:
            os._exit(code)

    def library(self) -> str:
        """First line of the MPI library's version string (e.g. "MPICH Version: 4.2.0")."""
        from mpi4py import MPI

        return " ".join(MPI.Get_library_version().splitlines()[0].split())


def merge_rank_warnings(per_rank: list[list[str]]) -> list[str]:
    """Warnings gathered from every rank, each once, tagged with the ranks that raised it.

    ``per_rank[r]`` is rank r's list.  A warning every rank raised carries no
    tag; others read "[rank 1] ..." or "[ranks 0,2,3] ...".  Order: first seen.
    """
    seen: dict[str, list[int]] = {}
    for rank, messages in enumerate(per_rank):
        for message in messages:
            seen.setdefault(message, [])
            if rank not in seen[message]:
                seen[message].append(rank)
    out = []
    for message, ranks in seen.items():
        if len(per_rank) == 1 or len(ranks) == len(per_rank):
            out.append(message)
        else:
            tag = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))
            out.append(relabel(message, f"[{tag}] {message}"))
    return out


def shared_device_warnings(gathered: list[tuple[str, str | None]], rank: int) -> list[str]:
    """This rank's warning when other ranks on its node drive the same device.

    ``gathered[r]`` is rank r's (host name, device id): a GPU's UUID or PCI
    bus id, an OpenCL platform:device pair, or None for a backend without a
    device.  Counting ranks against visible GPUs cannot tell: under
    ``srun --gpus-per-task=1`` every rank sees one GPU, each a different one.
    """
    host, device = gathered[rank]
    if not device:
        return []
    sharing = [r for r, (h, d) in enumerate(gathered) if h == host and d == device]
    if len(sharing) < 2:
        return []
    return [warn("oversubscribed", f"{len(sharing)} ranks on {host} share device {device}: each measures a share of it")]


def launched_size() -> int:
    """Ranks the launcher says this job has (1 when not under a launcher)."""
    for var in _SIZE_VARS:
        value = os.environ.get(var)
        if value and value.isdigit():
            return int(value)
    return 1


def world():
    """MPI's world communicator if this process is one of several ranks, else SerialComm.

    mpi4py is imported only then; with no MPI library it raises RuntimeError,
    not ImportError.  Several ranks without a working mpi4py is an error.
    """
    size = launched_size()
    if size <= 1:
        return SerialComm()
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:
        # N independent "rank 0"s would all write the same run directory.
        from ert.errors import ErtError

        raise ErtError(f"launched as {size} MPI ranks, but mpi4py cannot load ({exc}); "
                       f"install mpi4py or run without mpirun", key="mpi") from None
    comm = MpiComm(MPI.COMM_WORLD)
    if comm.size == 1:
        # N independent "rank 0"s, each writing the same run directory: the launcher's PMI never reached MPI.
        from ert.errors import ErtError

        hint = ("srun started them without a PMI MPI understands: use srun --mpi=pmi2 (MPICH) or the site's "
                "PMIx (srun --mpi=list), or MpiDefault in slurm.conf" if os.environ.get("SLURM_STEP_ID")
                else "the launcher and the MPI library mpi4py loaded do not match (mpi4py's MPI: "
                     f"{comm.library() or 'unknown'})")
        raise ErtError(f"launched as {size} ranks, but MPI sees 1 in each: {hint}", key="mpi")
    return comm


def gentle_barrier(comm) -> None:
    """A world barrier that sleeps while it waits (idle ranks must not steal a measured pair's cores)."""
    mpi = getattr(comm, "mpi", None)
    if mpi is None:
        return
    request = mpi.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)
