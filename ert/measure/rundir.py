"""The run directory: its file names, a new one claimed (named, created and locked by one process), whether
one already holds a run, resuming one on the same hardware and config only, and its resolved config."""

from __future__ import annotations

from pathlib import Path

from ert.errors import ErtError, fs_path
from ert.records.files import CEILINGS_NAME
from ert.records.rawio import RAW_NAME

CONFIG_NAME = "config.yaml"


def _run_names(output_dir: str):
    """``output_dir/<date>-<time>-<host>``, then the same with ``-2``, ``-3``..., without end: the names
    ``claim_auto`` tries in turn."""
    import itertools
    import socket
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(output_dir) / f"{stamp}-{socket.gethostname().split('.')[0]}"
    yield base
    for n in itertools.count(2):
        yield base.with_name(f"{base.name}-{n}")


def claim_auto(output_dir: str):
    """(a new run directory under ``output_dir``, its lock): created with mkdir, which fails for all but one
    process, so two runs started in the same second (a job array) take ``-2``, ``-3``... in turn."""
    from ert.records import runlock

    output_dir = fs_path(output_dir)  # the config's text, a name the file system of any locale takes
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    # Every name from the first: two processes that both found <stamp> taken and both tried <stamp>-2 must not
    # make the loser's <stamp>-2-2 (seen once, four runs in one second).
    path = next(path for path in _run_names(output_dir) if _made(path))
    return path, runlock.hold(path)


def _made(path: Path) -> bool:
    """Whether this process created ``path`` (mkdir: one process of any number wins a name)."""
    try:
        path.mkdir()
        return True
    except FileExistsError:
        return False


def claim_out(run_dir: Path, *, restart: bool = False):
    """The lock of ``--out`` DIR, created if absent; ErtError if another process holds it, or (checked under
    the lock, so two runs cannot both pass) it already holds a run (``check_new``)."""
    from ert.records import runlock

    if run_dir.exists() and not run_dir.is_dir():
        raise ErtError("exists and is not a directory", path=run_dir, key="--out")
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = runlock.hold(run_dir, key="--out")
    try:
        if restart:
            check_restart(run_dir)
        else:
            check_new(run_dir)
    except BaseException:
        lock.release()
        raise
    return lock


class Claim:
    """What the writing process (rank 0) holds of the run directory: its lock, a resume's raw data, whether
    this run created the directory."""

    def __init__(self, run_dir: Path, lock, *, created: bool = False, raw=None, fresh: bool = False,
                 notes: list | None = None):
        self.run_dir, self.lock, self.created, self.raw = run_dir, lock, created, raw
        self.fresh = fresh  # a resume of a run that measured nothing: started afresh
        self.notes = notes or []

    def let_go(self) -> None:
        """At the end of the run (or its failure): the lock, and a directory this run created but never used."""
        if self.created and not holds_run(self.run_dir):
            abandon(self.run_dir, self.lock)
        else:
            self.lock.release()


def claim(run_dir: Path | None, *, output_dir: str | None, resume: bool, restart: bool) -> Claim:
    """The run directory, taken for this run alone: a new one created (``None``: named under ``output_dir``;
    ``--out`` DIR checked under its lock); a resumed one locked before anything there is read, then its header
    checked against config.yaml (``resume_state``)."""
    if run_dir is None:
        path, lock = claim_auto(output_dir)
        return Claim(path, lock, created=True)
    if not resume:
        created = not run_dir.exists()
        return Claim(run_dir, claim_out(run_dir, restart=restart), created=created)
    lock = claim_resume(run_dir)
    try:
        raw, notes = resume_state(run_dir)
    except BaseException:
        lock.release()
        raise
    return Claim(run_dir, lock, raw=raw, fresh=raw is None, notes=notes)


def abandon(run_dir: Path, lock) -> None:
    """Let go of a run directory that never started (an error before the header): the lock, and the directory
    itself when nothing else is in it."""
    lock.release()
    try:
        run_dir.rmdir()  # only an empty one
    except OSError:
        pass


def holds_run(path: Path) -> bool:
    """Whether ``path`` already holds (part of) a run: its raw records, config or ceilings."""
    return any((path / name).exists() for name in (RAW_NAME, CONFIG_NAME, CEILINGS_NAME))


def check_new(run_dir: Path) -> None:
    """ErtError unless ``run_dir`` (``--out``) can take a new run: absent, or a directory without one."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ErtError("exists and is not a directory", path=run_dir, key="--out")
    if run_dir.is_dir() and holds_run(run_dir):
        raise ErtError("already holds a run; continue it with --resume, or choose a new --out",
                       path=run_dir, key="--out")


def measured(run_dir: Path) -> bool:
    """Whether ``run_dir``'s raw.jsonl holds a complete line (a header, at least); a file cut before its
    first newline (a kill or a full disk while the header was written) holds nothing."""
    try:
        with open(run_dir / RAW_NAME, "rb") as fh:
            return any(line.strip() and line.endswith(b"\n") for line in fh)
    except FileNotFoundError:
        return False


def check_restart(run_dir: Path) -> None:
    """ErtError unless ``--out DIR --restart`` may start DIR afresh: it holds no measured record."""
    if measured(run_dir):
        raise ErtError("holds measured records; continue it with --resume (--restart only starts afresh a run "
                       "that wrote none)", path=run_dir, key="--restart")


def load_config(run_dir: Path):
    """The resolved config of the run in ``run_dir`` (``--resume``, every rank, once rank 0 has checked or
    rebuilt it: ``resume_state``); ErtError if it is not a run directory."""
    from ert.config import schema as config_mod

    if not (run_dir / CONFIG_NAME).exists():
        raise ErtError("not a run directory (no config.yaml and raw.jsonl)", path=run_dir, key="--resume")
    return config_mod.load(run_dir / CONFIG_NAME)


def claim_resume(run_dir: Path):
    """The lock of the run to resume (rank 0, before it reads anything there)."""
    from ert.records import runlock

    if not run_dir.is_dir():
        raise ErtError("is not a directory" if run_dir.exists() else "no such run directory", path=run_dir,
                       key="--resume")
    return runlock.hold(run_dir, key="--resume")


def resume_state(run_dir: Path):
    """(the run's raw data, notes for the user) of ``--resume`` (rank 0, holding the lock).

    config.yaml must be the config the header says was measured (else ErtError
    naming the key that differs); a missing one is rebuilt from the header.  A
    run that ended before its header (config.yaml, and a raw.jsonl absent, empty
    or cut short) has measured nothing: raw data None, and it starts afresh.
    """
    from ert.config import schema as config_mod
    from ert.records.rawio import read_raw

    config_path = run_dir / CONFIG_NAME
    if not measured(run_dir):
        if not config_path.exists():
            raise ErtError("not a run directory (no config.yaml and raw.jsonl)", path=run_dir, key="--resume")
        return None, ["raw.jsonl holds no header (the run ended before it measured anything): starting it afresh "
                      f"with its config.yaml -> {run_dir}"]
    raw = read_raw(run_dir)
    header_config = (raw.header.get("metadata") or {}).get("config")
    if config_path.exists():
        check_config(config_mod.load(config_path), raw.header, path=config_path)
        return raw, []
    if not isinstance(header_config, dict):
        raise ErtError("no config.yaml, and raw.jsonl's header holds no config to rebuild it from", path=run_dir,
                       key="--resume")
    write_config(config_mod.from_dict(header_config, source=raw.path), config_path)
    return raw, [f"{config_path} was missing: rebuilt from raw.jsonl's header"]


def check_config(cfg, header: dict, *, path: Path) -> None:
    """ErtError, naming the first key that differs, unless ``cfg`` (config.yaml) is the config of the header
    (``metadata.config`` and ``config_sha256``): a resume under another config would mix two sweeps."""
    from ert.config import schema as config_mod

    meta = header.get("metadata") or {}
    old = meta.get("config")
    why = "resuming would mix two sweeps; restore it, delete it (rebuilt from the header), or start a new run"
    if isinstance(old, dict):
        try:
            old = config_mod.from_dict(old).to_dict()  # an older ert's header: today's defaults on both sides
        except ErtError:
            pass
        keys = differences(old, cfg.to_dict())
        if keys:
            there, here = _value_at(old, keys[0]), _value_at(cfg.to_dict(), keys[0])
            more = f" (and {', '.join(keys[1:4])}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
            raise ErtError(f"{here} here, {there} in the run's header (raw.jsonl){more}: {why}", path=path,
                           key=keys[0])
    elif meta.get("config_sha256") and meta["config_sha256"] != cfg.sha256():
        raise ErtError(f"differs from the run's header (config_sha256): {why}", path=path)


def differences(old, new, prefix: str = "") -> list[str]:
    """The dotted paths of the keys whose values differ between two dicts, in sorted order."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [found for key in sorted(set(old) | set(new), key=str)
                for found in differences(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}{key}.")]
    return [] if old == new else [prefix.rstrip(".")]


_ABSENT = object()


def _value_at(data: dict, key: str) -> str:
    import json

    for part in key.split("."):
        data = data.get(part, _ABSENT) if isinstance(data, dict) else _ABSENT
    if data is _ABSENT:
        return "absent"
    text = json.dumps(data)
    return text if len(text) <= 40 else text[:37] + "..."


def refuse_other_hardware(old_meta: dict, run_dir: Path, *, threads: int, ranks: int, device: str = "") -> list[str]:
    """Never mix measurements of different hardware or layouts in one run; the warnings of a resume on
    another host of the same CPU model (allowed: the same hardware, elsewhere)."""
    import socket

    from ert.hardware import hwinfo

    if device and old_meta.get("device") and old_meta["device"] != device:
        raise ErtError(f"was measured on device '{old_meta['device']}', this is '{device}'; start a new run instead",
                       path=run_dir, key="--resume")

    if old_meta.get("cpu_model") != hwinfo.cpu_model():
        raise ErtError(f"was measured on '{old_meta.get('cpu_model')}', this is '{hwinfo.cpu_model()}'; "
                       f"start a new run instead", path=run_dir, key="--resume")
    if int(old_meta.get("ranks", 1)) != ranks or int(old_meta.get("threads_per_rank", 0)) != threads:
        raise ErtError(f"was measured with {old_meta.get('ranks')} rank(s) x {old_meta.get('threads_per_rank')} "
                       f"thread(s), not {ranks} x {threads}", path=run_dir, key="--resume")
    host = socket.gethostname()
    if old_meta.get("host") and old_meta["host"] != host:
        return [f"{run_dir}: was measured on host {old_meta['host']}, this is {host} (the same CPU model, "
                f"{hwinfo.cpu_model()}): its points are mixed with this host's; they differ if the hosts do"]
    return []


def write_config(config, path: Path) -> None:
    """The resolved config as YAML, written atomically (``ert-run --resume`` reads it back)."""
    import yaml

    from ert.records.files import write_text_atomic

    text = "# Resolved config of this run (ert-run --resume uses it)\n" + yaml.safe_dump(
        config.to_dict(), sort_keys=False)
    write_text_atomic(text, path)


def create(run_dir: Path, cfg) -> None:
    """The new run directory with its resolved config (rank 0 only)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir / CONFIG_NAME)
