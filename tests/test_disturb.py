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
    assert 0.05 < ran["busy_share"] <= 0.6, ran  # 300 of every 1000 us, loosely (a busy host moves it)
    # Without the privilege it says so on stderr, even with -q; with it, nothing.
    assert ("warning:" in proc.stderr) == (ran["policy"] != "fifo"), proc.stderr


def test_spin_keeps_the_share_of_every_period_it_is_asked_for():
    # A busy host stretches a busy stretch it preempts and delays a wake-up: the shares are loose, their order not.
    always, seldom = spin(0.004, 0.004, 0.1), spin(0.0005, 0.01, 0.1)  # 100 % and 5 % asked for
    assert always >= 0.9 and seldom <= 0.6 and seldom < always, (always, seldom)


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
