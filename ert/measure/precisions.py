"""The precision policy: a run measures the precisions its backend can run, and says which it skipped."""

from __future__ import annotations

from ert.errors import ErtError


def supported_precisions(cfg, backend):
    """(config without the precisions the backend cannot run, a warning or None); ErtError if none is left.

    The one place unsupported precisions are handled, for every backend; each
    backend says why (``unsupported_reason``, e.g. a missing OpenCL extension).
    """
    from ert.config import with_overrides
    from ert.spec import KernelSpec

    cfg, tensor_warning = _tensor_supported(cfg, backend)
    dropped = [p for p in cfg.precisions if not backend.supports(KernelSpec(p, 1, False))]
    if not dropped:
        return cfg, tensor_warning
    why = "; ".join(backend.unsupported_reason(p) for p in dropped)
    if len(dropped) == len(cfg.precisions):
        raise ErtError(f"{why}, and nothing else was asked for; choose another backend, device or precision",
                       key="precisions")
    warning = f"{why}: its {', '.join(dropped)} points are skipped"
    return with_overrides(cfg, precisions=[p for p in cfg.precisions if p not in dropped]), \
        "; ".join(w for w in (warning, tensor_warning) if w)


def _tensor_supported(cfg, backend):
    """(config without the tensor types this GPU lacks, a warning or None); ErtError on a backend with no tensor cores."""
    from ert.config import with_overrides
    from ert.measure.plan import tensor_specs

    if not cfg.tensor:
        return cfg, None
    if getattr(backend, "tensor_plan", None) is None:
        raise ErtError(f"the {backend.name} backend has no tensor cores: tensor roofs are measured by the cuda "
                       f"backend only (remove `tensor`, or use backend: cuda)", key="tensor")
    dropped = [s.precision for s in tensor_specs(cfg) if not backend.supports(s)]
    if not dropped:
        return cfg, None
    why = "; ".join(backend.unsupported_reason(f"{p} tensor") for p in dropped)
    return with_overrides(cfg, tensor=[p for p in cfg.tensor if p not in dropped]), \
        f"{why}: its {', '.join(dropped)} tensor points are skipped"
