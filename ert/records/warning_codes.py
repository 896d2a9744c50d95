"""Warning codes: each warning's stable code, and the group a reader acts on it by (`ert show`, reports).

A warning stays a plain string everywhere it travels (lists, prefixes, the
``warnings`` list of ceilings.json); ``warn(code, text)`` makes one that
carries its code, and every warning ert raises is raised so (a backend's own
warnings as ``backend`` where the CLI gathers them).  Across raw.jsonl the
header keeps the ranks' warnings' codes beside them (``rank_warnings``,
``rank_warning_codes``; ``with_codes`` reads them back).  The writer puts
``{code, group}`` of every warning, in the same order, into
``metadata.warning_codes`` (schema 1.10); readers call
``coded_warnings(doc)``.  Only the warnings of files from older erts reach
``classify``, which reads the text: a fallback for them alone.

To add a code: one line in CODES (code -> group), raise the warning with
``warn("the-code", text)``, and, for files written before it existed, a
pattern in _FALLBACK if an older ert wrote the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

# The groups, in the order a report shows them, with their headings.
GROUPS = {
    "act": "act on it",
    "machine": "the kernel or the machine",
    "bookkeeping": "bookkeeping",
}

# Every code and its group.  Codes are stable: a reader may key on them.
CODES = {
    # act on it: the numbers are not the machine's alone; measure again, or finish the run.
    "busy-machine": "act",          # most points stayed noisy: other work shared the cores
    "bandwidth-changed": "act",     # a level's bandwidth changed during the run (host changed under it)
    "oversubscribed": "act",        # ranks share cores or a device, or took turns
    "threads-oversubscribed": "act",  # more threads than the cpus a rank may use: not the machine's ceilings
    "partial-run": "act",           # fewer points measured than planned
    "output-check-failed": "act",   # points or records whose results were wrong, not used
    "test-only": "act",             # a test override was in force
    "emulated-cpu": "act",          # the CPU is emulated (qemu-user): the rates are the emulator's, no rated values
    "slow-host": "act",             # one host of several >10 % below the hosts' median: it lowers the aggregate
    "host-disturbed": "act",        # the sentinels read low for a notable share of the run (ert.analysis.weather)
    "precisions-disagree": "act",   # two precisions of one access pattern read one level at different rates
    "level-inverted": "act",        # a level reads faster than the level above it
    # the kernel or the machine: what the numbers say about the hardware or ert's kernels.
    "below-rated": "machine",       # a ceiling well below its rated value
    "above-rated": "machine",       # points above their rated value, not used (work was removed)
    "level-missing": "machine",     # a cache or the memory has no level of its own
    "no-cache-sizes": "machine",    # no cache hints: levels named by position
    "break-off-cache": "machine",   # a break far from the cache size it is named after
    "not-flat": "machine",          # a level that is a range, not a plateau
    "level-changes": "machine",     # the memory level changes within itself
    "rise": "machine",              # a level faster than the one before it
    "peak-at-edge": "machine",      # a compute rate still rising at the largest FLOPs swept
    "throttled": "machine",         # a sustained hold fell off
    "network-path": "machine",      # MPI bytes went another way than the link measured
    "backend": "machine",           # a backend's own caveat (an OpenCL driver on a CPU, a fused no-FMA)
    "other": "machine",             # a warning classify could not place
    # bookkeeping: how the levels were drawn; read it when a number looks odd.
    "points-in-no-level": "bookkeeping",
    "ramp": "bookkeeping",          # overhead-bound points below the first level
    "noisy-points": "bookkeeping",  # points that stayed noisy after re-measuring
    "noisy-level": "bookkeeping",   # a level or transfer built on noisy points
    "noisy-peak": "bookkeeping",    # a compute peak from a noisy point
    "not-reproduced": "bookkeeping",  # points their re-measurement did not reproduce: noisy, never a roof
    "levels-borrowed": "bookkeeping",   # a curve measured over another curve's level ranges
    "merged-plateaus": "bookkeeping",   # several plateaus with no cache boundary, one level
    "split-level": "bookkeeping",   # two plateaus map to one cache: L2 and L2b
    "level-cut": "bookkeeping",     # a plateau across a cache's capacity, cut there into two levels
    "regimes": "bookkeeping",       # several regimes inside one cache
    "memory-transition": "bookkeeping",  # the last cache's transition, left out of the memory level
    "lone-size": "bookkeeping",     # a transfer level whose largest size has no neighbour
    "unconfirmed-points": "bookkeeping",  # memory points above the roof that nothing confirmed: not a roof
    "imported": "bookkeeping",      # numbers read from another tool's files (ERT's): what they lack, how they were read
    "skipped": "bookkeeping",       # precisions or kernels the backend cannot run, skipped
}

assert set(CODES.values()) <= set(GROUPS)


class CodedText(str):
    """A warning's text (a str in every respect) that carries its code."""

    __slots__ = ("code",)

    def __new__(cls, text: str, code: str):
        if code not in CODES:
            raise KeyError(f"unknown warning code {code!r} (add it to ert.records.warning_codes.CODES)")
        self = super().__new__(cls, text)
        self.code = code
        return self

    def __reduce__(self):  # copy.deepcopy and pickle keep the code
        return (CodedText, (str(self), self.code))


def warn(code: str, text: str) -> CodedText:
    """A warning ``text`` with its ``code`` (a key of CODES)."""
    return CodedText(text, code)


def relabel(warning: str, text: str) -> str:
    """``text`` (the warning reworded, say with a label in front) with ``warning``'s code, if it had one."""
    return CodedText(text, warning.code) if isinstance(warning, CodedText) else text


# Fallback for text without a code: (lowercase substring, code), the first that occurs wins.  Ordered so
# that a more specific phrase comes before a general one ("not flat" mentions a run that changed).
_FALLBACK = (
    ("busy machine:", "busy-machine"),
    ("partial run:", "partial-run"),
    ("test only:", "test-only"),
    ("the cpu is emulated", "emulated-cpu"),
    ("output check", "output-check-failed"),
    ("data check", "output-check-failed"),
    ("oversubscribed; these are not", "threads-oversubscribed"),
    ("took turns", "oversubscribed"),
    ("share cores", "oversubscribed"),
    ("cpu binding overlaps", "oversubscribed"),
    ("share device", "oversubscribed"),
    ("cores: every rank runs the same thread count", "oversubscribed"),
    ("not flat (", "not-flat"),
    ("changes within the level", "level-changes"),
    ("the last cache's transition", "memory-transition"),
    ("the host was disturbed for", "host-disturbed"),
    ("no level streams faster than the one above it", "level-inverted"),
    ("changed during the run", "bandwidth-changed"),
    ("measured above", "above-rated"),
    ("of the rated", "below-rated"),
    ("no cache sizes known", "no-cache-sizes"),
    ("x off the l", "break-off-cache"),
    ("no separate plateau", "level-missing"),
    ("short of memory", "level-missing"),
    ("no drop seen", "level-missing"),
    ("too few for plateaus", "level-missing"),
    ("no plateau of", "level-missing"),
    ("bandwidth rises from", "rise"),
    ("still rose", "peak-at-edge"),
    ("hold: throttling", "throttled"),
    ("mpi took another path", "network-path"),
    ("in no level", "points-in-no-level"),
    ("overhead-bound", "ramp"),
    ("overhead ramp", "ramp"),
    ("stayed noisy", "noisy-points"),
    ("peak comes from a noisy point", "noisy-peak"),
    ("not reproduced within the noise threshold", "not-reproduced"),
    ("noisy point", "noisy-level"),
    ("noisy size", "noisy-level"),
    ("separates fewer levels", "levels-borrowed"),
    ("no cache boundary between them", "merged-plateaus"),
    ("plateaus map to", "split-level"),
    ("regimes inside the cache", "regimes"),
    ("stands alone", "lone-size"),
    ("read above its roof", "unconfirmed-points"),
    ("noisy", "noisy-points"),
    ("skipped", "skipped"),
    ("opencl", "backend"),
    ("fused", "backend"),
)


def classify(text: str) -> str:
    """The code of a warning from its text alone: for warnings raised without one and files before 1.10."""
    lowered = str(text).lower()
    return next((code for phrase, code in _FALLBACK if phrase in lowered), "other")


def code_of(warning: str) -> str:
    """The warning's own code, or its text's (``classify``)."""
    return warning.code if isinstance(warning, CodedText) else classify(warning)


def codes_of(warnings: list[str]) -> list[dict]:
    """``metadata.warning_codes``: ``{code, group}`` of every warning, in the warnings' order."""
    return [{"code": code, "group": CODES[code]} for code in map(code_of, warnings)]


@dataclass(frozen=True)
class Coded:
    """One warning of a ceilings document, as a reader sees it."""

    text: str
    code: str
    group: str


def coded_warnings(doc: dict, *, warnings: list | None = None, codes: list | None = None) -> list[Coded]:
    """Every warning of a ceilings document with its code and group, in the document's order.

    Codes come from ``metadata.warning_codes`` (1.10 on); a file without them,
    or whose list does not pair up with its warnings (edited by hand), is
    classified from the text.  ``warnings`` and ``codes`` default to the
    document's top level; pass a ``scaling.by_threads`` entry's to read those.
    """
    given = list(doc.get("warnings", []) if warnings is None else warnings)
    if codes is None:
        codes = (doc.get("metadata") or {}).get("warning_codes")
    if not (isinstance(codes, list) and len(codes) == len(given)):
        codes = [None] * len(given)
    out = []
    for warning, entry in zip(given, codes):
        if isinstance(entry, dict) and isinstance(entry.get("code"), str) and entry["code"]:
            code = entry["code"]
            # A group this ert does not know (a newer file's) is read as the code's, or the machine's.
            group = entry.get("group") if entry.get("group") in GROUPS else CODES.get(code, "machine")
        else:
            code = code_of(warning) if isinstance(warning, str) else classify(str(warning))
            group = CODES[code]
        out.append(Coded(str(warning), code, group))
    return out


def with_codes(texts: list, codes: list | None) -> list[str]:
    """Warnings kept as texts beside their codes (raw.jsonl's ``rank_warnings`` and ``rank_warning_codes``) as
    coded warnings again; a text without a code this ert knows (an older file's) stays plain, for ``classify``."""
    if not (isinstance(codes, list) and len(codes) == len(texts)):
        codes = [None] * len(texts)
    return [warn(code, str(text)) if isinstance(code, str) and code in CODES else str(text)
            for text, code in zip(texts, codes)]


__all__ = ["CODES", "GROUPS", "Coded", "CodedText", "classify", "code_of", "codes_of", "coded_warnings", "relabel",
           "warn", "with_codes"]
