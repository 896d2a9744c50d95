"""Non-ASCII paths under any locale (issue 41): written as the file system has them, printed without a traceback.

Under ``LANG=C`` with Python's UTF-8 mode off, ``résultats`` on the command line reaches ert as lone surrogates
(its bytes the ASCII locale cannot decode), a ``résultats`` read from a YAML file is text the ASCII file system
encoding cannot hold, and an ASCII stdout (``PYTHONIOENCODING=ascii``) cannot print ``é``: each was a
UnicodeEncodeError traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import REPO, command

DATA = REPO / "tests" / "data"
NAME = "résultats"
# The bytes the file system holds for NAME when the terminal that typed it is UTF-8: what ert must write.
NAME_BYTES = NAME.encode("utf-8")
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}  # no UTF-8 mode: ASCII file names and streams


def _run(argv: list, env: dict, cwd) -> subprocess.CompletedProcess:
    """``argv`` in ``cwd`` under ``env`` (over this environment); bytes out, as the terminal gets them."""
    full = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING")}
    return subprocess.run([os.fsencode(str(a)) for a in argv], cwd=cwd, env={**full, **env}, capture_output=True,
                          timeout=120)


def _run_dir(tmp_path):
    """A finished run's files in ``tmp_path/résultats`` (the busy 2-core bare run)."""
    run = tmp_path / NAME
    run.mkdir()
    shutil.copy(DATA / "bare-2core-busy.ceilings.json", run / "ceilings.json")
    shutil.copy(DATA / "bare-2core-busy.raw.jsonl", run / "raw.jsonl")
    return run


def test_a_report_into_a_non_ascii_folder_under_the_c_locale(tmp_path):
    """`ert report` embeds the run's path in the page: the surrogates were a UnicodeEncodeError (utf-8)."""
    _run_dir(tmp_path)
    proc = _run([command("ert"), "report", NAME, "-o", f"{NAME}/page.html"], C_LOCALE, tmp_path)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert b"report: " + NAME_BYTES + b"/page.html" in proc.stderr  # printed as the file system has it
    page = (tmp_path / NAME / "page.html").read_text(encoding="utf-8")  # UTF-8 throughout, no lone surrogate
    assert NAME in page


def test_an_error_naming_a_non_ascii_path_prints_its_bytes(tmp_path):
    proc = _run([command("ert"), "show", f"{NAME}/none.json"], C_LOCALE, tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [b"ert: error: " + NAME_BYTES + b"/none.json: no such file"]


def test_a_non_ascii_path_on_an_ascii_stream_is_escaped_not_a_traceback(tmp_path):
    """The issue's traceback: "'ascii' codec can't encode character '\\xe9'" printing the ceilings' path."""
    _run_dir(tmp_path)
    proc = _run([command("ert"), "analyze", f"{NAME}/raw.jsonl", "-o", f"{NAME}/again.json"],
                {"LC_ALL": "C", "PYTHONIOENCODING": "ascii"}, tmp_path)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert b"ceilings: r\\xe9sultats/again.json" in proc.stdout
    assert (tmp_path / NAME / "again.json").is_file()


def test_a_configs_non_ascii_output_dir_is_created_under_the_c_locale(tmp_path):
    """A config's ``output_dir: sortie-é`` (text from YAML) could not be a file name in ASCII: mkdir raised. The
    run directory is created under the name's UTF-8 bytes, the name a UTF-8 terminal shows."""
    script = ("import sys; from ert.measure import rundir; path, lock = rundir.claim_auto('sortie-\\u00e9'); "
              "lock.release(); print(path)")
    proc = _run([sys.executable, "-c", script], C_LOCALE, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert os.listdir(os.fsencode(tmp_path)) == ["sortie-é".encode("utf-8")]
    assert proc.stdout.startswith("sortie-é/".encode("utf-8"))


def test_a_name_no_locale_can_hold_is_one_line_not_a_traceback(tmp_path):
    """What slips past (a text path opened as it is, under an ASCII file system encoding): one line, exit 2."""
    script = ("import sys; from ert.cli import _guarded; "
              "sys.exit(_guarded(lambda args: open('donn\\u00e9es.txt', 'w'), None, 'ert'))")
    proc = _run([sys.executable, "-c", script], C_LOCALE, tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr.decode(errors="replace")
    assert proc.stderr.startswith(b"ert: error: donn\\xe9es.txt: cannot be a file name in this locale's encoding")
