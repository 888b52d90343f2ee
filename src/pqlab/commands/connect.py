"""`pqlab connect HOST:PORT`: pqlab's TLS client against any server; prints what was
negotiated and how long each connection and handshake took."""

from __future__ import annotations

import os
from pathlib import Path

from pqlab import catalog, engine, stats, units
from pqlab.errors import UserError

SYSTEM_CAS = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)


def register(sub) -> None:
    p = sub.add_parser("connect", help="TLS client against any server", description=__doc__)
    p.add_argument("target", metavar="HOST:PORT")
    p.add_argument("--group", help="key-exchange group to offer and require")
    p.add_argument("--sig", help="server signature algorithm to offer and require")
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
        "--request-bytes",
        metavar="SIZE",
        help="after the handshake send `GET <n>` and read n bytes (pqlab servers)",
    )
    p.add_argument("--keylog", metavar="FILE", help="write an SSLKEYLOGFILE for Wireshark")
    p.add_argument("--json", action="store_true", help="print the engine's records as JSON")
    p.set_defaults(func=run)


def client_args(
    target: str,
    ca: str | Path,
    servername: str | None,
    group=None,
    sig=None,
    n: int = 1,
    warmup: int = 0,
    tls_version: str = "1.3",
) -> list[str]:
    argv = [
        "tls",
        "client",
        "--connect",
        target,
        "--ca",
        str(ca),
        "-n",
        str(n),
        "--warmup",
        str(warmup),
        "--tls-version",
        tls_version,
    ]
    if servername:
        argv += ["--servername", servername]
    if group is not None:
        argv += ["--groups", group.tls_name or group.openssl]
    if sig is not None:
        argv += ["--sigalgs", sig.tls_name]
    return argv


def run(args) -> int:
    if ":" not in args.target:
        raise UserError(f"{args.target!r} is not HOST:PORT (e.g. 127.0.0.1:4433)")
    n = units.parse_positive_int(args.n, "-n")
    warmup = units.parse_positive_int(args.warmup, "--warmup", minimum=0)
    group = catalog.resolve(args.group, "kem") if args.group else None
    sig = catalog.resolve(args.sig, "sig") if args.sig else None
    if group is not None and not (group.openssl and group.tls_name):
        raise UserError(f"{group.name} is not a TLS key-exchange group in OpenSSL's TLS stack")
    if sig is not None and not sig.tls_name:
        raise UserError(f"{sig.name} has no TLS signature scheme in OpenSSL's TLS stack")
    ca = args.ca or next((c for c in SYSTEM_CAS if os.path.exists(c)), None)
    if ca is None:
        raise UserError("no --ca given and no system CA bundle found; pass --ca ROOT.pem")
    if not os.path.exists(ca):
        raise UserError(f"--ca {ca!r} does not exist")
    argv = client_args(args.target, ca, args.servername, group, sig, n, warmup, args.tls_version)
    if args.request_bytes:
        argv += ["--request-bytes", str(units.parse_size(args.request_bytes, "--request-bytes"))]
    if args.keylog:
        argv += ["--keylog", args.keylog]
    hs_ms = []
    for rec in engine.stream(argv, timeout=3600):
        if rec.get("type") != "connection":
            continue
        if args.json:
            import json

            print(json.dumps(rec), flush=True)
            continue
        neg = rec["negotiated"]
        d = rec["durations"]
        tag = "warm-up" if rec["warmup"] else f"#{rec['index']}"
        line = (
            f"{tag}: {neg['version']} group {neg['group']} signature {neg['sigalg']} "
            f"cipher {neg['cipher']} verified; TCP connect {d['tcp_connect_ns'] / 1e6:.3f} ms,"
            f" handshake {d['handshake_ns'] / 1e6:.3f} ms; bytes sent "
            f"{rec['bytes_sent']}, received {rec['bytes_received']}"
        )
        if "last_byte_ns" in d:
            line += (
                f"; first byte {d['first_byte_ns'] / 1e6:.3f} ms, last byte "
                f"{d['last_byte_ns'] / 1e6:.3f} ms"
            )
        print(line, flush=True)
        if not rec["warmup"]:
            hs_ms.append(d["handshake_ns"] / 1e6)
    if len(hs_ms) > 1 and not args.json:
        s = stats.summarize(hs_ms)
        print(
            f"handshake over {s['n']} connections: median {s['median']:.3f} ms, mean "
            f"{s['mean']:.3f} ms, p90 {s['p90']:.3f} ms"
        )
    return 0
