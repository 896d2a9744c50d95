"""Command line: `ert-run` (the sweep) and `ert` (validate, backends, analyze, show, run).

Only argparse and ert.errors are imported at module level, so `ert --help`
stays instant; every subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ert.errors import ErtError

CONFIG_NAME = "config.yaml"
CEILINGS_NAME = "ceilings.json"


# ---------------------------------------------------------------------------- ert-run
def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="run config (YAML); default: the packaged default.yaml")
    p.add_argument("--backend", metavar="NAME", help="override the config's backend (see `ert backends`)")
    p.add_argument("--out", metavar="DIR", help="the run directory to create (refused if it already holds a run)")
    p.add_argument("--resume", metavar="RUN_DIR", help="measure only the points missing from RUN_DIR/raw.jsonl")
    p.add_argument("--threads", metavar="N[,N...]", type=_thread_counts,
                   help="threads per rank (overrides the config); a list such as 1,2 sweeps each count "
                        "(thread scaling; the largest gives the top-level ceilings)")
    p.add_argument("--sustain", metavar="SECONDS", type=_positive_seconds,
                   help="after the sweep, hold the FP64 peak and DRAM points this long each and report "
                        "sustained beside burst values")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _thread_counts(text: str):
    """``N`` (an int, as before) or ``N,M,...`` (a sorted list of distinct counts: thread scaling)."""
    parts = [_positive_int(part.strip()) for part in text.split(",")]
    if len(parts) == 1:
        return parts[0]
    if len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"thread counts repeat: {text!r}")
    return sorted(parts)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 seconds: {text!r}")
    return value


def _new_run_dir(output_dir: str) -> Path:
    import socket
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(output_dir) / f"{stamp}-{socket.gethostname().split('.')[0]}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _holds_run(path: Path) -> bool:
    return any((path / name).exists() for name in ("raw.jsonl", CONFIG_NAME, CEILINGS_NAME))


def _resolve(config, *, source, backend_flag: bool, placement=None):
    """Concrete backend and thread count, so the saved config reproduces the run.

    Under MPI, ``threads: auto`` is the cores this rank was given (placement).
    """
    from ert import hwinfo
    from ert.backends import REGISTRY
    from ert.config import with_overrides

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
        threads = 1  # a device backend drives its device from one host thread per rank
    elif threads == "auto":
        threads = placement.threads if placement else max(1, hwinfo.usable_cpus())
    return with_overrides(config, backend=backend, threads=threads)


def _write_config(config, path: Path) -> None:
    import yaml

    from ert.ceilings_io import write_text_atomic

    text = "# Resolved config of this run (ert-run --resume uses it)\n" + yaml.safe_dump(
        config.to_dict(), sort_keys=False)
    write_text_atomic(text, path)


class QuietExit(Exception):
    """End this rank with ``code``; the error was already printed once (by rank 0 or the failing rank)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ErtError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _agreed(comm, func):
    """Run ``func`` on every rank; if it fails with a user error anywhere, report it once and end all ranks.

    For the steps before the sweep (config, run directory, backend): they
    usually fail the same way on every rank, and N copies of one message help
    nobody.  Rank 0 prints the error (tagged with the rank when only some
    ranks failed) and every rank exits with 2; nothing hangs, because every
    rank reaches the one allgather.
    """
    if comm.size == 1:
        return func()
    try:
        value, error = func(), None
    except (ErtError, OSError) as exc:
        value, error = None, _one_line(exc)
    errors = comm.allgather(error)
    failed = [(rank, e) for rank, e in enumerate(errors) if e]
    if not failed:
        return value
    if comm.rank == 0:
        rank, text = failed[0]
        if len(failed) < comm.size or len({e for _, e in failed}) > 1:
            more = f" (and {len(failed) - 1} more rank(s))" if len(failed) > 1 else ""
            text = f"rank {rank}: {text}{more}"
        print(f"ert-run: error: {text}", file=sys.stderr)
    raise QuietExit(2)


def _prepare_run(args, comm, placement):
    """(resolved config, run directory, resume?) from the command line; ErtError for every user fault."""
    from ert import config as config_mod

    if args.resume and args.config:
        raise ErtError("give either CONFIG or --resume RUN_DIR, not both", key="--resume")
    if args.resume and args.out:
        raise ErtError("--out names a new run; --resume continues an existing one", key="--out")
    if args.resume:
        run_dir = Path(args.resume)
        cfg = config_mod.load(run_dir / CONFIG_NAME) if (run_dir / CONFIG_NAME).exists() else None
        if cfg is None or not (run_dir / "raw.jsonl").exists():
            raise ErtError("not a run directory (no config.yaml and raw.jsonl)", path=run_dir, key="--resume")
        if args.backend and args.backend != cfg.backend:
            raise ErtError(f"the run used backend '{cfg.backend}'; a resume cannot switch to '{args.backend}'",
                           path=run_dir, key="--backend")
        if args.threads and args.threads != (cfg.thread_counts or cfg.threads):
            raise ErtError(f"the run used {cfg.thread_counts or cfg.threads} threads; a resume cannot change that",
                           path=run_dir, key="--threads")
        if args.sustain and args.sustain != cfg.sustain_seconds:
            raise ErtError(f"the run's sustain time is {cfg.sustain_seconds}; a resume cannot change that",
                           path=run_dir, key="--sustain")
        return cfg, run_dir, True
    source = args.config or config_mod.default_path()
    cfg = config_mod.load(source)
    data = cfg.to_dict()
    if args.threads is not None:  # N: one count, as before; N,M,...: thread scaling up to the largest
        counts = args.threads if isinstance(args.threads, list) else None
        data.update(threads=max(counts) if counts else args.threads, thread_counts=counts)
    cfg = config_mod.with_overrides(config_mod.from_dict(data, source="command line"), backend=args.backend,
                                    sustain_seconds=args.sustain)
    cfg = _resolve(cfg, source=source, backend_flag=bool(args.backend), placement=placement)
    if args.out:
        run_dir = Path(args.out)
        if run_dir.exists() and not run_dir.is_dir():
            raise ErtError("exists and is not a directory", path=run_dir, key="--out")
        if run_dir.is_dir() and _holds_run(run_dir):
            raise ErtError("already holds a run; continue it with --resume or choose a new --out",
                           path=run_dir, key="--out")
    else:
        # Rank 0 names the directory (clock and host name differ between ranks).
        run_dir = comm.bcast(_new_run_dir(cfg.output_dir) if comm.rank == 0 else None)
    return cfg, run_dir, False


def cmd_run(args) -> int:
    from ert import placement as placement_mod
    from ert.comm import world

    comm = world()
    placement = None
    if comm.size > 1:
        # Before anything starts threads: this rank's own cores, pinned.
        placement = placement_mod.place(comm)
        placement_mod.apply(placement)
    cfg, run_dir, resume = _agreed(comm, lambda: _prepare_run(args, comm, placement))
    if comm.size == 1:
        return _execute(cfg, run_dir, comm=comm, resume=resume, quiet=args.quiet, placement=placement)
    try:
        return _execute(cfg, run_dir, comm=comm, resume=resume, quiet=args.quiet, placement=placement)
    except QuietExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure on one rank must end the whole job
        # The other ranks wait in a collective for this one: print once, then
        # Abort, which ends every rank (and mpiexec) instead of hanging it.
        interrupted = isinstance(exc, KeyboardInterrupt)
        what = "interrupted" if interrupted else f"error: rank {comm.rank}: {_one_line(exc)}"
        print(f"ert-run: {what}", file=sys.stderr)
        comm.abort(130 if interrupted else 2)
        raise  # not reached


def _execute(cfg, run_dir: Path, *, comm, resume: bool, quiet: bool, placement=None) -> int:
    import socket

    from ert import faults, metadata
    from ert.analysis.ceilings import build
    from ert.backends import REGISTRY
    from ert.ceilings_io import write_ceilings
    from ert.comm import merge_rank_warnings
    from ert.driver import run_sweep
    from ert.progress import Progress
    from ert.rawio import read_raw
    from ert.report import format_ceilings
    from ert.sweep import plan

    def setup():
        backend = REGISTRY.create(cfg.backend, threads=cfg.threads, config=cfg, local_rank=comm.local_rank,
                                  local_size=comm.local_size)
        if resume and comm.rank == 0:
            _refuse_other_hardware(read_raw(run_dir).header["metadata"], run_dir, threads=cfg.threads,
                                   ranks=comm.size, device=backend.describe().get("device", ""))
        return backend

    backend = _agreed(comm, setup)
    backend = faults.maybe_wrap(backend, rank=comm.rank)
    points = plan(cfg, workers=cfg.threads * comm.size, granule_elements_of=backend.granule_elements,
                  launches_of=getattr(backend, "launches", None))
    own_warnings = list(placement.warnings if placement else []) + list(getattr(backend, "warnings", []))
    rank_warnings = merge_rank_warnings(comm.allgather(own_warnings))
    header = None
    if not resume:
        hosts = comm.allgather(socket.gethostname())
        placements = comm.allgather(placement.to_dict() if placement else None)
        meta = metadata.collect(config=cfg, backend_info=backend.describe(), ranks=comm.size,
                                threads_per_rank=cfg.threads, hosts=sorted(set(hosts)))
        meta["ranks_per_host"] = {h: hosts.count(h) for h in sorted(set(hosts))}
        if comm.size > 1:
            meta["mpi_library"] = comm.library()
            meta["placement"] = placements
        if rank_warnings:
            meta["rank_warnings"] = rank_warnings
        header = {"metadata": meta, "planned_points": len(points)}
        if comm.rank == 0:
            run_dir.mkdir(parents=True, exist_ok=True)
            _write_config(cfg, run_dir / CONFIG_NAME)
    progress = Progress(min_seconds=cfg.timing.min_seconds, enabled=not quiet and comm.rank == 0)
    if comm.rank == 0:
        for warning in rank_warnings:
            print(f"ert-run: warning: {warning}", file=sys.stderr)
        print(f"ert-run: {cfg.backend}, {comm.size} rank(s) x {cfg.threads} thread(s) -> {run_dir}",
              file=sys.stderr)
    if cfg.thread_counts or cfg.sustain_seconds:
        from ert.scaling import run_all

        def make_backend(threads: int):
            return faults.maybe_wrap(REGISTRY.create(cfg.backend, threads=threads, config=cfg,
                                                     local_rank=comm.local_rank, local_size=comm.local_size),
                                     rank=comm.rank)

        result = run_all(config=cfg, run_dir=run_dir, backend=backend, make_backend=make_backend, comm=comm,
                         header=header, progress=progress, sustain_seconds=cfg.sustain_seconds)
    else:
        result = run_sweep(config=cfg, points=points, run_dir=run_dir, backend=backend, comm=comm,
                           header=header, progress=progress)
    backend.close()
    if comm.rank != 0:
        if result.interrupted and comm.size > 1:
            raise KeyboardInterrupt  # cmd_run aborts the job: rank 0 may be waiting for this rank
        return 130 if result.interrupted else 0
    doc = build(read_raw(run_dir))
    write_ceilings(doc, run_dir / CEILINGS_NAME)
    print(format_ceilings(doc))
    print(f"\nceilings: {run_dir / CEILINGS_NAME}")
    if result.interrupted:
        print(f"ert-run: interrupted after {doc['metadata']['points']['measured']} of {result.planned} points; "
              f"resume with: ert-run --resume {run_dir}", file=sys.stderr)
        if comm.size > 1:
            comm.abort(130)  # other ranks may be waiting in a collective
        return 130
    return 0


def _refuse_other_hardware(old_meta: dict, run_dir: Path, *, threads: int, ranks: int, device: str = "") -> None:
    """Never mix measurements of different hardware or layouts in one run."""
    from ert import hwinfo

    if device and old_meta.get("device") and old_meta["device"] != device:
        raise ErtError(f"was measured on device '{old_meta['device']}', this is '{device}'; start a new run instead",
                       path=run_dir, key="--resume")

    if old_meta.get("cpu_model") != hwinfo.cpu_model():
        raise ErtError(f"was measured on '{old_meta.get('cpu_model')}', this is '{hwinfo.cpu_model()}'; "
                       f"start a new run instead", path=run_dir, key="--resume")
    if int(old_meta.get("ranks", 1)) != ranks or int(old_meta.get("threads_per_rank", 0)) != threads:
        raise ErtError(f"was measured with {old_meta.get('ranks')} rank(s) x {old_meta.get('threads_per_rank')} "
                       f"thread(s), not {ranks} x {threads}", path=run_dir, key="--resume")


# ---------------------------------------------------------------------------- ert subcommands
def cmd_validate(args) -> int:
    from ert import config as config_mod
    from ert import hwinfo
    from ert.sweep import kernel_specs, working_sets

    cfg = config_mod.load(args.config)
    threads = hwinfo.usable_cpus() if cfg.threads == "auto" else cfg.threads
    specs = kernel_specs(cfg)
    ws = cfg.working_set
    sizes = working_sets(min_bytes=ws.min_bytes, max_bytes=ws.max_bytes, growth=ws.growth,
                         granule_bytes=512 * threads)
    print(f"{args.config}: valid: {len(specs)} kernel variant(s) x {len(sizes)} working set(s) "
          f"= {len(specs) * len(sizes)} points per rank layout (threads: {cfg.threads}, backend: {cfg.backend})"
          f"{_geometry_note(cfg)}")
    return 0


def _geometry_note(cfg) -> str:
    """How launch geometries multiply the points of a device backend (they depend on the device when not given)."""
    if cfg.backend == "cuda":
        c = cfg.cuda
        if c.blocks and c.threads_per_block:
            allowed = set(c.blocks_threads) if c.blocks_threads else None
            n = sum(1 for b in c.blocks for t in c.threads_per_block if allowed is None or b * t in allowed)
            return f", each at up to {n} blocks x threads geometries"
        return ", each at the blocks x threads geometries chosen from the GPU's SM count"
    if cfg.backend == "opencl":
        o = cfg.opencl
        if o.global_sizes and o.local_sizes:
            return f", each at up to {len(o.global_sizes) * len(o.local_sizes)} global x local size geometries"
        return ", each at the global x local size geometries chosen from the device"
    return ""


def cmd_backends(args) -> int:
    from ert.backends import REGISTRY

    for name in REGISTRY.names():
        st = REGISTRY.status(name)
        if st.available:
            versions = ", ".join(f"{k} {v}" for k, v in st.detail.items() if k != "devices")
            print(f"{name:12s} available    {versions}")
            # A device backend lists every device it sees, one per line.
            for line in st.detail.get("devices", []):
                print(f"{'':12s}   device    {line}")
        else:
            print(f"{name:12s} unavailable  {st.reason}")
    return 0


def cmd_analyze(args) -> int:
    import json

    from ert.analysis.ceilings import build
    from ert.ceilings_io import validate, write_ceilings
    from ert.rawio import read_raw
    from ert.report import format_ceilings

    raw = read_raw(args.raw)
    doc = build(raw)
    validate(doc)
    if args.output:
        write_ceilings(doc, args.output)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(format_ceilings(doc))
        if args.output:
            print(f"\nceilings: {args.output}")
    return 0


def cmd_show(args) -> int:
    from ert.ceilings_io import load_ceilings
    from ert.report import format_ceilings

    path = Path(args.ceilings)
    if path.is_dir():
        path = path / CEILINGS_NAME
    print(format_ceilings(load_ceilings(path)))
    return 0


# ---------------------------------------------------------------------------- consumers of the ceilings
def _ceilings_path(text: str) -> Path:
    path = Path(text)
    return path / CEILINGS_NAME if path.is_dir() else path


def _write_or_print(text: str, output) -> None:
    """To stdout, or atomically to ``output``: never a half-written file."""
    if output:
        from ert.ceilings_io import write_text_atomic

        write_text_atomic(text, output)
    else:
        sys.stdout.write(text)


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1 (or 0% to 100%): {text!r}")
    return value


def cmd_plot(args) -> int:
    from ert import plot

    plot.check_output(args.output)
    if args.sweep:
        if args.app:
            raise ErtError("--app draws kernels on the roofline; it does not apply to --sweep", key="--app")
        plot.plot_sweep(args.ceilings, args.output)
    else:
        from ert.appdata import load_app
        from ert.ceilings_io import load_ceilings

        doc = load_ceilings(_ceilings_path(args.ceilings))
        kernels = [k for path in args.app or [] for k in load_app(path)]
        plot.plot_roofline(doc, args.output, kernels=kernels, precision=args.precision, access=args.access)
    print(f"plot: {args.output}", file=sys.stderr)
    return 0


def cmd_profile(args) -> int:
    import json

    from ert import profile
    from ert.appdata import load_app
    from ert.ceilings_io import load_ceilings

    doc = load_ceilings(_ceilings_path(args.ceilings))
    kernels = load_app(args.app)
    profiles = profile.profile_all(kernels, doc, access=args.access, fma_ratio=args.fma_ratio,
                                   ratio_source="instruction counts" if str(args.app).endswith(".csv") else "file")
    if args.json:
        print(json.dumps(profile.to_json(profiles, doc), indent=2))
    else:
        print(profile.format_profiles(profiles, doc))
    return 0


def cmd_compare(args) -> int:
    import json

    from ert import compare
    from ert.ceilings_io import load_ceilings

    if len(args.ceilings) < 2:
        raise ErtError("give at least two ceiling files to compare", key="CEILINGS_JSON")
    paths = [_ceilings_path(p) for p in args.ceilings]
    docs = [load_ceilings(p) for p in paths]
    labels = args.labels.split(",") if args.labels else compare.default_labels(docs, [str(p) for p in paths])
    if len(labels) != len(docs):
        raise ErtError(f"{len(labels)} label(s) for {len(docs)} files", key="--labels")
    if args.plot:
        from ert.plot import check_output

        check_output(args.plot)
    if args.json:
        print(json.dumps(compare.to_json(docs, labels), indent=2))
    else:
        print(compare.format_comparison(docs, labels))
    if args.plot:
        compare.plot_comparison(docs, labels, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from ert import export
    from ert.ceilings_io import load_ceilings

    doc = load_ceilings(_ceilings_path(args.ceilings))
    kernels = None
    if args.app:
        if args.format != "nersc":
            raise ErtError("--app adds application points to the nersc format only", key="--app")
        from ert.appdata import load_app

        kernels = load_app(args.app)
    text = export.export_text(doc, fmt=args.format, precision=args.precision, access=args.access, kernels=kernels)
    _write_or_print(text, args.output)
    return 0


def cmd_import_ert_config(args) -> int:
    from ert import import_ert

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ErtError("no such file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ErtError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path=path) from None
    conv = import_ert.convert(text, path=path)
    yaml_text = import_ert.to_yaml(conv, source=path)
    for note in conv.notes:
        print(f"import-ert-config: {path.name}: {note}", file=sys.stderr)
    _write_or_print(yaml_text, args.output)
    return 0


def _add_consumer_parsers(sub) -> None:
    roof_rule = ("memory roofs use the bandwidth of one kernel per level: --precision (default fp64) and --access "
                 "(default rw = ERT's read+write), falling back to another precision, then the other access")
    p = sub.add_parser("plot", help="draw the roofline (or, with --sweep, the sweep behind it)",
                       description="Log-log roofline of a ceilings file: " + roof_rule + ".")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json or its run directory (RUN_DIR with --sweep)")
    p.add_argument("--app", metavar="FILE", action="append",
                   help="application kernels (ncu CSV, YAML or JSON); repeatable")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="image file: .png, .svg or .pdf")
    p.add_argument("--sweep", action="store_true",
                   help="plot RUN_DIR's sweep: GB/s vs working set with plateaus, GFLOP/s vs FLOPs per element")
    p.add_argument("--precision", choices=("fp64", "fp32", "fp16"), default="fp64", help="precision of the memory roofs")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("profile", help="place application kernels on the roofline: AI, binding ceiling, %% of attainable",
                       description="Hierarchical roofline of each kernel. Memory roofs: the bandwidth per level of the "
                                   "kernel's own precision with --access (default rw = ERT's read+write), falling "
                                   "back to another precision, then the other access.")
    p.add_argument("app", metavar="APP_FILE", help="Nsight Compute CSV (--csv or --csv --page raw), or YAML/JSON")
    p.add_argument("--ceilings", metavar="CEILINGS_JSON", required=True, help="a ceilings.json or its run directory")
    p.add_argument("--fma-ratio", metavar="F", type=_fraction,
                   help="FMA share of FP instructions (0-1 or %%): compute ceiling (2F + 1 - F)/2 x FMA peak; "
                        "default: derived from the dfma/dadd/dmul counts of an ncu file")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("compare", help="ceilings of several machines side by side, with ratios")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", nargs="+", help="two or more ceilings.json (or run directories)")
    p.add_argument("--labels", metavar="A,B,...", help="names of the machines (default: host names)")
    p.add_argument("--plot", metavar="OUT", help="also draw the ratios (.png, .svg or .pdf)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("export", help="write the ceilings for other tools: ERT roofline.json, NERSC data, CSV",
                       description="ert: ERT 1.1 roofline.json; nersc: the data file of NERSC's plot_roofline.py; "
                                   "csv: one row per ceiling. For ert and nersc, " + roof_rule + ".")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json or its run directory")
    p.add_argument("--format", choices=("ert", "nersc", "csv"), required=True)
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    p.add_argument("--precision", choices=("fp64", "fp32", "fp16"), default="fp64", help="precision of the memory roofs")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.add_argument("--app", metavar="FILE", help="nersc only: add kernels' AI/GFLOPs points (one per level)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import-ert-config", help="convert an ERT 1.1 config into an ert YAML config")
    p.add_argument("file", metavar="FILE", help="an ERT config (KEY value... lines)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    p.set_defaults(func=cmd_import_ert_config)


def build_parser() -> argparse.ArgumentParser:
    from ert import __version__

    parser = argparse.ArgumentParser(
        prog="ert", description="Empirical Roofline Toolkit: measure and use a machine's bandwidth and FLOP/s ceilings.")
    parser.add_argument("--version", action="version", version=f"ert {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", help="run a sweep (same as ert-run)")
    _add_run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a run config and print what it would measure")
    p.add_argument("config", help="run config (YAML)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("backends", help="list backends: available, or why not")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("analyze", help="re-derive ceilings from raw data without rerunning")
    p.add_argument("raw", metavar="RUN_DIR_OR_RAW", help="a run directory or its raw.jsonl")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the ceiling JSON here")
    p.add_argument("--json", action="store_true", help="print the ceiling JSON instead of the table")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("show", help="print a ceiling JSON as a table")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json (or the run directory holding it)")
    p.set_defaults(func=cmd_show)

    _add_consumer_parsers(sub)
    return parser


def _guarded(func, args, prog: str) -> int:
    try:
        return func(args)
    except QuietExit as exc:
        return exc.code
    except ErtError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ert show x | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # an unwritable directory, a full disk: the user's to fix, in one line
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _guarded(args.func, args, "ert")


def run_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ert-run",
        description="Sweep working sets, FLOPs per element, precisions and FMA on one backend, stream every "
                    "point to RUN_DIR/raw.jsonl, and write RUN_DIR/ceilings.json. Works the same under mpirun.")
    _add_run_arguments(parser)
    return _guarded(cmd_run, parser.parse_args(argv), "ert-run")


if __name__ == "__main__":
    sys.exit(main())
