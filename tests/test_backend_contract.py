"""The Backend contract, run for real on every registered backend that is available here (others skip with why)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from ert.hardware import hwinfo
from ert.backends import REGISTRY, Backend
from ert.config.schema import from_dict
from ert.spec import ITEMSIZE, KernelSpec

# A config every backend accepts; the OpenCL CPU caveat's numba-cpu reference
# (a child process) is not what these tests are about.
CONFIG = from_dict({"precisions": ["fp64", "fp32"], "opencl": {"cpu_reference": False}})
TRIALS = (1, 2)  # an odd total: the sign of c_t catches a trial run twice or skipped


def _params():
    out = []
    for name in REGISTRY.names():
        status = REGISTRY.status(name)
        marks = [] if status.available else [pytest.mark.skip(reason=f"{name}: {status.reason}")]
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.fixture(scope="module", params=_params())
def backend(request):
    name = request.param
    threads = hwinfo.usable_cpus() if REGISTRY.entry(name).host_threads else 1
    made = REGISTRY.create(name, threads=threads, options=CONFIG.backend_options(name), local_rank=0, local_size=1)
    yield made
    made.close()


def _elements(backend, spec: KernelSpec, wss_bytes: int) -> int:
    """Elements per thread for about ``wss_bytes`` in total, a whole number of granules."""
    granule = backend.granule_elements(spec)
    per_thread = wss_bytes // spec.itemsize // backend.threads
    return max(granule, per_thread // granule * granule)


def _prepare(backend, spec: KernelSpec, n: int) -> None:
    options = backend.launches(spec, n)
    assert options, f"{backend.name} lists no launch geometry for {spec.key} at {n} elements"
    backend.prepare(spec, elements_per_thread=n, launch=options[0])


def _protocol_members() -> set[str]:
    members = {m for m in vars(Backend) if not m.startswith("_")}
    return members | set(Backend.__annotations__)


@pytest.mark.parametrize("name", REGISTRY.names())
def test_every_backend_class_has_every_protocol_member(name):
    """Without its runtime too: a backend that lacks a member the driver or CLI uses fails here, not on a GPU."""
    module = importlib.import_module(REGISTRY.entry(name).module)
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and c.__module__ == module.__name__ and getattr(c, "name", None) == name]
    assert len(classes) == 1, classes
    cls = classes[0]
    # Instance attributes set in __init__ (threads on numba-cpu, device_id on GPUs) are read from its source.
    source = inspect.getsource(cls)
    missing = [m for m in sorted(_protocol_members())
               if not hasattr(cls, m) and f"self.{m} =" not in source]
    assert not missing, f"{cls.__name__} lacks {missing}"


KERNELS = [KernelSpec(p, f, fma, access) for p in ITEMSIZE
           for f, fma, access in ((1, False, "rw"), (8, True, "rw"), (8, False, "rw"), (1, False, "ro"))
           if not (fma and p.startswith("int"))]  # integers have no fused form
# The integer add roof (schema 1.4): K dependent adds per element.
KERNELS += [KernelSpec(p, 8, False, op="add") for p in ITEMSIZE if p.startswith("int")]


@pytest.mark.parametrize("spec", KERNELS, ids=lambda s: s.key)
def test_round_trip_is_checked_against_the_host_replay(backend, spec):
    if not backend.supports(spec):
        pytest.skip(f"{backend.name} does not run {spec.precision} here")
    n = _elements(backend, spec, 48 * 1024)
    _prepare(backend, spec, n)
    seconds = [backend.run(t) for t in TRIALS]
    assert all(s > 0 for s in seconds), seconds
    result = backend.check()
    assert result.ok, f"{spec.key}: {result.detail}"
    backend.corrupt_for_test()
    damaged = backend.check()
    assert not damaged.ok, f"{spec.key}: check() passed a corrupted output ({damaged.detail})"


def test_unsupported_sizes_are_refused(backend):
    spec = KernelSpec("fp32", 1, False)
    granule = backend.granule_elements(spec)
    assert granule >= 1
    if granule > 1:
        with pytest.raises(ValueError):
            backend.prepare(spec, elements_per_thread=granule + 1)


def test_seconds_scale_with_trials(backend):
    spec = KernelSpec("fp32", 1, False)
    _prepare(backend, spec, _elements(backend, spec, 512 * 1024))
    backend.run(4)  # wake the thread pool
    few, many = [], []
    for _ in range(5):  # interleaved, fastest of each: a stall on the shared host hits one sample, not all
        few.append(backend.run(8))
        many.append(backend.run(128))
    few, many = min(few), min(many)
    # 16x the work: launch or fork overhead may eat some of it, never most.
    assert many > 4 * few, (few, many)
    assert backend.check().ok


def test_describe_names_the_backend_and_device(backend):
    info = backend.describe()
    assert info["backend"] == backend.name
    assert isinstance(info.get("device"), str) and info["device"]


def test_optional_capabilities_are_declared_protocols_each_backend_has_or_lacks():
    """Links, tensor cores and measured mixes: a backend has a capability exactly when it says so."""
    from ert.backends import LinkBackend, MixBackend, TensorBackend
    from ert.backends.cuda import CudaBackend
    from ert.backends.numba_cpu import NumbaCpuBackend
    from ert.backends.opencl import OpenCLBackend

    has = {cls.__name__: {p.__name__ for p in (LinkBackend, TensorBackend, MixBackend) if issubclass(cls, p)}
           for cls in (NumbaCpuBackend, OpenCLBackend, CudaBackend)}
    assert has == {"NumbaCpuBackend": {"MixBackend"}, "OpenCLBackend": {"LinkBackend"},
                   "CudaBackend": {"LinkBackend", "TensorBackend"}}
