"""The numba-cpu reference an OpenCL CPU device is set beside and rated against, measured in a child process.

The measuring side hands ``cpu_reference`` to a backend that wants it
(``ert.backends.CpuReferenceBackend``: the CLI does, as it creates the
backend), so a backend never starts a measurement itself.  It runs
``python -m ert.measure.reference --cpu-reference THREADS`` -- a child, so that
Numba's thread pinning never touches the OpenCL driver's threads -- and reads
the one JSON line it prints.  The kernel is timed through the one measuring
engine, ``ert.measure.timing``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ert.measure import timing


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def cpu_reference(threads: int, *, timeout_seconds: float = 120.0) -> dict:
    """numba-cpu's FP64 FMA GFLOP/s (and the cores' rated values) on this host, measured in a child process.

    Returns {"gflops_per_s": ...} or {"error": "..."}; never raises.
    """
    cmd = [sys.executable, "-m", "ert.measure.reference", "--cpu-reference", str(max(1, threads))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_seconds)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return {"error": f"numba-cpu reference failed: {tail[:200]}"}
        return json.loads(lines[-1])
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"error": f"numba-cpu reference failed: {type(exc).__name__}: {_short(exc)}"}


def measure_cpu_reference(threads: int) -> dict:
    """FP64, 32 FMAs per element, an L1-sized block per thread: the numba-cpu compute peak (in the child)."""
    from ert.backends import REGISTRY, RatedBackend
    from ert.spec import KernelSpec

    status = REGISTRY.status("numba-cpu")
    if not status.available:
        return {"error": f"numba-cpu is not available: {status.reason}"}
    backend = REGISTRY.create("numba-cpu", threads=threads)
    spec = KernelSpec("fp64", 64, True, "rw")
    per_thread = 16 * 1024 // spec.itemsize
    backend.prepare(spec, elements_per_thread=per_thread)
    trials, _ = timing.calibrate(backend.run, min_seconds=0.02, jump=False)
    got = timing.sample(backend.run, trials, samples=5, noise_threshold=float("inf"), max_remeasure=0)
    seconds = min(got.seconds)  # a shared host only ever slows it down
    if not backend.check().ok:
        return {"error": "numba-cpu reference kernel failed its check"}
    gflops = spec.gflops_per_s(elements=per_thread * threads, trials=trials, seconds=seconds)
    out = {"backend": "numba-cpu", "kernel": spec.key, "threads": threads, "gflops_per_s": round(gflops, 2)}
    if isinstance(backend, RatedBackend):
        # What these cores can physically do (ert.hardware.cpu's table x the measured clock):
        # an OpenCL CPU device runs on the same cores, so its ceilings are rated against it too.
        out["rated"] = backend.rated()
    backend.close()
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--cpu-reference":
        print(json.dumps(measure_cpu_reference(int(sys.argv[2]))))
    else:
        print("usage: python -m ert.measure.reference --cpu-reference THREADS", file=sys.stderr)
        sys.exit(2)
