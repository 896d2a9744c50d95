"""The progress line (ert/measure/progress.py): what it prints on a terminal and in a log, and its ETA."""

from __future__ import annotations

import io
from types import SimpleNamespace

from ert.measure import progress as progress_mod
from ert.measure.progress import Progress, _clock, point_cost
from ert.spec import KernelSpec


class Tty(io.StringIO):
    def isatty(self):
        return True


def _point(flops=1, wss_bytes=32 * 1024):
    return SimpleNamespace(spec=KernelSpec("fp64", flops, flops > 1), wss_bytes=wss_bytes)


def _record(point, *, seconds=1e-3, trials=1000, noisy=False, valid=True):
    elements = point.wss_bytes // point.spec.itemsize
    return {"spec": point.spec.to_dict(), "elements": elements, "trials": trials,
            "seconds": {"median": seconds}, "noisy": noisy, "valid": valid}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_clock_format():
    assert [_clock(s) for s in (-1, 0, 59.9, 60, 3599)] == ["0s", "0s", "59s", "1m00s", "59m59s"]


def test_cost_grows_with_the_working_set_and_the_flops():
    small, large, compute = _point(), _point(wss_bytes=1 << 30), _point(flops=64)
    assert point_cost(small, 0.01) < point_cost(large, 0.01)
    assert point_cost(compute, 0.01) > point_cost(small, 0.01)


def test_terminal_line_shows_done_total_the_rate_and_an_eta(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    out = Tty()
    p = Progress(stream=out, min_seconds=0.01)
    a, b = _point(), _point(flops=8)
    p.start(total=2, already=0, todo=[a, b])
    p.begin(a)
    clock.now += 10
    p.end(a, _record(a))  # 32 KiB x 2 (load + store) x 1000 trials in 1 ms: 65.5 GB/s
    line = out.getvalue().rsplit("\r", 1)[-1].rstrip()
    assert line.startswith("[1/2] fp64-add-rw-f1 32 KiB -> 65.5 GB/s  elapsed 10s, ETA ")
    eta_seconds = 10 * point_cost(b, 0.01) / point_cost(a, 0.01)
    assert line.endswith(f"ETA {_clock(eta_seconds)}")
    p.begin(b)
    p.end(b, _record(b, noisy=True, valid=False))  # 8 FLOPs/element: a compute point, in GFLOP/s
    line = out.getvalue().rsplit("\r", 1)[-1].rstrip()
    assert "[2/2] fp64-fma-rw-f8 32 KiB -> 32.8 GFLOP/s NOISY CHECK FAILED" in line
    p.finish()
    assert out.getvalue().endswith("\n") and "\n" not in out.getvalue()[:-1]  # one line, rewritten in place


def test_a_log_gets_a_line_per_interval_and_resume_is_said(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    out = io.StringIO()
    p = Progress(stream=out, interval=10.0)
    points = [_point() for _ in range(4)]
    p.start(total=6, already=2, todo=points)
    assert out.getvalue() == "resuming: 2 of 6 points already measured\n"
    for k, point in enumerate(points):
        clock.now += 4
        p.begin(point)
        p.end(point, _record(point))
    lines = out.getvalue().splitlines()[1:]
    # One line per 10 s, counting from the resume line at t = 100: the status at t = 112 only
    # (the third point begun after four are done), none at 104, 108 or 116.
    assert lines == [line for line in lines if line.startswith("[4/6] fp64-add-rw-f1 32 KiB  elapsed 12s, ETA 12s")]
    assert len(lines) == 1


def test_disabled_prints_nothing():
    out = Tty()
    p = Progress(stream=out, enabled=False)
    p.start(total=1, already=1, todo=[])
    p.say("hello")
    p.finish()
    assert out.getvalue() == ""


def test_say_ends_the_status_line_first():
    out = Tty()
    p = Progress(stream=out)
    p.start(total=1, already=0, todo=[_point()])
    p.begin(_point())
    p.say("warning: something")
    assert out.getvalue().endswith("\nwarning: something\n")


def test_integer_and_int8_tensor_points_show_giops():
    """The unit follows the kernel: GIOP/s for an int32 multiply-add and for the int8 tensor MMA, GFLOP/s for fp16's."""
    for spec, unit in ((KernelSpec("int32", 8, False), "GIOP/s"),
                       (KernelSpec("int8", 8192, True, pipe="tensor"), "GIOP/s"),
                       (KernelSpec("fp16", 4096, True, pipe="tensor"), "GFLOP/s")):
        out = Tty()
        p = Progress(stream=out, min_seconds=0.01)
        point = SimpleNamespace(spec=spec, wss_bytes=32 * 1024)
        p.start(total=1, already=0, todo=[point])
        p.begin(point)
        p.end(point, _record(point))
        line = out.getvalue().rsplit("\r", 1)[-1]
        assert f" {unit} " in line + " " and ("GFLOP/s" in line) == (unit == "GFLOP/s"), line
