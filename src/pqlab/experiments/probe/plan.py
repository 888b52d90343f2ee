"""The probe's options and plan: the server to probe, the client configurations (which
groups a ClientHello offers and which carry key shares), the signature schemes, the stacks,
all validated before anything connects."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pqlab import catalog, units
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.net import privileges
from pqlab.options.tls import parse_stacks, stack_option
from pqlab.tls import runner, stacks

NAME = "probe"
# The client configurations probed by default: each hybrid and ML-KEM alone, X25519 alone,
# and the ClientHello OpenSSL 3.5 sends by default (key shares for X25519MLKEM768 and X25519).
DEFAULT_CONFIGS = (
    "X25519MLKEM768",
    "X25519",
    "SecP256r1MLKEM768",
    "ML-KEM-768",
    "X25519MLKEM768+X25519",
)
DEFAULT_SIG = "default"  # --sig: the stack's own list of signature schemes
DEFAULT_N = 5
MAX_N = 10_000
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 600
# After each connection the client waits this long (at most) for the server's close_notify,
# reading what the server sends meanwhile (session tickets).
AWAIT_CLOSE_MS = 1000
MAX_NAME = 100

CELLS = Cells(NAME, ("probe", "config", "sig"), tls=True)

OPTIONS = (
    Option(
        "target",
        "the server: HOST:PORT ([IPv6]:PORT) or https://HOST[:PORT][/PATH]",
        metavar="TARGET",
        positional=True,
    ),
    Option(
        "groups",
        "client configurations, comma separated; each names the groups one ClientHello "
        "offers, in preference order: joined with '+' each has a key share, after a '/' "
        "they are offered without one (X25519/X25519MLKEM768: a key share for X25519, "
        "X25519MLKEM768 offered too)",
        default=",".join(DEFAULT_CONFIGS),
        metavar="LIST",
    ),
    Option(
        "sig",
        "signature algorithms to offer, each alone in a configuration of its own, comma "
        f"separated; '{DEFAULT_SIG}': the stack's own list",
        default=DEFAULT_SIG,
        metavar="LIST",
    ),
    stack_option(several=True),
    Option(
        "n",
        f"connections per configuration (1-{MAX_N})",
        default=str(DEFAULT_N),
        metavar="N",
        short="-n",
    ),
    Option(
        "servername",
        "name sent in SNI and checked against the certificate (default: the host of TARGET)",
        metavar="NAME",
    ),
    Option(
        "ca",
        "root certificates (PEM) to check the server's chain against (default: the "
        "system's CA bundle); the outcome is reported, a chain that does not validate does "
        "not stop the probe",
        metavar="ROOT.pem",
    ),
    Option(
        "path",
        "after each handshake, GET this path over HTTP/1.1 and read the response to its end "
        "(time to first and last byte; default: the path of an https:// TARGET, else none)",
        metavar="PATH",
    ),
    Option(
        "timeout",
        f"seconds each connection may take from its TCP connect to its end (connecting, the "
        f"handshake, the request and the response), however the server paces its bytes "
        f"(1-{MAX_TIMEOUT}); a connection cut off then is reported as timed out in the phase "
        "it was in",
        default=str(DEFAULT_TIMEOUT),
        metavar="SECONDS",
    ),
    Option(
        "name",
        "what this probe is called in tables and by `pqlab compare` (default: TARGET); give "
        "two servers' probes the same name to compare them",
        metavar="NAME",
    ),
    Option(
        "interface",
        "interface to capture on (default: the one the route to the server leaves by)",
        metavar="IFACE",
    ),
    Option(
        "no-capture",
        "do not capture packets (without CAP_NET_RAW the probe does not either): message "
        "sizes and times then come from the client alone, where its stack reports them",
        flag=True,
    ),
)


@dataclass(frozen=True)
class Config:
    """One client configuration: the groups a ClientHello offers, in preference order, and
    those it sends key shares for."""

    groups: tuple[Algorithm, ...]
    shares: tuple[Algorithm, ...]

    @property
    def name(self) -> str:
        with_share = "+".join(g.name for g in self.groups if g in self.shares)
        without = "+".join(g.name for g in self.groups if g not in self.shares)
        return with_share + (f"/{without}" if without else "")

    @property
    def post_quantum(self) -> tuple[Algorithm, ...]:
        return tuple(g for g in self.groups if is_post_quantum(g))


def is_post_quantum(alg: Algorithm | None) -> bool:
    """A group with a post-quantum part (ML-KEM alone or in a hybrid): it has a NIST PQC
    category in the catalogue."""
    return alg is not None and alg.nist_level is not None


def parse_config(text: str) -> Config:
    """`A+B/C`: A and B with key shares, C offered without one, in that order."""
    shared_text, slash, other_text = text.partition("/")
    if slash and not other_text.strip():
        raise UserError(f"--groups {text!r}: name the groups offered without a key share after '/'")
    if "/" in other_text:
        raise UserError(f"--groups {text!r}: one '/' at most (groups after it have no key share)")
    parts = [(p, True) for p in shared_text.split("+")]
    parts += [(p, False) for p in other_text.split("+")] if other_text else []
    if any(not p.strip() for p, _ in parts):
        raise UserError(
            f"--groups {text!r} has an empty group; write e.g. X25519MLKEM768+X25519 or "
            "X25519/X25519MLKEM768"
        )
    groups, shares = [], []
    for p, share in parts:
        g = catalog.resolve(p.strip(), "kem")
        if g in groups:
            raise UserError(f"--groups {text!r} names {g.name} twice")
        groups.append(g)
        if share:
            shares.append(g)
    return Config(tuple(groups), tuple(shares))


@dataclass(frozen=True)
class Target:
    """The server as the user named it, and where it is."""

    text: str  # as given
    host: str  # name or address, without brackets
    port: int
    address: str  # the IP address connected to (the first the name resolves to)
    path: str | None = None  # of an https:// URL

    @property
    def connect(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


def parse_target(text: str | None) -> Target:
    if not text:
        raise UserError("give the server to probe: pqlab probe HOST:PORT (or https://HOST/PATH)")
    path = None
    if "://" in text:
        url = urlsplit(text)
        if url.scheme != "https" or not url.hostname:
            raise UserError(f"{text!r}: a URL target is https://HOST[:PORT][/PATH]")
        try:
            port = url.port or 443
        except ValueError:
            raise UserError(f"{text!r}: the port is not a number from 1 to 65535") from None
        host = url.hostname
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    else:
        m = re.fullmatch(r"\[([^\[\]]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", text)
        if not m or not 0 < int(m.group(2) or m.group(4)) < 65536:
            raise UserError(
                f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:4433, example.com:443, [::1]:443)"
            )
        host, port = m.group(1) or m.group(3), int(m.group(2) or m.group(4))
    return Target(text, host, port, _resolve(host, text), path)


def _resolve(host: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"{text!r}: cannot resolve {host!r}: {e}") from None
    return str(infos[0][4][0])


def route_interface(address: str) -> str:
    """The interface the route to `address` leaves by (what a capture must watch)."""
    try:
        out = subprocess.run(
            ["ip", "-o", "route", "get", address], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"cannot ask for the route to {address}: {e}") from None
    words = out.stdout.split()
    if out.returncode != 0 or "dev" not in words:
        raise UserError(
            f"no route to {address} ({(out.stderr or out.stdout).strip()}); give --interface "
            "or --no-capture"
        )
    return words[words.index("dev") + 1]


@dataclass(frozen=True)
class Cell:
    """One configuration on one stack with one signature choice."""

    config: Config
    sig: Algorithm | None  # None: the stack's own list
    stack: stacks.Stack

    @property
    def sig_name(self) -> str:
        return self.sig.name if self.sig is not None else DEFAULT_SIG


@dataclass
class Plan:
    target: Target
    name: str
    cells: list[Cell]
    n: int
    servername: str
    ca: Path
    path: str | None
    timeout: int
    capture: str | None  # the interface to capture on; None: no capture
    no_capture_reason: str | None = None  # why not, when not
    skipped: list[str] = field(default_factory=list)  # default configurations a stack lacks

    def cell_id(self, cell: Cell) -> CellId:
        return CELLS.id(self.name, cell.config.name, cell.sig_name, stack=cell.stack.name)


def _configs(values, chosen: list[stacks.Stack]) -> tuple[list[tuple[Config, list[str]]], list]:
    """(config, stacks it runs on) for --groups; default configurations a stack cannot run
    are left out on that stack (noted), given ones are errors."""
    given = values.groups is not None and values.groups != ",".join(DEFAULT_CONFIGS)
    texts = units.parse_list(values.groups, "--groups", example="X25519MLKEM768,X25519")
    out, skipped = [], []
    for text in dict.fromkeys(texts):
        config = parse_config(text)
        where = []
        for st in chosen:
            why = _config_why_not(config, st)
            if why is None:
                where.append(st.name)
            elif given:
                raise UserError(f"--groups {config.name}: {why}")
            else:
                skipped.append(f"{config.name} on {st.name}: {why}")
        out.append((config, where))
    return out, skipped


def _config_why_not(config: Config, st: stacks.Stack) -> str | None:
    for g in config.groups:
        why = st.why_not(g, "group")
        if why:
            return why
    return st.key_shares_why_not(config.groups, config.shares)


def _sigs(values, chosen: list[stacks.Stack]) -> list[Algorithm | None]:
    names = units.parse_list(values.sig, "--sig", example="ML-DSA-44,ECDSA-P256")
    out: list[Algorithm | None] = []
    for n in names:
        if n.lower() == DEFAULT_SIG:
            if None not in out:
                out.append(None)
            continue
        alg = catalog.resolve(n, "sig")
        for st in chosen:
            stacks.require([alg], st, "server", "--sig")
        if alg not in out:
            out.append(alg)
    return out


def _ca(text: str | None) -> Path:
    if text:
        if not os.path.isfile(text):
            raise UserError(f"--ca {text!r} is not a file")
        return Path(text).resolve()
    bundle = runner.system_ca_bundle()
    if bundle is None:
        raise UserError(
            "no --ca given and no system CA bundle found; pass --ca ROOT.pem (the chain is "
            "checked against it and reported; one that does not validate does not stop the "
            "probe)"
        )
    return bundle


def _capture(values, target: Target) -> tuple[str | None, str | None]:
    """(interface, None) to capture on, or (None, why not)."""
    if values.no_capture:
        return None, "--no-capture"
    ok, why = privileges.can_capture()
    if not ok:
        return None, why
    if values.interface:
        if not Path("/sys/class/net", values.interface).exists():
            raise UserError(f"--interface {values.interface!r}: no such interface here")
        return values.interface, None
    return route_interface(target.address), None


def _path(values, target: Target) -> str | None:
    path = values.path or target.path
    if values.path and target.path and values.path != target.path:
        raise UserError(
            f"--path {values.path!r} and the URL's path {target.path!r} differ; give one"
        )
    if path is not None and (
        not path.startswith("/") or any(not c.isprintable() or c == " " for c in path)
    ):
        raise UserError(
            f"--path {path!r} must start with / and hold no spaces (percent-encode them)"
        )
    return path


def from_values(values) -> Plan:
    target = parse_target(values.target)
    chosen = parse_stacks(values)
    configs, skipped = _configs(values, chosen)
    sigs = _sigs(values, chosen)
    cells = [
        Cell(config, sig, st)
        for st in chosen
        for config, where in configs
        if st.name in where
        for sig in sigs
    ]
    if not cells:
        raise UserError("no configuration can run on the chosen stacks: " + "; ".join(skipped))
    name = values.name or target.text
    if len(name) > MAX_NAME or "|" in name or name.startswith("+"):
        raise UserError(
            f"--name {name!r}: at most {MAX_NAME} characters, no '|', not starting with '+'"
        )
    n = units.parse_positive_int(values.n, "-n", maximum=MAX_N)
    timeout = units.parse_positive_int(values.timeout, "--timeout", maximum=MAX_TIMEOUT)
    interface, why = _capture(values, target)
    return Plan(
        target=target,
        name=name,
        cells=cells,
        n=n,
        servername=values.servername or target.host,
        ca=_ca(values.ca),
        path=_path(values, target),
        timeout=timeout,
        capture=interface,
        no_capture_reason=why,
        skipped=skipped,
    )
