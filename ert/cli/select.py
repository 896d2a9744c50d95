"""Which backend a run uses and how: ``auto`` resolved, its host thread count, and ``--device`` applied."""

from __future__ import annotations

from ert.errors import ErtError


def resolve(config, *, source, backend_flag: bool, placement=None):
    """Concrete backend and thread count, so the saved config reproduces the run.

    Under MPI, ``threads: auto`` is the cores this rank was given (placement).
    """
    from ert.hardware import hwinfo
    from ert.backends import REGISTRY
    from ert.config.schema import with_overrides

    backend = config.backend
    if backend == "auto":
        backend = REGISTRY.best_available()
    else:
        try:
            REGISTRY.entry(backend)
        except ErtError as exc:  # name where the bad value came from
            raise ErtError(exc.message, path=None if backend_flag else source,
                           key="--backend" if backend_flag else "backend") from None
    threads = config.threads
    if not REGISTRY.entry(backend).host_threads:
        if config.thread_counts:
            raise ErtError(f"thread scaling measures CPU threads; backend '{backend}' drives its device from "
                           f"one host thread per rank (scale with ranks instead)", key="--threads")
        threads = 1  # a device backend drives its device from one host thread per rank
    elif threads == "auto":
        threads = placement.threads if placement else max(1, hwinfo.usable_cpus())
    return with_overrides(config, backend=backend, threads=threads)


def with_device(cfg, selector: str):
    """The config with ``--device`` applied to its backend's options."""
    from ert.config.schema import from_dict

    data = cfg.to_dict()
    if cfg.backend == "opencl":
        from ert.backends.opencl_devices import parse_selector

        data["opencl"].update(parse_selector(selector))
    elif cfg.backend == "cuda":
        if not selector.strip().isdigit():
            raise ErtError(f"the cuda backend takes a GPU index, not {selector!r}", key="--device")
        data["cuda"]["device"] = int(selector)
    else:
        raise ErtError(f"applies to the opencl and cuda backends, not '{cfg.backend}'", key="--device")
    return from_dict(data, source="command line")
