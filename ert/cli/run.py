"""`ert-run`: from the command line to a finished run directory, on one rank or many.

Placement of MPI ranks, agreement on errors before the sweep, abort on a
failure during it, and the resolved config that makes a run reproducible and
resumable.  Only argparse and ert.errors are imported at module level.
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--device", metavar="SELECTOR",
                   help="device of the opencl backend: gpu|cpu|accelerator, an index, PLATFORM:DEVICE "
                        "(index or name substring), or a name substring; of the cuda backend: a GPU index. "
                        "Default: the rank's index on its node picks among the matching devices")
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
        if config.thread_counts:
            raise ErtError(f"thread scaling measures CPU threads; backend '{backend}' drives its device from "
                           f"one host thread per rank (scale with ranks instead)", key="--threads")
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
        if args.device:
            raise ErtError("a resume runs on the run's own device (see its config.yaml)", path=run_dir,
                           key="--device")
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
    if args.device:
        cfg = _with_device(cfg, args.device)
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
    from ert.measure import placement as placement_mod
    from ert.measure.comm import world

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

    from ert.measure import faults, metadata
    from ert.analysis.ceilings import build
    from ert.backends import REGISTRY
    from ert.ceilings_io import write_ceilings
    from ert.measure.comm import merge_rank_warnings, shared_device_warnings
    from ert.measure.driver import run_sweep
    from ert.measure.progress import Progress
    from ert.rawio import read_raw
    from ert.consumers.report import format_ceilings
    from ert.measure.plan import plan

    def setup():
        backend = REGISTRY.create(cfg.backend, threads=cfg.threads, config=cfg, local_rank=comm.local_rank,
                                  local_size=comm.local_size)
        if resume and comm.rank == 0:
            _refuse_other_hardware(read_raw(run_dir).header["metadata"], run_dir, threads=cfg.threads,
                                   ranks=comm.size, device=backend.describe().get("device", ""))
        return backend

    backend = _agreed(comm, setup)
    cfg, skipped_warning = _agreed(comm, lambda: _supported_precisions(cfg, backend))
    backend = faults.maybe_wrap(backend, rank=comm.rank)
    points = plan(cfg, workers=cfg.threads * comm.size, granule_elements_of=backend.granule_elements,
                  launches_of=backend.launches)
    own_warnings = list(placement.warnings if placement else []) + list(backend.warnings)
    own_warnings += [skipped_warning] if skipped_warning else []
    # Whether ranks share a device, from the device each rank really holds.
    own_warnings += shared_device_warnings(comm.allgather((socket.gethostname(), backend.device_id)),
                                           comm.rank)
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
        from ert.measure.modes import run_all

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


def _with_device(cfg, selector: str):
    """The config with ``--device`` applied to its backend's options."""
    from ert.config import from_dict

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


def _supported_precisions(cfg, backend):
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
