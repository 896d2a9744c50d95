"""Files every stage writes: atomic writes (never a half-written file) and the run directory's file names."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ert.errors import ErtError, fs_text

CEILINGS_NAME = "ceilings.json"  # the ceilings of a run directory (ert.records.ceilings_io reads and writes it)


def _new_file_mode() -> int:
    # The mode open() would give a new file; mkstemp's 0600 would surprise users
    # who share run directories.  os.umask can only be read by setting it.
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_json_atomic(obj: Any, path: os.PathLike | str) -> None:
    """Write ``obj`` as JSON (indent 2, trailing newline) so that ``path`` is never half-written.

    The text goes to a temporary file in the same directory (so the final
    rename stays on one filesystem), is fsynced, and then replaces ``path`` in
    one os.replace.  Readers see either the old file or the new one.
    """
    try:
        text = json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ErtError(f"cannot write as JSON: {exc}", path=path) from None
    write_text_atomic(text, path)


def write_text_atomic(text: str, path: os.PathLike | str) -> None:
    """Write ``text`` (UTF-8) so that ``path`` is never half-written; see write_json_atomic.  A path inside it that
    the locale could not decode (résultats under LANG=C) is written as the characters its bytes spell (fs_text)."""
    write_bytes_atomic(fs_text(text).encode("utf-8"), path)


def write_bytes_atomic(data: bytes, path: os.PathLike | str) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, and rename it over ``path``.

    What is not a regular file (a device, a FIFO, /dev/stdout) is written in
    place: renaming over it would replace a device node, or fail.  A symlink
    is followed, so the file it points to is replaced, not the link.
    """
    try:
        if _is_special(path):
            _write_in_place(data, path)
            return
        target = Path(os.path.realpath(path))
        directory = target.parent
        mode = target.stat().st_mode & 0o7777 if target.is_file() else _new_file_mode()
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(target.name), suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ErtError(f"cannot write: {exc.strerror or exc}", path=path) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException as exc:
        # Also on KeyboardInterrupt: never leave the temporary file behind.
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ErtError(f"cannot write: {exc.strerror or exc}", path=path) from None
        raise
    _fsync_directory(directory)


def check_writable(path: os.PathLike | str) -> None:
    """ErtError unless ``write_bytes_atomic(.., path)`` can be expected to succeed: called before a command
    writes anything else, so that a bad ``-o`` leaves no other file behind."""
    try:
        if _is_special(path):
            if not os.access(path, os.W_OK):
                raise ErtError("cannot write: permission denied", path=path)
            return
        target = Path(os.path.realpath(path))
        if target.is_dir():
            raise ErtError("is a directory", path=path)
        if not target.parent.is_dir():
            raise ErtError(f"cannot write: no such directory {str(target.parent)[:80]}", path=path)
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise ErtError("cannot write: the directory is not writable", path=path)
    except OSError as exc:
        raise ErtError(f"cannot write: {exc.strerror or exc}", path=path) from None


def _is_special(path: os.PathLike | str) -> bool:
    """Whether ``path`` (its symlinks followed) exists and is not a regular file or a directory."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_in_place(data: bytes, path: os.PathLike | str) -> None:
    import sys

    # /dev/stdout shares the terminal or pipe with what the command prints: keep their order.
    sys.stdout.flush()
    with open(path, "wb") as handle:  # opened through the original name: /proc/self/fd links stay valid
        handle.write(data)
        handle.flush()


def _temp_prefix(name: str) -> str:
    # mkstemp adds 8 random characters and ".tmp": a name near NAME_MAX (255 bytes)
    # would make the temporary name too long, so such a name gets a short prefix.
    return f".{name}." if len(os.fsencode(name)) <= 200 else ".ert-write."


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable.  Best effort: not every platform or
    # filesystem lets a directory be opened or fsynced.
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    try:
        fd = os.open(directory, os.O_RDONLY | flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)




def read_cache(path: Path) -> dict:
    """A small JSON object ert keeps between runs (a probe's answer, the sentinels' history); {} where the file is
    missing, unreadable or not an object: a cache is never an input."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_cache(path: Path, value: dict) -> None:
    """Write a cache whole (``write_json_atomic``); a cache that cannot be written is left as it was."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(value, path)
    except (OSError, ErtError):
        pass
