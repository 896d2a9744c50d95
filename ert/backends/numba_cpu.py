"""Numba CPU backend: runs the ERT kernels of kernels/numba_cpu.py on this rank's cores."""

from __future__ import annotations

import os
import time

from ert.backends import CheckResult
from ert.replay import A, C  # the recurrence's values (see ert/replay.py)
from ert.spec import KernelSpec

NAME = "numba-cpu"
ALIGN_BYTES = 64
DTYPES = {"fp64": "float64", "fp32": "float32"}  # the precisions this backend runs

# Relative tolerance of the replay check, per precision.  The no-FMA and add
# kernels match the replay bit for bit; the FMA kernel rounds once where the
# replay rounds twice, and a < 1 damps those differences to a few ulp.
RW_TOLERANCE = {"fp64": 1e-12, "fp32": 2e-5}
# The load-only sum is reassociated into vector lanes and chunks of RO_CHUNK
# elements, so its rounding differs from an exact sum by up to ~RO_CHUNK ulp.
RO_TOLERANCE = {"fp64": 1e-10, "fp32": 1e-4}


def configure_numba_env(threads: int | None = None) -> dict:
    """Set Numba's environment before it is imported; return what was decided.

    * NUMBA_CPU_FEATURES: the host's features plus ``-prefer-256-bit`` where the
      CPU has AVX-512, or LLVM emits 256-bit vectors on Intel and loses half the
      peak.  A value the user set is left alone.
    * NUMBA_NUM_THREADS: at least the requested thread count (Numba caps
      set_num_threads at its pool size, which defaults to the core count).
    """
    decided = {}
    if "NUMBA_CPU_FEATURES" not in os.environ:
        try:
            import llvmlite.binding as llvm

            features = llvm.get_host_cpu_features().flatten()
        except Exception:  # an unknown host: let Numba choose
            features = ""
        if "+avx512f" in features:
            os.environ["NUMBA_CPU_FEATURES"] = features + ",-prefer-256-bit"
            decided["cpu_features"] = "host,-prefer-256-bit"
    # Pin each thread to its own core (Numba's OpenMP layer honours these), so a
    # thread's block stays in its core's private caches between calls.  Values
    # the user or a job script set are left alone.
    if "OMP_PROC_BIND" not in os.environ and "OMP_PLACES" not in os.environ:
        os.environ["OMP_PROC_BIND"] = "close"
        os.environ["OMP_PLACES"] = "cores"
        decided["pinning"] = "OMP_PROC_BIND=close OMP_PLACES=cores"
    if threads is not None:
        pool = int(os.environ.get("NUMBA_NUM_THREADS", "0") or 0)
        if pool < threads:
            os.environ["NUMBA_NUM_THREADS"] = str(max(threads, os.cpu_count() or 1))
    return decided


def probe():
    """(available, reason, detail) without compiling anything."""
    try:
        import llvmlite
        import numba
    except ImportError as exc:
        return False, f"numba is not installed ({exc})", {}
    return True, "", {"numba": numba.__version__, "llvmlite": llvmlite.__version__}


def create(*, threads: int, **_ignored) -> "NumbaCpuBackend":
    return NumbaCpuBackend(threads=threads)


def _aligned_empty(n_elements: int, dtype):
    import numpy as np

    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n_elements * itemsize + ALIGN_BYTES, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN_BYTES
    return raw[offset:offset + n_elements * itemsize].view(dtype)


class NumbaCpuBackend:
    """The Backend protocol over Numba's parallel loops: one contiguous block per thread."""

    name = NAME

    def __init__(self, *, threads: int):
        if threads < 1:
            raise ValueError("threads must be >= 1")
        configure_numba_env(threads)
        import numba
        import numpy as np

        from ert.kernels import numba_cpu as kernels

        self._np = np
        self._numba = numba
        self._k = kernels
        numba.set_num_threads(threads)
        self.threads = threads
        self._buf = None        # the aligned allocation, grown as needed and reused
        self._spec: KernelSpec | None = None
        self._n = 0
        self._trials_done = 0
        self._ro_out = None

    # -- metadata -------------------------------------------------------------
    def describe(self) -> dict:
        import llvmlite.binding as llvm

        from ert import hwinfo

        return {
            "backend": NAME,
            "device": f"{hwinfo.cpu_model()} ({self.threads} threads)",
            "threads": self.threads,
            "numba_threading_layer": self._threading_layer(),
            "llvm_cpu": llvm.get_host_cpu_name(),
            "numba_cpu_features": os.environ.get("NUMBA_CPU_FEATURES", "host default"),
            "pinning": {k: os.environ.get(k, "") for k in ("OMP_PROC_BIND", "OMP_PLACES")},
            "alignment_bytes": ALIGN_BYTES,
            "granule_bytes": self._k.GRANULE_BYTES,
        }

    def _threading_layer(self) -> str:
        try:
            return self._numba.threading_layer()
        except ValueError:  # no parallel region has run yet
            return os.environ.get("NUMBA_THREADING_LAYER", "default")

    # -- the protocol ----------------------------------------------------------
    def granule_elements(self, spec: KernelSpec) -> int:
        return self._k.GRANULE_BYTES // spec.itemsize

    def supports(self, spec: KernelSpec) -> bool:
        return spec.precision in DTYPES

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        # ``launch`` is for device backends; a CPU thread's share is its whole block.
        if not self.supports(spec):
            raise ValueError(f"{NAME} does not run {spec.precision}")
        granule = self.granule_elements(spec)
        if elements_per_thread < granule or elements_per_thread % granule:
            raise ValueError(f"elements_per_thread must be a multiple of {granule}")
        dtype = self._np.dtype(DTYPES[spec.precision])
        total = elements_per_thread * self.threads
        need = total * dtype.itemsize
        if self._buf is None or self._buf.nbytes < need:
            self._buf = None  # free the old allocation before the new one
            self._buf = _aligned_empty(need // 8 + 1, self._np.float64).view(self._np.uint8)
        buf = self._buf[:need].view(dtype)
        self._spec, self._n, self._trials_done = spec, elements_per_thread, 0
        self._view = buf
        self._k.init_blocks(buf, self.threads, elements_per_thread)
        self._ro_out = self._np.zeros(self.threads, dtype=self._np.float64)
        # Compile or load from cache now, never inside a timed region.  The
        # multiply-add kernels return whether they were built to fuse: a cache
        # entry of the wrong variant would otherwise go unnoticed.
        fused = self._call(0)
        if spec.access == "rw" and spec.flops_per_element > 1 and bool(fused) != spec.fma:
            raise RuntimeError(f"{spec.key}: the loaded kernel was built with fma={bool(fused)}; "
                               f"clear Numba's cache (__pycache__ beside kernels/numba_cpu.py)")

    def _call(self, trials: int):
        spec, k, buf, n, nt = self._spec, self._k, self._view, self._n, self.threads
        a = buf.dtype.type(A)
        c = buf.dtype.type(C)
        if spec.access == "ro":
            return k.ro_sum(buf, nt, n, trials, self._ro_out)
        if spec.flops_per_element == 1:
            return k.rw_add(buf, nt, n, trials, self._trials_done, c)
        kernel = (k.RW_FMA if spec.fma else k.RW_NOFMA)[spec.precision]
        return kernel(buf, nt, n, trials, self._trials_done, spec.fma_ops_per_element, a, c)

    def run(self, trials: int) -> float:
        start = time.perf_counter()
        self._call(trials)
        seconds = time.perf_counter() - start
        self._trials_done += trials
        return seconds

    def check(self) -> CheckResult:
        np = self._np
        spec, buf, n = self._spec, self._view, self._n
        dtype = buf.dtype
        if spec.access == "ro":
            # init_blocks repeats 16 values; n is a whole number of granules, so of 16s.
            block_sum = float(self._k.initial_values(np.float64).sum()) * (n // 16)
            expected = block_sum * self._trials_done
            got = self._ro_out.astype(np.float64)
            err = np.abs(got - expected).max() / max(expected, 1.0)
            if err > RO_TOLERANCE[spec.precision]:
                return CheckResult(False, f"load-only sums {got.tolist()} != replay {expected:.6g} (rel err {err:.2g})")
            return CheckResult(True, f"rel err {err:.2g}")
        expected16 = self._k.replay_rw(dtype=dtype, fma_ops=spec.fma_ops_per_element,
                                       trials=self._trials_done, a=A, c=C)
        worst = np.zeros((self.threads, 2), dtype=np.float64)
        self._k.max_rel_error(buf, self.threads, n, expected16.astype(np.float64), worst)
        t = int(worst[:, 0].argmax())
        err = float(worst[t, 0])
        if not err <= RW_TOLERANCE[spec.precision]:
            i = int(worst[t, 1])
            got = buf[t * n + i]
            return CheckResult(False, f"element {i} of thread {t}: {got!r} != replay "
                                      f"{expected16[i % 16]!r} after {self._trials_done} trials")
        return CheckResult(True, f"max rel err {err:.2g}")

    def corrupt_for_test(self) -> None:
        """Test-only: damage one value that check() examines (an element, or a load-only sum)."""
        if self._spec.access == "ro":
            self._ro_out[0] += 12345.0
        else:
            self._view[self._view.size // 2 + 5] = 3.0

    def close(self) -> None:
        self._buf = None
        self._view = None
