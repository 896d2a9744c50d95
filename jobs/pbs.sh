#!/bin/bash
# PBS Pro / OpenPBS (and PALS, as on HPE Cray systems): one node, RANKS ranks
# x (cores / RANKS) threads.
#
#   qsub -v CONFIG=configs/default.yaml,RANKS=2 jobs/pbs.sh
#   qsub -l select=1:ngpus=4 -v CONFIG=configs/gpu-a100.yaml,RANKS=4,BACKEND=cuda jobs/pbs.sh
#
#PBS -N ert
#PBS -l select=1
#PBS -l walltime=00:30:00
#PBS -j oe
##PBS -A myproject
##PBS -q debug
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^\(#[A-Z]\|[^#]\)/{/^#[A-Z]/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;; esac
cd "${PBS_O_WORKDIR:-.}"

CONFIG=${CONFIG:-}                 # empty: the packaged default
RANKS=${RANKS:-2}
BACKEND=${BACKEND:-}               # empty: the config's backend
OUT=${OUT:-results/${PBS_JOBID%%.*}-$(hostname -s)}
CORES=$(( $(nproc --all) / RANKS ))

source "${ERT_VENV:-$PWD/.venv}/bin/activate"

# mpiexec is whichever the environment provides: the site's (PALS, Open MPI,
# MPICH) or the one the `mpich` wheel installs into the venv.  --cpu-bind is
# PALS syntax; drop it for other launchers and let ert-run place the ranks.
if mpiexec --version 2>&1 | grep -qi pals; then
    BIND=(--cpu-bind depth --depth "$CORES")
else
    BIND=()
fi
mpiexec -n "$RANKS" "${BIND[@]}" ert-run ${CONFIG:+"$CONFIG"} ${BACKEND:+--backend "$BACKEND"} --out "$OUT"

ert show "$OUT"
