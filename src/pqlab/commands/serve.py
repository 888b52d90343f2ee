"""`pqlab serve`: run pqlab's TLS server (the engine's) for outside clients until stopped.

Generates (or reuses) a root CA and server certificate for the chosen algorithms, forces
the key-exchange group and signature algorithm, and prints where it listens and the root
certificate to verify it with, e.g. `openssl s_client -connect HOST:PORT -CAfile ROOT
-groups X25519MLKEM768` or `curl --cacert ROOT https://localhost:PORT/`.

Connections are served by a bounded pool of --max-concurrent workers. A full server makes
room for a new connection by evicting its oldest unfinished handshake or, when none is left,
its slowest response under --min-response-rate; when neither exists the new connection is
refused (closed at once) and reported. Each handshake must be done within 60 s and each
response within --response-timeout. See docs/security.md before listening on anything but
loopback.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
from pathlib import Path

from pqlab import catalog, files, units
from pqlab.errors import UserError
from pqlab.options.tls import parse_client_auth
from pqlab.tls import runner, stacks
from pqlab.tls.chains import make_chain

TMP_PREFIX = "pqlab-serve-"
DEFAULT_MAX_CONCURRENT = 64
MAX_RESPONSE_TIMEOUT = 86_400  # the engine's --response-timeout range
MAX_MIN_RESPONSE_RATE = 1 << 30  # the engine's --min-response-rate range (bytes/s)


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="run the TLS server for outside clients",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--group",
        default="X25519MLKEM768",
        help="key-exchange group to force (default %(default)s)",
    )
    p.add_argument(
        "--sig",
        default="ML-DSA-44",
        help="server certificate / CertificateVerify algorithm (default %(default)s)",
    )
    p.add_argument("--ca", default=None, help="CA signature algorithm (default: the same as --sig)")
    p.add_argument("--stack", default=stacks.DEFAULT_STACK, help="TLS stack (default %(default)s)")
    p.add_argument(
        "--send-root",
        action="store_true",
        help="send the root CA certificate after the server certificate (as document 000's "
        "servers did, and as a chain with an intermediate costs); default: the server "
        "certificate only",
    )
    p.add_argument("--port", default="4433", help="TCP port (default %(default)s)")
    p.add_argument("--listen", default="127.0.0.1", help="address (default %(default)s)")
    p.add_argument("--tls-version", choices=["1.2", "1.3"], default="1.3")
    p.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="keep the certificates here (default: a temporary directory removed when the "
        "server stops); private keys are written 0600 in 0700 directories",
    )
    p.add_argument(
        "--keylog",
        metavar="FILE",
        help="write an SSLKEYLOGFILE for Wireshark: a new file (made 0600 when the first "
        "secret comes), or an existing key log of yours with mode 0600, appended to",
    )
    p.add_argument(
        "--max-connections", metavar="N", default=None, help="stop after this many connections"
    )
    p.add_argument(
        "--max-concurrent",
        metavar="N",
        default=str(DEFAULT_MAX_CONCURRENT),
        help="connections served at the same time (a bounded worker pool); a full server "
        "evicts its oldest unfinished handshake, else its slowest response under "
        "--min-response-rate, else refuses the new connection (default %(default)s)",
    )
    p.add_argument(
        "--response-timeout",
        metavar="SECONDS",
        help="seconds a connection may take for its response, from its request to its last "
        f"byte, however slowly the client reads (1-{MAX_RESPONSE_TIMEOUT}; default 3600)",
    )
    p.add_argument(
        "--min-response-rate",
        metavar="SIZE",
        help="bytes a second (a size: 16KiB) under which a full server evicts its slowest "
        "response, measured over the last 5 to 7.5 s, to serve a new client (0: never; "
        "default 16KiB, one full TLS record a second)",
    )
    p.add_argument(
        "--client-sig",
        metavar="LIST",
        help="mutual TLS: require a client certificate of one of these algorithms (comma "
        "separated), signed by a client CA the server trusts; a client certificate and key "
        "of each are written next to the server's (keep them with --cert-dir)",
    )
    p.add_argument(
        "--client-ca-sig",
        metavar="ALG",
        help="mutual TLS: the client CA's algorithm (default: the same as --ca)",
    )
    p.add_argument("--json", action="store_true", help="print the engine's records as JSON")
    p.set_defaults(func=run)


def _fmt_host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


def check_listen(listen: str, port_text: str) -> int:
    try:
        addr = ipaddress.ip_address(listen)
    except ValueError:
        raise UserError(f"--listen {listen!r} is not an IP address (e.g. 127.0.0.1)") from None
    port = units.parse_positive_int(port_text, "--port")
    if not 0 < port < 65536:
        raise UserError(f"--port {port} is out of range 1..65535")
    fam = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((listen, port))
        except OSError as e:
            raise UserError(
                f"cannot listen on {listen}:{port}: {e.strerror}; choose another "
                "--port or stop what uses it"
            ) from None
    return port


def remove_stale_temp_dirs() -> list[Path]:
    """Temporary certificate directories of `pqlab serve` processes that are gone (killed
    with SIGKILL, so they could not clean up): they hold private keys; remove them."""
    removed = []
    pattern = re.compile(rf"^{TMP_PREFIX}(\d+)-")
    try:
        tmp = files.Dir.open(tempfile.gettempdir(), "temporary directory")
    except UserError:
        return removed  # a temporary directory pqlab may not write into: nothing of ours
    with tmp:
        for name in tmp.names():
            m = pattern.match(name)
            st = tmp.entry(name) if m else None
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue  # not one of ours (a link, or another user's): left alone
            try:
                os.kill(int(m.group(1)), 0)
                continue  # still running
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            tmp.remove_tree(name)
            removed.append(tmp.path_of(name))
    return removed


def _plan(args):
    stack = stacks.get(args.stack)
    group = catalog.resolve(args.group, "kem")
    sig = catalog.resolve(args.sig, "sig")
    ca = catalog.resolve(args.ca, "sig") if args.ca else sig
    stacks.require([group], stack, "group", "--group")
    stacks.require([sig], stack, "server", "--sig")
    stacks.require([ca], stack, "ca", "--ca")
    stacks.require_chains([sig], [ca], stack, send_root=args.send_root, option="--sig")
    signers, client_ca = parse_client_auth(args, stack)
    client_sigs = [s for s in signers if s is not None]
    if client_sigs and len(client_sigs) != len(signers):
        raise UserError(
            f"--client-sig {args.client_sig!r}: a server either requires a client "
            "certificate or not; leave 'none' out"
        )
    client_ca = client_ca or ca
    response_limits = _response_limits(args)
    port = check_listen(args.listen, args.port)
    max_conn = None
    if args.max_connections is not None:
        max_conn = units.parse_positive_int(args.max_connections, "--max-connections")
    max_concurrent = units.parse_positive_int(args.max_concurrent, "--max-concurrent")
    if max_concurrent > 4096:
        raise UserError(f"--max-concurrent {args.max_concurrent!r}: at most 4096")
    cert_dir = files.check_writable(args.cert_dir, "--cert-dir") if args.cert_dir else None
    keylog = files.check_keylog(args.keylog) if args.keylog is not None else None
    client = (client_sigs, client_ca)
    limits = (max_conn, max_concurrent, *response_limits)
    return stack, group, sig, ca, port, limits, cert_dir, keylog, client


def _response_limits(args) -> tuple[int | None, int | None]:
    """--response-timeout and --min-response-rate, checked (None: the engine's default)."""
    timeout = rate = None
    if args.response_timeout is not None:
        timeout = units.parse_positive_int(
            args.response_timeout, "--response-timeout", maximum=MAX_RESPONSE_TIMEOUT
        )
    if args.min_response_rate is not None:
        rate = units.parse_size(
            args.min_response_rate, "--min-response-rate", maximum=MAX_MIN_RESPONSE_RATE
        )
    return timeout, rate


def run(args) -> int:
    plan = _plan(args)
    stack, group, sig, ca, port, limits, cert_dir, keylog, client = plan
    max_conn, max_concurrent, response_timeout, min_response_rate = limits
    remove_stale_temp_dirs()
    tmp = None
    if cert_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
        cert_dir = tmp
    try:
        chain = make_chain(cert_dir, ca, sig, stack.name, send_root=args.send_root)
        client_sigs, client_ca = client
        client_chains = [
            make_chain(cert_dir, client_ca, s, stack.name, purpose="client") for s in client_sigs
        ]
        auth = None
        if client_chains:
            # One client CA root for all of them (roots are made once per CA algorithm).
            auth = runner.ClientAuth(stack, ca=client_chains[0].root, sigalgs=tuple(client_sigs))
        spec = runner.ServerSpec(
            tls=runner.Tls(
                stack=stack,
                groups=(group,),
                sigalgs=(sig,),
                version=args.tls_version,
                events=False,
                keylog=keylog,
            ),
            chain=chain,
            listen=f"{_fmt_host(args.listen)}:{port}",
            max_connections=max_conn,
            concurrent=True,
            max_concurrent=max_concurrent,
            response_timeout=response_timeout,
            min_response_rate=min_response_rate,
            client_auth=auth,
        )
        return _serve(spec, args, group, sig, ca, chain, client_chains)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _serve(spec, args, group, sig, ca, chain, client_chains=()) -> int:
    # Ctrl-C / SIGTERM stop the engine and let the read loop below end by itself: no
    # exception can land in the middle of the cleanup.
    state = {"stopped": False}
    # Records are read in batches: a wake-up per batch, not two thread switches per
    # connection, keeps the lab from slowing the server it reports on.
    server = runner.start_server(spec, batch_s=0.05)

    def on_stop(signum, frame):
        state["stopped"] = True
        server.signal(signal.SIGTERM)

    old = {s: signal.signal(s, on_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.json:
            print(_json(server.listening), flush=True)
        else:
            _banner(server.listening, args, group, sig, ca, chain, client_chains)
        for rec in server.iter_records():
            _show(rec, args)
        if not state["stopped"]:
            server.finish(10)
    finally:
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if state["stopped"]:
        print("stopped", file=sys.stderr)
    return 0


def _json(rec: dict) -> str:
    import json

    return json.dumps(rec)


def _banner(listening: dict, args, group, sig, ca, chain, client_chains=()) -> None:
    host = args.listen if args.listen not in ("0.0.0.0", "::") else "localhost"
    print(
        f"listening on {listening['address']} ({sig.name} certificate signed by a "
        f"{ca.name} root{', root sent too' if chain.sends_root else ''}, group {group.name}, "
        f"TLS {args.tls_version}, stack {args.stack})"
    )
    print(f"root certificate: {chain.root}")
    print(
        f"try: openssl s_client -connect {_fmt_host(host)}:{listening['port']} "
        f"-CAfile {chain.root} -groups {group.tls_name or group.name} -servername localhost"
    )
    print(f"     curl --cacert {chain.root} https://localhost:{listening['port']}/")
    for client_chain in client_chains:
        print(
            f"mutual TLS: a client must present a {client_chain.server.name} certificate "
            f"signed by the {client_chain.ca.name} client CA; one is at {client_chain.chain} "
            f"(key {client_chain.key}): add -cert {client_chain.chain} -key {client_chain.key} "
            "to openssl s_client, or to pqlab connect: --client-sig "
            f"{client_chain.server.name} --client-cert {client_chain.chain} --client-key "
            f"{client_chain.key}"
        )
    print("Ctrl-C stops the server", flush=True)


def _show(rec: dict, args) -> None:
    if args.json:
        print(_json(rec), flush=True)
        return
    kind = rec.get("type")
    neg = rec.get("negotiated") or {}
    if kind == "connection":
        print(
            f"connection {rec['index']} from {rec['peer']}: {neg.get('version')} "
            f"group {neg.get('group')} signature {neg.get('sigalg')} "
            f"cipher {neg.get('cipher')} handshake "
            f"{rec.get('handshake_ns', 0) / 1e6:.2f} ms",
            flush=True,
        )
    elif kind == "connection_error":
        print(
            f"connection {rec.get('index')} from {rec.get('peer')} failed: {rec.get('message')}",
            flush=True,
        )
    elif kind == "connection_refused":
        print(
            f"connection from {rec.get('peer')} refused: {rec.get('message')}",
            flush=True,
        )
