#!/bin/bash
# Plain mpirun/mpiexec on the current machine (a workstation, or a node you
# are logged in to): RANKS ranks, each on its own cores, threads = cores / ranks.
#
#   bash jobs/mpirun.sh                      # 2 ranks, packaged default config
#   RANKS=4 bash jobs/mpirun.sh configs/thorough-cpu.yaml
#   bash jobs/mpirun.sh --resume results/<run>   # finish a killed run (same RANKS)
#
# `pip install -e '.[mpi]'` puts MPICH's mpiexec into the venv; a system
# MPI works too if mpi4py was built against it.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^\(#[A-Z]\|[^#]\)/{/^#[A-Z]/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;; esac

RANKS=${RANKS:-2}
VENV=${ERT_VENV:-$(dirname "$0")/../.venv}
MPIEXEC=${MPIEXEC:-$(command -v "$VENV/bin/mpiexec" || command -v mpiexec)}

"$MPIEXEC" -n "$RANKS" "$VENV/bin/ert-run" "$@"
