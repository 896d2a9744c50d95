"""`ert-run`'s preparation: the command line checked, read into a config and a run directory, resume or restart."""

from __future__ import annotations

from pathlib import Path

from ert.errors import ErtError


def prepare_run(args, comm, placement):
    """(resolved config, run directory, resume?) from the command line; ErtError for every user fault.

    No collectives here (it runs under ``_agreed``).  A resume's config is read
    later (``resumed_config``), once rank 0 holds the directory and has checked
    it; a new run without ``--out`` gets its directory from ``claim_run_dir``.
    """
    if args.resume and args.config:
        raise ErtError("give either CONFIG or --resume RUN_DIR, not both", key="--resume")
    if args.resume and args.out:
        raise ErtError("--out names a new run; --resume continues an existing one", key="--out")
    if args.restart and not args.out:
        raise ErtError("--restart starts an --out DIR afresh; give --out DIR", key="--restart")
    if args.resume:
        return None, Path(args.resume), True
    return (*new_run(args, placement), False)


def claim_run_dir(cfg, run_dir: Path | None, *, resume: bool, restart: bool, comm):
    """Rank 0 takes the run directory for this run alone (``ert.measure.rundir.claim``); None on other ranks."""
    from ert.measure import rundir

    if comm.rank != 0:
        return None
    return rundir.claim(run_dir, output_dir=cfg.output_dir if cfg else None, resume=resume, restart=restart)


def resumed_config(args, run_dir: Path):
    """The config of the run to resume; ErtError if the command line asks to change it."""
    from ert.measure import rundir

    cfg = rundir.load_config(run_dir)
    if args.backend and args.backend != cfg.backend:
        raise ErtError(f"the run used backend '{cfg.backend}'; a resume cannot switch to '{args.backend}'",
                       path=run_dir, key="--backend")
    if args.threads and args.threads != (cfg.thread_counts or cfg.threads):
        raise ErtError(f"the run used {cfg.thread_counts or cfg.threads} threads; a resume cannot change that",
                       path=run_dir, key="--threads")
    if args.device:
        raise ErtError("a resume runs on the run's own device (see its config.yaml)", path=run_dir,
                       key="--device")
    if args.levels and args.levels != cfg.levels:
        raise ErtError(f"the run measures levels {','.join(cfg.levels)}; a resume cannot change that",
                       path=run_dir, key="--levels")
    if args.sustain and args.sustain != cfg.sustain_seconds:
        raise ErtError(f"the run's sustain time is {cfg.sustain_seconds}; a resume cannot change that",
                       path=run_dir, key="--sustain")
    return cfg


def new_run(args, placement):
    """(resolved config, ``--out`` DIR or None) from CONFIG (or the packaged default) and the flags."""
    from ert.config import schema as config_mod
    from ert.cli import select
    from ert.measure import rundir

    source = args.config or config_mod.default_path()
    cfg = config_mod.load(source)
    data = cfg.to_dict()
    if args.threads is not None:  # N: one count, as before; N,M,...: thread scaling up to the largest
        counts = args.threads if isinstance(args.threads, list) else None
        data.update(threads=max(counts) if counts else args.threads, thread_counts=counts)
    if getattr(args, "rated_dram", None) is not None:  # the flag wins over the config's value
        data["rated"] = {**(data.get("rated") or {}), "dram_gbytes_per_s": args.rated_dram}
    cfg = config_mod.with_overrides(config_mod.from_dict(data, source="command line"), backend=args.backend,
                                    sustain_seconds=args.sustain, levels=args.levels)
    cfg = select.resolve(cfg, source=source, backend_flag=bool(args.backend), placement=placement)
    if args.device:
        cfg = select.with_device(cfg, args.device)
    if not args.out:
        # Rank 0 names and creates it (``claim_run_dir``): clocks and host names differ between ranks.
        return cfg, None
    run_dir = Path(args.out)
    if args.restart:
        rundir.check_restart(run_dir)
    else:
        rundir.check_new(run_dir)  # early, before a backend starts; again under the lock (``claim_run_dir``)
    return cfg, run_dir
