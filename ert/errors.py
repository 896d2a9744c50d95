"""The one exception type for faults a user can cause and fix, and the user's files and paths as text."""

from __future__ import annotations

import codecs
import contextlib


class ErtError(Exception):
    """A user-caused fault, printed by the CLI as one line: ``FILE: KEY: problem``.

    ``path`` is the file involved (config, raw, ceilings, CSV ...), ``key`` the
    key path inside it (``working_set.min_bytes``) or a line number (``line 7``).
    Either may be omitted when it does not apply.
    """

    def __init__(self, message: str, *, path: object = None, key: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.key = key

    def __str__(self) -> str:
        parts = [p for p in (self.path, self.key) if p]
        parts.append(self.message)
        return ": ".join(parts)


def read_user_text(path, *, expected: str) -> str:
    """The text of a file the user named (UTF-8, BOM allowed); every fault is an ErtError naming it.

    ``expected`` says what the file should be ("a ceilings JSON file"), for
    the messages about a directory or an empty file.
    """
    from pathlib import Path

    source = Path(path)
    if source.is_dir():
        raise ErtError(f"is a directory, expected {expected}", path=path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise ErtError("no such file", path=path) from None
    except OSError as exc:
        raise ErtError(f"cannot read: {exc.strerror or exc}", path=path) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ErtError(f"not UTF-8 text (bad byte at offset {exc.start})", path=path) from None
    if not text.strip():
        raise ErtError(f"file is empty, expected {expected}", path=path)
    return text


def parse_user_json(text: str, *, path):
    """``json.loads`` of a user's file; a syntax error or absurd nesting is an ErtError naming file and line."""
    import json

    def bounded_int(digits: str) -> int:
        # An integer past 10^30 is no count ert reads, and past 10^308 no float holds it: every consumer's
        # float() would raise OverflowError.  Refused here, with its line.
        if len(digits.lstrip("-")) > 30:
            line = text.count("\n", 0, max(text.find(digits), 0)) + 1
            raise ErtError(f"an integer of {len(digits.lstrip('-'))} digits is out of range", path=path,
                           key=f"line {line}")
        return int(digits)

    try:
        return json.loads(text, parse_int=bounded_int)
    except json.JSONDecodeError as exc:
        raise ErtError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, key=f"line {exc.lineno}") from None
    except RecursionError:
        raise ErtError("invalid JSON: nested too deeply", path=path) from None


# ---------------------------------------------------------------------------- paths in any locale
# A file name whose bytes are no text in the locale (résultats under LANG=C, or Latin-1 bytes under UTF-8)
# reaches Python as lone surrogates (os.fsdecode's surrogateescape); and a locale's encoding (ASCII under
# LANG=C) cannot hold every character.  TEXT_ERRORS, the error handler ert's output streams and files use,
# writes the first as the bytes the file system has and the second as a \xNN escape: never a
# UnicodeEncodeError.
TEXT_ERRORS = "ert-text"


def _as_written(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for char in exc.object[exc.start:exc.end]:
        code = ord(char)
        out.append(bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else char.encode("ascii", "backslashreplace"))
    return b"".join(out), exc.end


codecs.register_error(TEXT_ERRORS, _as_written)


def fs_text(text: str) -> str:
    """``text`` that UTF-8 can hold: a file name's undecoded bytes (lone surrogates) as the characters they spell
    in UTF-8 (U+FFFD where they spell none); any other text unchanged.  For the files ert writes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", TEXT_ERRORS).decode("utf-8", "replace")
    return text


def fs_path(text: str) -> str:
    """A path read from a text file (a config's ``output_dir``) as the file system of this locale takes it: the
    characters its encoding lacks (é under LANG=C) as their UTF-8 bytes, the name a UTF-8 terminal shows."""
    import os

    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return os.fsdecode(text.encode("utf-8", TEXT_ERRORS))
    return text


def not_a_file_name(exc: UnicodeEncodeError) -> ErtError | None:
    """The one-line error of a text that could not become a file name in this locale's encoding (a name that
    slipped past ``fs_path``), or None for an encoding error of another kind."""
    import sys

    if codecs.lookup(exc.encoding).name != codecs.lookup(sys.getfilesystemencoding()).name:
        return None
    return ErtError(f"cannot be a file name in this locale's encoding ({exc.encoding}): run with a UTF-8 locale "
                    f"(LC_ALL=C.UTF-8)", path=fs_text(str(exc.object)))


def any_locale_streams(*streams) -> None:
    """Let ``streams`` (default stdout and stderr) print any path and any text in any locale (``TEXT_ERRORS``)."""
    import sys

    for stream in streams or (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors=TEXT_ERRORS)
            except (ValueError, OSError):  # a closed or detached stream: nothing will be printed there
                pass


def interrupts_reach_main() -> None:
    """A Ctrl-C that lands inside a callback Python cannot raise from (a ``__del__``, a ctypes callback of
    llvmlite's) is passed on, never printed as "Exception ignored ... Traceback": it is delivered again to the main
    flow a moment later, once the callback has returned, and stops it with ert's one line."""
    import _thread
    import signal
    import sys
    import threading

    default = sys.unraisablehook

    def hook(unraisable) -> None:
        if unraisable.exc_type is None or not issubclass(unraisable.exc_type, KeyboardInterrupt):
            default(unraisable)
        elif callable(signal.getsignal(signal.SIGINT)):  # a Python handler (the default raises KeyboardInterrupt)
            # Not from here: the main flow would take it inside this hook, where it is ignored once more.
            later = threading.Timer(0.01, _thread.interrupt_main)
            later.daemon = True
            later.start()

    sys.unraisablehook = hook


@contextlib.contextmanager
def held_interrupts():
    """Hold Ctrl-C (SIGINT) while the body runs (Numba compiling or loading a kernel: llvmlite's callbacks would
    swallow it) and act on it when the body ends. Only in the main thread, and only under a Python handler."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    arrived = []
    signal.signal(signal.SIGINT, lambda *received: arrived.append(received))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if arrived:
        previous(*arrived[0])  # the handler's own action, now (the default raises KeyboardInterrupt)
