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

    dropped = [p for p in cfg.precisions if not backend.supports(KernelSpec(p, 1, False))]
    if not dropped:
        return cfg, None
    why = "; ".join(backend.unsupported_reason(p) for p in dropped)
    if len(dropped) == len(cfg.precisions):
        raise ErtError(f"{why}, and nothing else was asked for; choose another backend, device or precision",
                       key="precisions")
    return with_overrides(cfg, precisions=[p for p in cfg.precisions if p not in dropped]), \
        f"{why}: its {', '.join(dropped)} points are skipped"
