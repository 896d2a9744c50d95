"""The run directory: its file names, a new one's name, whether one already holds a run, resuming one on the
same hardware only, and its resolved config."""

from __future__ import annotations

from pathlib import Path

from ert.errors import ErtError
from ert.files import CEILINGS_NAME
from ert.rawio import RAW_NAME

CONFIG_NAME = "config.yaml"


def new_run_dir(output_dir: str) -> Path:
    """``output_dir/<date>-<time>-<host>``, with ``-2``, ``-3``... appended while that name is taken."""
    import socket
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(output_dir) / f"{stamp}-{socket.gethostname().split('.')[0]}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def holds_run(path: Path) -> bool:
    """Whether ``path`` already holds (part of) a run: its raw records, config or ceilings."""
    return any((path / name).exists() for name in (RAW_NAME, CONFIG_NAME, CEILINGS_NAME))


def check_new(run_dir: Path) -> None:
    """ErtError unless ``run_dir`` (``--out``) can take a new run: absent, or a directory without one."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ErtError("exists and is not a directory", path=run_dir, key="--out")
    if run_dir.is_dir() and holds_run(run_dir):
        raise ErtError("already holds a run; continue it with --resume or choose a new --out",
                       path=run_dir, key="--out")


def load_config(run_dir: Path):
    """The resolved config of the run in ``run_dir`` (``--resume``); ErtError if it is not a run directory."""
    from ert import config as config_mod

    cfg = config_mod.load(run_dir / CONFIG_NAME) if (run_dir / CONFIG_NAME).exists() else None
    if cfg is None or not (run_dir / RAW_NAME).exists():
        raise ErtError("not a run directory (no config.yaml and raw.jsonl)", path=run_dir, key="--resume")
    return cfg


def refuse_other_hardware(old_meta: dict, run_dir: Path, *, threads: int, ranks: int, device: str = "") -> None:
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


def write_config(config, path: Path) -> None:
    """The resolved config as YAML, written atomically (``ert-run --resume`` reads it back)."""
    import yaml

    from ert.files import write_text_atomic

    text = "# Resolved config of this run (ert-run --resume uses it)\n" + yaml.safe_dump(
        config.to_dict(), sort_keys=False)
    write_text_atomic(text, path)


def create(run_dir: Path, cfg) -> None:
    """The new run directory with its resolved config (rank 0 only)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir / CONFIG_NAME)
