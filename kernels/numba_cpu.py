"""The ERT kernels for the Numba CPU backend, and the host replay that checks them.

Per element per trial (contract shared with ert.spec.KernelSpec):

* ``rw_add``    (flops_per_element = 1):  b = b + c_t            1 FLOP,  load + store
* ``rw_fma``    (flops_per_element = 2K): K x (b = fma(b, a, c_t)) 2K FLOPs, load + store
* ``rw_nofma``  (flops_per_element = 2K): K x (b = b*a; b = b + c_t) rounded separately,
                                          2K FLOPs, load + store
* ``ro_sum``    (flops_per_element = 1):  acc = acc + b           1 FLOP,  load only

``c_t`` is ``+c`` on even trials and ``-c`` on odd ones, counted over every
trial run on the buffer since it was initialised (``trial_offset`` carries the
count between calls), so the final values depend on the parity of the total and
an off-by-one in the trial loop is caught.  ``a`` < 1 keeps the values bounded
(near +-1) for any trial count: no overflow, no denormals.

Each thread owns one contiguous block of ``n`` elements, ``n`` a multiple of
``GRANULE_BYTES / itemsize`` (the granule is 512 bytes: 8 zmm registers).  The
multiply-add chains run over a 512-byte sub-block with the FLOP loop outside
the element loop, which gives 8 independent vector chains; a single chain per
element would be latency bound and lose the compute peak at high FLOP counts.

FMA versus no-FMA is decided by ``fastmath``: ``{'contract'}`` lets LLVM fuse
the multiply and add, ``False`` forbids it (checked on the assembly by tests).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# The host side of these kernels: starting values and the replay every check compares with.
from ert.replay import initial_values, replay_rw  # noqa: F401

GRANULE_BYTES = 512


@njit(parallel=True, cache=True)
def init_blocks(buf, nthreads, n):
    """Fill each thread's block from that thread, so first touch places its pages."""
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        for i in range(blk.size):
            blk[i] = 0.5 + (i % 16) * 0.0625


def _make_rw_kernel(w: int, fastmath):
    """The multiply-add kernel with a compile-time sub-block of ``w`` elements.

    ``w`` must be a constant for LLVM to unroll the sub-block into registers.
    Numba's cache key covers the code and the values closed over, but not the
    decorator's options, so ``fused`` is closed over (and returned) too:
    without it the FMA and no-FMA kernels of one precision share one cache
    entry, and whichever was compiled first is loaded for both.
    """
    fused = bool(fastmath)

    @njit(parallel=True, fastmath=fastmath, cache=True)
    def rw_kernel(buf, nthreads, n, trials, trial_offset, k_ops, a, c):
        for t in prange(nthreads):
            blk = buf[t * n:(t + 1) * n]
            for tr in range(trials):
                ct = c if (tr + trial_offset) % 2 == 0 else -c
                for i0 in range(0, blk.size, w):
                    sub = blk[i0:i0 + w]
                    for _ in range(k_ops):
                        for j in range(w):
                            sub[j] = sub[j] * a + ct
        return 1 if fused else 0

    return rw_kernel


# One kernel per (precision, FMA or not); the FLOP count k_ops stays a runtime
# argument, which costs nothing measurable and keeps JIT work to 4 variants.
RW_FMA = {"fp64": _make_rw_kernel(GRANULE_BYTES // 8, {"contract"}),
          "fp32": _make_rw_kernel(GRANULE_BYTES // 4, {"contract"})}
RW_NOFMA = {"fp64": _make_rw_kernel(GRANULE_BYTES // 8, False),
            "fp32": _make_rw_kernel(GRANULE_BYTES // 4, False)}


@njit(parallel=True, fastmath=False, cache=True)
def rw_add(buf, nthreads, n, trials, trial_offset, c):
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        for tr in range(trials):
            ct = c if (tr + trial_offset) % 2 == 0 else -c
            for i in range(blk.size):
                blk[i] = blk[i] + ct
    return 0


# reassoc lets LLVM split the sum over several vector accumulators; without it
# the reduction is one serial chain and measures add latency, not bandwidth.
# Elements summed in the array's precision before the partial sum is added to
# the float64 total: short enough that FP32 rounding stays ~1e-6 relative at
# any n, long enough that the vector loop dominates.
RO_CHUNK = 2048


# reassoc lets LLVM split the sum over several vector accumulators; without it
# the reduction is one serial chain and measures add latency, not bandwidth.
@njit(parallel=True, fastmath={"reassoc", "nsz", "arcp", "contract"}, cache=True)
def ro_sum(buf, nthreads, n, trials, out):
    """Sum each thread's block ``trials`` times into out[t] (float64).

    Each chunk is summed in the array's precision (so FP32 loads stay FP32
    work) and added to a float64 total, so FP32 neither saturates over many
    trials nor loses accuracy on large blocks.
    """
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        total = out[t]
        for _ in range(trials):
            for i0 in range(0, blk.size, RO_CHUNK):
                chunk = blk[i0:i0 + RO_CHUNK]
                acc = chunk[0] - chunk[0]
                for i in range(chunk.size):
                    acc += chunk[i]
                total += acc
        out[t] = total
    return 0


@njit(parallel=True, cache=True)
def max_rel_error(buf, nthreads, n, expected16, worst):
    """Largest |b - expected| / max(|expected|, 1) per thread into worst[t, 0], its index into worst[t, 1].

    The comparison walks every element, so a thread that skipped part of its
    block, or wrote a neighbour's, is caught; NaN counts as the worst error.
    """
    for t in prange(nthreads):
        blk = buf[t * n:(t + 1) * n]
        w_err = 0.0
        w_idx = -1.0
        for i in range(blk.size):
            e = expected16[i % 16]
            err = abs(float(blk[i]) - e) / max(abs(e), 1.0)
            if not (err <= w_err):  # also true for NaN
                if err != err:
                    err = np.inf
                w_err = err
                w_idx = float(i)
        worst[t, 0] = w_err
        worst[t, 1] = w_idx
