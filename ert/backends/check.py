"""The host replay of ERT's read+write recurrence: what every element must hold after N trials.

Every backend's kernel starts element i at ``initial_values()[i % 16]`` and,
per trial t, runs it through ``x = x*A + c_t`` (``fma_ops`` times) or
``x = x + c_t`` (the single add), with ``c_t = +C`` on even and ``-C`` on odd
trials.  A < 1 damps the values into a period-2 cycle, so the replay stops
once it sees one and decides the rest by parity: its cost is bounded whatever
the trial count.  NumPy has no fused multiply-add, so the replay is bit-exact
for the add and no-FMA kernels and within a few ulp of the FMA kernels.
"""

from __future__ import annotations

import numpy as np

# Dyadic, so the add form is exact in every precision.
A = 0.9375
C = 0.0625


def initial_values(dtype) -> np.ndarray:
    """The 16 distinct starting values, element i getting the (i % 16)-th."""
    return (0.5 + np.arange(16) * 0.0625).astype(dtype)


def replay_rw(*, dtype, fma_ops: int, trials: int, a: float = A, c: float = C) -> np.ndarray:
    """The 16 values after ``trials`` trials (``fma_ops`` = 0: the single add)."""
    dtype = np.dtype(dtype)
    x = initial_values(dtype)
    a_, c_ = dtype.type(a), dtype.type(c)
    history: list[np.ndarray] = []
    for t in range(trials):
        ct = c_ if t % 2 == 0 else -c_
        if fma_ops == 0:
            x = x + ct
        else:
            for _ in range(fma_ops):
                x = x * a_ + ct
        history.append(x)
        if len(history) >= 3 and np.array_equal(history[-1], history[-3]):
            # Period 2 reached: the state after `trials` trials has the same parity.
            return history[-1] if (trials - 1 - t) % 2 == 0 else history[-2]
        if len(history) > 3:
            history.pop(0)
    return x
