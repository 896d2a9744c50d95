"""The sweep plan: which points to measure, in what order, each with a stable id."""

from __future__ import annotations

from dataclasses import dataclass

from ert.config.schema import RunConfig
from ert.records.rawio import confirm_id
from ert.spec import KernelSpec


@dataclass(frozen=True)
class Point:
    """One measurement: a kernel variant at one working set.

    ``wss_bytes`` is the bytes of the one array summed over all ranks and
    threads; ``elements_per_thread`` is each thread's share, rounded to the
    backend's granule so every block is aligned and whole.
    """

    spec: KernelSpec
    wss_bytes: int
    elements_per_thread: int
    # Launch geometry of accelerator backends, e.g. (("global", 4096), ("local", 256))
    # or (("blocks", 80), ("threads", 256)); None where the backend has no such choice.
    launch: tuple[tuple[str, int], ...] | None = None
    # Threads per rank, set only in a thread-scaling run, where the same
    # kernel and working set is measured once per thread count.
    threads: int | None = None
    # N > 0: the N-th re-measurement of the point (ert.measure.window_search), recorded as a "confirm" record.
    again: int = 0

    @property
    def id(self) -> str:
        base = f"{self.spec.key}-w{self.wss_bytes}"
        if self.launch:
            base += "-" + "-".join(f"{k[0]}{v}" for k, v in self.launch)
        if self.threads is not None:
            base += f"-t{self.threads}"
        if self.again:
            base = confirm_id(base, self.again)
        return base

    def launch_dict(self) -> dict | None:
        return dict(self.launch) if self.launch else None


def working_sets(*, min_bytes: int, max_bytes: int, growth: float, granule_bytes: int) -> list[int]:
    """Geometric working sets from min to max, each a whole number of granules, no repeats.

    The largest set is always included, so the sweep reaches what was asked.
    """
    sizes: list[int] = []
    # The largest whole number of granules within max_bytes (at least one granule).
    top = max(granule_bytes, (max_bytes // granule_bytes) * granule_bytes)
    size = float(min_bytes)
    while size <= max_bytes * (1 + 1e-9):
        # Rounded to the nearest granule, but never past max_bytes.
        rounded = min(top, max(granule_bytes, int(round(size / granule_bytes)) * granule_bytes))
        if not sizes or rounded > sizes[-1]:
            sizes.append(rounded)
        size *= growth
    if sizes[-1] < top:
        sizes.append(top)
    return sizes


def kernel_specs(config: RunConfig) -> list[KernelSpec]:
    """Every kernel variant the config asks for, bandwidth-bound ones first."""
    specs: list[KernelSpec] = []
    from ert.spec import is_integer

    for precision in config.precisions:
        integer = is_integer(precision)  # no load-only kernel, no fused multiply-add
        for access in config.access:
            if access == "ro" and integer:
                continue
            if access == "ro":
                specs.append(KernelSpec(precision, 1, False, "ro"))
                continue
            for flops in config.flops_per_element:
                modes = [False] if flops == 1 or integer else config.fma_modes()
                for fma in modes:
                    if not (integer and flops > 1 and "madd" not in config.int_ops):
                        specs.append(KernelSpec(precision, flops, fma, "rw"))
                if integer and flops > 1 and "add" in config.int_ops:
                    specs.append(KernelSpec(precision, flops, False, "rw", op="add"))
                if precision in ("fp64", "fp32") and flops > 1:
                    for mix in config.mixes:
                        name = "fma+add" if mix == "fma+add" else ("int32+fp32" if precision == "fp32" else
                                                                   "int64+fp64")
                        specs.append(KernelSpec(precision, flops, True, "rw", mix=name))
    return sorted(set(specs), key=lambda s: (s.access != "rw", s.flops_per_element, s.precision != "fp64", not s.fma))


def interleaved(n: int) -> list[int]:
    """A permutation of range(n) in which consecutive entries are far apart.

    Measuring working sets in this order (golden-ratio steps) turns a slow
    spell of the machine, which spans consecutive measurements, into scattered
    single-point outliers that the plateau fit rejects, instead of a run of
    low points that looks like a level.
    """
    golden = (5 ** 0.5 - 1) / 2
    return sorted(range(n), key=lambda i: (i * golden) % 1.0)


def tensor_specs(config: RunConfig, variants_of=None) -> list[KernelSpec]:
    """The tensor-core kernels the config asks for (``tensor``): one mma.sync spec per MMA input type, or, with
    ``variants_of`` (the backend's ``tensor_variants``), the kernels this GPU measures for each type (on sm_90:
    wgmma, then mma.sync; none for a type the GPU only emulates)."""
    from ert.spec import SHAPES

    specs = [KernelSpec(name, SHAPES[name].flops_per_mma, True, "rw", pipe="tensor") for name in config.tensor]
    if variants_of is None:
        return specs
    return [variant for spec in specs for variant in variants_of(spec)]


def plan(config: RunConfig, *, workers: int, granule_elements_of, launches_of=None,
         thread_tag: int | None = None, min_bytes: int | None = None, tensor_of=None,
         tensor_variants_of=None) -> list[Point]:
    """All points, spec by spec, each spec's working sets in interleaved order.

    ``workers`` is threads x ranks (each owns one block); ``granule_elements_of``
    maps a KernelSpec to the backend's per-thread element granule.
    ``launches_of(spec, elements_per_thread)``, given by accelerator backends,
    lists the launch geometries to try at one working set (a list of dicts);
    each becomes its own point, and the analysis keeps the best per working set.
    ``thread_tag`` (thread-scaling runs) goes into every point's id;
    ``min_bytes`` overrides the config's smallest working set.

    Tensor kernels (``config.tensor``) have no working set to sweep: they come
    last, one point per launch geometry, from ``tensor_of(spec)`` (the
    backend's ``tensor_plan``): (MMAs per trial, bytes of the accumulators
    stored, launch geometries), each geometry running the same MMAs;
    ``tensor_variants_of`` (the backend's ``tensor_variants``) expands each
    type into the kernels this GPU measures (wgmma and mma.sync on sm_90).
    """
    points: list[Point] = []
    ws = config.working_set
    for spec in kernel_specs(config):
        granule_bytes = granule_elements_of(spec) * spec.itemsize * workers
        sizes = working_sets(min_bytes=min_bytes or ws.min_bytes, max_bytes=ws.max_bytes,
                             growth=ws.growth, granule_bytes=granule_bytes)
        if spec.flops_per_element > 2 and ws.compute_max_bytes is not None:
            # The same geometric grid, cut: compute points line up with bandwidth points.
            sizes = [s for s in sizes if s <= ws.compute_max_bytes] or sizes[:1]
        for i in interleaved(len(sizes)):
            per_thread = sizes[i] // spec.itemsize // workers
            launches = launches_of(spec, per_thread) if launches_of is not None else [None]
            for launch in launches:
                key = tuple(launch.items()) if launch else None
                points.append(Point(spec, sizes[i], per_thread, key, thread_tag))
    tensors = tensor_specs(config, tensor_variants_of)
    if config.tensor and tensor_of is None:
        from ert.errors import ErtError

        raise ErtError("tensor roofs are measured by the cuda backend only", key="tensor")
    for spec in tensors:
        mmas, out_bytes, launches = tensor_of(spec)
        for launch in launches:
            points.append(Point(spec, out_bytes, mmas, tuple(launch.items()), thread_tag))
    return points
