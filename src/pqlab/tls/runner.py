"""The TLS runner: typed specs of what a TLS server, client, load generator, bulk transfer
or memory measurement runs with (turned into engine arguments by `pqlab.specs`), and the
calls that start them.

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
from pqlab.process import EngineProcess, OutFile
from pqlab.specs import Arg, Spec
from pqlab.tls import stacks
from pqlab.tls.chains import Chain, make_chain
from pqlab.tls.negotiation import Expected

# Where Linux distributions keep the system's trusted CA certificates, in the order tried.
SYSTEM_CAS = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)


def system_ca_bundle() -> Path | None:
    """The system's bundle of trusted CA certificates, if it has one."""
    return next((Path(c) for c in SYSTEM_CAS if Path(c).is_file()), None)


@dataclass(frozen=True)
class Tls(Spec):
    """What both ends are configured with."""

    stack: stacks.Stack = field(default_factory=stacks.get)  # (default: the default stack)
    groups: tuple[Algorithm, ...] = ()  # offered (client) / accepted (server), in order
    sigalgs: tuple[Algorithm, ...] = ()
    version: str = "1.3"
    ciphers: str | None = None  # TLS 1.2 cipher list (OpenSSL syntax)
    ciphersuites: str | None = None  # TLS 1.3 suites
    security_level: int | None = None
    # Per-message events in the connection records: True (both directions), "sent" (only
    # what each side sent: what the handshake analysis reads, half the events) or False.
    events: bool | str = True
    keylog: Path | None = None
    io_timeout: int | None = None  # seconds; None: the engine's default (30)
    # Client only: the groups its ClientHello carries key shares for (a subset of `groups`;
    # () the stack's choice), and how it judges the server's chain ("require" or "report";
    # None the engine's default, require).
    key_shares: tuple[Algorithm, ...] = ()
    verify: str | None = None

    ARGS = (
        Arg("stack", "--stack", "stack"),
        Arg("groups", "--groups", "groups"),
        Arg("sigalgs", "--sigalgs", "sigalgs"),
        Arg("version", "--tls-version"),
        Arg("ciphers", "--ciphers"),
        Arg("ciphersuites", "--ciphersuites"),
        Arg("security_level", "--security-level"),
        Arg("events", "--events"),
        Arg("keylog", "--keylog", "secret-out"),
        Arg("io_timeout", "--io-timeout"),
        Arg("key_shares", "--key-shares", "groups"),
        Arg("verify", "--verify"),
    )


@dataclass(frozen=True)
class ClientAuth(Spec):
    """Mutual TLS on the server: the roots a client chain must validate against and the
    schemes accepted for its CertificateVerify."""

    stack: stacks.Stack
    ca: Path
    sigalgs: tuple[Algorithm, ...] = ()

    ARGS = (Arg("ca", "--client-ca", "in"), Arg("sigalgs", "--client-sigalgs", "sigalgs"))


@dataclass(frozen=True)
class Identity(Spec):
    """Mutual TLS on the client: its certificate chain and key, and the scheme its
    CertificateVerify must use."""

    stack: stacks.Stack
    cert_chain: Path
    key: Path
    sigalg: Algorithm | None = None

    ARGS = (
        Arg("cert_chain", "--cert-chain", "in"),
        Arg("key", "--key", "in"),
        Arg("expect_sigalg", "--expect-client-sigalg", "sigalgs"),
    )

    @property
    def expect_sigalg(self) -> tuple[Algorithm, ...]:
        return (self.sigalg,) if self.sigalg is not None else ()


def mutual(
    client_chain: Chain, client_sig: Algorithm, stack: stacks.Stack
) -> tuple[ClientAuth, Identity]:
    """Mutual TLS on `stack` with a client certificate of `client_chain` (made with purpose
    "client"): what the server asks for (its roots, the scheme) and what the client
    presents. The client must also offer `client_sig` in its own `Tls.sigalgs`: stacks sign
    only with schemes of their own list."""
    return (
        ClientAuth(stack, ca=client_chain.root, sigalgs=(client_sig,)),
        Identity(stack, client_chain.chain, client_chain.key, sigalg=client_sig),
    )


def client_certificate(
    directory,
    server_ca: Algorithm,
    client_sig: Algorithm | None,
    client_ca,
    stack: stacks.Stack,
) -> tuple[ClientAuth | None, Identity | None]:
    """A cell's mutual TLS: a client certificate of `client_sig` under `client_ca` (default:
    the server chain's CA algorithm), made once under `directory`; (None, None) without a
    client certificate."""
    if client_sig is None:
        return None, None
    chain = make_chain(directory, client_ca or server_ca, client_sig, stack.name, purpose="client")
    return mutual(chain, client_sig, stack)


@dataclass(frozen=True)
class ServerSpec(Spec):
    tls: Tls
    chain: Chain
    listen: str  # "IP:PORT" (port 0: any free port; see the listening record)
    max_connections: int | None = None
    response_mode: str = "echo-size"  # or "none": wait for the client to close
    dh_bits: int | None = None  # TLS 1.2 DHE with the RFC prime of this size
    dh_params: Path | None = None  # TLS 1.2 DHE with these parameters (PEM) instead
    concurrent: bool = False  # serve connections in parallel (outside clients)
    max_concurrent: int | None = None  # the worker pool's size when concurrent
    threads: int | None = None  # a fixed pool of accepting threads (capacity)
    max_response_bytes: int | None = None  # largest GET/PULL/PUSH size accepted
    # Seconds a response may take (None: the engine's default, an hour), and the rate under
    # which a full concurrent server evicts its slowest response (bytes/s; 0 never).
    response_timeout: int | None = None
    min_response_rate: int | None = None
    client_auth: ClientAuth | None = None  # mutual TLS
    hold_records: bool = False  # records written when the server ends, none while it serves
    connection_records: Path | None = None  # its connection records to this file instead
    count_heap: bool = False  # a heap record (the process's memory) after each handshake

    COMMAND = ("tls", "server")
    ARGS = (
        Arg("listen", "--listen"),
        Arg("cert_chain", "--cert-chain", "in"),
        Arg("key", "--key", "in"),
        Arg("tls", kind="spec"),
        Arg("max_connections", "--max-connections"),
        Arg("response_mode", "--response-mode"),
        Arg("dh_bits", "--dh-bits"),
        Arg("dh_params", "--dh-params", "in"),
        Arg("concurrent", "--concurrent", "switch"),
        Arg("max_concurrent", "--max-concurrent"),
        Arg("threads", "--threads"),
        Arg("max_response_bytes", "--max-response-bytes"),
        Arg("response_timeout", "--response-timeout"),
        Arg("min_response_rate", "--min-response-rate"),
        Arg("client_auth", kind="spec"),
        Arg("hold_records", "--hold-records", "switch"),
        Arg("connection_records", "--connection-records", "out"),
        Arg("count_heap", "--count-heap", "switch"),
    )

    @property
    def stack(self) -> stacks.Stack:
        return self.tls.stack

    @property
    def cert_chain(self) -> Path:
        return self.chain.chain

    @property
    def key(self) -> Path:
        return self.chain.key

    def __post_init__(self) -> None:
        if self.max_concurrent is not None and not self.concurrent:
            raise ValueError("max_concurrent sizes the pool of a concurrent server")


@dataclass(frozen=True)
class ClientSpec(Spec):
    tls: Tls
    connect: str  # "HOST:PORT"
    ca: Path
    servername: str | None = None
    n: int = 1
    warmup: int = 0
    request_bytes: int | None = None
    # what the warm-ups ask for instead of request_bytes (None: the same)
    warmup_request_bytes: int | None = None
    gap_ms: int = 0
    time_limit: int = 3600
    # Seconds each connection may take from its TCP connect to its close, however the
    # server paces its bytes (None: only time_limit and the per-wait io_timeout bound it).
    connection_timeout: int | None = None
    expected: Expected = field(default_factory=Expected)
    identity: Identity | None = None  # mutual TLS
    request_path: str | None = None  # an HTTP/1.1 GET of this path after the handshake
    await_close_ms: int | None = None  # wait this long for the server's close_notify
    peer_chain: bool = False  # record the certificates the server sent (DER)
    # (warm-up, measured) connections per round, each run on `next_round` (n and warmup
    # are then their totals); () one run of n after warmup.
    rounds: tuple[tuple[int, int], ...] = ()
    connection_records: Path | None = None  # its connection records to this file instead

    COMMAND = ("tls", "client")
    ARGS = (
        Arg("connect", "--connect"),
        Arg("ca", "--ca", "in"),
        Arg("servername", "--servername"),
        Arg("tls", kind="spec"),
        Arg("n", "-n"),
        Arg("warmup", "--warmup"),
        Arg("request_bytes", "--request-bytes"),
        Arg("warmup_request_bytes", "--warmup-request-bytes"),
        Arg("gap_ms", "--gap-ms"),
        Arg("time_limit", "--time-limit"),
        Arg("connection_timeout", "--connection-timeout"),
        Arg("expect_group", "--expect-group", "groups"),
        Arg("expect_sigalg", "--expect-sigalg", "sigalgs"),
        Arg("identity", kind="spec"),
        Arg("request_path", "--request-path"),
        Arg("await_close_ms", "--await-close-ms"),
        Arg("peer_chain", "--peer-chain", "switch"),
        Arg("rounds", "--rounds", "rounds"),
        Arg("connection_records", "--connection-records", "out"),
    )

    def __post_init__(self) -> None:
        if self.rounds and (
            sum(w for w, _ in self.rounds) != self.warmup
            or sum(n for _, n in self.rounds) != self.n
        ):
            raise ValueError("with rounds, n and warmup are the rounds' totals")

    @property
    def stack(self) -> stacks.Stack:
        return self.tls.stack

    @property
    def expect_group(self) -> tuple[Algorithm, ...]:
        return (self.expected.group,) if self.expected.group is not None else ()

    @property
    def expect_sigalg(self) -> tuple[Algorithm, ...]:
        return (self.expected.sigalg,) if self.expected.sigalg is not None else ()


@dataclass(frozen=True)
class LoadSpec(Spec):
    """`tls load`: the client's options (`client.n` is the most measured handshakes, its
    `warmup` per worker, its `time_limit` the bound on everything) and the load shape."""

    client: ClientSpec
    mode: str  # "closed" | "open"
    clients: int  # closed: concurrent clients; open: most handshakes in flight
    duration_ms: int
    rate: float | None = None  # open loop: arrivals per second

    COMMAND = ("tls", "load")
    ARGS = (
        Arg("client", kind="spec"),
        Arg("mode", "--mode"),
        Arg("clients", "--clients"),
        Arg("duration_ms", "--duration-ms"),
        Arg("rate", "--rate"),
    )

    @property
    def stack(self) -> stacks.Stack:
        return self.client.stack


@dataclass(frozen=True)
class BulkSpec(Spec):
    """`tls bulk`: one handshake, then `push_bytes` to the server and `pull_bytes` back, then
    (when given) `echo_bytes` echoed a record at a time, per connection of the client's
    options."""

    client: ClientSpec
    push_bytes: int
    pull_bytes: int
    echo_bytes: int | None = None

    COMMAND = ("tls", "bulk")
    ARGS = (
        Arg("client", kind="spec"),
        Arg("push_bytes", "--push-bytes"),
        Arg("pull_bytes", "--pull-bytes"),
        Arg("echo_bytes", "--echo-bytes"),
    )

    @property
    def stack(self) -> stacks.Stack:
        return self.client.stack


@dataclass(frozen=True)
class MemorySpec(Spec):
    """`tls memory`: `n` measured handshakes (after `warmup`) whose memory each role counts,
    both roles in one process (`role` "both"), or one role against the other's process:
    "server" listening on `listen`, "client" connecting to `connect`. Each role is given
    only its own files (the server its chain and key, the client the root), and in mutual
    TLS (`client_chain`) the client its certificate and key, the server the client chain's
    root; the client signs with `client_sig`."""

    tls: Tls
    chain: Chain
    role: str = "both"
    listen: str | None = None
    connect: str | None = None
    n: int = 10
    warmup: int = 2
    fixed_random: bool = False  # fixed-seed randomness, so allocations repeat exactly
    client_chain: Chain | None = None
    client_sig: Algorithm | None = None

    COMMAND = ("tls", "memory")
    ARGS = (
        Arg("role", "--role"),
        Arg("cert_chain", "--cert-chain", "in"),
        Arg("key", "--key", "in"),
        Arg("ca", "--ca", "in"),
        Arg("listen", "--listen"),
        Arg("connect", "--connect"),
        Arg("tls", kind="spec"),
        Arg("n", "-n"),
        Arg("warmup", "--warmup"),
        Arg("fixed_random", "--fixed-random", "switch"),
        Arg("client_cert_chain", "--client-cert-chain", "in"),
        Arg("client_key", "--client-key", "in"),
        Arg("client_ca", "--client-ca", "in"),
        Arg("client_sigalg", "--client-sigalg", "sigalgs"),
    )

    def __post_init__(self) -> None:
        if self.role not in ("both", "server", "client"):
            raise ValueError(f"role {self.role!r}: both, server or client")
        if (self.client_chain is None) != (self.client_sig is None):
            raise ValueError("mutual TLS takes a client chain and its signature scheme")

    @property
    def stack(self) -> stacks.Stack:
        return self.tls.stack

    @property
    def _serves(self) -> bool:
        return self.role in ("both", "server")

    @property
    def _connects(self) -> bool:
        return self.role in ("both", "client")

    @property
    def cert_chain(self) -> Path | None:
        return self.chain.chain if self._serves else None

    @property
    def key(self) -> Path | None:
        return self.chain.key if self._serves else None

    @property
    def ca(self) -> Path | None:
        return self.chain.root if self._connects else None

    @property
    def client_cert_chain(self) -> Path | None:
        return self.client_chain.chain if self.client_chain and self._connects else None

    @property
    def client_key(self) -> Path | None:
        return self.client_chain.key if self.client_chain and self._connects else None

    @property
    def client_ca(self) -> Path | None:
        return self.client_chain.root if self.client_chain and self._serves else None

    @property
    def client_sigalg(self) -> tuple[Algorithm, ...]:
        return (self.client_sig,) if self.client_sig is not None else ()


@dataclass(frozen=True)
class HoldSpec(Spec):
    """`tls hold`: `n` verified connections to `connect`, opened one after the other
    (`gap_ms` apart) and all kept open `hold_ms` after the last is up; in mutual TLS the
    client presents `identity`."""

    tls: Tls
    connect: str
    ca: Path
    n: int
    servername: str | None = None
    identity: Identity | None = None
    hold_ms: int | None = None
    gap_ms: int | None = None

    COMMAND = ("tls", "hold")
    ARGS = (
        Arg("connect", "--connect"),
        Arg("ca", "--ca", "in"),
        Arg("servername", "--servername"),
        Arg("tls", kind="spec"),
        Arg("cert_chain", "--cert-chain", "in"),
        Arg("key", "--key", "in"),
        Arg("n", "-n"),
        Arg("hold_ms", "--hold-ms"),
        Arg("gap_ms", "--gap-ms"),
    )

    @property
    def stack(self) -> stacks.Stack:
        return self.tls.stack

    @property
    def cert_chain(self) -> Path | None:
        return self.identity.cert_chain if self.identity is not None else None

    @property
    def key(self) -> Path | None:
        return self.identity.key if self.identity is not None else None


def run_load(spec: LoadSpec, topo=None, cpu=None, timeout: float = 3600) -> dict:
    """Run the load generator to completion; its `load_result` record."""
    proc = EngineProcess(
        spec.argv(), "TLS load generator", spec.program, topo=topo, side="client", cpu=cpu
    )
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
    wait: bool = True,
) -> EngineProcess:
    """The engine's TLS server, started and listening (its `listening` record in
    `.listening`). `batch_s`: read its records in batches (servers under load; see
    `Process`). `wait=False`: started only; `await_ready` waits for it (with others)."""
    proc = EngineProcess(
        spec.argv(),
        what,
        spec.program,
        topo=topo,
        side="server",
        cpu=cpu,
        preexec_fn=preexec_fn,
        lifetime=lifetime,
        batch_s=batch_s,
    )
    proc.ready_record = "listening"
    if wait:
        await_ready([proc], start_timeout)
    return proc


def start_client(
    spec: ClientSpec,
    topo=None,
    cpu: int | None = None,
    batch_s: float | None = None,
    wait: bool = True,
) -> EngineProcess:
    """The engine's TLS client, running; with `spec.rounds`, ready for its first round
    (`next_round`). `batch_s`: read its records in batches (a client whose records are
    only needed at the end; see `Process`). `wait=False`: started only; `await_ready`
    waits for it (with others)."""
    # A remote client ends by itself within its own time limit; this bounds it regardless.
    proc = EngineProcess(
        spec.argv(),
        "TLS client",
        spec.program,
        topo=topo,
        side="client",
        cpu=cpu,
        lifetime=spec.time_limit + 120,
        batch_s=batch_s,
    )
    if spec.rounds:
        # Its first record comes once it has blocked the signal that starts a round.
        proc.ready_record = "config"
    if wait:
        await_ready([proc])
    return proc


def await_ready(procs: list[EngineProcess], timeout: float = 30) -> None:
    """Wait until every process has reported itself ready (its `ready_record`: a server's
    `listening`, kept in `.listening`; a capture's `capturing`; a client with rounds, its
    `config`), each within `timeout`. Processes started together get ready side by side:
    a batch of cells waits about as long as its slowest process, not the sum of them."""
    for proc in procs:
        if proc.ready_record is not None:
            record = proc.wait_for(proc.ready_record, timeout)
            if proc.ready_record == "listening":
                proc.listening = record


def next_round(client: EngineProcess, number: int, timeout: float) -> dict:
    """Run round `number` (counted from 0) of a client started with rounds; its `round`
    record. The client writes nothing while the round runs, and its records of the round
    are out (on stdout, or in its `connection_records` file) when this returns."""
    client.signal(signal.SIGCONT)
    return client.wait_count(("round",), number + 1, timeout)[number]


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
    topo,
    side: str,
    port: int,
    pcap_path: Path,
    snaplen: int,
    max_seconds: float,
    interface: str | None = None,
    unhooked: bool = False,
    wait: bool = True,
) -> EngineProcess:
    """The engine's packet capture on one host's interface (TCP port `port`), capturing
    once its `capturing` record arrived. Stop it with `stop_capture`. Without a topology
    (`topo` None) it captures on this machine's `interface`. `unhooked`: it sees no packet
    until `hook_captures` (many captures on one interface then cost a packet nothing but
    the hooked ones' filters). `wait=False`: started only; `await_ready` waits for it."""
    proc = EngineProcess(
        [
            "capture",
            "--interface",
            interface or topo.ifname(side),
            "--port",
            port,
            "--pcap",
            OutFile(Path(pcap_path), "pcap"),
            "--snaplen",
            snaplen,
            "--max-seconds",
            f"{max_seconds:.0f}",
            *(["--unhooked"] if unhooked else []),
        ],
        f"capture on the {side} host",
        topo=topo,
        side=side,
        lifetime=max_seconds + 120,
    )
    proc.ready_record = "capturing"
    if wait:
        await_ready([proc])
    return proc


def hook_captures(caps: list[EngineProcess], hooks: int, timeout: float = 10) -> None:
    """Hook unhooked captures (SIGUSR1) and wait until each has: its `hooks`-th `hooked`
    record (a capture's records are counted from its start)."""
    for proc in caps:
        proc.signal(signal.SIGUSR1)
    for proc in caps:
        proc.wait_count(("hooked",), hooks, timeout)


def unhook_captures(caps: list[EngineProcess]) -> None:
    """Unhook captures (SIGUSR2): each does once its port has been quiet for a moment, so
    the tail of its last connection is kept; nothing waits for it."""
    for proc in caps:
        proc.signal(signal.SIGUSR2)


def stop_capture(proc: EngineProcess, timeout: float = 30) -> dict:
    """Stop a capture (SIGTERM: it flushes the pcap) and return its summary record."""
    return stop_captures([proc], timeout)[0]


def stop_captures(procs: list[EngineProcess], timeout: float = 30) -> list[dict]:
    """Stop captures side by side (SIGTERM to every one, then each one's end awaited):
    their summary records, in order. A capture takes some 20 ms to flush and exit, so a
    batch's 96 end in about that, not in two seconds."""
    for proc in procs:
        proc.signal(signal.SIGTERM)
    out = []
    for proc in procs:
        records = proc.finish(timeout)
        summary = next((r for r in records if r["type"] == "capture_summary"), None)
        if summary is None:
            raise EngineError(f"{proc.what} printed no summary")
        out.append(summary)
    return out
