"""`pqlab connect HOST:PORT`: pqlab's TLS client against any server; prints what was
negotiated and how long each connection and handshake took. Every connection must validate
the server's chain and host name; with --group/--sig it must negotiate exactly those. Each
connection must be done within --timeout seconds, however the server paces its bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pqlab import catalog, files, stats, units
from pqlab.errors import EngineError, UserError
from pqlab.tls import runner, stacks
from pqlab.tls.negotiation import Expected

MAX_CONNECTIONS = 1_000_000
DEFAULT_TIMEOUT = 60
MAX_TIMEOUT = 86_400  # the engine's --connection-timeout range
MAX_TIME_LIMIT = 2_592_000  # the engine's --time-limit range


def register(sub) -> None:
    p = sub.add_parser("connect", help="TLS client against any server", description=__doc__)
    p.add_argument("target", metavar="HOST:PORT")
    p.add_argument("--group", help="key-exchange group to offer and require")
    p.add_argument("--sig", help="server signature algorithm to offer and require")
    p.add_argument("--stack", default=stacks.DEFAULT_STACK, help="TLS stack (default %(default)s)")
    p.add_argument(
        "--ca",
        metavar="ROOT",
        help="root certificate (PEM) to verify the server with (default: the system's CA bundle)",
    )
    p.add_argument("--servername", help="name to send and check (default: HOST)")
    p.add_argument("-n", default="1", help="connections (default 1)")
    p.add_argument("--warmup", default="0", help="warm-up connections, not counted")
    p.add_argument("--tls-version", choices=["1.2", "1.3"], default="1.3")
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        default=str(DEFAULT_TIMEOUT),
        help="seconds each connection may take from its TCP connect to its close (connect, "
        f"handshake, request, response; 1-{MAX_TIMEOUT}, default %(default)s); a server "
        "that stalls or trickles its bytes fails the connection then",
    )
    p.add_argument(
        "--request-bytes",
        metavar="SIZE",
        help="after the handshake send `GET <n>` and read n bytes (pqlab servers)",
    )
    p.add_argument(
        "--keylog",
        metavar="FILE",
        help="write an SSLKEYLOGFILE for Wireshark: a new file (made 0600 when the first "
        "secret comes: a connection that fails before that leaves none), or an existing key "
        "log of yours with mode 0600, appended to",
    )
    p.add_argument(
        "--client-sig",
        metavar="ALG",
        help="mutual TLS: present the client certificate --client-cert (key --client-key) and "
        "sign the CertificateVerify with this algorithm (`pqlab serve --client-sig` writes "
        "such a certificate into its --cert-dir)",
    )
    p.add_argument("--client-cert", metavar="PEM", help="mutual TLS: the client certificate chain")
    p.add_argument("--client-key", metavar="PEM", help="mutual TLS: its private key")
    p.add_argument("--json", action="store_true", help="print the engine's records as JSON")
    p.set_defaults(func=run)


def _spec(args) -> runner.ClientSpec:

    host, sep, port = args.target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{args.target!r} is not HOST:PORT (e.g. 127.0.0.1:4433)")
    n = units.parse_positive_int(args.n, "-n")
    warmup = units.parse_positive_int(args.warmup, "--warmup", minimum=0)
    if n + warmup > MAX_CONNECTIONS:
        raise UserError(f"-n plus --warmup is at most {MAX_CONNECTIONS} connections")
    timeout = units.parse_positive_int(args.timeout, "--timeout", maximum=MAX_TIMEOUT)
    stack = stacks.get(args.stack)
    group = catalog.resolve(args.group, "kem") if args.group else None
    sig = catalog.resolve(args.sig, "sig") if args.sig else None
    if group is not None:
        stacks.require([group], stack, "group", "--group")
    if sig is not None:
        stacks.require([sig], stack, "server", "--sig")
    ca = args.ca or runner.system_ca_bundle()
    if ca is None:
        raise UserError("no --ca given and no system CA bundle found; pass --ca ROOT.pem")
    if not os.path.isfile(ca):
        raise UserError(f"--ca {ca!r} is not a file")
    request = None
    if args.request_bytes:
        request = units.parse_size(args.request_bytes, "--request-bytes")
    keylog = files.check_keylog(args.keylog) if args.keylog is not None else None
    identity, client_sig = _identity(args, stack)
    tls = runner.Tls(
        stack=stack,
        groups=(group,) if group else (),
        sigalgs=tuple(a for a in (sig, client_sig) if a) if sig else (),
        version=args.tls_version,
        events=bool(args.json),  # --json shows the message events too
        keylog=keylog,
        io_timeout=timeout,
    )
    return runner.ClientSpec(
        tls=tls,
        connect=args.target,
        ca=Path(ca),
        servername=args.servername,
        n=n,
        warmup=warmup,
        connection_timeout=timeout,
        # Every connection within its --timeout: the run within all of theirs.
        time_limit=min((n + warmup) * timeout + 30, MAX_TIME_LIMIT),
        request_bytes=request,
        expected=Expected(args.tls_version, group=group, sigalg=sig, client_sigalg=client_sig),
        identity=identity,
    )


def _identity(args, stack) -> tuple[runner.Identity | None, catalog.Algorithm | None]:
    """The client certificate of --client-sig / --client-cert / --client-key, checked."""
    given = [a for a in ("client_sig", "client_cert", "client_key") if getattr(args, a)]
    if not given:
        return None, None
    if len(given) != 3:
        raise UserError(
            "mutual TLS needs --client-sig, --client-cert and --client-key together (given: "
            + ", ".join("--" + g.replace("_", "-") for g in given)
            + ")"
        )
    client_sig = catalog.resolve(args.client_sig, "sig")
    stacks.require([client_sig], stack, "client", "--client-sig")
    for flag, path in (("--client-cert", args.client_cert), ("--client-key", args.client_key)):
        if not os.path.isfile(path):
            raise UserError(f"{flag} {path!r} is not a file")
    ident = runner.Identity(stack, Path(args.client_cert), Path(args.client_key), sigalg=client_sig)
    return ident, client_sig


def run(args) -> int:
    spec = _spec(args)
    hs_ms = []
    try:
        with runner.start_client(spec) as client:
            # The engine ends itself at its time limit; this bounds it regardless.
            for rec in client.iter_records(timeout=spec.time_limit + 30):
                if rec.get("type") != "connection":
                    continue
                if args.json:
                    print(json.dumps(rec), flush=True)
                    continue
                print(_line(rec), flush=True)
                if not rec["warmup"]:
                    hs_ms.append(rec["durations"]["handshake_ns"] / 1e6)
            client.finish(10)
    except EngineError as e:
        # The engine names its own flag for the deadline; the user gave --timeout.
        raise type(e)(str(e).replace("--connection-timeout", "--timeout")) from None
    if len(hs_ms) > 1 and not args.json:
        s = stats.summarize(hs_ms)
        print(
            f"handshake over {s['n']} connections: median {s['median']:.3f} ms, mean "
            f"{s['mean']:.3f} ms, p90 {s['p90']:.3f} ms"
        )
    return 0


def _line(rec: dict) -> str:
    neg = rec["negotiated"]
    d = rec["durations"]
    tag = "warm-up" if rec["warmup"] else f"#{rec['index']}"
    line = (
        f"{tag}: {neg['version']} group {neg['group']} signature {neg['sigalg']} "
        + (f"client signature {neg['client_sigalg']} " if neg.get("client_sigalg") else "")
        + f"cipher {neg['cipher']} verified; TCP connect {d['tcp_connect_ns'] / 1e6:.3f} ms,"
        f" handshake {d['handshake_ns'] / 1e6:.3f} ms; bytes sent "
        f"{rec['bytes_sent']}, received {rec['bytes_received']}"
    )
    if "last_byte_ns" in d:
        line += (
            f"; first byte {d['first_byte_ns'] / 1e6:.3f} ms, last byte "
            f"{d['last_byte_ns'] / 1e6:.3f} ms"
        )
    return line
