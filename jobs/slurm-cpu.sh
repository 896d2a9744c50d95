#!/bin/bash
# Slurm, CPU nodes (one, or --nodes=N): all their cores, as RANKS ranks per node x (cores / RANKS) threads.
#
#   sbatch jobs/slurm-cpu.sh [CONFIG]            (default: the packaged default config)
#   RANKS=4 sbatch --nodes=2 jobs/slurm-cpu.sh configs/thorough-cpu.yaml
#   sbatch --nodes=2 jobs/slurm-cpu.sh --resume results/<run>   (finish a killed run: same nodes and RANKS)
#
# One rank per socket (or per NUMA domain) is the usual choice: each rank's
# threads then share one memory controller.  ert-run gives each rank its own
# cores and pins one thread per core; with --cpu-bind below, Slurm binds the
# ranks first and ert-run keeps that binding.
#SBATCH --job-name=ert-cpu
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=00:30:00
#SBATCH --no-requeue               # a failed measurement is resumed (--resume), never rerun from scratch
#SBATCH --output=ert-cpu-%j.out
# Site-specific lines go here, e.g.:
##SBATCH --account=myproject
##SBATCH --constraint=cpu
##SBATCH --qos=regular
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^\(#[A-Z]\|[^#]\)/{/^#[A-Z]/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;; esac

CONFIG=${1:-}                      # empty: the packaged default
RESUME=
if [ "$CONFIG" = --resume ]; then
    RESUME=${2:?usage: sbatch jobs/slurm-cpu.sh --resume RUN_DIR}
    CONFIG=
fi
RANKS=${RANKS:-2}                  # ranks per node
if [ "$RANKS" -gt "$SLURM_CPUS_ON_NODE" ]; then
    echo "slurm-cpu.sh: error: RANKS=$RANKS ranks per node, but the node has $SLURM_CPUS_ON_NODE cpu(s)" >&2
    exit 2
fi
CORES=$(( SLURM_CPUS_ON_NODE / RANKS ))
OUT=${RESUME:-${OUT:-results/${SLURM_JOB_ID}-$(hostname -s)-cpu}}

# The environment that has ert installed (see the README's first command).
source "${ERT_VENV:-$PWD/.venv}/bin/activate"

if [ -n "$RESUME" ]; then RUN_ARGS=(--resume "$RESUME"); else RUN_ARGS=(${CONFIG:+"$CONFIG"} --out "$OUT"); fi

# Threads are cores per rank; OMP_* left unset so ert-run pins them per rank.
# --kill-on-bad-exit: a rank that dies (or a node that goes) ends the step at once,
# instead of leaving the others waiting in a collective until the time limit.
# MPI reaches the ranks through Slurm's PMI: the site's default (MpiDefault), or
# SRUN_MPI=pmi2 for MPICH (the pip 'mpich' wheel) where the default is none.
srun ${SRUN_MPI:+--mpi="$SRUN_MPI"} --kill-on-bad-exit=1 \
     --ntasks-per-node="$RANKS" --cpus-per-task="$CORES" --cpu-bind=cores \
     ert-run "${RUN_ARGS[@]}"

ert show "$OUT"
