#!/bin/bash
# Slurm, one GPU node: one rank per GPU.  Each rank's index on its node picks
# its GPU (CUDA) or OpenCL device; aggregate ceilings cover the whole node.
#
#   sbatch jobs/slurm-gpu.sh configs/gpu-a100.yaml
#   GPUS=8 sbatch jobs/slurm-gpu.sh configs/gpu-h100.yaml
#   BACKEND=opencl sbatch jobs/slurm-gpu.sh configs/tiny.yaml
#
# The CUDA backend needs CuPy built for the node's CUDA (see the README:
# cupy-cuda13x for sm_75 and newer, cupy-cuda12x for V100).
#SBATCH --job-name=ert-gpu
#SBATCH --nodes=1
#SBATCH --gpus-per-node=4
#SBATCH --time=00:30:00
#SBATCH --no-requeue               # a failed measurement is resumed (--resume), never rerun from scratch
#SBATCH --output=ert-gpu-%j.out
##SBATCH --account=myproject
##SBATCH --constraint=gpu
set -euo pipefail

CONFIG=${1:?usage: sbatch jobs/slurm-gpu.sh CONFIG}
GPUS=${GPUS:-4}                    # GPUs per node = ranks per node
BACKEND=${BACKEND:-cuda}
OUT=${OUT:-results/${SLURM_JOB_ID}-$(hostname -s)-${BACKEND}}

source "${ERT_VENV:-$PWD/.venv}/bin/activate"

# --gpus-per-task=1 shows each rank one GPU; ert-run then uses device 0 of
# what it sees.  Without it, each rank's local index selects among all GPUs.
srun --ntasks-per-node="$GPUS" --gpus-per-task=1 --cpus-per-task=1 \
     ert-run "$CONFIG" --backend "$BACKEND" --out "$OUT"

ert show "$OUT"
