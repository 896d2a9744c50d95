"""Progress on stderr: points done/total, the current point, its result and the ETA."""

from __future__ import annotations

import sys
import time

from ert.units import human_bytes


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def point_cost(point, min_seconds: float) -> float:
    """Relative cost of a point for the ETA: fixed timed work plus the size of one trial."""
    work = point.wss_bytes * max(1, point.spec.flops_per_element // 8)
    return min_seconds + work / 2e10


class Progress:
    """Rewrites one status line on a terminal; on a log file, prints a line every ``interval`` seconds."""

    def __init__(self, *, stream=None, min_seconds: float = 0.01, interval: float = 10.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_seconds = min_seconds
        self.interval = interval
        self.enabled = enabled
        self._last_print = 0.0
        self._width = 0

    def start(self, *, total: int, already: int, todo: list) -> None:
        self.total, self.done = total, already
        self._cost_left = sum(point_cost(p, self.min_seconds) for p in todo)
        self._cost_done = 0.0
        self._t0 = time.monotonic()
        self._current = ""
        if already and self.enabled:
            self._emit(f"resuming: {already} of {total} points already measured", force=True, newline=True)

    def extend(self, *, total: int, todo: list) -> None:
        """More points were planned (an adaptive sweep's next batch)."""
        self.total = total
        self._cost_left += sum(point_cost(p, self.min_seconds) for p in todo)

    def begin(self, point) -> None:
        self._current = f"{point.spec.key} {human_bytes(point.wss_bytes)}"
        self._status("")

    def end(self, point, record: dict) -> None:
        self.done += 1
        cost = point_cost(point, self.min_seconds)
        self._cost_done += cost
        self._cost_left -= cost
        from ert.spec import ops_unit, rates

        gbytes_per_s, gflops_per_s = rates(record)
        spec = record["spec"]
        # As the analysis reads them: 1 FLOP/element is bandwidth, more is compute (GIOP/s for integers and the
        # int8 tensor MMA, GOP/s for an integer+float mix).
        unit = ops_unit(spec["precision"], spec.get("mix"), spec.get("pipe", "vector"))
        rate = f"{gbytes_per_s:.1f} GB/s" if spec["flops_per_element"] < 2 else f"{gflops_per_s:.1f} {unit}"
        flag = " NOISY" if record["noisy"] else ""
        flag += "" if record["valid"] else " CHECK FAILED"
        self._status(f"{rate}{flag}")

    def _status(self, result: str) -> None:
        elapsed = time.monotonic() - self._t0
        eta = elapsed / self._cost_done * self._cost_left if self._cost_done > 0 else None
        text = (f"[{self.done}/{self.total}] {self._current}"
                + (f" -> {result}" if result else "")
                + (f"  elapsed {_clock(elapsed)}" + (f", ETA {_clock(eta)}" if eta is not None else "")))
        self._emit(text)

    def _emit(self, text: str, *, force: bool = False, newline: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty and not newline:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            now = time.monotonic()
            if not force and now - self._last_print < self.interval:
                return
            self._last_print = now
            if self.tty and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self._width = 0
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def say(self, text: str) -> None:
        """A line of its own (a warning or a phase change)."""
        if self.enabled:
            self.finish()
            self.stream.write(text + "\n")
            self.stream.flush()
