"""`ert-disturb`: a co-tenant on purpose -- a real-time process on one core, busy X us of every period for N s.

A neighbour on a shared host takes part of a core from time to time, and the
guest's counters need not show it.  This makes one: a process pinned to one
cpu at real-time priority (SCHED_FIFO 1, which needs root or CAP_SYS_NICE)
that spins ``--busy-us`` microseconds of every ``--period-us`` (default 300 of
1000: 30 % of the core) for ``--seconds``, after ``--after`` seconds.  A
plain busy loop at normal priority slows almost nothing: the scheduler hands
out slices of milliseconds, so a region of a few milliseconds mostly runs
untouched; a real-time process wakes up inside the regions, as a hypervisor's
other guest or OS noise does.  Without the privilege it falls back to
``nice -20`` (or the priority it has) and says so: a weaker disturbance.

Standard library only, so any ``python3`` can run this file as a script (the
test rig's ``jobs/local-cluster.sh throttle`` does, inside a namespace host).
``--json`` prints what ran (start and end Unix times, cpu, policy, the busy
share reached) as one JSON line at the end: the benchmark and the tests name
the disturbed stretch from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _arguments(argv):
    p = argparse.ArgumentParser(prog="ert-disturb", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("--busy-us", type=int, default=300, help="microseconds busy in every period (default 300)")
    p.add_argument("--period-us", type=int, default=1000, help="the period, microseconds (default 1000)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long to disturb; 0: until killed (default 10)")
    p.add_argument("--after", type=float, default=0.0, help="seconds to wait before starting (default 0)")
    p.add_argument("--cpu", type=int, default=None, help="the cpu to pin to (default: the last this process may use)")
    p.add_argument("--priority", type=int, default=1, choices=range(1, 100), metavar="1-99",
                   help="its SCHED_FIFO priority (default 1; above a real-time workload's to disturb it)")
    p.add_argument("--json", action="store_true", help="print what ran as one JSON line at the end")
    p.add_argument("-q", "--quiet", action="store_true", help="no line on stderr at the start and end")
    args = p.parse_args(argv)
    if not 0 < args.busy_us <= args.period_us:
        p.error(f"--busy-us must be more than 0 and at most --period-us ({args.period_us}), got {args.busy_us}")
    if args.period_us > 10_000_000 or args.seconds < 0 or args.after < 0:
        p.error("--period-us is at most 10 s, --seconds and --after are not negative")
    return args


def pin(cpu: int | None) -> int:
    """Pin this process to ``cpu`` (default: the last cpu it may use); the cpu it runs on."""
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    return cpu


def raise_priority(priority: int = 1) -> tuple[str, str | None]:
    """(policy, warning): SCHED_FIFO ``priority`` where allowed, else nice -20, else as it is (weaker)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return "fifo", None
    except (PermissionError, OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        return "nice-20", "no real-time priority (needs root or CAP_SYS_NICE): busy at nice -20, a weaker disturbance"
    except (PermissionError, OSError):
        return "normal", ("no real-time priority nor nice -20 (needs root or CAP_SYS_NICE): busy at normal priority, "
                          "which slows short regions little")


def spin(busy_s: float, period_s: float, seconds: float, clock=time.perf_counter) -> float:
    """Busy ``busy_s`` of every ``period_s`` for ``seconds`` (0: forever); the share of the time it was busy.

    The periods are laid on the clock from the start, so a sleep that wakes late delays the busy stretch
    within its period instead of stretching every period."""
    start = clock()
    busy_total = 0.0
    k = 0
    while seconds <= 0 or clock() - start < seconds:
        t0 = clock()
        end = t0 + busy_s
        while clock() < end:
            pass
        busy_total += max(0.0, clock() - t0)
        k = max(k + 1, int((clock() - start) / period_s))
        rest = start + k * period_s - clock()
        if rest > 0:
            time.sleep(rest)
    return busy_total / max(clock() - start, 1e-9)


def main(argv=None) -> int:
    args = _arguments(argv)
    cpu = pin(args.cpu)
    policy, warning = raise_priority(args.priority)
    say = (lambda text: None) if args.quiet else (lambda text: print(f"ert-disturb: {text}", file=sys.stderr,
                                                                     flush=True))
    if warning:
        print(f"ert-disturb: warning: {warning}", file=sys.stderr, flush=True)
    if args.after:
        time.sleep(args.after)
    start = time.time()
    say(f"cpu {cpu}, {policy}: busy {args.busy_us} of every {args.period_us} us for "
        f"{args.seconds:g} s" if args.seconds else f"cpu {cpu}, {policy}: busy {args.busy_us} of every "
        f"{args.period_us} us until killed")
    try:
        share = spin(args.busy_us / 1e6, args.period_us / 1e6, args.seconds)
    except KeyboardInterrupt:
        share = None
    end = time.time()
    say(f"done after {end - start:.1f} s")
    if args.json:
        print(json.dumps({"start": start, "end": end, "cpu": cpu, "policy": policy, "busy_us": args.busy_us,
                          "period_us": args.period_us, "busy_share": None if share is None else round(share, 3)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
