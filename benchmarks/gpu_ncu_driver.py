#!/usr/bin/env python3
"""A few launches of ert's CUDA kernels, for Nsight Compute to profile (benchmarks/gpu_acceptance.sh).

    ncu --kernel-name regex:'^ert_(rw|ro|mma|wgmma)' ... python3 benchmarks/gpu_ncu_driver.py

Each kernel is prepared through the cuda backend exactly as a run prepares it (compiled by CuPy's
NVRTC, one warm-up launch of 1 trial), launched once more with TRIALS trials, and checked against
the host replay. One line per kernel: its key, the launch geometry, the seconds of the timed launch
(inflated under ncu's replay) and the check. Exit status 1 if a kernel fails its check or raises;
the others still run. Never run on a GPU yet.

The kernels: fp64 read+write add at 128 MiB (beyond every L2: DRAM bytes) and at 8 MiB (inside
every L2 since Volta), fp64/fp32/fp16 FMA at 64 FLOPs per element, the fp64 read-only add, the
int32 multiply-add, and the tensor-core MMAs where this GPU has them: fp16 and fp64 mma.sync, and on
sm_90 Hopper's fp16 wgmma (the one independent counter check of its tensor roof) and the FP64
m16n8k16 DMMA. Under ncu each gives `ert profile` a kernel whose bytes per level and FLOPs per
precision are known from the spec.
"""

from __future__ import annotations

import argparse
import sys
import traceback

TRIALS = 2
MIB = 1 << 20


def kernels(scale: float = 1.0):
    """(spec, bytes of its array, or None for a tensor kernel) for every kernel profiled; ``scale`` shrinks
    the arrays (the tests run the list on an emulated GPU)."""
    from ert.spec import SHAPES, SM90_SHAPES, WGMMA_SHAPES, KernelSpec

    sizes = [(KernelSpec("fp64", 1, False), 128), (KernelSpec("fp64", 1, False), 8),
             (KernelSpec("fp64", 64, True), 64), (KernelSpec("fp32", 64, True), 64),
             (KernelSpec("fp16", 64, True), 64), (KernelSpec("fp64", 1, False, "ro"), 128),
             (KernelSpec("int32", 64, False), 64)]
    vector = [(spec, int(mib * MIB * scale)) for spec, mib in sizes]
    shapes = [SHAPES["fp16"], SHAPES["fp64"], WGMMA_SHAPES["fp16"], SM90_SHAPES["fp64"]]
    tensor = [(KernelSpec(s.name, s.flops_per_mma, True, "rw", pipe="tensor", instruction=s.spec_instruction), None)
              for s in shapes]
    return vector + tensor


def run_kernels(backend, todo) -> int:
    """Prepare, launch and check each (spec, bytes) of ``todo`` on ``backend``; the number that failed."""
    failed = 0
    for spec, nbytes in todo:
        try:
            if not backend.supports(spec):
                print(f"{spec.key}: not supported on this GPU, skipped", flush=True)
                continue
            if spec.tensor:
                elements, _, launches = backend.tensor_plan(spec)
            else:
                elements = nbytes // spec.itemsize
                launches = backend.launches(spec, elements)
            launch = launches[0]
            backend.prepare(spec, elements_per_thread=elements, launch=launch)
            seconds = backend.run(TRIALS)
            result = backend.check()
            size = "" if nbytes is None else f" {nbytes / MIB:g} MiB"
            print(f"{spec.key}{size}: blocks {launch['blocks']} x threads {launch['threads']}, "
                  f"{seconds * 1e3:.3f} ms for {TRIALS} trials, check {'ok' if result.ok else 'FAILED'}"
                  + ("" if result.ok else f": {result.detail}"), flush=True)
            failed += not result.ok
        except Exception:
            failed += 1
            print(f"{spec.key}: raised", flush=True)
            traceback.print_exc(file=sys.stdout)
    return failed


def main(argv: list[str] = ()) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Run it under ncu (benchmarks/gpu_acceptance.sh); without a GPU it says so and "
                                   "exits 2.").parse_args(argv)
    from ert.backends import cuda as cuda_mod

    ok, reason, _ = cuda_mod.probe()
    if not ok:
        print(f"gpu_ncu_driver: the cuda backend is not available: {reason}", file=sys.stderr)
        return 2
    backend = cuda_mod.create()
    try:
        failed = run_kernels(backend, kernels())
    finally:
        backend.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
