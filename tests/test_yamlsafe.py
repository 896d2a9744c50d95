"""Bounded YAML (ert.config.yamlsafe): alias bombs, deep nesting and duplicate keys are one line each, at once,
in run configs (`ert validate`, `ert-run`) and in `ert profile`'s application files."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

from conftest import run_cmd, stderr_lines
from ert.config.schema import load
from ert.errors import ErtError

# Nine levels of nine aliases: 9^9 (387 million) strings once expanded, under a key the schema knows.
LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + LAUGHS + "threads: *i\n"
DEEP_FLOW = "threads: " + "[" * 600 + "]" * 600 + "\n"
DEEP_LINE = "threads: " + "[" * 20000 + "]" * 20000 + "\n"  # the scanner reads a line ahead: it stops too
DEEP_BLOCK = "threads:\n" + "".join("  " * (i + 1) + "a:\n" for i in range(600))


@contextlib.contextmanager
def _deadline(seconds: float):
    """Fail (not hang) when the block runs past ``seconds``: the old loader expanded a bomb for minutes."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _load_fault(tmp_path, text: str) -> tuple[str, float]:
    """The one error line of loading ``text`` as a config, and the seconds the load took, in a child process
    under a timeout: an old loader spent minutes in pydantic's Rust code, where no signal interrupts it."""
    import subprocess
    import sys

    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = ("import sys, time\nfrom ert.config.schema import load\nfrom ert.errors import ErtError\n"
            "start = time.perf_counter()\ntry:\n    load(sys.argv[1])\nexcept ErtError as exc:\n"
            "    print(f'{time.perf_counter() - start:.3f} {exc}')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stderr[-500:]
    seconds, line = proc.stdout.strip().split(" ", 1)
    return line, float(seconds)


@pytest.mark.parametrize("text, words", [(BOMB, "alias bomb"), (DEEP_FLOW, "nested more than"),
                                         (DEEP_LINE, "nested more than"),
                                         (DEEP_BLOCK, "nested more than"), ("threads: 2\nthreads: 3\n",
                                                                            "duplicate key 'threads'")])
def test_a_bomb_deep_nesting_or_a_repeated_key_is_one_line_at_once(tmp_path, text, words):
    line, seconds = _load_fault(tmp_path, text)
    assert words in line and ": line " in line, line
    assert seconds < 1.0, f"{seconds:.2f} s"  # parsing stops at the limit, nothing is expanded


def test_validate_answers_the_bomb_in_one_line(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(BOMB)
    proc = run_cmd("ert", "validate", path, timeout=20)  # the old loader hung here while memory grew
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1 and "alias bomb" in proc.stderr


def test_merge_keys_and_small_aliases_still_load(tmp_path):
    # `<<: *base` and then a key of its own is an override, as YAML means it, not a repeated key.
    path = tmp_path / "c.yaml"
    path.write_text("timing: &t {repeats: 3}\nprecisions: &p [fp64]\nthread_counts: [1]\nthreads: 1\n")
    cfg = load(path)
    assert cfg.timing.repeats == 3 and cfg.precisions == ["fp64"]
    from ert.config import yamlsafe

    assert yamlsafe.load("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n")["use"] == {"x": 1, "y": 3}


@pytest.mark.parametrize("text, words", [
    ("kernels:\n" + "".join("  " * (i + 1) + "- \n" for i in range(500)), "nested more than"),
    (BOMB.replace("threads: *i", "kernels: *i"), "alias bomb"),
    ("kernels:\n  - name: a\n    name: b\n    seconds: 1\n", "duplicate key 'name'"),
])
def test_profile_app_yaml_is_bounded_too(tmp_path, text, words):
    from ert.consumers.profile.appdata import read_handwritten

    with _deadline(10), pytest.raises(ErtError) as info:
        read_handwritten(text, path=tmp_path / "app.yaml", as_json=False)
    assert words in info.value.message and info.value.key.startswith("line ")
