"""Convert an ERT 1.1 config (`KEY value...` lines) into an ert run config, reporting what has no equivalent."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ert.errors import ErtError

ITEMSIZE = {"fp64": 8, "fp32": 4, "fp16": 2}
# Keys of ERT 1.1 that only steer its C build, its shell launch or its gnuplot step: ert compiles
# its own kernels (Numba, OpenCL, CUDA) and is launched by the user, so these have no equivalent.
_BUILD_KEYS = {
    "ERT_DRIVER": "ert has one built-in driver", "ERT_KERNEL": "ert has its own kernels (kernels/)",
    "ERT_CC": "kernels are compiled by Numba/OpenCL/NVRTC, not a C compiler",
    "ERT_CFLAGS": "no C build", "ERT_LD": "no link step", "ERT_LDFLAGS": "no link step",
    "ERT_LDLIBS": "no link step", "ERT_MPI_CFLAGS": "no C build", "ERT_MPI_LDFLAGS": "no link step",
    "ERT_OPENMP_CFLAGS": "no C build", "ERT_OPENMP_LDFLAGS": "no link step",
    "ERT_GPU_CFLAGS": "kernels are compiled at run time for the device found",
    "ERT_GPU_LDFLAGS": "no link step", "ERT_GNUPLOT": "charts come from `ert plot`",
    "ERT_ALIGN": "buffers are always 64-byte aligned",
    "ERT_RUN": "launch ert-run yourself, under mpirun -n N for several ranks",
    "ERT_TRIALS_MIN": "trials are calibrated by doubling until timing.min_seconds",
    "ERT_SYCL": "no SYCL backend", "ERT_SYCL_SIZES": "no SYCL backend",
    "ERT_CODE": "a placeholder of ERT_RUN, not a key",
}
KNOWN_KEYS = set(_BUILD_KEYS) | {
    "ERT_RESULTS", "ERT_MPI", "ERT_OPENMP", "ERT_GPU", "ERT_HIP", "ERT_OCL", "ERT_OCL_SIZES", "ERT_FLOPS",
    "ERT_PRECISION", "ERT_PROCS_THREADS", "ERT_MPI_PROCS", "ERT_OPENMP_THREADS", "ERT_BLOCKS_THREADS",
    "ERT_GPU_BLOCKS", "ERT_GPU_THREADS", "ERT_NUM_EXPERIMENTS", "ERT_MEMORY_MAX", "ERT_WORKING_SET_MIN",
    "ERT_WSS_MULT", "ERT_SPEC_GFLOPS"}


@dataclass
class Conversion:
    """The converted config (a plain dict for YAML) and one line per ERT key that did not carry over exactly."""

    config: dict
    notes: list[str] = field(default_factory=list)


def parse_int_set(text: str, *, path, key: str) -> list[int]:
    """ERT's integer sets: '8', '1,2,4', '1-8', '1,2,6-8' -> sorted unique integers."""
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if low > high:
                    raise ValueError
                values.update(range(low, high + 1))
            else:
                values.add(int(part))
        except ValueError:
            raise ErtError(f"not an integer set (like 1,2,4-8): {text!r}", path=path, key=key) from None
    return sorted(values)


def read_ert_config(text: str, *, path) -> dict[str, tuple[list[str], int]]:
    """KEY -> (value tokens, line number). '#' starts a comment line only (ERT has no mid-line comments)."""
    directives: dict[str, tuple[list[str], int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        key = tokens[0]
        if not key.isupper() or not key.replace("_", "").isalnum():
            raise ErtError(f"not an ERT directive (KEY value...): {line.strip()[:60]!r}", path=path,
                           key=f"line {number}")
        directives[key] = (tokens[1:], number)  # ERT keeps the last occurrence
    if not directives:
        raise ErtError("no ERT directives found (expected lines like 'ERT_FLOPS 1,2,4')", path=path)
    return directives


def convert(text: str, *, path) -> Conversion:
    """Map every ERT key with an equivalent into an ert config; note the others, one line each."""
    d = _Directives(read_ert_config(text, path=path), path)
    notes: list[str] = _unknown_key_notes(d)
    cfg: dict = {"backend": _backend(d, notes), "precisions": _precisions(d)}
    flops = _flops_per_element(d, notes)
    if flops:
        cfg["flops_per_element"] = flops
    cfg["fma"] = "both"
    cfg["access"] = ["rw"]  # ERT's kernel: each element loaded and stored once
    max_bytes = _memory_max(d)
    threads = _threads(d, cfg, notes)
    cfg["working_set"] = {**max_bytes, **_working_set_from(d, cfg["precisions"], threads, notes)}
    experiments = d.first("ERT_NUM_EXPERIMENTS")
    if experiments is not None:
        cfg["timing"] = {"repeats": _int(experiments, path, d.line("ERT_NUM_EXPERIMENTS"))}
    if d.first("ERT_RESULTS"):
        cfg["output_dir"] = d.first("ERT_RESULTS")
    notes += _layout_notes(d)
    if d.gpu and not d.hip:
        cfg["cuda"] = _cuda_section(d.keys, d.ints, d.where, notes)
    if d.ocl:
        cfg["opencl"] = _opencl_section(d.keys, path, d.where, notes)
    notes += _no_equivalent_notes(d)
    return Conversion(config=cfg, notes=notes)


@dataclass
class _Directives:
    """An ERT config's directives (KEY -> (value tokens, line number)) and how its values read."""

    keys: dict[str, tuple[list[str], int]]
    path: object

    def first(self, key: str) -> str | None:
        tokens = self.keys.get(key, ([], 0))[0]
        return tokens[0] if tokens else None

    def line(self, key: str) -> int:
        return self.keys[key][1]

    def where(self, key: str) -> str:
        return f"{key} (line {self.line(key)})"

    def ints(self, key: str) -> list[int] | None:
        value = self.first(key)
        return None if value is None else parse_int_set(value, path=self.path, key=f"line {self.line(key)}")

    def flag(self, key: str) -> bool:
        return self.first(key) == "True"  # ERT's only true spelling

    @property
    def gpu(self) -> bool:
        return self.flag("ERT_GPU")

    @property
    def hip(self) -> bool:
        return self.flag("ERT_HIP")

    @property
    def ocl(self) -> bool:
        return self.flag("ERT_OCL")


def _unknown_key_notes(d: _Directives) -> list[str]:
    return [f"{d.where(key)}: unknown ERT key; ignored" for key in d.keys
            if not key.startswith("ERT_SPEC_GBYTES_") and key not in KNOWN_KEYS]


def _backend(d: _Directives, notes: list[str]) -> str:
    """ERT_GPU (CUDA; with ERT_HIP: none), ERT_OCL or the CPU."""
    for key, what in (("ERT_HIP", "a HIP"), ("ERT_SYCL", "a SYCL")):
        if d.flag(key):
            # Never a CPU run or 'auto' in its place: the config is refused in one line.
            raise ErtError(f"{what} config: it targets a GPU that ert drives through CUDA/OpenCL only; write a "
                           f"config with backend: cuda or opencl for that GPU", path=d.path, key=d.where(key))
    if d.gpu:
        return "cuda"
    if d.ocl:
        return "opencl"
    return "numba-cpu"


def _precisions(d: _Directives) -> list[str]:
    """ERT_PRECISION (FP16, FP32, FP64; default FP64) as ert's names."""
    if not d.first("ERT_PRECISION"):
        return ["fp64"]
    precisions = []
    for token in d.first("ERT_PRECISION").split(","):
        name = token.strip().lower()
        if name not in ITEMSIZE:
            raise ErtError(f"unknown precision {token!r} (FP16, FP32, FP64)", path=d.path,
                           key=f"line {d.line('ERT_PRECISION')}")
        precisions.append(name)
    return precisions


def _flops_per_element(d: _Directives, notes: list[str]) -> list[int] | None:
    """ERT_FLOPS without the counts ert does not sweep (powers of two from 1 to 1024), noted."""
    flops = d.ints("ERT_FLOPS")
    if flops is None:
        return None
    kept = [f for f in flops if 1 <= f <= 1024 and f & (f - 1) == 0]
    dropped = [f for f in flops if f not in kept]
    if dropped:
        notes.append(f"{d.where('ERT_FLOPS')}: {', '.join(map(str, dropped))} dropped: ert sweeps powers of "
                     f"two from 1 to 1024 FLOPs per element")
    return kept


def layouts(d: _Directives) -> list[tuple[int, int]]:
    """The (ranks, threads) layouts ERT runs for a CPU config: with MPI and OpenMP both on, each ERT_MPI_PROCS x
    ERT_OPENMP_THREADS whose product is in ERT_PROCS_THREADS (every one where that key is absent); with one of them,
    each of its counts; with neither, one rank of one thread."""
    mpi, openmp = d.flag("ERT_MPI"), d.flag("ERT_OPENMP")
    procs = (d.ints("ERT_MPI_PROCS") or [1]) if mpi else [1]
    threads = (d.ints("ERT_OPENMP_THREADS") or [1]) if openmp else [1]
    totals = d.ints("ERT_PROCS_THREADS") if mpi and openmp else None
    return [(p, t) for p in procs for t in threads if totals is None or p * t in totals]


def _threads(d: _Directives, cfg: dict, notes: list[str]) -> int | None:
    """Sets ``threads`` (and ``thread_counts`` for a sweep) of a CPU run in ``cfg``; the threads, or None.

    The thread counts are those of the layouts ERT runs (``layouts``), swept in one run of the launcher's ranks
    (thread scaling): ERT's ``ERT_OPENMP_THREADS 1-256`` beside ``ERT_PROCS_THREADS 256`` and ``ERT_MPI_PROCS
    1,4,16,64`` runs 4 layouts, never 256 thread counts."""
    if d.gpu or d.ocl:
        return None
    if not d.flag("ERT_OPENMP"):
        cfg["threads"] = 1  # ERT without OpenMP runs one thread per process
        return 1
    ran = layouts(d)
    counts = sorted({t for _, t in ran})
    if not counts:
        counts = d.ints("ERT_OPENMP_THREADS") or [1]
        notes.append(f"{d.where('ERT_PROCS_THREADS')}: no ERT_MPI_PROCS x ERT_OPENMP_THREADS product is in it, so "
                     f"ERT runs no layout of this config; thread_counts takes every ERT_OPENMP_THREADS count")
    cfg["threads"] = threads = max(counts)
    if len(counts) > 1:
        cfg["thread_counts"] = counts
    if ran and d.flag("ERT_MPI"):
        shown = ", ".join(f"{p}x{t}" for p, t in sorted(ran))
        notes.append(f"{d.where('ERT_OPENMP_THREADS')}: ERT runs the ranks x threads layouts whose product is in "
                     f"ERT_PROCS_THREADS ({shown}); thread_counts sweeps their thread counts in one run (thread "
                     f"scaling), threads is the largest; for one of ERT's layouts P x T run `mpirun -n P ert-run "
                     f"CONFIG --threads T`")
    elif len(counts) > 1:
        notes.append(f"{d.where('ERT_OPENMP_THREADS')}: ERT swept {len(counts)} thread counts; "
                     f"thread_counts measures each of them in one run (thread scaling), threads is the largest")
    return threads


def _memory_max(d: _Directives) -> dict:
    """``{"max_bytes": ERT_MEMORY_MAX}``, or nothing."""
    memory_max = d.first("ERT_MEMORY_MAX")
    return {} if memory_max is None else {"max_bytes": _int(memory_max, d.path, d.line("ERT_MEMORY_MAX"))}


def _working_set_from(d: _Directives, precisions: list[str], threads: int | None, notes: list[str]) -> dict:
    """min_bytes from ERT_WORKING_SET_MIN (elements per thread, noted as bytes), growth from ERT_WSS_MULT."""
    ws: dict = {}
    ws_min = d.first("ERT_WORKING_SET_MIN")
    if ws_min is not None:
        elements = _int(ws_min, d.path, d.line("ERT_WORKING_SET_MIN"))
        workers = threads or 1
        ws["min_bytes"] = elements * max(ITEMSIZE[p] for p in precisions) * workers
        notes.append(f"{d.where('ERT_WORKING_SET_MIN')}: {elements} element(s) per thread -> working_set.min_bytes "
                     f"{ws['min_bytes']} (x {workers} thread(s) x {max(ITEMSIZE[p] for p in precisions)} bytes)")
    mult = d.first("ERT_WSS_MULT")
    ws["growth"] = float(mult) if mult is not None else 1.1  # ERT's default growth
    return ws


def _layout_notes(d: _Directives) -> list[str]:
    """Ranks and threads ERT took from its config, which ert takes from the launcher or the backend."""
    notes = []
    if d.flag("ERT_MPI"):
        procs = d.first("ERT_MPI_PROCS") or "?"
        notes.append(f"{d.where('ERT_MPI')}: ranks come from the launcher, not the config: run "
                     f"`mpirun -n N ert-run ...` for each N in ERT_MPI_PROCS {procs}")
    for key in ("ERT_PROCS_THREADS", "ERT_MPI_PROCS"):
        used = d.flag("ERT_MPI") and (key == "ERT_MPI_PROCS" or d.flag("ERT_OPENMP")) and not (d.gpu or d.ocl)
        if key in d.keys and not used:
            notes.append(f"{d.where(key)}: ert runs one ranks x threads layout per run; no equivalent")
    if "ERT_OPENMP_THREADS" in d.keys and (d.gpu or d.ocl):
        notes.append(f"{d.where('ERT_OPENMP_THREADS')}: a device backend drives each device from one host thread")
    return notes


def _no_equivalent_notes(d: _Directives) -> list[str]:
    """The build, launch and plot keys, then the vendor peaks (ERT_SPEC_*)."""
    notes = []
    for key, reason in _BUILD_KEYS.items():
        if key in d.keys:
            value = " ".join(d.keys[key][0])
            notes.append(f"{d.where(key)}{' ' + repr(value) if value else ''}: no equivalent ({reason})")
    for key in d.keys:
        if key.startswith("ERT_SPEC_"):
            notes.append(f"{d.where(key)}: vendor peak {' '.join(d.keys[key][0])} has no place in a run config "
                         f"(ert records what it measures)")
    return notes


def _int(text: str, path, line: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise ErtError(f"not an integer: {text!r}", path=path, key=f"line {line}") from None


def _cuda_section(d, ints, where, notes) -> dict:
    section: dict = {}
    blocks, threads, products = ints("ERT_GPU_BLOCKS"), ints("ERT_GPU_THREADS"), ints("ERT_BLOCKS_THREADS")
    if blocks:
        section["blocks"] = blocks
    if threads:
        section["threads_per_block"] = threads
    if products:
        section["blocks_threads"] = max(products)
        notes.append(f"{where('ERT_BLOCKS_THREADS')}: ERT runs only blocks x threads equal to "
                     f"{','.join(map(str, products))}; cuda.blocks_threads {max(products)} tries every product "
                     f"up to it")
    return section


def _opencl_section(d, path, where, notes) -> dict:
    tokens = d.get("ERT_OCL_SIZES", ([], 0))[0]
    if not tokens:
        return {}
    pairs = []
    for item in tokens[0].split(","):
        try:
            global_size, local_size = (int(x) for x in item.split(":"))
        except ValueError:
            raise ErtError(f"expected global:local pairs like 81920:1024, got {item!r}", path=path,
                           key=f"line {d['ERT_OCL_SIZES'][1]}") from None
        pairs.append((global_size, local_size))
    globals_ = sorted({g for g, _ in pairs})
    locals_ = sorted({lo for _, lo in pairs})
    if len(pairs) != len(globals_) * len(locals_):
        notes.append(f"{where('ERT_OCL_SIZES')}: ERT runs the {len(pairs)} listed global:local pairs; ert tries "
                     f"every global size with every local size ({len(globals_) * len(locals_)} launches)")
    return {"global_sizes": globals_, "local_sizes": locals_}


def to_yaml(conv: Conversion, *, source) -> str:
    """The converted config as YAML, validated by ert's own schema first."""
    import yaml

    from ert.config.schema import from_dict

    from_dict(conv.config, source=f"{source} (converted)")
    header = [f"# Converted from the ERT 1.1 config {Path(str(source)).name} by `ert import-ert-config`."]
    if conv.notes:
        header.append("# Not carried over exactly (also printed on stderr):")
        header += [f"#   {n}" for n in conv.notes]
    return "\n".join(header) + "\n" + yaml.safe_dump(conv.config, sort_keys=False)
