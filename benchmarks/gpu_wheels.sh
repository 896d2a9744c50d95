#!/usr/bin/env bash
# Download, here (with network), the wheels a GPU machine without a package index lacks, for
# benchmarks/gpu_acceptance.sh to install there (it reads ${ERT_WHEELS:-.whl}).
#
#   bash benchmarks/gpu_wheels.sh [DIR]        # DIR defaults to .whl (ignored by git)
#
# The target is the device image of this workplace: CPython on x86-64 Linux (manylinux), whose python3
# already holds numpy, numba, pyyaml, matplotlib, attrs, cupy-cuda13x, nvidia-ml-py, mpi4py and pytest,
# but not pydantic, jsonschema or pyopencl. Exactly these are fetched, each with --no-deps at one pinned
# version (two versions of one package stop the install there), for every CPython of 3.10-3.13 (the
# image's version is not promised): the pure-Python wheels once, the compiled ones (pydantic-core,
# rpds-py, pyopencl, siphash24) once per version. DIR/packages.txt lists the pins: gpu_acceptance.sh
# installs them one by one with --find-links DIR, pip taking the wheel built for its interpreter. The
# pins are the versions ert's own test environment runs. typing-extensions travels too: pydantic-core
# needs a recent one, and a newer one is safe for everything else. Override the versions or the list
# with ERT_WHEELS_PYTHONS="3.12" or ERT_WHEELS_PACKAGES="a==1 b==2". A package with no wheel for one
# version is named at the end (exit 1); the others are still fetched.
set -euo pipefail

case ${1:-} in
    -h|--help) echo "usage: bash benchmarks/gpu_wheels.sh [DIR]   (downloads the wheels a GPU machine lacks into DIR," \
                    "default .whl; see the comment at its top)"; exit 0 ;;
    -*) echo "gpu_wheels.sh: unknown option $1 (--help)" >&2; exit 2 ;;
esac
DIR=${1:-.whl}
PY=${PYTHON:-python3}
read -r -a PYVERS <<<"${ERT_WHEELS_PYTHONS:-3.10 3.11 3.12 3.13}"

# What the device image already holds of ert's needs (its package list in the device tool's KINDS.md;
# tests/test_gpu_acceptance.py checks that every dependency in pyproject.toml is here or fetched below).
# shellcheck disable=SC2034  # read by the test, not by this script
PRESENT_ON_IMAGE=(numpy numba pyyaml matplotlib attrs cupy-cuda13x nvidia-ml-py mpi4py pytest)
# ert's dependencies that the device image lacks, and theirs (pip show / each wheel's Requires-Dist).
DEFAULT_PACKAGES=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.8 siphash24==1.9
)
if [[ -n ${ERT_WHEELS_PACKAGES:-} ]]; then
    read -r -a PACKAGES <<<"$ERT_WHEELS_PACKAGES"
else
    PACKAGES=("${DEFAULT_PACKAGES[@]}")
fi

PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 \
         manylinux_2_35_x86_64; do
    PLATFORMS+=(--platform "$p")
done

mkdir -p "$DIR"
missing=()
for pkg in "${PACKAGES[@]}"; do
    name=${pkg%%==*}
    # One version of each: drop any other version left in DIR by an earlier download.
    glob=$(echo "$name" | tr '-' '_')
    for old in "$DIR"/"$glob"-*.whl "$DIR"/"$name"-*.whl; do
        [[ -e $old ]] || continue
        case $old in
            */"$glob-${pkg#*==}"-*|*/"$name-${pkg#*==}"-*) ;;
            *) echo "removing another version: $old"; rm -f -- "$old" ;;
        esac
    done
    for pyver in "${PYVERS[@]}"; do
        if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
                "${PLATFORMS[@]}" -d "$DIR" "$pkg"; then
            missing+=("$pkg for CPython $pyver")
        fi
    done
done
printf '%s\n' "${PACKAGES[@]}" >"$DIR/packages.txt"

echo "wheels in $DIR:"
ls -1 "$DIR"
du -sh "$DIR"
if ((${#missing[@]})); then
    echo "gpu_wheels.sh: no wheel found for: ${missing[*]}" >&2
    exit 1
fi
