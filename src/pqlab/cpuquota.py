"""Which CPUs a process runs on, and how much of one it gets.

`pick_cpus` splits this process's CPUs between a server and its clients (the TLS
experiments pin each side with taskset, as on two machines).

The rest limits a process to a fraction of one CPU core, as a stand-in for a weaker machine.

A pqlab-created cgroup gets a CFS quota of `fraction x period` per period, with the
shortest period the kernel allows for that quota (the quota must be at least 1 ms): a
process that needs the CPU for longer than the quota is then paused within milliseconds,
so a CPU-bound burst such as one handshake takes about 1/fraction times longer, which is
what a slower CPU does. With the kernel's default 100 ms period a mostly idle server would
almost never be throttled. cgroup v2
`cpu.max` where the cpu controller is on the unified hierarchy, else cgroup v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us`. Processes join it from `preexec_fn` (before
exec), and the cgroup is removed on exit, errors and Ctrl-C. When neither is usable the
caller gets a UserError that says why, never a silent unlimited run.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import time
from fractions import Fraction
from pathlib import Path

from pqlab.errors import UserError
from pqlab.units import show


def pick_cpus(threads: int) -> tuple[list[int], list[int]]:
    """(server CPUs, client CPUs): disjoint halves of this process's CPUs, the server
    getting the higher ones (at least one, at most `threads`). With one CPU both share it."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return cpus, cpus
    n = max(1, min(threads, len(cpus) // 2))
    return cpus[-n:], cpus[:-n]


def pick_cpu_pair() -> tuple[int, int] | None:
    """One CPU each for a single-threaded server and its client (server, client), or None
    without taskset or with fewer than two CPUs: the two run on different cores, as on two
    machines, so the client waking up on data cannot preempt the server in the middle of
    its flight."""
    server, client = pick_cpus(1)
    if not shutil.which("taskset") or server == client:
        return None
    return server[0], client[0]


MIN_QUOTA_US = 1000  # kernel minimum for cfs quota (and period)
V2_ROOT = Path("/sys/fs/cgroup")
V2_ALT = Path("/sys/fs/cgroup/unified")
V1_CPU = Path("/sys/fs/cgroup/cpu")


def _v2_root() -> Path | None:
    for root in (V2_ROOT, V2_ALT):
        controllers = root / "cgroup.controllers"
        try:
            if "cpu" in controllers.read_text().split():
                return root
        except OSError:
            continue
    return None


# The smallest fraction: its 1 ms minimum quota needs a 100 ms period, which still pauses a
# busy process within a handshake; below it the period nears the kernel's 1 s maximum and a
# handshake could run unthrottled for most of a period.
MIN_FRACTION = 0.01


def parse_fraction(text, what: str = "--server-cpu") -> float:
    """A fraction of one CPU core in [0.01, 1]: '0.25', '1', or '25%'.

    ASCII decimals only: float() would also take 'nan', 'inf', '1e-1', '0.5_0' and
    fullwidth or Arabic-Indic digits, which are refused here like any other non-number."""
    accepted = "accepted: a fraction of one CPU core from 0.01 to 1, e.g. 0.25 or 25%"
    s = str(text)
    m = re.fullmatch(r"[ \t\n\r\f\v]*(-?[0-9]{1,30}(?:\.[0-9]{1,30})?)[ \t]*(%?)[ \t\n\r\f\v]*", s)
    if not m:
        raise UserError(f"{what} {show(text)} is not a number; {accepted}")
    value = Fraction(m.group(1)) / (100 if m.group(2) else 1)
    if not Fraction(str(MIN_FRACTION)) <= value <= 1:  # exact: 0.01 is not a double
        raise UserError(f"{what} {show(text)} is out of range; {accepted}")
    return float(value)


class CpuQuota:
    """`with CpuQuota(0.25) as q: Popen(..., preexec_fn=q.join)`; `q.describe()` for the
    results metadata."""

    def __init__(self, fraction: float, name: str | None = None):
        self.fraction = fraction
        self.period_us = max(MIN_QUOTA_US, math.ceil(MIN_QUOTA_US / fraction))
        self.quota_us = max(MIN_QUOTA_US, int(round(fraction * self.period_us)))
        self.name = name or f"pqlab-{os.getpid()}-{int(time.time() * 1000) % 10**9}"
        self.path: Path | None = None
        self.mechanism = ""
        self._procs_file: str = ""

    def __enter__(self) -> CpuQuota:
        errors = []
        root = _v2_root()
        if root is not None:
            try:
                self._make_v2(root)
                return self
            except OSError as e:
                errors.append(f"cgroup v2 at {root}: {e.strerror or e}")
                self._remove()
        else:
            errors.append("cgroup v2: the cpu controller is not enabled on the unified hierarchy")
        if (V1_CPU / "cpu.cfs_quota_us").exists():
            try:
                self._make_v1()
                return self
            except OSError as e:
                errors.append(f"cgroup v1 at {V1_CPU}: {e.strerror or e}")
                self._remove()
        else:
            errors.append(f"cgroup v1: no cpu controller at {V1_CPU}")
        raise UserError(
            "cannot limit the CPU (" + "; ".join(errors) + "); run as root on "
            "a system with the cgroup cpu controller, or leave out the CPU limit"
        )

    def _make_v2(self, root: Path) -> None:
        with contextlib.suppress(OSError):  # may already be on, or not needed
            (root / "cgroup.subtree_control").write_text("+cpu")
        self.path = root / self.name
        self.path.mkdir()
        (self.path / "cpu.max").write_text(f"{self.quota_us} {self.period_us}")
        self.mechanism = f"cgroup v2 cpu.max {self.quota_us} {self.period_us} ({self.path})"
        self._procs_file = str(self.path / "cgroup.procs")

    def _make_v1(self) -> None:
        self.path = V1_CPU / self.name
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text(str(self.period_us))
        (self.path / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        self.mechanism = (
            f"cgroup v1 cpu.cfs_quota_us={self.quota_us} "
            f"cpu.cfs_period_us={self.period_us} ({self.path})"
        )
        self._procs_file = str(self.path / "cgroup.procs")

    def join(self) -> None:
        """For `preexec_fn`: move the calling (child) process into the cgroup."""
        fd = os.open(self._procs_file, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # "0" means the writing process
        finally:
            os.close(fd)

    def describe(self) -> dict:
        return {
            "fraction_of_one_core": self.fraction,
            "mechanism": self.mechanism,
            "quota_us": self.quota_us,
            "period_us": self.period_us,
        }

    def _remove(self) -> None:
        if self.path is None:
            return
        deadline = time.monotonic() + 5
        while True:
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                # Still has processes (just exiting); they were started by us and are ended
                # by their owners; wait briefly.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.path = None

    def __exit__(self, *exc) -> None:
        self._remove()
