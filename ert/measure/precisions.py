"""The precision policy: a run measures the precisions its backend can run, and says which it skipped."""

from __future__ import annotations

from ert.errors import ErtError
from ert.backends import MixBackend, TensorBackend
from ert.records.warning_codes import warn


def supported_precisions(cfg, backend):
    """(config without the precisions the backend cannot run, a warning or None); ErtError if none is left.

    The one place unsupported precisions are handled, for every backend; each
    backend says why (``unsupported_reason``, e.g. a missing OpenCL extension).
    """
    from ert.config.schema import with_overrides
    from ert.spec import KernelSpec

    cfg, extra = _kernels_supported(cfg, backend)
    cfg, tensor_warning = _tensor_supported(cfg, backend)
    extra = "; ".join(w for w in (extra, tensor_warning) if w) or None
    dropped = [p for p in cfg.precisions if not backend.supports(KernelSpec(p, 1, False))]
    if not dropped:
        return cfg, warn("skipped", extra) if extra else None
    why = "; ".join(backend.unsupported_reason(p) for p in dropped)
    if len(dropped) == len(cfg.precisions):
        raise ErtError(f"{why}, and nothing else was asked for; choose another backend, device or precision",
                       key="precisions")
    note = f"{why}: its {', '.join(dropped)} points are skipped"
    return with_overrides(cfg, precisions=[p for p in cfg.precisions if p not in dropped]), \
        warn("skipped", "; ".join(w for w in (extra, note) if w))


def _kernels_supported(cfg, backend):
    """(config without the mixes and integer add kernels the backend cannot run, a warning or None)."""
    from ert.config.schema import with_overrides
    from ert.spec import KernelSpec

    notes, changes = [], {}
    if cfg.mixes and not isinstance(backend, MixBackend):
        notes.append(f"backend {backend.name} runs no measured mixes: mixes {', '.join(cfg.mixes)} are skipped")
        changes["mixes"] = []
    ints = [p for p in cfg.precisions if p in ("int32", "int64") and backend.supports(KernelSpec(p, 1, False))]
    if "add" in cfg.int_ops and ints and not all(backend.supports(KernelSpec(p, 2, False, op="add")) for p in ints):
        notes.append(f"backend {backend.name} has no integer add-only kernel: int_ops add is skipped")
        keep = [o for o in cfg.int_ops if o != "add"] or ["madd"]
        changes["int_ops"] = keep
    if not changes:
        return cfg, None
    return with_overrides(cfg, **changes), "; ".join(notes)


def _tensor_supported(cfg, backend):
    """(config without the tensor types this GPU lacks, a warning or None); ErtError on a backend with no tensor cores."""
    from ert.config.schema import with_overrides
    from ert.measure.plan import tensor_specs

    if not cfg.tensor:
        return cfg, None
    if not isinstance(backend, TensorBackend):
        raise ErtError(f"the {backend.name} backend has no tensor cores: tensor roofs are measured by the cuda "
                       f"backend only (remove `tensor`, or use backend: cuda)", key="tensor")
    variants_of = getattr(backend, "tensor_variants", None)
    if variants_of is not None:  # a type is kept where the GPU measures any kernel of it (wgmma or mma.sync)
        dropped = [s.precision for s in tensor_specs(cfg) if not any(backend.supports(v) for v in variants_of(s))]
    else:
        dropped = [s.precision for s in tensor_specs(cfg) if not backend.supports(s)]
    if not dropped:
        return cfg, None
    why = "; ".join(backend.unsupported_reason(f"{p} tensor") for p in dropped)
    if len(dropped) == len(cfg.tensor) and not cfg.precisions:  # a tensor-only run with nothing left to measure
        raise ErtError(f"{why}, and nothing else was asked for (a tensor-only run: precisions is empty)",
                       key="tensor")
    return with_overrides(cfg, tensor=[p for p in cfg.tensor if p not in dropped]), \
        f"{why}: its {', '.join(dropped)} tensor points are skipped"
