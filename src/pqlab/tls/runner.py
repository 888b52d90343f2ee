"""The one TLS runner: starting and supervising engine processes, and the typed specs that
become their arguments.

    server = start_server(ServerSpec(tls, chain, listen=f"{hosts.server_ip}:4433"), hosts)
    records = run_client(ClientSpec(tls, connect=..., ca=chain.root, n=100), hosts)
    server_records = server.finish(30)

`EngineProcess` runs any engine subcommand (TLS server or client, capture) on whichever host
runs one side of a topology: this machine, one of its namespaces (`TwoHosts`), or a remote
host over SSH (`pqlab.net.remote.RemoteHosts`), optionally pinned to a CPU or placed in a
cgroup (locally). The process is a `LocalChild` or a `pqlab.net.ssh.RemoteChild` behind one
interface; background threads read its output, so a chatty process never blocks on a full
pipe; callers wait for a record type with a bound, collect records, stop it (TERM, then
KILL, the whole process group) and read its CPU time. Files in its arguments are marked
(`pqlab.net.argv`): a remote host gets the inputs uploaded and sends the outputs back when
the process has finished. Every wait is bounded; every process is stopped on error, Ctrl-C
and SIGTERM; a remote one also when its SSH session closes (see `pqlab.net.ssh`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import engine
from pqlab.catalog import Algorithm
from pqlab.errors import EngineError, EngineIOError, UserError
from pqlab.net import argv as hostargv
from pqlab.tls import stacks
from pqlab.tls.chains import Chain
from pqlab.tls.negotiation import Expected


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
        """Wait (bounded) for the process to exit, keeping its resource usage."""
        if self.popen.returncode is not None:
            return True
        deadline = time.monotonic() + timeout
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
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

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


def _spawn(argv: list, what: str, topo, side, env, preexec_fn, lifetime):
    """Start argv on the host that runs `side` of `topo` (this machine without a topology)."""
    remote = topo.remote_side(side) if topo is not None and hasattr(topo, "remote_side") else None
    if remote is not None:
        if preexec_fn is not None:
            raise UserError(
                f"{what}: a local process setting (CPU quota) cannot apply on {remote.label}"
            )
        return remote.spawn(argv, what, env=env, lifetime=lifetime)
    kw = dict(
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # our own process group: stop() signals all of it
        env={**os.environ, **env} if env else None,
        preexec_fn=preexec_fn,
    )
    cmd = hostargv.local(argv)
    return LocalChild(
        topo.popen(side, cmd, **kw) if topo is not None else subprocess.Popen(cmd, **kw)
    )


class Process:
    """A program that speaks JSON lines (the engine, the lab's network probes), supervised
    as the module docstring says. `argv` is the whole command line; its elements may be
    `pqlab.net.argv` markers (the engine, input and output files), which the host running
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
    ):
        self.what = what
        # With batch_s, output is read in chunks at most every batch_s seconds (immediately
        # again while the pipe stays full), so a process that prints a record per connection
        # costs the lab a wake-up per batch, not two thread switches per record.
        self.batch_s = batch_s
        argv = list(argv)  # str or hostargv.InFile/OutFile (files a remote host gets or sends)
        if cpu is not None:  # a CPU number or a taskset list ("0,2")
            argv = ["taskset", "-c", str(cpu), *argv]
        self.p = _spawn(argv, what, topo, side or "server", env, preexec_fn, lifetime)
        self.records: list[dict] = []
        self.listening: dict | None = None
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
        if self.batch_s:
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
        import codecs

        assert self.p.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        partial = ""
        chunk_size = 1 << 16
        with contextlib.suppress(ValueError, OSError):  # pipe closed by stop()
            fd = self.p.stdout.fileno()
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
                    time.sleep(batch_s)
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
                del self._err[:-50]  # the last lines are the useful ones

    def _parse_pending(self) -> list[dict]:
        with self._cond:
            lines, self._lines = self._lines, []
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
    """`pqlab-engine ARGS` under supervision (on whichever host runs `side` of `topo`)."""

    def __init__(self, args: Sequence, what: str, **kw):
        super().__init__([hostargv.ENGINE, *args], what, **kw)


# --- typed specs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    """What both ends are configured with."""

    stack: str = stacks.DEFAULT_STACK
    groups: tuple[Algorithm, ...] = ()  # offered (client) / accepted (server), in order
    sigalgs: tuple[Algorithm, ...] = ()
    version: str = "1.3"
    ciphers: str | None = None  # TLS 1.2 cipher list (OpenSSL syntax)
    ciphersuites: str | None = None  # TLS 1.3 suites
    security_level: int | None = None
    events: bool = True
    keylog: Path | None = None

    def args(self) -> list[str]:
        return [str(a) for a in self.argv()]

    def argv(self) -> list:
        """The arguments, files marked for the host that runs them (`pqlab.net.argv`)."""
        st = stacks.get(self.stack)
        out: list = []
        if self.stack != stacks.DEFAULT_STACK:
            out += ["--stack", self.stack]
        if self.groups:
            out += ["--groups", ":".join(st.group_name(g) for g in self.groups)]
        if self.sigalgs:
            out += ["--sigalgs", ":".join(st.sigalg_name(s) for s in self.sigalgs)]
        out += ["--tls-version", self.version]
        if self.ciphers:
            out += ["--ciphers", self.ciphers]
        if self.ciphersuites:
            out += ["--ciphersuites", self.ciphersuites]
        if self.security_level is not None:
            out += ["--security-level", str(self.security_level)]
        out += ["--events", "on" if self.events else "off"]
        if self.keylog is not None:
            out += ["--keylog", hostargv.OutFile(Path(self.keylog), "secret")]
        return out


@dataclass(frozen=True)
class ServerSpec:
    tls: Tls
    chain: Chain
    listen: str  # "IP:PORT" (port 0: any free port; see the listening record)
    max_connections: int | None = None
    response_mode: str = "echo-size"  # or "none": wait for the client to close
    dh_bits: int | None = None
    concurrent: bool = False  # serve connections in parallel (outside clients)
    max_concurrent: int | None = None  # the worker pool's size when concurrent
    threads: int | None = None  # a fixed pool of accepting threads (capacity)
    max_response_bytes: int | None = None  # largest GET/PULL/PUSH size accepted

    def args(self) -> list[str]:
        return [str(a) for a in self.argv()]

    def argv(self) -> list:
        out: list = ["tls", "server", "--listen", self.listen]
        out += ["--cert-chain", hostargv.InFile(Path(self.chain.chain))]
        out += ["--key", hostargv.InFile(Path(self.chain.key))]
        out += self.tls.argv()
        if self.max_connections is not None:
            out += ["--max-connections", str(self.max_connections)]
        out += ["--response-mode", self.response_mode]
        if self.dh_bits is not None:
            out += ["--dh-bits", str(self.dh_bits)]
        if self.concurrent:
            out.append("--concurrent")
            if self.max_concurrent is not None:
                out += ["--max-concurrent", str(self.max_concurrent)]
        return out
        if self.threads is not None:
            out += ["--threads", str(self.threads)]
        if self.max_response_bytes is not None:
            out += ["--max-response-bytes", str(self.max_response_bytes)]
        return out


@dataclass(frozen=True)
class ClientSpec:
    tls: Tls
    connect: str  # "HOST:PORT"
    ca: Path
    servername: str | None = None
    n: int = 1
    warmup: int = 0
    request_bytes: int | None = None
    gap_ms: int = 0
    time_limit: int = 3600
    expected: Expected = field(default_factory=Expected)

    def args(self) -> list[str]:
        return [str(a) for a in self.argv()]

    def argv(self) -> list:
        st = stacks.get(self.tls.stack)
        out: list = ["tls", "client", "--connect", self.connect]
        out += ["--ca", hostargv.InFile(Path(self.ca))]
        if self.servername:
            out += ["--servername", self.servername]
        out += self.tls.argv()
        out += ["-n", str(self.n), "--warmup", str(self.warmup)]
        if self.request_bytes is not None:
            out += ["--request-bytes", str(self.request_bytes)]
        if self.gap_ms:
            out += ["--gap-ms", str(self.gap_ms)]
        out += ["--time-limit", str(self.time_limit)]
        if self.expected.group is not None:
            out += ["--expect-group", st.group_name(self.expected.group)]
        if self.expected.sigalg is not None:
            out += ["--expect-sigalg", st.sigalg_name(self.expected.sigalg)]
        return out


@dataclass(frozen=True)
class LoadSpec:
    """`tls load`: the client's options (`client.n` is the most measured handshakes, its
    `warmup` per worker, its `time_limit` the bound on everything) and the load shape."""

    client: ClientSpec
    mode: str  # "closed" | "open"
    clients: int  # closed: concurrent clients; open: most handshakes in flight
    duration_ms: int
    rate: float | None = None  # open loop: arrivals per second

    def args(self) -> list[str]:
        out = ["tls", "load", *self.client.args()[2:]]
        out += ["--mode", self.mode, "--clients", str(self.clients)]
        out += ["--duration-ms", str(self.duration_ms)]
        if self.rate is not None:
            out += ["--rate", f"{self.rate:.6g}"]
        return out


def run_load(spec: LoadSpec, topo=None, cpu=None, timeout: float = 3600) -> dict:
    """Run the load generator to completion; its `load_result` record."""
    proc = EngineProcess(spec.args(), "TLS load generator", topo=topo, side="client", cpu=cpu)
    try:
        records = proc.finish(timeout)
    finally:
        proc.stop()
    result = next((r for r in records if r.get("type") == "load_result"), None)
    if result is None:
        raise EngineError("the load generator reported no load_result")
    return result


def start_server(
    spec: ServerSpec,
    topo=None,
    cpu: int | None = None,
    preexec_fn: Callable[[], None] | None = None,
    what: str = "TLS server",
    start_timeout: float = 30,
    lifetime: float | None = None,
    batch_s: float | None = None,
) -> EngineProcess:
    """The engine's TLS server, started and listening (its `listening` record in
    `.listening`). `batch_s`: read its records in batches (servers under load; see
    `Process`)."""
    proc = EngineProcess(
        spec.argv(),
        what,
        topo=topo,
        side="server",
        cpu=cpu,
        preexec_fn=preexec_fn,
        lifetime=lifetime,
        batch_s=batch_s,
    )
    proc.listening = proc.wait_for("listening", start_timeout)
    return proc


def start_client(spec: ClientSpec, topo=None, cpu: int | None = None) -> EngineProcess:
    # A remote client ends by itself within its own time limit; this bounds it regardless.
    return EngineProcess(
        spec.argv(),
        "TLS client",
        topo=topo,
        side="client",
        cpu=cpu,
        lifetime=spec.time_limit + 120,
    )


def run_client(spec: ClientSpec, topo=None, cpu: int | None = None, timeout: float = 3600):
    """Run the client to completion; its connection records (warm-ups included, marked)."""
    proc = start_client(spec, topo, cpu)
    try:
        records = proc.finish(timeout)
    finally:
        proc.stop()
    return [r for r in records if r.get("type") == "connection"]


def connection_errors(*procs: EngineProcess) -> list[dict]:
    return [r for p in procs for r in p.take("connection_error")]


# --- packet captures ---------------------------------------------------------------------------


def start_capture(
    topo, side: str, port: int, pcap_path: Path, snaplen: int, max_seconds: float
) -> EngineProcess:
    """The engine's packet capture on one host's interface (TCP port `port`), capturing
    once its `capturing` record arrived. Stop it with `stop_capture`."""
    proc = EngineProcess(
        [
            "capture",
            "--interface",
            topo.ifname(side),
            "--port",
            port,
            "--pcap",
            hostargv.OutFile(Path(pcap_path), "pcap"),
            "--snaplen",
            snaplen,
            "--max-seconds",
            f"{max_seconds:.0f}",
        ],
        f"capture on the {side} host",
        topo=topo,
        side=side,
        lifetime=max_seconds + 120,
    )
    proc.wait_for("capturing", 30)
    return proc


def stop_capture(proc: EngineProcess, timeout: float = 30) -> dict:
    """Stop a capture (SIGTERM: it flushes the pcap) and return its summary record."""
    proc.signal(signal.SIGTERM)
    records = proc.finish(timeout)
    summary = next((r for r in records if r["type"] == "capture_summary"), None)
    if summary is None:
        raise EngineError(f"{proc.what} printed no summary")
    return summary
