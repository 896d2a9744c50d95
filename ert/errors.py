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
