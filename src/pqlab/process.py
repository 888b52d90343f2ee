"""The process layer: starting, supervising and stopping every child process the lab runs,
on this machine, in one of its network namespaces, or on a remote host.

    proc = EngineProcess(["tls", "server", ...], "TLS server", topo=hosts, side="server")
    listening = proc.wait_for("listening", 30)
    records = proc.finish(60)

`Process` runs any program that speaks JSON lines (the engine, the lab's network probes), or
with `json_lines=False` any program that prints text (a library's own tools), on
whichever host runs one side of a topology: this machine, one of its namespaces
(`pqlab.net.topology.TwoHosts`), or a remote host over SSH (`pqlab.net.remote.RemoteHosts`),
optionally pinned to a CPU or placed in a cgroup (locally). The child is a `LocalChild` or a
`pqlab.net.ssh.RemoteChild` behind one interface; background threads read its output, so a
chatty process never blocks on a full pipe; callers wait for a record type with a bound,
collect records, stop it (TERM, then KILL, the whole process group) and read its CPU time.

Arguments that name things living on this machine are marked (`Program`, `InFile`,
`OutFile`): locally each is just its path; a remote host runs its own installed engine,
gets the inputs uploaded and sends the outputs back when the process has finished. Every
wait is bounded; every process is stopped on error, Ctrl-C and SIGTERM; a remote one also
when its SSH session closes (see `pqlab.net.ssh`). One-shot engine calls that need no
supervision are `pqlab.engine.run`.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pqlab import engine
from pqlab.errors import EngineError, EngineIOError, UserError

# --- arguments that name this machine's things ----------------------------------------------


# fcntl's F_SETPIPE_SZ (Linux; Python names it from 3.10 on some builds only).
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass(frozen=True)
class Program:
    """An engine program (`pqlab.engine.programs`; a stack names the one that has it,
    `Stack.program`), run as whichever host runs the process has it."""

    name: str = engine.MAIN

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class InFile:
    """A local file the process reads."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class OutFile:
    """A file the process writes, wanted at `path` on this machine once it has finished.
    `kind` says what it is ("pcap" for captures, whose timestamps belong to the clock of the
    host that wrote them; "secret" for key logs, kept 0600)."""

    path: Path
    kind: str = "data"

    def __str__(self) -> str:
        return str(self.path)


def local(argv) -> list[str]:
    """The argv as it runs on this machine."""
    return [str(engine.binary(a.name)) if isinstance(a, Program) else str(a) for a in argv]


# --- children and their supervision ----------------------------------------------------------


class LocalChild:
    """A process on this machine (or in one of its namespaces): what `Process` supervises
    through the same interface as a remote one (`pqlab.net.ssh.RemoteChild`)."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self.stdout, self.stderr = popen.stdout, popen.stderr
        self.rusage = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def reap(self, timeout: float) -> bool:
        """Wait (bounded) for the process to exit, keeping its resource usage. Woken by
        the exit itself (a pidfd), where the kernel has them: a batch ends some 300
        processes, and a 5 ms polling step cost each of them half of that on average."""
        if self.popen.returncode is not None:
            return True
        deadline = time.monotonic() + timeout
        pidfd = _pidfd(self.popen.pid)
        try:
            while True:
                try:
                    pid, status, usage = os.wait4(self.popen.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere (a topology teardown)
                    self.popen.poll()
                    return True
                if pid:
                    self.popen.returncode = os.waitstatus_to_exitcode(status)
                    self.rusage = usage
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if pidfd is None:
                    time.sleep(min(left, 0.005))
                else:
                    select.select([pidfd], [], [], left)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def signal(self, sig: int) -> None:
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def collect(self) -> None:
        """Output files are already where they belong."""

    def release(self) -> None:
        """Nothing to let go of."""

    def cpu_seconds(self) -> float | None:
        if self.rusage is None:
            return None
        return self.rusage.ru_utime + self.rusage.ru_stime


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when process `pid` exits (Linux 5.3+), or
    None where there is none (then `reap` polls)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _spawn(argv: list, what: str, topo, side, env, preexec_fn, lifetime, cwd=None):
    """Start argv on the host that runs `side` of `topo` (this machine without a topology)."""
    remote = topo.remote_side(side) if topo is not None and hasattr(topo, "remote_side") else None
    if remote is not None:
        if preexec_fn is not None or cwd is not None:
            raise UserError(
                f"{what}: a local process setting (CPU quota, directory) cannot apply on "
                f"{remote.label}"
            )
        return remote.spawn(argv, what, env=env, lifetime=lifetime)
    kw = dict(
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # our own process group: stop() signals all of it
        env={**os.environ, **env} if env else None,
        preexec_fn=preexec_fn,
        cwd=cwd,
    )
    cmd = local(argv)
    return LocalChild(
        topo.popen(side, cmd, **kw) if topo is not None else subprocess.Popen(cmd, **kw)
    )


class Process:
    """A program that speaks JSON lines (the engine, the lab's network probes), supervised
    as the module docstring says. `argv` is the whole command line; its elements may be
    markers (`Program`, `InFile`, `OutFile`), which the host running
    it resolves. `lifetime` bounds a remote process's life (it ends by itself after that
    many seconds even if the lab is gone)."""

    def __init__(
        self,
        argv: Sequence,
        what: str,
        topo=None,
        side: str | None = None,
        cpu: int | None = None,
        env: dict | None = None,
        preexec_fn: Callable[[], None] | None = None,
        lifetime: float | None = None,
        batch_s: float | None = None,
        json_lines: bool = True,
        cwd: Path | None = None,
    ):
        self.what = what
        # Without JSON lines, stdout is kept as text (`output`), nothing is parsed.
        self.json_lines = json_lines
        self._text: list[str] = []
        # With batch_s, a local process's output is read in chunks at most every batch_s
        # seconds (immediately again while the pipe stays full), so a process that prints a
        # record per connection costs the lab a wake-up per batch, not two thread switches
        # per record.
        self.batch_s = batch_s
        # Set once the process has ended: a batched reader then reads the rest at once.
        self._ended = threading.Event()
        argv = list(argv)  # str or InFile/OutFile (files a remote host gets or sends)
        if cpu is not None:  # a CPU number or a taskset list ("0,2")
            argv = ["taskset", "-c", str(cpu), *argv]
        self.p = _spawn(argv, what, topo, side or "server", env, preexec_fn, lifetime, cwd)
        self.records: list[dict] = []
        self.listening: dict | None = None
        # The record that says the process is ready to be used, for whoever waits for it
        # (`pqlab.tls.runner.await_ready`); None: it is ready once started.
        self.ready_record: str | None = None
        self._lines: list[str] = []
        self._err: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def rusage(self):
        return getattr(self.p, "rusage", None)

    @property
    def local(self) -> bool:
        """Whether the process runs on this machine (its pid is one of ours, /proc shows it)."""
        return isinstance(self.p, LocalChild)

    # --- reading ---------------------------------------------------------------------------
    def _read_out(self) -> None:
        assert self.p.stdout is not None
        # Batches are of a local pipe; a remote process's lines arrive one by one from the
        # SSH connection's thread already.
        if self.batch_s and self.local:
            self._read_out_batched(self.batch_s)
            return
        with contextlib.suppress(ValueError, OSError):  # pipe closed by stop()
            for line in self.p.stdout:
                with self._cond:
                    self._lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _read_out_batched(self, batch_s: float) -> None:
        assert self.p.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        partial = ""
        chunk_size = 1 << 16
        with contextlib.suppress(ValueError, OSError):  # pipe closed by stop()
            fd = self.p.stdout.fileno()
            # A pipe holds 64 KiB by default: a process printing faster than that per batch
            # would wait for the reader. Ask for 1 MiB (the kernel's default ceiling for
            # pipe-max-size; a socket or a refusal keeps what it has).
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
            while True:
                data = os.read(fd, chunk_size)
                if not data:
                    break
                text = partial + decoder.decode(data)
                *lines, partial = text.split("\n")
                if lines:
                    with self._cond:
                        self._lines.extend(line + "\n" for line in lines)
                        self._cond.notify_all()
                if len(data) < chunk_size:
                    self._ended.wait(batch_s)
        with self._cond:
            if partial:
                self._lines.append(partial)
            self._eof = True
            self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.p.stderr is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.p.stderr:
                self._err.append(line)
                # The last lines are the useful ones; a text tool's report is all of it
                # (bounded all the same).
                del self._err[: -50 if self.json_lines else -100_000]

    def _parse_pending(self) -> list[dict]:
        with self._cond:
            lines, self._lines = self._lines, []
        if not self.json_lines:
            self._text.extend(lines)
            return []
        new = []
        for line in lines:
            if line.strip():
                rec = engine.parse_line(line)  # raises the engine's error record
                new.append(rec)
                self.records.append(rec)
        return new

    @property
    def pid(self) -> int:
        return self.p.pid

    @property
    def returncode(self) -> int | None:
        return self.p.returncode

    def output(self) -> str:
        """Everything the process printed on stdout so far (`json_lines=False`)."""
        self._parse_pending()
        return "".join(self._text)

    def stderr_text(self) -> str:
        """The last lines the process printed on stderr."""
        return "".join(self._err)

    def last_stderr(self) -> str:
        err = "".join(self._err).strip()
        return err.splitlines()[-1] if err else ""

    def take(self, *types: str) -> list[dict]:
        """Records of these types received so far (parsing what has arrived)."""
        self._parse_pending()
        return [r for r in self.records if r.get("type") in types]

    def wait_for(self, rtype: str, timeout: float) -> dict:
        """The first record of type `rtype` (bounded by `timeout`); the process is stopped and
        EngineError raised if it ends or times out first."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                for rec in self._parse_pending():
                    if rec["type"] == rtype:
                        return rec
                with self._cond:
                    if self._eof and not self._lines:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    if not self._lines:
                        self._cond.wait(timeout=min(left, 0.5))
        except EngineError:
            self.stop()
            raise
        self.stop()
        err = self.last_stderr()
        raise EngineIOError(
            f"{self.what} did not report {rtype!r} within {timeout:.0f} s"
            + (f": {err}" if err else "")
        )

    def iter_records(self, timeout: float | None = None):
        """Yield records as they arrive until the process closes its output (bounded by
        `timeout` in total, if given)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            yield from self._parse_pending()
            with self._cond:
                if self._eof and not self._lines:
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if not self._lines:
                    self._cond.wait(timeout=0.5 if left is None else min(left, 0.5))
        self.stop()
        raise EngineIOError(f"{self.what} did not finish within {timeout:.0f} s")

    def wait_count(self, rtypes: tuple[str, ...], count: int, timeout: float) -> list[dict]:
        """Wait until `count` records of these types have arrived (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.take(*rtypes)
            if len(got) >= count:
                return got
            with self._cond:
                if self._eof and not self._lines:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self._lines:
                    self._cond.wait(timeout=min(left, 0.5))
        raise EngineIOError(
            f"{self.what} reported {len(self.take(*rtypes))} of {count} "
            f"{'/'.join(rtypes)} records within {timeout:.0f} s"
        )

    # --- ending ------------------------------------------------------------------------------
    def _reap(self, timeout: float) -> bool:
        return self.p.reap(timeout)

    def finish(self, timeout: float) -> list[dict]:
        """Wait for the process to exit by itself; all its records, or the engine's error.
        Its output files are where they belong afterwards (fetched from a remote host)."""
        if not self._reap(timeout):
            self.stop()
            raise EngineIOError(f"{self.what} did not finish within {timeout:.0f} s")
        self._ended.set()
        for t in self._threads:
            t.join(timeout=10)
        self._parse_pending()  # raises the engine's own error record first
        if self.p.returncode != 0:
            err = self.last_stderr() or f"exit {self.p.returncode}"
            raise EngineError(f"{self.what} failed: {err}")
        self.p.collect()
        return self.records

    def signal(self, sig: int) -> None:
        self.p.signal(sig)

    def stop(self) -> None:
        """Terminate (then kill) the process and its group; never leaves it running."""
        if self.p.returncode is None:
            self.signal(signal.SIGTERM)
            if not self._reap(5):
                self.signal(signal.SIGKILL)
                self._reap(5)
        self._ended.set()
        self.p.release()
        for t in self._threads:
            t.join(timeout=2)
        for f in (self.p.stdout, self.p.stderr):
            if f:
                with contextlib.suppress(Exception):
                    f.close()

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the finished process (None before it ended)."""
        return self.p.cpu_seconds()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class EngineProcess(Process):
    """The engine's `program` with ARGS under supervision (on whichever host runs `side` of
    `topo`)."""

    def __init__(self, args: Sequence, what: str, program: str = engine.MAIN, **kw):
        super().__init__([Program(program), *args], what, **kw)


def stream(
    args: Sequence,
    timeout: float | None = None,
    env: dict | None = None,
    program: str = engine.MAIN,
):
    """Run the engine and yield its records as they arrive (for commands that print as they
    go, such as `connect`); the engine's error becomes the matching exception."""
    what = f"engine {' '.join(map(str, args[:2]))}"
    proc = EngineProcess(args, what, program=program, env=env)
    try:
        yield from proc.iter_records(timeout)
        proc.finish(10)
    finally:
        proc.stop()
