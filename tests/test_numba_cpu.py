"""The numba-cpu backend's host logic that compiles nothing (ert/backends/numba_cpu.py, numba_codegen.py): its
aligned buffers and the Numba settings it leaves to the user; the kernels themselves are tests/test_numba_kernels.py (slow)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ert.backends import numba_codegen
from ert.backends.numba_cpu import ALIGN_BYTES, _aligned_empty


def test_configure_numba_env_keeps_a_user_setting(monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2")
    assert numba_codegen.configure_numba_env() == {}
    assert os.environ["NUMBA_CPU_FEATURES"] == "+avx2"


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 4099])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_aligned_empty(n, dtype):
    arrays = [_aligned_empty(n, dtype) for _ in range(8)]
    for arr in arrays:
        assert arr.ctypes.data % ALIGN_BYTES == 0
        assert arr.size == n and arr.dtype == dtype
