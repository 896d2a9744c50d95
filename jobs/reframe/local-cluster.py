"""ReFrame site configuration for the two-host cluster of jobs/local-cluster.sh (Slurm partition ``ert``).

    sudo bash jobs/local-cluster.sh up
    export SLURM_CONF=/run/ert-cluster/slurm.conf ERT_VENV=$PWD/.venv
    .venv/bin/reframe -C jobs/reframe/local-cluster.py -c jobs/reframe/ert_check.py -r -S config=configs/tiny.yaml

A site copies this file and changes the partition's name, ``access`` (account,
QOS, constraint), ``processor.num_cpus`` (cpus per node; ert_check gives each
rank cpus / ranks_per_node threads) and ``extras.launcher_options`` (srun's
options for the site's MPI).  See jobs/README.md.
"""

import os
import sys

if __name__ == "__main__":  # ReFrame loads this file; run as a script, it says how (without ReFrame installed too)
    print(__doc__.strip())
    sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)


def _cpus_per_host() -> int:
    # What `local-cluster.sh up` told Slurm each host has (max(2, cpus / 2) unless ERT_CLUSTER_CPUS).
    path = os.path.join(os.environ.get("ERT_CLUSTER_DIR", "/run/ert-cluster"), "cpus")
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return max(2, (os.cpu_count() or 2) // 2)


site_configuration = {
    "systems": [
        {
            "name": "ert-local-cluster",
            "descr": "jobs/local-cluster.sh: node1 and node2 in namespaces on this machine, a real Slurm",
            "hostnames": [".*"],
            "partitions": [
                {
                    "name": "ert",
                    "descr": "the rig's one partition (node1, node2), MPI through srun's PMI-2",
                    # squeue, not slurm: the rig keeps no accounting (sacct has nothing to say).
                    "scheduler": "squeue",
                    "launcher": "srun",
                    "access": ["--partition=ert"],
                    "environs": ["ert"],
                    "max_jobs": 1,
                    "processor": {"num_cpus": _cpus_per_host()},
                    # The rig's MpiDefault is pmi2 already; a site whose default MPI plugin is none names it.
                    "extras": {"launcher_options": ["--mpi=pmi2", "--kill-on-bad-exit=1"]},
                }
            ],
        }
    ],
    "environments": [{"name": "ert", "target_systems": ["ert-local-cluster"]}],
    # squeue here is a local call: ask every second (ReFrame's default slows to once in 10 s).
    "general": [{"poll_rate_min": 1.0, "target_systems": ["ert-local-cluster"]}],
}
