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
    d = read_ert_config(text, path=path)
    notes: list[str] = []
    cfg: dict = {}

    def first(key: str) -> str | None:
        tokens = d.get(key, ([], 0))[0]
        return tokens[0] if tokens else None

    def where(key: str) -> str:
        return f"{key} (line {d[key][1]})"

    def ints(key: str) -> list[int] | None:
        value = first(key)
        return None if value is None else parse_int_set(value, path=path, key=f"line {d[key][1]}")

    def flag(key: str) -> bool:
        return first(key) == "True"  # ERT's only true spelling

    for key in d:
        if key.startswith("ERT_SPEC_GBYTES_"):
            continue
        if key not in KNOWN_KEYS:
            notes.append(f"{where(key)}: unknown ERT key; ignored")
    gpu, hip, ocl = flag("ERT_GPU"), flag("ERT_HIP"), flag("ERT_OCL")
    if gpu and hip:
        cfg["backend"] = "auto"
        notes.append(f"{where('ERT_HIP')}: no HIP backend; backend left 'auto'")
    elif gpu:
        cfg["backend"] = "cuda"
    elif ocl:
        cfg["backend"] = "opencl"
    else:
        cfg["backend"] = "numba-cpu"

    precisions = ["fp64"]
    if first("ERT_PRECISION"):
        precisions = []
        for token in first("ERT_PRECISION").split(","):
            name = token.strip().lower()
            if name not in ITEMSIZE:
                raise ErtError(f"unknown precision {token!r} (FP16, FP32, FP64)", path=path,
                               key=f"line {d['ERT_PRECISION'][1]}")
            precisions.append(name)
    cfg["precisions"] = precisions

    flops = ints("ERT_FLOPS")
    if flops is not None:
        kept = [f for f in flops if 1 <= f <= 1024 and f & (f - 1) == 0]
        dropped = [f for f in flops if f not in kept]
        if dropped:
            notes.append(f"{where('ERT_FLOPS')}: {', '.join(map(str, dropped))} dropped: ert sweeps powers of "
                         f"two from 1 to 1024 FLOPs per element")
        if kept:
            cfg["flops_per_element"] = kept
    cfg["fma"] = "both"
    cfg["access"] = ["rw"]  # ERT's kernel: each element loaded and stored once

    ws: dict = {}
    memory_max = first("ERT_MEMORY_MAX")
    if memory_max is not None:
        ws["max_bytes"] = _int(memory_max, path, d["ERT_MEMORY_MAX"][1])
    threads = None
    if flag("ERT_OPENMP") and not (gpu or ocl):
        candidates = ints("ERT_OPENMP_THREADS") or [1]
        threads = max(candidates)
        cfg["threads"] = threads
        if len(candidates) > 1:
            cfg["thread_counts"] = sorted(set(candidates))
            notes.append(f"{where('ERT_OPENMP_THREADS')}: ERT swept {len(cfg['thread_counts'])} thread counts; "
                         f"thread_counts measures each of them in one run (thread scaling), threads is the largest")
    elif not (gpu or ocl):
        cfg["threads"] = threads = 1  # ERT without OpenMP runs one thread per process
    ws_min = first("ERT_WORKING_SET_MIN")
    if ws_min is not None:
        elements = _int(ws_min, path, d["ERT_WORKING_SET_MIN"][1])
        workers = threads or 1
        ws["min_bytes"] = elements * max(ITEMSIZE[p] for p in precisions) * workers
        notes.append(f"{where('ERT_WORKING_SET_MIN')}: {elements} element(s) per thread -> working_set.min_bytes "
                     f"{ws['min_bytes']} (x {workers} thread(s) x {max(ITEMSIZE[p] for p in precisions)} bytes)")
    mult = first("ERT_WSS_MULT")
    ws["growth"] = float(mult) if mult is not None else 1.1  # ERT's default growth
    cfg["working_set"] = ws

    experiments = first("ERT_NUM_EXPERIMENTS")
    if experiments is not None:
        cfg["timing"] = {"repeats": _int(experiments, path, d["ERT_NUM_EXPERIMENTS"][1])}
    if first("ERT_RESULTS"):
        cfg["output_dir"] = first("ERT_RESULTS")

    if flag("ERT_MPI"):
        procs = first("ERT_MPI_PROCS") or "?"
        notes.append(f"{where('ERT_MPI')}: ranks come from the launcher, not the config: run "
                     f"`mpirun -n N ert-run ...` for each N in ERT_MPI_PROCS {procs}")
    for key in ("ERT_PROCS_THREADS", "ERT_MPI_PROCS"):
        if key in d and not (key == "ERT_MPI_PROCS" and flag("ERT_MPI")):
            notes.append(f"{where(key)}: ert runs one ranks x threads layout per run; no equivalent")
    if "ERT_OPENMP_THREADS" in d and (gpu or ocl):
        notes.append(f"{where('ERT_OPENMP_THREADS')}: a device backend drives each device from one host thread")
    if gpu and not hip:
        cfg["cuda"] = _cuda_section(d, ints, where, notes)
    if ocl:
        cfg["opencl"] = _opencl_section(d, path, where, notes)
    for key, reason in _BUILD_KEYS.items():
        if key in d:
            value = " ".join(d[key][0])
            notes.append(f"{where(key)}{' ' + repr(value) if value else ''}: no equivalent ({reason})")
    for key in d:
        if key.startswith("ERT_SPEC_") and key in d:
            notes.append(f"{where(key)}: vendor peak {' '.join(d[key][0])} has no place in a run config "
                         f"(ert records what it measures)")
    return Conversion(config=cfg, notes=notes)


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

    from ert.config import from_dict

    from_dict(conv.config, source=f"{source} (converted)")
    header = [f"# Converted from the ERT 1.1 config {Path(str(source)).name} by `ert import-ert-config`."]
    if conv.notes:
        header.append("# Not carried over exactly (also printed on stderr):")
        header += [f"#   {n}" for n in conv.notes]
    return "\n".join(header) + "\n" + yaml.safe_dump(conv.config, sort_keys=False)
