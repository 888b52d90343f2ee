"""`pqlab serve`: run pqlab's TLS server (the engine's) for outside clients until stopped.

Generates (or reuses) a root CA and server certificate for the chosen algorithms, forces
the key-exchange group and signature algorithm, and prints where it listens and the root
certificate to verify it with, e.g. `openssl s_client -connect HOST:PORT -CAfile ROOT
-groups X25519MLKEM768` or `curl --cacert ROOT https://localhost:PORT/`.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from pqlab import catalog, engine
from pqlab.errors import EngineError, UserError
from pqlab.experiments import certs


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="run the TLS server for outside clients",
        description=__doc__,
        formatter_class=_raw(),
    )
    p.add_argument(
        "--group",
        default="X25519MLKEM768",
        help="key-exchange group to force (default X25519MLKEM768)",
    )
    p.add_argument(
        "--sig",
        default="ML-DSA-44",
        help="server certificate / CertificateVerify algorithm (default ML-DSA-44)",
    )
    p.add_argument("--ca", default=None, help="CA signature algorithm (default: the same as --sig)")
    p.add_argument("--port", type=int, default=4433, help="TCP port (default 4433)")
    p.add_argument("--listen", default="127.0.0.1", help="address (default 127.0.0.1)")
    p.add_argument("--tls-version", choices=["1.2", "1.3"], default="1.3")
    p.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="keep the certificates here (default: a temporary directory "
        "removed when the server stops)",
    )
    p.add_argument("--keylog", metavar="FILE", help="write an SSLKEYLOGFILE for Wireshark")
    p.add_argument(
        "--max-connections", type=int, default=None, help="stop after this many connections"
    )
    p.add_argument("--json", action="store_true", help="print the engine's records as JSON")
    p.set_defaults(func=run)


def _raw():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def _check_port(listen: str, port: int) -> None:
    try:
        addr = ipaddress.ip_address(listen)
    except ValueError:
        raise UserError(f"--listen {listen!r} is not an IP address (e.g. 127.0.0.1)") from None
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


def server_args(
    chain: certs.ChainPaths, group, sig, listen: str, port: int, tls_version: str = "1.3"
) -> list[str]:
    return [
        "tls",
        "server",
        "--listen",
        f"{_fmt_host(listen)}:{port}",
        "--cert-chain",
        str(chain.chain),
        "--key",
        str(chain.key),
        "--groups",
        group.tls_name or group.openssl,
        "--sigalgs",
        sig.tls_name,
        "--tls-version",
        tls_version,
    ]


def _fmt_host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


def run(args) -> int:
    group = catalog.resolve(args.group, "kem")
    sig = catalog.resolve(args.sig, "sig")
    ca = catalog.resolve(args.ca, "sig") if args.ca else sig
    if not (group.openssl and group.tls_name):
        raise UserError(f"{group.name} is not a TLS key-exchange group in OpenSSL's TLS stack")
    if not certs.tls_supported(sig):
        raise UserError(f"{sig.name} has no TLS signature scheme in OpenSSL's TLS stack")
    _check_port(args.listen, args.port)
    tmp = None
    cert_dir = Path(args.cert_dir) if args.cert_dir else None
    if cert_dir is None:
        tmp = tempfile.mkdtemp(prefix="pqlab-serve-")
        cert_dir = Path(tmp)
    proc = None
    # Ctrl-C / SIGTERM stop the engine and let the read loop below end by itself: no
    # exception that could land in the middle of the cleanup.
    state: dict = {"proc": None, "stopped": False}

    def on_stop(signum, frame):
        state["stopped"] = True
        running = state["proc"]
        if running is None:
            raise KeyboardInterrupt  # still making certificates: abandon that
        if running.poll() is None:
            running.terminate()

    old_handlers = {s: signal.signal(s, on_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        chain = certs.ensure_chain(ca, sig, cert_dir)
        argv = server_args(chain, group, sig, args.listen, args.port, args.tls_version)
        argv += ["--concurrent", "--events", "off"]
        if args.keylog:
            argv += ["--keylog", args.keylog]
        if args.max_connections:
            argv += ["--max-connections", str(args.max_connections)]
        proc = subprocess.Popen(
            engine.command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        state["proc"] = proc
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.strip():
                continue
            rec = json.loads(line)
            if args.json:
                print(line.rstrip(), flush=True)
            kind = rec.get("type")
            if kind == "error":
                raise EngineError(rec.get("message", "server failed"))
            if kind == "listening" and not args.json:
                host = args.listen if args.listen not in ("0.0.0.0", "::") else "localhost"
                print(
                    f"listening on {rec['address']} ({sig.name} certificate signed by a "
                    f"{ca.name} root, group {group.name}, TLS {args.tls_version})"
                )
                print(f"root certificate: {chain.root}")
                print(
                    f"try: openssl s_client -connect {_fmt_host(host)}:{rec['port']} "
                    f"-CAfile {chain.root} -groups {group.tls_name} "
                    f"-servername localhost"
                )
                print(f"     curl --cacert {chain.root} https://localhost:{rec['port']}/")
                print("Ctrl-C stops the server", flush=True)
            elif kind in ("connection", "connection_error") and not args.json:
                neg = rec.get("negotiated") or {}
                if kind == "connection":
                    print(
                        f"connection {rec['index']} from {rec['peer']}: {neg.get('version')} "
                        f"group {neg.get('group')} signature {neg.get('sigalg')} "
                        f"cipher {neg.get('cipher')} handshake "
                        f"{rec.get('handshake_ns', 0) / 1e6:.2f} ms",
                        flush=True,
                    )
                else:
                    print(
                        f"connection {rec['index']} from {rec['peer']} failed: "
                        f"{rec.get('message')}",
                        flush=True,
                    )
        proc.wait()
        if state["stopped"]:
            print("stopped", file=sys.stderr)
            return 0
        if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGINT):
            err = (proc.stderr.read() if proc.stderr else "").strip()
            raise EngineError(err.splitlines()[-1] if err else f"server exited {proc.returncode}")
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    finally:
        _cleanup(proc, tmp)
        for sig, old in old_handlers.items():
            signal.signal(sig, old)
    return 0


def _cleanup(proc, tmp) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
