"""A job across hosts ends within seconds when one host dies or is cut off, naming it.

MPI gives no time limit on a collective: when a host's process is killed the
launcher usually ends the job, but when its network goes (a cable, a switch,
a veth link set down) every other rank waits in a barrier until the batch
system's node timeout, or the job's time limit.  So in a run over several
hosts, each rank runs a small heartbeat process beside it, outside MPI and
outside the Python process whose kernels hold the interpreter lock:

* rank 0's ``monitor`` listens on a TCP port of its host;
* every other rank's ``beat`` connects to it, says who it is (rank, host),
  and sends a byte every ``INTERVAL`` seconds while its rank lives; a rank
  that finishes says ``bye`` first.

When a rank's connection closes without ``bye`` (its process died) or stays
silent for ``SILENT_AFTER`` seconds (its host or the network to it is gone),
the monitor prints one line naming the rank and the host, with where the
finished points are and how to resume, and kills rank 0, which makes the
launcher (``srun --kill-on-bad-exit``, mpiexec) end the job.  raw.jsonl holds
every point finished before (each line is fsynced as it is written).

Without a reachable port (a firewall between hosts) the run goes on without
it and says so.  ``ERT_WATCHDOG=0`` turns it off; ``ERT_WATCHDOG_SECONDS``
sets the silence (default 5 s; longer where hosts may stall, shorter to end
sooner).
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

INTERVAL = 0.5          # seconds between heartbeats
SILENT_AFTER = 5.0      # a rank silent this long is gone (with INTERVAL 0.5: ten missed beats)
CONNECT_SECONDS = 5.0   # how long a rank tries to reach the monitor at the start
GRACE = 0.5             # after a rank's connection closes: a job ending anyway takes rank 0 within this
VARIABLE = "ERT_WATCHDOG"
SECONDS_VARIABLE = "ERT_WATCHDOG_SECONDS"  # the silence after which a rank is gone (default SILENT_AFTER)


def enabled() -> bool:
    return os.environ.get(VARIABLE, "1").strip().lower() not in ("0", "off", "no", "false")


# ---------------------------------------------------------------------------- in the ranks
def silence_seconds(text: str | None) -> float:
    """The silence (seconds) after which a rank is gone: ``ERT_WATCHDOG_SECONDS``, default SILENT_AFTER.

    ValueError with the reason for anything but a number of at least 3 heartbeats (1.5 s).
    """
    if text is None or not text.strip():
        return SILENT_AFTER
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 3 * INTERVAL or value != value or value == float("inf"):
        raise ValueError(f"expected at least {3 * INTERVAL:g} seconds (3 heartbeats), got {text!r}")
    return value


class Watchdog:
    """This rank's heartbeat process (rank 0: the monitor); ``close()`` at a normal end."""

    def __init__(self, proc: subprocess.Popen | None, note: str, error: str | None = None):
        self.proc = proc
        self.note = note  # what the run says about it (active, or why not)
        self.error = error  # a bad ERT_WATCHDOG_SECONDS (rank 0 reports it, every rank ends): the run does not start

    def close(self) -> None:
        """The rank finished: the beat says bye (the monitor stops) and exits."""
        if not self.proc:
            return
        try:
            self.proc.stdin.write(b"bye\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
        self.proc = None


def start(comm, run_dir, hosts: list[str]) -> Watchdog:
    """Collective: rank 0 starts the monitor, the others their beats.  Only for runs over 2+ hosts."""
    if comm.size < 2 or len(set(hosts)) < 2:
        return Watchdog(None, "")
    if not enabled():
        return Watchdog(None, f"no watchdog ({VARIABLE}=0): a host that dies mid-run leaves the others waiting")
    from ert.hardware.hwinfo import ipv4_addresses

    proc, port, addresses, silent, error = None, None, [], SILENT_AFTER, None
    if comm.rank == 0:
        try:
            silent = silence_seconds(os.environ.get(SECONDS_VARIABLE))
        except ValueError as exc:
            error = str(exc)
        if error is None:
            proc = _spawn(["monitor", "--parent", str(os.getpid()), "--ranks", str(comm.size),
                           "--run-dir", str(run_dir), "--silent-after", str(silent)])
            line = _first_line(proc, CONNECT_SECONDS)
            port = int(line.split()[1]) if line.startswith("listening ") else None
            addresses = [addr.split("/")[0] for _, addr in ipv4_addresses()] + [socket.gethostname()]
    port, addresses, silent, error = comm.bcast((port, addresses, silent, error))
    if error:
        return Watchdog(None, "", error)
    ok = port is not None
    if comm.rank != 0 and ok:
        targets = ",".join(_ordered(addresses))
        proc = _spawn(["beat", "--parent", str(os.getpid()), "--rank", str(comm.rank), "--host", hosts[comm.rank],
                       "--connect", targets, "--port", str(port), "--silent-after", str(silent)])
        line = _first_line(proc, CONNECT_SECONDS + 1)
        if not line.startswith("connected"):
            proc.kill()
            proc, ok = None, False
    reached = comm.allgather(ok)
    if not all(reached):
        missing = [f"rank {r} on {hosts[r]}" for r, good in enumerate(reached) if not good]
        if proc:
            proc.kill()
        return Watchdog(None, f"no watchdog: {', '.join(missing[:3])} could not reach rank 0's heartbeat port "
                              f"(a firewall between hosts?); a host that dies mid-run leaves the others waiting")
    return Watchdog(proc, f"watchdog: a rank silent for {silent:g} s ends the job, naming its host")


def _ordered(addresses: list[str]) -> list[str]:
    """Rank 0's addresses, those in a subnet of this host first."""
    import ipaddress

    from ert.hardware.hwinfo import ipv4_addresses

    mine = [ipaddress.ip_interface(addr).network for _, addr in ipv4_addresses()]

    def near(addr: str) -> int:
        try:
            return 0 if any(ipaddress.ip_address(addr) in net for net in mine) else 1
        except ValueError:
            return 2  # a host name
    return sorted(addresses, key=near)


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ert.measure.watchdog", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=None, start_new_session=False)


def _first_line(proc: subprocess.Popen, seconds: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout=seconds):
        return ""
    return proc.stdout.readline().decode(errors="replace").strip()


# ---------------------------------------------------------------------------- the processes
def _parent_alive(pid: int) -> bool:
    return os.getppid() == pid


def monitor(parent: int, ranks: int, run_dir: str, silent_after: float = SILENT_AFTER) -> int:
    """Rank 0's side: accept every rank's beat; on a death, say so and kill rank 0 (the launcher ends the job)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(max(8, ranks))
    print(f"listening {server.getsockname()[1]}", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "parent")
    who: dict[socket.socket, dict] = {}
    buffers: dict[socket.socket, bytes] = {}
    last_sent = 0.0
    while True:
        if time.monotonic() - last_sent >= INTERVAL:
            # The beats hear rank 0 too: a rank cut off from it ends itself instead of waiting forever.
            last_sent = time.monotonic()
            for conn in list(who):
                try:
                    conn.send(b".\n")
                except OSError:
                    pass
        for key, _ in sel.select(timeout=INTERVAL):
            if key.data == "accept":
                conn, _ = server.accept()
                conn.setblocking(False)
                who[conn] = {"rank": None, "host": "?", "seen": time.monotonic(), "bye": False}
                buffers[conn] = b""
                sel.register(conn, selectors.EVENT_READ, "rank")
            elif key.data == "parent":  # rank 0 said bye or closed the pipe: finished, or died (nothing to watch)
                return 0
            else:
                conn = key.fileobj
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""
                state = who[conn]
                if not data:
                    sel.unregister(conn)
                    conn.close()
                    if not state["bye"]:
                        # A job being torn down (MPI_Abort after one rank's own error, srun killing the
                        # step) takes rank 0 too within moments: then the launcher has said it all.
                        time.sleep(GRACE)
                        if not _parent_alive(parent):
                            return 0
                        return _gone(parent, state, run_dir, "exited without finishing")
                    continue
                state["seen"] = time.monotonic()
                buffers[conn] += data
                while b"\n" in buffers[conn]:
                    line, buffers[conn] = buffers[conn].split(b"\n", 1)
                    fields = line.decode(errors="replace").split()
                    if fields[:1] == ["hello"] and len(fields) >= 3:
                        state["rank"], state["host"] = int(fields[1]), fields[2]
                    elif fields[:1] == ["bye"]:
                        state["bye"] = True
        if not _parent_alive(parent):
            return 0
        now = time.monotonic()
        for state in who.values():
            if not state["bye"] and now - state["seen"] > silent_after:
                return _gone(parent, state, run_dir,
                             f"sent nothing for {silent_after:g} s (the host is down or the network to it is cut)")


def _gone(parent: int, state: dict, run_dir: str, what: str) -> int:
    rank = state["rank"] if state["rank"] is not None else "?"
    print(f"ert-run: error: rank {rank} on {state['host']} {what}; every point finished before is in "
          f"{run_dir}/raw.jsonl: finish the run with ert-run --resume {run_dir}", file=sys.stderr, flush=True)
    try:
        os.kill(parent, signal.SIGKILL)  # the launcher sees rank 0 die and ends every rank
    except OSError:
        pass
    return 1


def beat(parent: int, rank: int, host: str, targets: list[str], port: int, silent_after: float = SILENT_AFTER) -> int:
    """A rank's side: connect to the monitor, then a byte every INTERVAL while the rank lives."""
    sock = None
    deadline = time.monotonic() + CONNECT_SECONDS
    while sock is None and time.monotonic() < deadline:
        for target in targets:
            try:
                sock = socket.create_connection((target, port), timeout=1.0)
                break
            except OSError:
                continue
        else:
            time.sleep(0.2)
    if sock is None:
        print("unreachable", flush=True)
        return 1
    sock.sendall(f"hello {rank} {host}\n".encode())
    print("connected", flush=True)
    sock.settimeout(2.0)
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ, "rank")
    sel.register(sock, selectors.EVENT_READ, "monitor")
    heard = time.monotonic()
    monitor_open = True
    last_sent = 0.0
    while True:
        for key, _ in sel.select(timeout=INTERVAL):
            if key.data == "rank":
                line = sys.stdin.buffer.readline()
                if line.strip() == b"bye":
                    try:
                        sock.sendall(b"bye\n")
                    except OSError:
                        pass
                    sock.close()
                    return 0
                if not line:  # the rank's end of the pipe closed without bye: it died
                    sock.close()
                    return 0
            else:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if data:
                    heard = time.monotonic()
                else:
                    # The monitor closed: rank 0 finished or died, and the launcher ends this rank.
                    sel.unregister(sock)
                    monitor_open = False
        if not _parent_alive(parent):
            sock.close()
            return 0
        if monitor_open and time.monotonic() - heard > silent_after:
            # Rank 0's host is down or cut off: nobody will end this rank, so it ends itself.
            print(f"ert-run: error: rank {rank} on {host} heard nothing from rank 0 for {silent_after:g} s (its "
                  f"host is down or the network to it is cut); ending this rank", file=sys.stderr, flush=True)
            try:
                os.kill(parent, signal.SIGKILL)
            except OSError:
                pass
            return 1
        if monitor_open and time.monotonic() - last_sent >= INTERVAL:
            last_sent = time.monotonic()
            try:
                sock.sendall(b".\n")
            except OSError:
                monitor_open = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ert.measure.watchdog",
                                     description="ert-run's heartbeat processes (started by ert-run itself)")
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("monitor")
    m.add_argument("--parent", type=int, required=True)
    m.add_argument("--ranks", type=int, required=True)
    m.add_argument("--run-dir", required=True)
    m.add_argument("--silent-after", type=float, default=SILENT_AFTER)
    b = sub.add_parser("beat")
    b.add_argument("--parent", type=int, required=True)
    b.add_argument("--rank", type=int, required=True)
    b.add_argument("--host", required=True)
    b.add_argument("--connect", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--silent-after", type=float, default=SILENT_AFTER)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the rank; it ends us by closing the pipe
    if args.mode == "monitor":
        return monitor(args.parent, args.ranks, args.run_dir, args.silent_after)
    return beat(args.parent, args.rank, args.host, [t for t in args.connect.split(",") if t], args.port,
                args.silent_after)


if __name__ == "__main__":
    sys.exit(main())
