"""The report's screen (ert.consumers.terminal.notes): a bare run fits 70 rows at 100 columns, each derivation printed
once, warnings one line each under their groups; --verbose prints every warning and derivation whole."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import command, run_cmd
from ert.analysis.ceilings import build
from ert.records.ceilings_io import load_ceilings, validate
from ert.consumers.terminal.notes import GROUP_LINES
from ert.consumers.terminal.report import format_ceilings
from ert.records.rawio import read_raw
from ert.records.warning_codes import GROUPS, coded_warnings

DATA = Path(__file__).parent / "data"
# A real bare `ert-run` on this project's 2-core AMD EPYC guest (Zen 4 in the rated table), made while other
# sessions shared the machine: 92 % of its points noisy, 44 warnings in all three groups.
BUSY = DATA / "bare-2core-busy.ceilings.json"
BUSY_RAW = DATA / "bare-2core-busy.raw.jsonl"
# A real bare run of the same guest on a quiet machine (4 levels a curve, long L2/L3 derivations), re-analysed.
QUIET_RAW = DATA / "bare-zen4-full.raw.jsonl"
WIDTH = 100
MAX_ROWS = 70
FOOTNOTE = re.compile(r"^  \[(\d+)\] (.*)$")


def rows(text: str, width: int = WIDTH) -> int:
    """Terminal rows ``text`` takes at ``width`` columns: a longer line wraps, an empty one is a row."""
    return sum(max(1, math.ceil(len(line) / width)) for line in text.splitlines())


def _docs():
    return {"recorded": load_ceilings(BUSY), "analysed": build(read_raw(BUSY_RAW)),
            "quiet": build(read_raw(QUIET_RAW))}


@pytest.fixture(scope="module")
def docs() -> dict:
    out = _docs()
    for doc in out.values():
        validate(doc)
    return out


def footnotes(text: str) -> dict[int, str]:
    """The footnotes of a screen report, each joined back into one line (the wrap splits at spaces only)."""
    notes, current = {}, None
    for line in text.splitlines():
        match = FOOTNOTE.match(line)
        if match:
            current = int(match.group(1))
            notes[current] = match.group(2)
        elif current is not None and line.startswith("      "):
            notes[current] += " " + line.strip()
        else:
            current = None
    return notes


def expand(note: str, notes: dict[int, str]) -> str:
    """A footnote with every "[k]" it names replaced by footnote k, recursively."""
    return re.sub(r"\[(\d+)\]", lambda m: expand(notes[int(m.group(1))], notes), note)


def derivations(doc: dict) -> set[str]:
    return {e["rated"]["derivation"] for kind in ("memory", "compute") for e in doc["ceilings"][kind]
            if isinstance(e.get("rated"), dict) and e["rated"].get("derivation")}


@pytest.mark.parametrize("name", ["recorded", "analysed", "quiet"])
def test_a_bare_run_fits_70_rows_at_100_columns(docs, name):
    text = format_ceilings(docs[name], width=WIDTH)
    assert rows(text) <= MAX_ROWS, f"{rows(text)} rows:\n{text}"
    # Only the tables may run wider than the screen, and they do not here.
    assert max(len(line) for line in text.splitlines()) <= WIDTH


@pytest.mark.parametrize("name", ["recorded", "analysed", "quiet"])
def test_each_derivation_is_printed_once(docs, name):
    doc = docs[name]
    text = format_ceilings(doc, width=WIDTH)
    notes = footnotes(text)
    flat = " ".join(text.split())
    # Every footnote's text is printed once, in its footnote and nowhere else (not in a warning).
    for note in notes.values():
        assert flat.count(note) == 1, note
    # The measured clock is note [1]; the others refer to it, and every derivation is its footnotes expanded.
    clock = doc["metadata"]["backend_info"]["rated"]["clock_source"]
    assert clock in notes[1] and flat.count(clock) == 1
    expanded = {expand(note, notes) for note in notes.values()}
    for how in derivations(doc):
        assert how in expanded, how
    # A derivation that a warning repeats (a ceiling below its rated value) is its number there: at most once.
    assert all(flat.count(" ".join(how.split())) <= 1 for how in derivations(doc))
    repeated = [w for w in doc["warnings"] if any(how in w for how in derivations(doc))]
    assert all(re.search(r"\(\[\d+\]\)", line) for line in text.splitlines()
               if any(line.startswith(f"  - {w[:40]}") for w in repeated))
    assert bool(repeated) == (name != "quiet")  # the busy run's ceilings are below their rated values


def test_warnings_are_one_line_each_under_counted_groups(docs):
    doc = docs["recorded"]
    text = format_ceilings(doc, width=WIDTH)
    section = text.split("\nWarnings (")[1].splitlines()
    assert section[0].startswith(f"{len(doc['warnings'])})")
    coded = coded_warnings(doc)
    headings = [line for line in section if line.startswith(" ") and not line.startswith("  ")]
    assert [h.split(" (")[0].strip() for h in headings] == [
        GROUPS[g] for g in GROUPS if any(w.group == g for w in coded)]
    for heading in headings:
        group = next(g for g, title in GROUPS.items() if heading.strip().startswith(title))
        count = sum(1 for w in coded if w.group == group)
        assert heading.strip().startswith(f"{GROUPS[group]} ({count}")
        if count > GROUP_LINES[group]:
            assert f"{GROUP_LINES[group]} shown, {count - GROUP_LINES[group]} more with --verbose" in heading
    bullets = [line for line in section if line.startswith("  - ")]
    assert len(bullets) == sum(min(GROUP_LINES[g], sum(1 for w in coded if w.group == g)) for g in GROUPS)
    assert all(len(line) <= WIDTH for line in bullets)
    # What to act on comes first, and the busy machine is in it.
    assert headings[0].strip().startswith("act on it") and "busy machine" in section[2]


def test_the_width_is_the_terminal_s_and_100_when_not_a_terminal(tmp_path):
    """`ert show` through the installed command: a pipe is not a terminal, so 100 columns; COLUMNS narrows it."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    wide = subprocess.run([command("ert"), "show", str(BUSY)], capture_output=True, text=True, env=env, timeout=60)
    assert wide.returncode == 0, wide.stderr
    assert wide.stdout.rstrip("\n") == format_ceilings(load_ceilings(BUSY), width=100)
    narrow = subprocess.run([command("ert"), "show", str(BUSY)], capture_output=True, text=True,
                            env=dict(env, COLUMNS="80"), timeout=60)
    bullets = [line for line in narrow.stdout.splitlines() if line.startswith("  - ")]
    assert bullets and all(len(line) <= 80 for line in bullets) and any(len(line) > 70 for line in bullets)


def test_show_verbose_prints_every_warning_and_derivation_in_full():
    proc = run_cmd("ert", "show", "--verbose", BUSY)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(BUSY.read_text())
    for warning in doc["warnings"]:
        assert f"  - {warning}\n" in proc.stdout, warning
    for how in derivations(doc):
        assert f"] {how}\n" in proc.stdout, how
    # Every point left out of a level, as the analysis counted them.
    assert all(w in proc.stdout for w in doc["warnings"] if "in no level" in w)


def test_analyze_verbose_matches_show_verbose(tmp_path):
    out = tmp_path / "c.json"
    proc = run_cmd("ert", "analyze", "--verbose", BUSY_RAW, "-o", out)
    assert proc.returncode == 0, proc.stderr
    shown = run_cmd("ert", "show", "--verbose", out)
    assert proc.stdout.split("\nceilings: ")[0].rstrip("\n") == shown.stdout.rstrip("\n")


@pytest.mark.slow  # two ert-run processes on a run this host made
def test_ert_run_verbose_prints_the_report_in_full(tiny_copy):
    """`ert-run --resume` of a finished run measures nothing and prints its report: --verbose passes through."""
    proc = run_cmd("ert-run", "--resume", tiny_copy, "--verbose", "-q", timeout=180)
    assert proc.returncode == 0, proc.stderr
    doc = load_ceilings(tiny_copy / "ceilings.json")
    assert "Memory bandwidth, read+write" in proc.stdout  # the tables by curve, as before
    for warning in doc["warnings"]:
        assert warning in proc.stdout, warning
    default = run_cmd("ert-run", "--resume", tiny_copy, "-q", timeout=180)
    assert default.returncode == 0 and "Memory bandwidth (rw read+write" in default.stdout
