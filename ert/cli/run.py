"""`ert-run`: from the command line to a finished run directory, on one rank or many.

The command line read into a config and a run directory, then one step per
stage (backend, plan, run directory, measuring, analysis and report); MPI
ranks placed, errors before the sweep agreed on, a failure during it ending
every rank.  The command line's checks and the run's config and directory
(new, resumed or restarted) are prepared in ert.cli.prepare; the run
directory, backend selection and precision policy live in their stages
(ert.measure.rundir, ert.cli.select, ert.measure.precisions).  Only argparse
and ert.errors are imported at module level.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ert.errors import ErtError


# ---------------------------------------------------------------------------- ert-run
def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="run config (YAML); default: the packaged default.yaml")
    p.add_argument("--backend", metavar="NAME", help="override the config's backend (see `ert backends`)")
    p.add_argument("--out", metavar="DIR", help="the run directory to create (refused if it already holds a run)")
    p.add_argument("--resume", metavar="RUN_DIR", help="measure only the points missing from RUN_DIR/raw.jsonl")
    p.add_argument("--restart", action="store_true",
                   help="with --out DIR: start DIR afresh although a run began there, provided it measured nothing "
                        "(its raw.jsonl holds no header: it ended first)")
    # The options that take a value, in --help's order: (flag, metavar, type or None, help).
    for flag, metavar, kind, text in (
        ("--threads", "N[,N...]", _thread_counts,
         "threads per rank (overrides the config); a list such as 1,2 sweeps each count "
         "(thread scaling; the largest gives the top-level ceilings)"),
        ("--sustain", "SECONDS", _positive_seconds,
         "after the sweep, hold the FP64 peak and DRAM points this long each and report "
         "sustained beside burst values"),
        ("--device", "SELECTOR", None,
         "device of the opencl backend: gpu|cpu|accelerator, an index, PLATFORM:DEVICE "
         "(index or name substring), or a name substring; of the cuda backend: a GPU index. "
         "Default: the rank's index on its node picks among the matching devices"),
        ("--levels", "NAME[,NAME...]", _level_names,
         "what to measure (overrides the config's levels): memory (the sweep), links "
         "(host<->device copies, device backends), network (MPI, 2+ ranks); e.g. links,network"),
        ("--rated-dram", "GBPS", _gbytes_per_s,
         "the host's rated DRAM bandwidth in GB/s (channels x MT/s x 8 B); sets the config's "
         "rated.dram_gbytes_per_s, which takes precedence over what SMBIOS (dmidecode) shows"),
    ):
        p.add_argument(flag, metavar=metavar, type=kind, help=text)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument("--report", action="store_true", help="at the end, also write RUN_DIR/report.html (ert report)")
    p.add_argument("-v", "--verbose", action="store_true", help="the report in full: every warning whole, every "
                   "derivation, the tables as separate groups (as `ert show --verbose`); the default fits a screen")


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


def _level_names(text: str) -> list[str]:
    from ert.config.schema import LEVEL_GROUPS

    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in LEVEL_GROUPS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown level {unknown[0] if unknown else text!r} "
                                         f"(known: {', '.join(LEVEL_GROUPS)})")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"levels repeat: {text!r}")
    return names


def _in_range(text: str, *, what: str, unit: str, most: float) -> float:
    """``text`` as a number above 0 and at most ``most``; else argparse's one-line error naming ``what``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not 0 < value <= most:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {most:g} {unit}: {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    return _in_range(text, what="a number of seconds", unit="seconds", most=86400)


def _gbytes_per_s(text: str) -> float:
    return _in_range(text, what="a bandwidth in GB/s", unit="GB/s", most=100000)


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


def cmd_run(args) -> int:
    from ert.measure import placement as placement_mod
    from ert.measure.comm import world

    comm = world()
    placement = None
    if comm.size > 1:
        # Before anything starts threads: this rank's own cores, pinned.
        placement = placement_mod.place(comm)
        placement_mod.apply(placement)
    from ert.measure.metadata import usable_cpus

    usable_cpus()  # read now, before a backend's threads bind this one to a cpu
    from ert.cli.prepare import claim_run_dir, prepare_run, resumed_config

    cfg, run_dir, resume = _agreed(comm, lambda: prepare_run(args, comm, placement))
    claim = _agreed(comm, lambda: claim_run_dir(cfg, run_dir, resume=resume, restart=args.restart, comm=comm))
    try:
        if comm.size > 1:  # rank 0 holds the directory; every rank learns its name (and whether it starts afresh)
            run_dir, fresh = comm.bcast((claim.run_dir, claim.fresh) if claim else None)
        else:
            run_dir, fresh = claim.run_dir, claim.fresh
        if claim:
            for note in claim.notes:
                print(f"ert-run: {note}", file=sys.stderr)
        if resume:
            cfg = _agreed(comm, lambda: resumed_config(args, run_dir))
            resume = not fresh
        return _run_claimed(args, cfg, run_dir, claim, comm=comm, resume=resume, placement=placement)
    finally:
        if claim:
            claim.let_go()


def _run_claimed(args, cfg, run_dir: Path, claim, *, comm, resume: bool, placement) -> int:
    """The run, once rank 0 holds its directory: measured, analysed and reported; a failure ends every rank."""
    raw = claim.raw if claim else None
    if comm.size == 1:
        try:
            code = _execute(cfg, run_dir, comm=comm, resume=resume, quiet=args.quiet, placement=placement,
                            verbose=args.verbose, raw=raw)
        except (ErtError, OSError):
            raise  # the user's to fix (a full disk, a bad file): one line from the CLI
        except Exception as exc:  # noqa: BLE001 - a sweep that raised (MemoryError, a fault): one line, resumable
            print(f"ert-run: error: {_one_line(exc)}{_resume_hint(run_dir)}", file=sys.stderr)
            return 2
        return _report(args, run_dir, code, rank=comm.rank)
    from ert.measure import watchdog

    # Over several hosts: a host that dies or is cut off ends the job within seconds, named.
    guard = watchdog.start(comm, run_dir, getattr(comm, "hosts", []))
    if guard.error:  # a bad setting, the same verdict on every rank: rank 0 says it once
        if comm.rank == 0:
            raise ErtError(guard.error, key=watchdog.SECONDS_VARIABLE)
        raise QuietExit(2)
    if guard.note and comm.rank == 0 and (not guard.proc or not args.quiet):
        print(f"ert-run: {'warning: ' if not guard.proc else ''}{guard.note}", file=sys.stderr)
    try:
        result = _execute(cfg, run_dir, comm=comm, resume=resume, quiet=args.quiet, placement=placement,
                          verbose=args.verbose, raw=raw)
        guard.close()
        return _report(args, run_dir, result, rank=comm.rank)
    except QuietExit:
        guard.close()
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure on one rank must end the whole job
        # The other ranks wait in a collective for this one: print once, then
        # Abort, which ends every rank (and mpiexec) instead of hanging it.
        guard.close()
        interrupted = isinstance(exc, KeyboardInterrupt)
        what = "interrupted" if interrupted else f"error: rank {comm.rank}: {_one_line(exc)}{_resume_hint(run_dir)}"
        print(f"ert-run: {what}", file=sys.stderr)
        comm.abort(130 if interrupted else 2)
        raise  # not reached


def _resume_hint(run_dir: Path) -> str:
    """The tail of an error line after the sweep began: how to go on from the points raw.jsonl keeps."""
    from ert.records.rawio import RAW_NAME

    return f"; the points measured are kept: resume with: ert-run --resume {run_dir}" if (
        run_dir / RAW_NAME).exists() else ""


def _report(args, run_dir: Path, code: int, *, rank: int) -> int:
    """--report: rank 0 writes RUN_DIR/report.html once the run has finished (not after an interruption)."""
    if getattr(args, "report", False) and rank == 0 and code == 0:
        from ert.cli.consumers import write_report

        size = write_report([str(run_dir)], run_dir / "report.html")
        print(f"report: {run_dir / 'report.html'} ({size / 1024:.0f} KiB)")
    return code


def _execute(cfg, run_dir: Path, *, comm, resume: bool, quiet: bool, placement=None, verbose: bool = False,
             raw=None) -> int:
    """One run, stage by stage: backend, plan, run directory, measuring, analysis and report.

    ``raw``: a resumed run's raw data (rank 0 read it, holding the directory's lock).
    """
    from ert.records.rawlog import RawLog

    cfg, backend, skipped_warning = _open_backend(cfg, run_dir, comm=comm, raw=raw)
    if comm.rank == 0:  # the first line, once the backend is open, before it measures its clock and compiles
        print(f"ert-run: {cfg.backend}, {comm.size} rank(s) x {cfg.threads} thread(s) -> {run_dir}", file=sys.stderr,
              flush=True)
    points = _plan(cfg, backend, comm=comm) if "memory" in cfg.levels else []
    rank_warnings = _rank_warnings(backend, skipped_warning, comm=comm, placement=placement)
    header = None if resume else _start_run_dir(cfg, run_dir, backend, comm=comm, placement=placement,
                                                  rank_warnings=rank_warnings, planned_points=len(points))
    if comm.rank == 0:
        _announce(cfg, run_dir, comm=comm, rank_warnings=rank_warnings)
    # Every stage appends through this one log: rank 0 writes, and holds what the file holds (``raw``, read
    # once for a resume) plus every record since, so no stage reads raw.jsonl again.
    log = RawLog.open(run_dir, header=header, data=raw, writes=comm.rank == 0)
    try:
        result = _measure(cfg, points, log, backend, comm=comm, quiet=quiet)
    finally:
        log.close()
    if comm.rank != 0:
        if result.interrupted and comm.size > 1:
            raise KeyboardInterrupt  # cmd_run aborts the job: rank 0 may be waiting for this rank
        return 130 if result.interrupted else 0
    return _analyze_and_report(run_dir, result, comm=comm, verbose=verbose)


def _make_backend(cfg, threads: int, comm):
    from ert.backends import REGISTRY, CpuReferenceBackend
    from ert.measure.reference import cpu_reference

    backend = REGISTRY.create(cfg.backend, threads=threads, options=cfg.backend_options(),
                              local_rank=comm.local_rank, local_size=comm.local_size)
    if hasattr(backend, "clock_thread_counts"):
        # The clock of each smaller thread count a scaling run sweeps (0.3 s each on 2 cores), none otherwise.
        backend.clock_thread_counts = tuple(c for c in (cfg.thread_counts or ()) if c < threads)
    if isinstance(backend, CpuReferenceBackend):
        # A device on the host's cores is set beside numba-cpu's peak: measured by the measuring side.
        backend.use_cpu_reference(cpu_reference)
    return backend


def _open_backend(cfg, run_dir: Path, *, comm, raw=None):
    """(config with the precisions it can run, the backend, a warning or None), agreed on by every rank.

    A resume (``raw``: the run's raw data, on rank 0) is refused here when the
    hardware differs from the run's; a test override that cannot be read is
    refused here too, once, for every rank.
    """
    from ert.measure import faults, network, rundir
    from ert.measure.precisions import supported_precisions

    def setup():
        faults.check()
        if "network" in cfg.levels and comm.size > 1 and network.node_override():
            network.node_id(comm.rank, comm.size, "", network.node_override())  # ErtError if malformed
        backend = _make_backend(cfg, cfg.threads, comm)
        if raw is not None:
            notes = rundir.refuse_other_hardware(raw.header["metadata"], run_dir, threads=cfg.threads,
                                                 ranks=comm.size, device=backend.describe().get("device", ""))
            for note in notes:
                print(f"ert-run: warning: {note}", file=sys.stderr)
        return backend

    backend = _agreed(comm, setup)
    cfg, skipped_warning = _agreed(comm, lambda: supported_precisions(cfg, backend))
    return cfg, faults.maybe_wrap(backend, rank=comm.rank), skipped_warning


def _plan(cfg, backend, *, comm):
    from ert.measure.plan import plan

    return plan(cfg, workers=cfg.threads * comm.size, granule_elements_of=backend.granule_elements,
                launches_of=backend.launches, tensor_of=_tensor_of(backend),
                tensor_variants_of=_tensor_of(backend, "tensor_variants"))


def _rank_warnings(backend, skipped_warning, *, comm, placement) -> list:
    """Every rank's warnings, merged (collective)."""
    import socket

    from ert.measure.comm import merge_rank_warnings, shared_device_warnings

    from ert.records.warning_codes import CodedText, warn

    # A backend's own warnings (a write-through L1, a CPU measured through OpenCL) are the "backend" code's.
    own_warnings = list(placement.warnings if placement else []) + [
        w if isinstance(w, CodedText) else warn("backend", w) for w in backend.warnings]
    own_warnings += _oversubscribed(backend)
    own_warnings += [skipped_warning] if skipped_warning else []
    # Whether ranks share a device, from the device each rank really holds.
    own_warnings += shared_device_warnings(comm.allgather((socket.gethostname(), backend.device_id)),
                                           comm.rank)
    return merge_rank_warnings(comm.allgather(own_warnings))


def _oversubscribed(backend) -> list:
    """This rank's warning when its CPU backend runs more threads than the cpus it may use: the threads take
    turns, and the rates are shares of those cpus, not the machine's ceilings."""
    from ert.measure.metadata import usable_cpus
    from ert.records.warning_codes import warn

    cpus = usable_cpus()
    if getattr(backend, "name", "") != "numba-cpu" or backend.threads <= cpus:
        return []
    return [warn("threads-oversubscribed", f"{backend.threads} threads on {cpus} cpus: oversubscribed; these are "
                                           f"not the machine's ceilings")]


def _start_run_dir(cfg, run_dir: Path, backend, *, comm, placement, rank_warnings, planned_points) -> dict:
    """The header of a new run (collective); rank 0 creates the directory with the resolved config."""
    from ert.measure import rundir
    from ert.measure.metadata import run_header

    header = run_header(cfg, backend=backend, comm=comm, placement=placement, rank_warnings=rank_warnings,
                        planned_points=planned_points)
    if comm.rank == 0:
        rundir.create(run_dir, cfg)
    return header


def _announce(cfg, run_dir: Path, *, comm, rank_warnings) -> None:
    """Rank 0, on stderr, after the layout line (``_execute``): every rank's warnings, and a busy host's."""
    for warning in rank_warnings:
        print(f"ert-run: warning: {warning}", file=sys.stderr)
    from ert.measure.metadata import load_average

    load = load_average().get("load_average_at_start")
    if comm.size == 1 and load and load["load1"] > 0.5 * load["cpus"]:
        print(f"ert-run: warning: the host is busy (load average {load['load1']:g} on {load['cpus']} cpu(s)): "
              "other work will slow and scatter the measurements; a quiet machine gives its real ceilings",
              file=sys.stderr)


def _measure(cfg, points, log, backend, *, comm, quiet: bool):
    """The sweep (or the run modes: thread scaling, sustained holds), then links and the network, into the
    run's raw.jsonl (``log``); the backend closed after."""
    from ert.measure import faults
    from ert.measure.driver import run_sweep
    from ert.measure.progress import Progress
    from ert.measure.transfers import run_transfers

    progress = Progress(min_seconds=cfg.timing.min_seconds, enabled=not quiet and comm.rank == 0)
    if cfg.thread_counts or cfg.sustain_seconds:
        from ert.measure.modes import run_all

        def make_backend(threads: int):
            return faults.maybe_wrap(_make_backend(cfg, threads, comm), rank=comm.rank)

        result = run_all(config=cfg, log=log, backend=backend, make_backend=make_backend, comm=comm,
                         progress=progress, sustain_seconds=cfg.sustain_seconds)
    else:
        result = run_sweep(config=cfg, points=points, log=log, backend=backend, comm=comm, progress=progress)
    if not result.interrupted:
        # Links and the network, after the sweep and the sustained holds; resumable like them.
        result.interrupted = run_transfers(cfg=cfg, log=log, backend=backend, comm=comm, progress=progress)
    backend.close()
    return result


def _analyze_and_report(run_dir: Path, result, *, comm, verbose: bool = False) -> int:
    """Rank 0: ceilings.json from raw.jsonl, the report on stdout; 130 (and a resume hint) if interrupted."""
    from ert.analysis.ceilings import build
    from ert.analysis.weather import memory_roofs
    from ert.records.ceilings_io import write_ceilings
    from ert.consumers.terminal.report import format_ceilings
    from ert.records.files import CEILINGS_NAME
    from ert.records.rawio import read_raw

    doc = build(read_raw(run_dir))
    write_ceilings(doc, run_dir / CEILINGS_NAME)
    if not result.interrupted and result.history is not None:
        result.history.remember_memory(memory_roofs(doc))  # for the next run here to be held against
    print(format_ceilings(doc, verbose=verbose))
    print(f"\nceilings: {run_dir / CEILINGS_NAME}")
    if result.interrupted:
        print(f"ert-run: interrupted after {doc['metadata']['points']['measured']} of {result.planned} points; "
              f"resume with: ert-run --resume {run_dir}", file=sys.stderr)
        if comm.size > 1:
            comm.abort(130)  # other ranks may be waiting in a collective
        return 130
    return 0


def _tensor_of(backend, method: str = "tensor_plan"):
    """The backend's tensor plan (or ``method``) where it has tensor cores (ert.backends.TensorBackend), else None."""
    from ert.backends import TensorBackend

    return getattr(backend, method) if isinstance(backend, TensorBackend) else None
