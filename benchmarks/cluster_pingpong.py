"""MPI ping-pong between the first and the last rank, and whether the bytes crossed a network interface.

Run across the two hosts of jobs/local-cluster.sh to see which path MPI takes between them
(docs/cluster.md): with UCX's shared-memory transports allowed, the "inter-node" messages never
touch the veth link.

    sudo bash jobs/local-cluster.sh up
    for tls in all tcp,self; do
      UCX_TLS=$tls sudo -E bash jobs/local-cluster.sh exec node1 .venv/bin/mpiexec -launcher ssh \\
          -launcher-exec "$PWD/jobs/local-cluster-ssh" -hosts node1:1,node2:1 -n 2 \\
          .venv/bin/python benchmarks/cluster_pingpong.py
    done

Prints, per message size: one-way latency (us), bandwidth (GB/s), and the bytes rank 0's
interfaces counted against the bytes the messages carried (the ratio: about 1 on the wire, 0 off it).
"""

from __future__ import annotations

import argparse
import os
import socket
import time

ROUND_TRIPS = 200


def main(argv: list[str] = ()) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Run it under mpiexec with 2 or more ranks (one rank sends nothing).").parse_args(argv)
    import numpy as np
    from mpi4py import MPI

    from ert.hardware.hwinfo import iface_bytes, ipv4_addresses

    comm = MPI.COMM_WORLD
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    hosts = comm.allgather(socket.gethostname())
    if rank == 0:
        print(f"ranks 0 on {hosts[0]} and {len(hosts) - 1} on {hosts[-1]}; UCX_TLS={os.environ.get('UCX_TLS', '')!r}")
    names = [name for name, _ in ipv4_addresses()]
    for size in (8, 1 << 22):
        buf = np.zeros(size, np.uint8)
        before = sum(iface_bytes(n) or 0 for n in names)
        comm.Barrier()
        start = time.perf_counter()
        if last > 0 and rank in (0, last):
            for _ in range(ROUND_TRIPS):
                if rank == 0:
                    comm.Send(buf, last)
                    comm.Recv(buf, last)
                else:
                    comm.Recv(buf, 0)
                    comm.Send(buf, 0)
        one_way = (time.perf_counter() - start) / (2 * ROUND_TRIPS)
        counted = sum(iface_bytes(n) or 0 for n in names) - before
        if rank == 0:
            carried = 2 * ROUND_TRIPS * size
            print(f"{size:>8} B: {one_way * 1e6:8.2f} us one way, {size / one_way / 1e9:7.3f} GB/s; "
                  f"interfaces counted {counted / carried:.2f} x the bytes carried")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
