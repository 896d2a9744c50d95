#!/bin/bash
# Slurm, GPU nodes: one rank per GPU.  Each rank sees one GPU (--gpus-per-task=1);
# aggregate ceilings cover every GPU of the job.
#
#   sbatch jobs/slurm-gpu.sh configs/gpu-a100.yaml                        (4 GPUs, the default below)
#   sbatch --gpus-per-node=8 jobs/slurm-gpu.sh configs/gpu-h100.yaml      (an 8-GPU node)
#   sbatch --nodes=2 jobs/slurm-gpu.sh configs/links-network.yaml          (2 nodes: NVLink, PCIe and the network)
#   BACKEND=opencl sbatch jobs/slurm-gpu.sh configs/tiny.yaml
#   sbatch jobs/slurm-gpu.sh --resume results/<run>                        (finish a killed run: same allocation)
#
# Ranks per node = the GPUs per node the job asked for (SLURM_GPUS_PER_NODE).  The
# allocation is fixed when the job is submitted, so the GPU count is chosen
# with sbatch's own option (--gpus-per-node=N on the command line overrides
# the line below), never with a variable read once the job runs.
#
# The CUDA backend needs CuPy built for the node's CUDA (see the README:
# cupy-cuda13x for sm_75 and newer, cupy-cuda12x for V100).
#SBATCH --job-name=ert-gpu
#SBATCH --nodes=1
#SBATCH --gpus-per-node=4
#SBATCH --exclusive                # the whole node: every cpu for the ranks (one per GPU), nothing else on its GPUs
#SBATCH --time=00:30:00
#SBATCH --no-requeue               # a failed measurement is resumed (--resume), never rerun from scratch
#SBATCH --output=ert-gpu-%j.out
##SBATCH --account=myproject
##SBATCH --constraint=gpu
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^\(#[A-Z]\|[^#]\)/{/^#[A-Z]/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;; esac

CONFIG=${1:?usage: sbatch jobs/slurm-gpu.sh CONFIG | --resume RUN_DIR}
RESUME=
if [ "$CONFIG" = --resume ]; then
    RESUME=${2:?usage: sbatch jobs/slurm-gpu.sh --resume RUN_DIR}
    CONFIG=
fi
# GPUs per node the job asked for ("4", or "h100:4" where the site names the type); --exclusive may
# give the node's every GPU (SLURM_GPUS_ON_NODE), but the ranks are the GPUs asked for.
NGPU=${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
NGPU=${NGPU##*:}
if ! [[ "$NGPU" =~ ^[1-9][0-9]*$ ]]; then
    echo "slurm-gpu.sh: error: the job has no GPUs (SLURM_GPUS_ON_NODE is '${SLURM_GPUS_ON_NODE:-}'): submit with sbatch --gpus-per-node=N" >&2
    exit 2
fi
# GPUS=N (this script's old way) cannot change an allocation that already exists: say how.
if [ -n "${GPUS:-}" ] && [ "$GPUS" != "$NGPU" ]; then
    echo "slurm-gpu.sh: error: GPUS=$GPUS but the allocation has $NGPU GPU(s) per node: submit with sbatch --gpus-per-node=$GPUS" >&2
    exit 2
fi
BACKEND=${BACKEND:-cuda}
OUT=${RESUME:-${OUT:-results/${SLURM_JOB_ID}-$(hostname -s)-${BACKEND}}}
if [ -n "$RESUME" ]; then RUN_ARGS=(--resume "$RESUME"); else RUN_ARGS=("$CONFIG" --backend "$BACKEND" --out "$OUT"); fi

source "${ERT_VENV:-$PWD/.venv}/bin/activate"

# --gpus-per-task=1 shows each rank one GPU; ert-run then uses device 0 of what
# it sees.  --kill-on-bad-exit: a rank that dies (or a node that goes) ends the
# step at once.  SRUN_MPI=pmi2 for MPICH where the site's MpiDefault is none.
srun ${SRUN_MPI:+--mpi="$SRUN_MPI"} --kill-on-bad-exit=1 \
     --ntasks-per-node="$NGPU" --gpus-per-task=1 --cpus-per-task=1 \
     ert-run "${RUN_ARGS[@]}"

ert show "$OUT"
