"""How a bad config is told: pydantic's first error as one key path and one line, a bad value quoted in part.

``ert.config.schema`` validates; this module only words the fault (``ErtError``'s key and message), so that an
expanded YAML alias or a 500-character key is never echoed whole.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

QUOTED_CHARS = 80  # at most this much of a bad value is quoted in an error line


def key_path(loc: tuple) -> str:
    """Render ('working_set', 'min_bytes') as 'working_set.min_bytes', ('precisions', 2) as 'precisions[2]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def first_error(exc: ValidationError, *, top_keys) -> tuple[str, str]:
    """The key path and one-line message of pydantic's first error; ``top_keys``: the config's top-level keys,
    so that a check across keys that names the one at fault is reported as that key."""
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if p not in ("function-after[_ordered(), WorkingSet]",))
    # Literal/union errors add the union branch name to the location; drop it.
    loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("literal"))))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        # A check across keys that names the one at fault ("precisions: ...") reports it as that key.
        named = re.match(r"([a-z_]+): ", msg)
        if not loc and named and named.group(1) in top_keys:
            loc, msg = (named.group(1),), msg[named.end():]
    if err["type"] not in ("extra_forbidden", "missing") and not isinstance(err.get("input", {}), dict):
        got = quoted(err["input"])
        if got not in msg:  # a value error that names the value already says it
            msg += f" (got {got})"
    key = key_path(loc)
    if len(key) > QUOTED_CHARS:  # an unknown key of 500 characters is quoted in part too
        key = key[:QUOTED_CHARS - 3] + "..."
    return key, msg


def quoted(value: object) -> str:
    """repr of a bad value, at most QUOTED_CHARS long: an expanded alias or a long string is not echoed whole."""
    if isinstance(value, (list, tuple, dict)) and len(value) > QUOTED_CHARS:
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {len(str(value))} digits"
    text = repr(value)
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS - 3] + "..."
