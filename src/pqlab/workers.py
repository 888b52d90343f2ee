"""Worker processes for the lab's own CPU work between measurements (analysing finished
cells): one per CPU this process may use, so the work after a batch of handshakes takes
the machine's cores instead of one.

    with Workers() as pool:
        for result in pool.map(analyse_one, jobs):   # in the jobs' order
            commit(result)

Nothing may run beside a timed measurement, so callers use the pool only between them
(docs/handshake.md, "What runs when"). Workers are started from a fresh server process
(multiprocessing's forkserver: never a fork of the lab, whose threads read its children's
output), ignore Ctrl-C (the lab stops them), and are terminated when the block ends,
whatever happens. With one CPU the jobs run in this process, one after another.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator

# What the fork server imports before it forks any worker: the main module (as
# multiprocessing does by default) and the lab, whose analysis and figures the jobs run.
PRELOAD = ["__main__", "pqlab.cli"]


def usable_cpus() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def _ignore_interrupt() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Workers:
    def __init__(self, processes: int | None = None):
        self.processes = usable_cpus() if processes is None else processes
        self._pool = None
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None

    def start_soon(self) -> None:
        """Start the workers in a thread of their own (the first pool of a process waits
        some 0.5 s for the fork server's imports): `ready` says when they are up, and
        the caller goes on meanwhile. Nothing to start with one CPU."""
        if self.processes > 1 and self._starting is None:
            self._starting = threading.Thread(target=self._started, daemon=True)
            self._starting.start()

    def wait_started(self) -> None:
        """Until the workers `start_soon` started are up."""
        if self._starting is not None:
            self._starting.join()

    @property
    def ready(self) -> bool:
        """Whether the workers are up (`start_soon`, or a first job)."""
        return self._pool is not None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def map(self, fn: Callable, jobs: Iterable) -> Iterator:
        """fn(job) for every job, in the workers, results in the jobs' order; an exception
        in a job is raised here when its result is due. `fn` must be a module-level
        function and jobs and results picklable."""
        jobs = list(jobs)
        if self.processes <= 1 or len(jobs) <= 1:
            return map(fn, jobs)
        return self._started().imap(fn, jobs)

    def submit(self, fn: Callable, job):
        """fn(job) started in a worker at once; `.get()` on the result waits for it (and
        raises its exception). With one CPU it runs here, now."""
        if self.processes <= 1:
            return _Done(fn, job)
        return self._started().apply_async(fn, (job,))

    def _started(self):
        with self._lock:
            if self._pool is None:
                ctx = multiprocessing.get_context("forkserver")
                # The server imports the lab once; every worker forked from it has it
                # already (a pool after the first is ready in some 10 ms instead of 0.6 s
                # of imports per worker: the analysis's pool, then the export's figure
                # workers).
                ctx.set_forkserver_preload(PRELOAD)
                self._pool = ctx.Pool(self.processes, initializer=_ignore_interrupt)
            return self._pool

    def close(self) -> None:
        """Stop the workers (at once: a job still running is abandoned)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


class _Done:
    """A job run at once in this process, with the `.get()` of a pool's result."""

    def __init__(self, fn: Callable, job):
        self._error: BaseException | None = None
        try:
            self._value = fn(job)
        except Exception as e:  # raised when the result is asked for, as a pool's would be
            self._error, self._value = e, None

    def get(self):
        if self._error is not None:
            raise self._error
        return self._value
