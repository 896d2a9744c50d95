"""The one output check of every backend: the host replay, the tolerance policy, the error metric and its verdict.

Every backend's kernel starts element i at ``initial_values()[i % 16]`` and,
per trial t, runs it through ``x = fma(x, A, c_t)`` (``fma_ops`` times, fused),
``x = x*A; x = x + c_t`` (the same, rounded separately) or ``x = x + c_t``
(the single add), with ``c_t = +C`` on even and ``-C`` on odd trials.  A < 1
damps the values into a short cycle, so the replay jumps whole cycles ahead
once it sees one: its cost is bounded whatever the trial count.

The replay is bit-exact wherever ``fma_exact()``: the add and no-FMA kernels
always, the fused kernels whenever the host has a wide enough float to round
once as the device does.  The tolerance policy follows from that, and is the
same for every backend: zero where the replay is exact, a few ulp (damped)
where it rounds twice.  The load-only sums are of small dyadic values, exact
in every accumulator the backends use; their tolerance only admits another
summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ert.spec import KernelSpec, is_integer

# Dyadic, so the add form is exact in every precision.
A = 0.9375
C = 0.0625

NUMPY_DTYPE = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}

# The integer kernels (numba-cpu): x = x*A_INT + c_t or x = x + c_t, c_t = +-C_INT,
# wrapping modulo 2**bits (LLVM's mul/add without nsw/nuw flags).  A_INT is
# odd, so x -> x*A_INT is a bijection mod 2**bits: the values never collapse
# to a fixed point, and every trial changes every element.  The replay is exact.
A_INT = 1103515245
C_INT = 12345
INT_DTYPE = {"int32": np.int32, "int64": np.int64}
INT_BITS = {"int32": 32, "int64": 64}

# a = 15/16 has 4 significant bits, so b*a + c for |b| < 2 and |c| = 1/16
# needs at most 53 + 5 bits: exact in float64 for FP32/FP16 inputs, and in an
# x87 or quad long double (>= 63 bits) for FP64 inputs.  One rounding to the
# precision then is the device's fused multiply-add, bit for bit.
WIDE_FLOAT = np.longdouble if np.finfo(np.longdouble).nmant >= 63 else None

# Relative tolerance of a read+write check where the replay rounds twice and
# the device once (FP64 FMA on a host without a 63-bit long double): a < 1
# damps the difference to a few ulp.
TWO_ROUNDINGS_TOLERANCE = 1e-12
# Relative tolerance of a load-only sum, per precision of the data: every
# partial sum is exact, so this only admits another order of exact additions
# and the rounding of a float64 (FP64) or float32 (FP32/FP16) total.
RO_TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "fp16": 1e-5}


@dataclass(frozen=True)
class CheckResult:
    """Outcome of comparing a kernel's output with the host replay."""

    ok: bool
    detail: str = ""


def initial_values(dtype) -> np.ndarray:
    """The 16 distinct starting values, element i getting the (i % 16)-th."""
    return (0.5 + np.arange(16) * 0.0625).astype(dtype)


def initial_int_values(precision: str) -> np.ndarray:
    """The 16 distinct integer starting values (element i gets the (i % 16)-th): 3 + 1000003 i."""
    return (3 + 1000003 * np.arange(16, dtype=np.int64)).astype(INT_DTYPE[precision])


def _affine_power(p: int, q: int, n: int, mask: int) -> tuple[int, int]:
    """(P, Q) with x -> P x + Q the map x -> p x + q applied n times, modulo mask + 1."""
    rp, rq = 1, 0
    while n:
        if n & 1:
            rp, rq = (p * rp) & mask, (p * rq + q) & mask
        p, q = (p * p) & mask, (p * q + q) & mask
        n >>= 1
    return rp, rq


def replay_rw_int(spec: KernelSpec, *, trials: int, x0: np.ndarray | None = None) -> np.ndarray:
    """The 16 values an integer read+write kernel leaves after ``trials`` trials: exact, in O(log trials).

    One trial is the affine map x -> P x + Q_t modulo 2**bits (P = A**K,
    Q_t = +-C (A**(K-1) + ... + 1); P = 1, Q_t = +-C for the add); an even and
    an odd trial compose to x -> P**2 x + (P - 1) Q, which is raised to the
    number of trial pairs by squaring, in Python's unbounded integers.
    """
    bits = INT_BITS[spec.precision]
    mask = (1 << bits) - 1
    k_ops = spec.fma_ops_per_element
    if spec.add_ops_per_element:  # K adds of c_t: x -> x + K c_t
        p, q = 1, (spec.add_ops_per_element * C_INT) & mask
    else:
        p, q = (1, C_INT) if k_ops == 0 else _affine_power(A_INT, C_INT, k_ops, mask)
    pair = ((p * p) & mask, ((p - 1) * q) & mask)  # even trial (+q) then odd (-q)
    big_p, big_q = _affine_power(*pair, trials // 2, mask)
    if trials % 2:
        big_p, big_q = (p * big_p) & mask, (p * big_q + q) & mask
    start = initial_int_values(spec.precision) if x0 is None else np.asarray(x0).view(INT_DTYPE[spec.precision])
    out = [((big_p * (v & mask) + big_q) & mask) for v in start.astype(np.int64).tolist()]
    unsigned = np.array(out, dtype=np.uint64 if bits == 64 else np.uint32)
    return unsigned.view(INT_DTYPE[spec.precision])


def replay_rw_int_stepwise(spec: KernelSpec, *, trials: int) -> np.ndarray:
    """The same values, trial by trial in numpy unsigned arithmetic (wraps modulo 2**bits): the reference."""
    udt = np.uint64 if INT_BITS[spec.precision] == 64 else np.uint32
    x = initial_int_values(spec.precision).view(udt).copy()
    a, c = udt(A_INT), udt(C_INT)
    with np.errstate(over="ignore"):
        for t in range(trials):
            ct = c if t % 2 == 0 else udt(0) - c
            if spec.add_ops_per_element:
                for _ in range(spec.add_ops_per_element):
                    x = x + ct
            elif spec.fma_ops_per_element == 0:
                x = x + ct
            else:
                for _ in range(spec.fma_ops_per_element):
                    x = x * a + ct
    return x.view(INT_DTYPE[spec.precision])


def fma_exact(precision: str) -> bool:
    """Whether this host replays the precision's fused multiply-add bit-exactly."""
    return precision != "fp64" or WIDE_FLOAT is not None


def _fused(b: np.ndarray, a, c, dtype) -> np.ndarray:
    wide = np.float64 if dtype != np.float64 else WIDE_FLOAT
    return (b.astype(wide) * wide(a) + wide(c)).astype(dtype)


def replay_rw(spec: KernelSpec, *, trials: int) -> np.ndarray:
    """The 16 element values a read+write kernel leaves after ``trials`` trials from initial_values.

    Bit-exact for the add and no-FMA kernels, and for FMA wherever
    fma_exact(); elsewhere FMA is replayed with two roundings and matches
    within rw_tolerance().
    """
    if is_integer(spec.precision):
        return replay_rw_int(spec, trials=trials)
    dtype = NUMPY_DTYPE[spec.precision]
    x = initial_values(dtype)
    a, c = dtype(A), dtype(C)
    k_ops = spec.fma_ops_per_element
    fused = spec.fma and fma_exact(spec.precision)
    seen: dict[bytes, int] = {}
    t = 0
    while t < trials:
        if t % 2 == 0:
            key = x.tobytes()
            if key in seen:  # the state at this trial parity repeats: jump whole cycles ahead
                cycle = t - seen[key]
                t += (trials - t) // cycle * cycle
                seen = {}
                if t >= trials:
                    break
            seen[key] = t
        ct = c if t % 2 == 0 else -c
        if k_ops == 0:
            x = (x + ct).astype(dtype)
        elif fused:
            for _ in range(k_ops):
                x = _fused(x, a, ct, dtype)
        else:
            for _ in range(k_ops):
                x = (x * a).astype(dtype)
                x = (x + ct).astype(dtype)
        t += 1
    return x


def replay_mix(spec: KernelSpec, *, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """(first half's 16 values, second half's 16 values) of a mix kernel after ``trials`` trials (ert.spec.MIXES).

    The first half is the FMA kernel of F FLOPs per element.  The second is,
    for fma+add, F/2 adds of c_t per trial (exact: small dyadic values, so
    every even number of trials returns to the start); for int+float, the
    integer multiply-add of F operations from the float starting values' bits,
    wrapping.  Both exact, bit for bit (the FMA half wherever fma_exact()).
    """
    from ert.spec import MIX_INT

    first = replay_rw(KernelSpec(spec.precision, spec.flops_per_element, True), trials=trials)
    dtype = NUMPY_DTYPE[spec.precision]
    if spec.mix == "fma+add":
        x = initial_values(dtype)
        if trials % 2:
            for _ in range(spec.fma_ops_per_element):
                x = (x + dtype(C)).astype(dtype)
        return first, x
    integer = KernelSpec(MIX_INT[spec.mix], spec.flops_per_element, False)
    return first, replay_rw_int(integer, trials=trials, x0=initial_values(dtype))


def mix_expected_bits(spec: KernelSpec, *, trials: int, width: int, n: int) -> np.ndarray:
    """The bit patterns (unsigned) of a mix kernel's ``n``-element block: halves of each ``width``-element sub-block.

    Element i holds the ``i % 16``-th value of the first half's replay where
    ``i % width < width / 2``, else of the second half's.
    """
    first, second = replay_mix(spec, trials=trials)
    udt = np.uint64 if spec.itemsize == 8 else np.uint32
    i = np.arange(n, dtype=np.int64)
    return np.where(i % width < width // 2, first.view(udt)[i % 16], second.view(udt)[i % 16])


def rw_tolerance(spec: KernelSpec) -> float:
    """Relative tolerance of a read+write check: 0 (bit-exact) unless the replay rounds twice where the kernel fuses."""
    return 0.0 if not spec.fma or fma_exact(spec.precision) else TWO_ROUNDINGS_TOLERANCE


def ro_tolerance(spec: KernelSpec) -> float:
    """Relative tolerance of a load-only sum check."""
    return RO_TOLERANCE[spec.precision]


def relative_errors(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|got - expected| / max(|expected|, 1), in float64; NaN counts as infinite, so a lost or garbage store is caught.

    The backends' on-device checks (``max_rel_error`` in kernels/numba_cpu.py,
    ``ert_check`` in kernels/ert_cuda.cu) compute this same metric in place.
    """
    expected = np.asarray(expected, dtype=np.float64)
    err = np.abs(np.asarray(got, dtype=np.float64) - expected) / np.maximum(np.abs(expected), 1.0)
    err[np.isnan(err)] = np.inf
    return err


def worst(err: np.ndarray) -> tuple[float, int]:
    """(largest error, its index); (0, 0) for no values."""
    if not err.size:
        return 0.0, 0
    i = int(err.argmax())
    return float(err[i]), i


def rw_errors(values: np.ndarray, *, first_element: int, expected16: np.ndarray) -> tuple[float, int]:
    """(largest relative error, its index in ``values``) of a run of elements starting at ``first_element``."""
    idx = (np.arange(values.size, dtype=np.int64) + first_element) % 16
    return worst(relative_errors(values, np.asarray(expected16, dtype=np.float64)[idx]))


def ro_errors(sums: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """(largest relative error, its index) of per-thread load-only sums."""
    return worst(relative_errors(sums, expected))


def verdict(*, error: float, tolerance: float, what: str, got, expected, trials: int,
            count: int | None = None) -> CheckResult:
    """The check's result, in the words every backend uses.

    ``what`` names the worst value ("element 12 of thread 1", "load-only sum
    of thread 3"); ``count``, where known, is how many elements failed.
    """
    if error <= tolerance:  # False for NaN
        return CheckResult(True, f"max rel err {error:.2g}")
    many = f"{count} element(s) differ from the replay; the first, " if count else ""
    return CheckResult(False, f"{many}{what}: {got!r} != replay {expected!r} after {trials} trials "
                              f"(rel err {error:.2g}, tolerance {tolerance:.2g})")
