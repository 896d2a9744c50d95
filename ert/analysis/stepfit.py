"""Piecewise-constant fit of a noisy series: its noise, the L1 cost of every stretch, the optimal partition."""

from __future__ import annotations

import heapq
import math

import numpy as np

# Scale from a median absolute deviation to a Gaussian sigma.
_MAD_TO_SIGMA = 1.4826


def log_noise(y: np.ndarray) -> float:
    """A sigma of the point-to-point noise of ``y`` (logs, in sweep order): MAD of successive differences / sqrt(2).

    Level steps and isolated outliers are a minority of the differences and
    barely move it.  0.0 for fewer than 3 values.
    """
    if y.size < 3:
        return 0.0
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return _MAD_TO_SIGMA * mad / math.sqrt(2.0)


def median_cost_table(y: np.ndarray) -> np.ndarray:
    """cost[i, j] = sum |y[i:j] - median(y[i:j])| for all 0 <= i < j <= n (inf elsewhere).

    Two heaps per start index keep the running median and the sums of the
    lower and upper halves, so the whole table costs O(n^2 log n).
    """
    n = y.size
    cost = np.full((n + 1, n + 1), np.inf)
    push, pop = heapq.heappush, heapq.heappop
    values = [float(v) for v in y]
    for i in range(n):
        lower: list[float] = []  # max-heap of the lower half, stored negated
        upper: list[float] = []  # min-heap of the upper half
        n_lower = n_upper = 0
        sum_lower = sum_upper = 0.0
        row = []
        for x in values[i:]:
            if n_lower and x > -lower[0]:
                push(upper, x)
                sum_upper += x
                n_upper += 1
            else:
                push(lower, -x)
                sum_lower += x
                n_lower += 1
            # Keep n_lower == n_upper or n_upper + 1, so the median is -lower[0].
            if n_lower > n_upper + 1:
                moved = -pop(lower)
                push(upper, moved)
                sum_lower -= moved
                sum_upper += moved
                n_lower -= 1
                n_upper += 1
            elif n_upper > n_lower:
                moved = pop(upper)
                push(lower, -moved)
                sum_upper -= moved
                sum_lower += moved
                n_upper -= 1
                n_lower += 1
            med = -lower[0]
            row.append((sum_upper - med * n_upper) + (med * n_lower - sum_lower))
        cost[i, i + 1 :] = row
    return cost


def optimal_partition(cost: np.ndarray, penalty: float) -> list[tuple[int, int]]:
    """Optimal partition into constant segments, as [(start, end)] with end exclusive.

    Minimises total L1 misfit plus ``penalty`` per segment by dynamic
    programming over all split points (optimal partitioning, O(n^2)).
    """
    n = cost.shape[0] - 1
    best = np.zeros(n + 1)
    back = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        total = best[:j] + cost[:j, j]
        back[j] = int(np.argmin(total))
        best[j] = total[back[j]] + penalty
    segments = []
    j = n
    while j > 0:
        segments.append((int(back[j]), j))
        j = int(back[j])
    return segments[::-1]
