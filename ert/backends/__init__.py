"""The Backend protocol and the registry of every backend, loadable or not (with the reason)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

from ert.backends.check import CheckResult
from ert.errors import ErtError
from ert.spec import KernelSpec


class Backend(Protocol):
    """One runtime (Numba CPU, OpenCL, CUDA).  Only backends know their runtime.

    Contract: every call blocks until the device is idle again.  ``run`` returns
    the seconds of its timed region only (no compilation, no allocation), and
    backends never compute GB/s or GFLOP/s: the analysis does, from KernelSpec.
    Every member below is used by the driver or the CLI; every backend has each.
    """

    name: str
    # Host threads per rank that run the kernel: the config's `threads` on a
    # CPU backend, 1 on a device backend (one host thread drives the device).
    # Never threads per block or work-items: those are launch geometry.
    threads: int
    # What identifies the device this rank drives, so that ranks sharing one
    # are found (a GPU's UUID, "opencl:P:D"); None where ranks own their cores.
    device_id: str | None

    @property
    def warnings(self) -> list[str]:
        """What a reader of the ceilings must know about this backend on this rank (a CPU measured
        through OpenCL, a write-through L1, no-FMA code that fused anyway).  The CLI gathers every
        rank's into the metadata's ``rank_warnings``, from which the analysis copies them into the
        ceilings' ``warnings``; call it after planning (programs are built by then)."""

    def describe(self) -> dict:
        """Metadata about the device and runtime (model, threads, versions, caches, rated ceilings)."""

    def granule_elements(self, spec: KernelSpec) -> int:
        """Each thread's element count must be a multiple of this."""

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        """The launch geometries (chains, blocks x threads, global x local) measured at one working set."""

    def supports(self, spec: KernelSpec) -> bool:
        """Whether this backend and device run ``spec``."""

    def unsupported_reason(self, precision: str) -> str:
        """Why ``precision`` is not supported (the run skips it, with this in a warning)."""

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        """Compile (untimed, cached), allocate and initialise buffers for one point.

        ``launch`` is one of ``launches(spec, elements_per_thread)``; None means the first.
        """

    def run(self, trials: int) -> float:
        """Run ``trials`` trials of the prepared kernel; return the timed seconds."""

    def check(self) -> CheckResult:
        """Check the output of everything run since ``prepare`` against the host replay (ert.backends.check)."""

    def point_info(self) -> dict:
        """What the device did during the point just measured (occupancy, clocks), for its raw record; {} if nothing."""

    def corrupt_for_test(self) -> None:
        """Test-only: damage one value that check() examines, so the contract test sees check() fail."""

    def close(self) -> None:
        """Release buffers."""


class Transfer(Protocol):
    """One (level, variant) of a device's links or peers: moves and times transfers of a given size.

    ``prepare(nbytes)`` readies buffers (untimed; the destination poisoned, so
    the check sees this size's copies); ``time(count)`` runs ``count``
    transfers back to back and returns the seconds of the timed region (it
    blocks until they are done); ``check()`` compares what arrived with the
    source: (ok, text). The stage in ``ert.measure.transfers`` calibrates,
    samples and records them (``measure_transfer``, which also serves the
    network's levels, ``ert.measure.network``): a backend only hands them over.
    """

    level: str
    kind: str
    variant: str
    method: str
    directions: int          # 2 for a bidirectional transfer (moved_bytes = 2 x bytes), else 1
    extra: dict              # optional record keys: transport, pair, peer_access, devices ...

    def prepare(self, nbytes: int) -> None: ...

    def time(self, count: int) -> float: ...

    def check(self) -> tuple[bool, str]: ...


@runtime_checkable
class LinkBackend(Protocol):
    """The links capability (a device backend: CUDA, OpenCL); numba-cpu has none (the host is the host).

    ``link_transfers(max_bytes)``: one ``Transfer`` per (level, variant), with
    buffers for sizes up to ``max_bytes``, released by ``close()``.
    ``link_rated(reference)``: level -> {"gbytes_per_s": value or None,
    "derivation": text}; ``reference()`` measures this host's memory-copy rate
    (``ert.measure.transfers.host_copy_reference``), which a CPU device's
    "link" is set beside: a backend calls it only if it needs it.
    """

    def link_transfers(self, max_bytes: int) -> list[Transfer]: ...

    def link_rated(self, reference: Callable[[], dict] | None = None) -> dict[str, dict]: ...


@runtime_checkable
class RatedBackend(Protocol):
    """The rated capability of a CPU backend (numba-cpu): what the cores it runs on can physically do
    (``ert.hardware.cpu``'s table x the clock it measures), with the derivation.  An OpenCL CPU device
    is rated against it (``ert.measure.reference``)."""

    def rated(self) -> dict: ...


@runtime_checkable
class CpuReferenceBackend(Protocol):
    """A device that runs on the host's own cores (OpenCL's CPU device): its numbers are set beside
    numba-cpu's FP64 FMA peak and rated against the host CPU.  ``use_cpu_reference(measure)`` hands in
    ``measure(threads) -> dict`` ({"gflops_per_s", "rated", ...} or {"error": ...}), run by the measuring
    side (``ert.measure.reference.cpu_reference``); the backend calls it at most once, only where it needs
    it, as ``LinkBackend.link_rated(reference)`` does.  A backend never starts a measurement itself."""

    def use_cpu_reference(self, measure: Callable[[int], dict]) -> None: ...


@runtime_checkable
class TensorBackend(Protocol):
    """The tensor-core capability (cuda): the kernels a config's tensor type becomes on this GPU (wgmma and
    mma.sync on sm_90), and MMAs per trial, accumulator bytes and launches of one tensor kernel."""

    def tensor_variants(self, spec: KernelSpec) -> list[KernelSpec]: ...

    def tensor_plan(self, spec: KernelSpec) -> tuple[int, int, list[dict]]: ...


@runtime_checkable
class MixBackend(Protocol):
    """The measured-mix capability (numba-cpu): whether one of ert.spec.MIXES runs here."""

    def supports_mix(self, mix: str) -> bool: ...


def close_attr(owner, attr: str) -> None:
    """``owner.attr.close()`` where it holds something (a link sweep's buffers), then None."""
    held = getattr(owner, attr, None)
    if held is not None:
        held.close()
        setattr(owner, attr, None)


def grow_buffer(owner, attr: str, *, need_bytes: int, nbytes, allocate, release=None):
    """``owner.attr`` where it holds ``need_bytes`` already, else a new allocation stored there.

    Backends keep one buffer across points and the largest working sets fill
    most of the memory, so the old buffer is dropped (``release``d where
    dropping the reference does not free it) before the new one is allocated.
    """
    current = getattr(owner, attr)
    if current is not None and nbytes(current) >= need_bytes:
        return current
    setattr(owner, attr, None)
    if current is not None and release is not None:
        release(current)
    del current
    setattr(owner, attr, allocate(need_bytes))
    return getattr(owner, attr)


@dataclass(frozen=True)
class BackendEntry:
    name: str
    module: str
    summary: str
    # True where the config's `threads` means host threads that run the kernel
    # (CPU backends); device backends use one host thread per rank.
    host_threads: bool = True


@dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    reason: str = ""
    detail: dict = field(default_factory=dict)


class Registry:
    """Knows every backend by name; loading one is deferred until it is asked for."""

    def __init__(self, entries: list[BackendEntry]):
        self._entries = {e.name: e for e in entries}

    def names(self) -> list[str]:
        return list(self._entries)

    def entry(self, name: str) -> BackendEntry:
        if name not in self._entries:
            known = ", ".join(self._entries)
            raise ErtError(f"unknown backend '{name}' (known: {known})", key="backend")
        return self._entries[name]

    def _module(self, name: str):
        return importlib.import_module(self.entry(name).module)

    def status(self, name: str) -> BackendStatus:
        """Available or not, and why; never raises for a backend that fails to load."""
        self.entry(name)
        try:
            module = self._module(name)
            ok, reason, detail = module.probe()
        except Exception as exc:  # a backend that cannot import is still listed, with why
            return BackendStatus(name, False, f"cannot load: {type(exc).__name__}: {exc}".strip())
        return BackendStatus(name, bool(ok), reason, detail)

    def best_available(self) -> str:
        """The first available backend in registry order (most capable first).

        A device backend whose probe reports ``accelerators: 0`` in its detail
        (OpenCL seeing only a CPU device) is passed over while a later backend
        is available: the CPU backend measures a CPU better.  One whose module
        says at no cost that the machine has no accelerator for it
        (``no_accelerators()``: OpenCL where no GPU or accelerator device node
        exists) is not probed unless no later backend is available (OpenCL's
        probe builds a kernel on every device: 0.3 s of a bare run's first line).
        """
        reasons, fallback, unprobed = [], None, []
        for name, entry in self._entries.items():
            if not entry.host_threads and self._no_accelerators(name):
                unprobed.append(name)
                continue
            st = self.status(name)
            if st.available:
                if entry.host_threads or st.detail.get("accelerators", 1):
                    return name
                fallback = fallback or name
                continue
            reasons.append(f"{name}: {st.reason}")
        for name in unprobed:
            st = self.status(name)
            if st.available:
                fallback = fallback or name
            else:
                reasons.append(f"{name}: {st.reason}")
        if fallback:
            return fallback
        raise ErtError("no backend is available (" + "; ".join(reasons) + ")", key="backend")

    def _no_accelerators(self, name: str) -> bool:
        try:
            check = getattr(self._module(name), "no_accelerators", None)
            return bool(check and check())
        except Exception:  # a backend that cannot load: its probe says why
            return False

    def create(self, name: str, **options) -> Backend:
        """The backend object.  The keywords every backend's create() accepts (and may ignore), and no
        others (a misspelt one is a TypeError, never silently dropped):
        ``threads`` (host threads per rank), ``options`` (its own block of the config, e.g.
        ``RunConfig.opencl``: a backend gets the values it needs, never the whole config),
        ``local_rank`` and ``local_size`` (this rank's index and the rank count on its node).
        """
        st = self.status(name)
        if not st.available:
            raise ErtError(f"backend '{name}' is not available: {st.reason}", key="backend")
        return self._module(name).create(**options)


# Most capable first: a bare ert-run picks the first available one.
REGISTRY = Registry([
    BackendEntry("cuda", "ert.backends.cuda", "NVIDIA GPUs through CuPy", host_threads=False),
    BackendEntry("opencl", "ert.backends.opencl", "OpenCL devices through PyOpenCL (GPUs, accelerators, CPUs)",
                 host_threads=False),
    BackendEntry("numba-cpu", "ert.backends.numba_cpu", "CPU cores through Numba (LLVM), OpenMP-style threads"),
])
