"""The numba-cpu reference an OpenCL CPU device is set beside, measured in a child process.

``ert.backends.opencl_devices.cpu_reference`` runs ``python -m ert.measure.reference
--cpu-reference THREADS`` (a child, so that Numba's thread pinning never touches
the OpenCL driver's threads) and reads the one JSON line it prints. The kernel
is timed through the one measuring engine, ``ert.measure.timing``.
"""

from __future__ import annotations

import json
import sys

from ert.measure import timing


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def measure_cpu_reference(threads: int) -> dict:
    """FP64, 32 FMAs per element, an L1-sized block per thread: the numba-cpu compute peak."""
    from ert.backends import REGISTRY
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
    try:
        # What these cores can physically do (ert.hardware.cpu's table x the measured clock):
        # an OpenCL CPU device runs on the same cores, so its ceilings are rated against it too.
        out["rated"] = backend.rated()
    except Exception as exc:  # noqa: BLE001 - a reference without a rated value is still a reference
        out["rated_error"] = f"{type(exc).__name__}: {_short(exc)}"
    backend.close()
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--cpu-reference":
        print(json.dumps(measure_cpu_reference(int(sys.argv[2]))))
    else:
        print("usage: python -m ert.measure.reference --cpu-reference THREADS", file=sys.stderr)
        sys.exit(2)
