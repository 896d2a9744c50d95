"""The OpenCL backend's output check: the buffer read back in chunks, or the work-items' sums, against the replay."""

from __future__ import annotations

import numpy as np

from ert.backends.check import (CheckResult, initial_values, replay_rw, ro_errors, ro_tolerance, rw_errors,
                                rw_tolerance, verdict)
from ert.spec import KernelSpec, is_integer

HOST_DTYPE = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "int32": "int32", "int64": "int64"}
# The load-only sums are FP32 for FP16 data (see ert_ro in the kernel).
SUM_DTYPE = {"fp64": "float64", "fp32": "float32", "fp16": "float32"}
# Elements read back per step of the check (bounded host memory for 1 GiB sets).
CHECK_CHUNK_ELEMENTS = 1 << 22


def check_rw(*, cl, queue, buf, spec: KernelSpec, n_elements: int, trials: int) -> CheckResult:
    """Every element of a read+write buffer against the replay of ``trials`` trials (integers exactly)."""
    dtype = np.dtype(HOST_DTYPE[spec.precision])
    expected16 = replay_rw(spec, trials=trials)
    chunk = min(n_elements, CHECK_CHUNK_ELEMENTS)
    host = np.empty(chunk, dtype=dtype)
    worst, worst_at = 0.0, -1
    for start in range(0, n_elements, chunk):
        part = host[:min(chunk, n_elements - start)]
        cl.enqueue_copy(queue, part, buf, src_offset=start * dtype.itemsize).wait()
        if is_integer(spec.precision):  # exact: every element equals the replay
            idx = (np.arange(part.size, dtype=np.int64) + start) % 16
            wrong = np.flatnonzero(part != expected16[idx])
            err, i = (float("inf"), int(wrong[0])) if wrong.size else (0.0, 0)
        else:
            err, i = rw_errors(part, first_element=start, expected16=expected16)
        if err > worst or worst_at < 0:
            worst, worst_at = err, start + i
        if worst == float("inf"):
            break
    one = np.empty(1, dtype=dtype)
    cl.enqueue_copy(queue, one, buf, src_offset=worst_at * dtype.itemsize).wait()
    return verdict(error=worst, tolerance=rw_tolerance(spec), what=f"element {worst_at}", got=one[0],
                   expected=expected16[worst_at % 16], trials=trials)


def expected_sums(*, global_size: int, n_vectors: int, vector_width: int, chains: int,
                  contiguous: bool) -> np.ndarray:
    """Per work-item, the sum of its elements in one load-only trial (float64, exact)."""
    pattern = initial_values(np.float64)
    prefix = np.concatenate([[0.0], np.cumsum(pattern)])

    def summed(first, count):  # sum of the pattern over elements [first, first + count)
        def upto(x):
            return (x // 16) * pattern.sum() + prefix[x % 16]
        return upto(first + count) - upto(first)

    gid = np.arange(global_size, dtype=np.int64)
    if contiguous:
        group = vector_width * chains
        groups = n_vectors // chains
        lo, hi = groups * gid // global_size, groups * (gid + 1) // global_size
        return summed(lo * group, (hi - lo) * group)
    # Interleaved: work-item g owns vectors g, g + G, g + 2G, ...; since
    # G * vw % 16 == 0 they all start at the same place in the pattern.
    owned = np.maximum(0, (n_vectors - gid + global_size - 1) // global_size)
    return owned * summed(gid * vector_width, vector_width)


def check_ro(*, cl, queue, sums, spec: KernelSpec, expected: np.ndarray, trials: int) -> CheckResult:
    """Each work-item's load-only sum (read back from ``sums``) against ``expected`` (one per work-item)."""
    host = np.empty(2 * expected.size, dtype=SUM_DTYPE[spec.precision])
    cl.enqueue_copy(queue, host, sums).wait()
    got = host[0::2].astype(np.float64)
    err, g = ro_errors(got, expected)
    return verdict(error=err, tolerance=ro_tolerance(spec), what=f"load-only sum of work-item {g}",
                   got=got[g], expected=expected[g], trials=trials)
