"""Ctrl-C that lands where Python cannot raise (a ctypes callback of llvmlite's while Numba loads a kernel, a
__del__) still stops ert with its one line, never "Exception ignored ... Traceback".

Each case runs in its own interpreter: signal handlers belong to a process's main thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CALLBACK = """
import ctypes, time
{install}
def interrupted():
    raise KeyboardInterrupt
callback = ctypes.CFUNCTYPE(ctypes.c_int)(interrupted)
try:
    callback()  # a C library calling back into Python, as llvmlite's object cache does
    start = time.monotonic()
    while time.monotonic() - start < 5:
        pass
    print("never stopped")
except KeyboardInterrupt:
    print("stopped")
"""


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_without_the_hook_a_callback_swallows_ctrl_c_and_prints_a_traceback():
    """What the hook is for (Python's own behaviour, so this test shows the next one can fail)."""
    proc = python(CALLBACK.format(install=""))
    assert "Exception ignored" in proc.stderr and "Traceback" in proc.stderr
    assert proc.stdout.strip() == "never stopped"


def test_a_ctrl_c_swallowed_by_a_callback_reaches_the_main_flow_without_a_traceback():
    proc = python(CALLBACK.format(install="from ert.errors import interrupts_reach_main; interrupts_reach_main()"))
    assert proc.stderr == ""
    assert proc.stdout.strip() == "stopped"


def test_other_unraisable_exceptions_are_still_reported():
    proc = python("""
        from ert.errors import interrupts_reach_main
        interrupts_reach_main()
        class Broken:
            def __del__(self):
                raise ValueError("a real fault in a finaliser")
        Broken()
        print("went on")
    """)
    assert "ValueError: a real fault in a finaliser" in proc.stderr
    assert proc.stdout.strip() == "went on"


def test_held_interrupts_acts_on_ctrl_c_when_the_body_ends():
    proc = python("""
        import os, signal
        from ert.errors import held_interrupts
        done = []
        try:
            with held_interrupts():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(100000):
                    pass
                done.append("body")
        except KeyboardInterrupt:
            print("stopped after", done)
        print("handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """)
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == ["stopped after ['body']", "handler restored: True"]


def test_held_interrupts_leaves_an_ignored_sigint_ignored():
    """A rank's watchdog (SIGINT ignored) and a background job keep their handler: nothing is held or raised."""
    proc = python("""
        import os, signal
        from ert.errors import held_interrupts
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
        print("went on", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    """)
    assert proc.stdout.strip() == "went on True", proc.stderr


def test_ctrl_c_while_numba_loads_a_kernel_ends_after_the_load():
    """The Numba backend holds Ctrl-C over its compile-or-load: a SIGINT sent from inside the kernel factory (the
    moment llvmlite's callbacks run) stops the process once the kernel is ready, with no traceback."""
    pytest.importorskip("numba")
    proc = python("""
        import os, signal
        from ert.backends import numba_cpu
        from ert.errors import interrupts_reach_main
        from ert.spec import KernelSpec
        interrupts_reach_main()
        backend = numba_cpu.create(threads=1)
        real = backend._k.make_rw_add
        def interrupted_factory(width):
            os.kill(os.getpid(), signal.SIGINT)
            return real(width)
        backend._k.make_rw_add = interrupted_factory
        try:
            backend.prepare(KernelSpec("fp64", 1, False), elements_per_thread=4096)
            print("never stopped")
        except KeyboardInterrupt:
            print("stopped with the kernel", "ready" if backend._fn is not None else "missing")
    """)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "stopped with the kernel ready"
