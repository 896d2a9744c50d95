"""The report's footnotes and warnings: each rated derivation once, numbered; warnings by their group."""

from __future__ import annotations

import shutil
import textwrap

from ert.consumers.report_model import Report
from ert.consumers.report_model import derivations as model_derivations
from ert.records.warning_codes import CODES

# A group of warnings shows this many lines on the screen; the rest are counted.
GROUP_LINES = {"act": 5, "machine": 5, "bookkeeping": 3}  # lines a group shows by default; the rest are counted
# A clause shared by several derivations is a footnote of its own from this length on (shorter ones repeat).
SHARED_CLAUSE_CHARS = 40


class Notes:
    """The rated values' footnotes: each derivation once, numbered.

    ``verbose`` keeps every derivation whole and unwrapped, as the file holds
    it.  Otherwise (the screen) the measured clock, which every CPU derivation
    quotes, is note [1] (with the cores and GHz before it) and the others
    begin "[1] x ..."; a clause that several derivations share (a cited
    source, say) is a note of its own, which they name by number; and each
    note is wrapped to ``width``.  ``shorten`` puts a derivation's number in
    place of its text wherever a warning repeats it.
    """

    def __init__(self, doc: dict, *, verbose: bool, width: int):
        self.verbose, self.width = verbose, width
        self.base = self.clock = ""  # the clock note's text, on the screen only (_shared)
        rated = (doc.get("metadata", {}).get("backend_info") or {}).get("rated")
        rated = rated if isinstance(rated, dict) else {}
        # The derivations first, then the reasons some ceilings have none (an unrated L3, DRAM).
        derivations = model_derivations(doc)
        self.texts = [] if verbose else self._shared(derivations, rated)
        first = len(self.texts)
        self.texts += [self._short(how) for how in derivations]
        self.number = {how: first + k + 1 for k, how in enumerate(derivations)}
        if not verbose:
            self._factor_clauses(first)

    def _shared(self, derivations: list[str], rated: dict) -> list[str]:
        """Note [1], the measured clock as the derivations quote it ("2 core(s) x 3.69 GHz (measured: ...)")."""
        clock = f"({rated.get('clock_source')})" if rated.get("clock_source") else ""
        users = [how for how in derivations if clock and clock in how]
        if len(users) < 2:
            return []
        prefixes = [how[:how.index(clock) + len(clock)] for how in users]
        self.clock, self.base = clock, max(prefixes, key=prefixes.count)
        return [self.base]

    def _short(self, text: str) -> str:
        """A text with the clock note's replaced by its number: "[1] x 32 FP64 FLOP/cycle (...)"."""
        if not self.clock:
            return text
        return text.replace(self.base, "[1]").replace(self.clock, "(clock [1])")

    def _factor_clauses(self, first: int) -> None:
        """A "; "-separated clause of 40 characters or more that two derivations share becomes its own note."""
        seen: dict[str, int] = {}
        for text in self.texts[first:]:
            for clause in dict.fromkeys(_clauses(text)):
                seen[clause] = seen.get(clause, 0) + 1
        shared = [c for c, n in seen.items() if n > 1 and len(c) >= SHARED_CLAUSE_CHARS]
        derived = len(self.texts)
        for clause in shared:
            number = f"[{len(self.texts) + 1}]"
            self.texts[first:derived] = [t.replace(clause, number) for t in self.texts[first:derived]]
            self.texts.append(clause)

    def ref(self, how: str) -> str:
        return f"[{self.number[how]}]" if how in self.number else ""

    def lines(self) -> list[str]:
        if self.verbose:
            return [f"  [{i}] {text}" for i, text in enumerate(self.texts, 1)]
        out = []
        for i, text in enumerate(self.texts, 1):
            out += textwrap.wrap(text, width=self.width, initial_indent=f"  [{i}] ",
                                 subsequent_indent=" " * (len(str(i)) + 5), break_long_words=False,
                                 break_on_hyphens=False) or [f"  [{i}]"]
        return out

    def shorten(self, text: str) -> str:
        """``text`` with each derivation it repeats (longest first) replaced by its footnote's number."""
        for how in sorted(self.number, key=len, reverse=True):
            text = text.replace(how, self.ref(how))
        return self._short(text) if not self.verbose else text



def _clauses(text: str) -> list[str]:
    """The "; "-separated clauses of a derivation, each without the parentheses it closes but did not open.

    Only the outermost separators split: a clause's own parenthesis that holds a "; " stays whole (cut
    there, a note would read "(... [16]; [17]))")."""
    depth, cuts = 0, []
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if text.startswith("; ", i):
            cuts.append((i, depth))
    top = min((d for _, d in cuts), default=0)
    out, start = [], 0
    for i, d in cuts:
        if d == top:
            out.append(text[start:i])
            start = i + 2
    out.append(text[start:])
    clauses = []
    for clause in out:
        while clause.endswith(")") and clause.count(")") > clause.count("("):
            clause = clause[:-1]
        clauses.append(clause)
    return clauses


def report_width() -> int:
    """The terminal's width in columns (``COLUMNS`` if set), 100 when stdout is not a terminal."""
    return shutil.get_terminal_size((100, 24)).columns


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, at a word where one is near, ending in "..." when cut."""
    if len(text) <= width:
        return text
    room = max(width - 4, 1)
    cut = text.rfind(" ", 0, room + 1)
    return (text[:cut] if cut > room // 2 else text[:room]).rstrip(" ,;:(") + " ..."


def warnings_section(report: Report, notes: Notes, *, verbose: bool, width: int) -> list[str]:
    """The warnings under their group's heading (act on it, the kernel or the machine, bookkeeping), counted.

    Codes and groups come from the file (the report model's ``warnings``).  The default is a
    screen: one clipped line each, derivations as their footnote numbers, at
    most GROUP_LINES[group] a group (bookkeeping, read when a number looks odd, fewest); ``verbose`` prints
    every warning whole.
    """
    if not report.warning_count:
        return []
    lines = [f"Warnings ({report.warning_count})"
             + ("" if verbose else ", one line each (ert show --verbose RUN: in full)")]
    for group in report.warnings:
        mine, heading = list(group.warnings), group.heading
        shown = GROUP_LINES.get(group.group, 5)
        more = 0 if verbose else max(0, len(mine) - shown)
        lines.append(f" {heading} ({len(mine)}" + (f"; {shown} shown, {more} more with --verbose)" if more
                                                    else ")"))
        if verbose:
            for w in mine:
                # Keep multi-line warnings under their bullet.
                first, *rest = w.text.splitlines() or [""]
                lines.append(f"  - {first}")
                lines += [f"    {line}" for line in rest]
            continue
        # One line each: whitespace (a multi-line warning's too) made single spaces, derivations their numbers.
        lines += [clip(f"  - {' '.join(notes.shorten(w.text).split())}", width)
                  for w in _by_kind(mine)[:shown]]
    return lines


def _by_kind(warnings: list) -> list:
    """One warning of each code in turn (in CODES' order), so that a group's first lines show its kinds."""
    kinds: dict[str, list] = {}
    for w in sorted(warnings, key=lambda w: list(CODES).index(w.code) if w.code in CODES else len(CODES)):
        kinds.setdefault(w.code, []).append(w)
    rounds = max(len(ws) for ws in kinds.values())
    return [ws[k] for k in range(rounds) for ws in kinds.values() if k < len(ws)]


__all__ = ["GROUP_LINES", "Notes", "clip", "report_width", "warnings_section"]
