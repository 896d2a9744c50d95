"""`ert-disturb` (ert/measure/disturb.py): a short disturbance for real, its busy share, and its argument checks.

The long disturbance of a real run, named by the weather rule, is tests/test_weather_run.py's (slow).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ert.measure.disturb import _arguments, spin


def test_a_short_disturbance_runs_on_one_cpu_and_says_what_ran():
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "ert.measure.disturb", "--busy-us", "300", "--seconds", "0.3",
                           "--json", "-q"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ran["policy"] in ("fifo", "nice-20", "normal") and ran["cpu"] >= 0
    assert (ran["busy_us"], ran["period_us"]) == (300, 1000)
    assert t0 <= ran["start"] < ran["end"] and 0.25 < ran["end"] - ran["start"] < 5
    assert 0.05 < ran["busy_share"] <= 0.5, ran  # 300 of every 1000 us (a late wake-up only lowers it)
    # Without the privilege it says so on stderr, even with -q; with it, nothing.
    assert ("warning:" in proc.stderr) == (ran["policy"] != "fifo"), proc.stderr


def test_spin_keeps_its_share_of_every_period():
    share = spin(0.002, 0.005, 0.2)  # 40 %; a late wake-up on a busy host skips a period, so less
    assert 0.15 <= share <= 0.45, share


@pytest.mark.parametrize("argv, fragment", [
    (["--busy-us", "2000"], "--busy-us must be more than 0 and at most --period-us (1000), got 2000"),
    (["--busy-us", "0"], "--busy-us must be more than 0"),
    (["--seconds", "-1"], "--seconds and --after are not negative"),
])
def test_bad_arguments_are_one_usage_error(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exc:
        _arguments(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
