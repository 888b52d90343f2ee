"""The TLS runner: typed specs of what a TLS server, client or load generator runs with,
turned into engine arguments, and the calls that start them.

    server = start_server(ServerSpec(tls, chain, listen=f"{hosts.server_ip}:4433"), hosts)
    records = run_client(ClientSpec(tls, connect=..., ca=chain.root, n=100), hosts)
    server_records = server.finish(30)

Every process is started and supervised by the process layer (`pqlab.process`), on whichever
host runs its side of the topology. Group and signature-scheme names come from the chosen
stack's own list, by code point, so a spec never spells a library's name for an algorithm.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pqlab.catalog import Algorithm
from pqlab.errors import EngineError
from pqlab.process import EngineProcess, InFile, OutFile
from pqlab.tls import stacks
from pqlab.tls.chains import Chain
from pqlab.tls.negotiation import Expected

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
        """The arguments, files marked for the host that runs them (`pqlab.process`)."""
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
            out += ["--keylog", OutFile(Path(self.keylog), "secret")]
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
        out += ["--cert-chain", InFile(Path(self.chain.chain))]
        out += ["--key", InFile(Path(self.chain.key))]
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
        out += ["--ca", InFile(Path(self.ca))]
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
            OutFile(Path(pcap_path), "pcap"),
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
