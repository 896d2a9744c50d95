"""The one exception type for faults a user can cause and fix."""

from __future__ import annotations


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
