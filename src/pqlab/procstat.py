"""What a child process cost the machine: CPU time and peak memory, measured from outside.

CPU time comes from the kernel's accounting of the finished process (`wait4`'s rusage, kept
by `pqlab.tls.process.Process`): user + system seconds of that process alone.

Peak memory cannot come from the same place: `ru_maxrss` of a child also counts the memory
image it started from. A child forked (or vforked) from the lab inherits the lab's resident
set until it execs, and Linux keeps that image's high-water mark in `ru_maxrss` across exec,
so every child would report at least the lab's own ~150 MiB (numpy, DuckDB, matplotlib).
`PeakRss` therefore samples `VmHWM` in `/proc/PID/status`, which belongs to the process's
current memory image only, every `interval` seconds while the child runs, and keeps the
largest value. VmHWM is itself a high-water mark, so a sample taken after the peak still
sees it; only growth in the last interval before the process exits can be missed, and a
process that ends before the first sample reports None.
"""

from __future__ import annotations

import threading
from pathlib import Path

DEFAULT_INTERVAL = 0.02


def vm_hwm_kib(pid: int) -> int | None:
    """The process's peak resident set (KiB) so far, or None once it has exited."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None  # a zombie has no memory image left


class PeakRss:
    """Sample a running process's VmHWM in a background thread until `stop()`."""

    def __init__(self, pid: int, interval: float = DEFAULT_INTERVAL):
        self.pid = pid
        self.interval = interval
        self.peak: int | None = None
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        v = vm_hwm_kib(self.pid)
        if v is not None and (self.peak is None or v > self.peak):
            self.peak = v

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def stop(self) -> int | None:
        """Stop sampling (one last sample if the process still exists); the peak in KiB."""
        self._stop.set()
        self._thread.join(timeout=2)
        self._sample()
        return self.peak


def cpu_seconds(proc) -> tuple[float | None, float | None]:
    """User and system CPU seconds of a finished `process.Process` (None before it ended)."""
    ru = getattr(proc, "rusage", None)
    if ru is None:
        return None, None
    return ru.ru_utime, ru.ru_stime
