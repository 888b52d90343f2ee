"""Certificate chains: the one maker every experiment and command uses.

`make_chain(directory, ca, server)` gives a root CA of algorithm `ca` and a server
certificate of algorithm `server` signed by it, generated once by the engine's one
certificate builder (`tls certs`: keys of OpenSSL or liboqs; every TLS stack reads them)
and reused afterwards: pairs live in `<directory>/<ca>__<server>/`, one root per CA algorithm
in `<directory>/roots/<ca>/` signs every server certificate of that CA (as a real CA does).
`Chain.sending_root()` is the same chain with the root certificate sent after the server
certificate (the document-000 servers did that; ttlb's chains stand for a chain with an
intermediate that way). `intermediates` puts intermediate CAs of the given algorithms
between the root and the server certificate; `chain_bytes` makes the certificates the server
sends take that many DER bytes in all (the builder adds subjectAltName names to the server
certificate: a multi-domain certificate's kind of size), whatever the algorithms.

Private keys are 0600 in 0700 directories.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from pqlab import catalog, engine
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.tls import stacks

ROOTS = "roots"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+]+", "-", name).strip("-")


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) for private keys: the leaf directory is 0700."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def secret_file(path: Path) -> Path:
    """Create (or restrict) a file that will hold secrets, such as a key log: mode 0600
    before anything is written to it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path


@dataclass(frozen=True)
class Chain:
    ca: Algorithm
    server: Algorithm
    stack: str
    directory: Path
    root: Path  # root certificate (PEM): what clients trust (--ca / -CAfile)
    chain: Path  # what the server sends (PEM)
    key: Path  # server private key (PEM, 0600)
    server_cert: Path
    record: dict  # the engine's certs record (sizes)
    sends_root: bool = False

    @property
    def sent_der(self) -> list[int]:
        """DER bytes of each certificate the server sends, leaf first."""
        r = self.record
        out = [int(r["server_cert_der_bytes"])]
        out += [int(n) for n in r.get("intermediate_der_bytes") or []]
        return out + ([int(r["root_der_bytes"])] if self.sends_root else [])

    @property
    def sent_certs(self) -> int:
        return len(self.sent_der)

    @property
    def sent_der_bytes(self) -> int:
        """DER bytes of the certificates the server sends."""
        return sum(self.sent_der)

    @property
    def root_name_der_bytes(self) -> int:
        """DER bytes of the root's Name (what a server lists in a CertificateRequest's
        certificate_authorities when it names the CAs it accepts)."""
        return subject_der_bytes((self.directory / "root.crt.der").read_bytes())

    @property
    def padded_to(self) -> int | None:
        """The DER size the chain was padded to (`chain_bytes`), if it was."""
        n = self.record.get("chain_bytes_requested")
        return int(n) if n else None

    def sending_root(self) -> Chain:
        """This chain with the root certificate appended to what the server sends."""
        if self.sends_root:
            return self
        if self.padded_to is not None:
            raise ValueError("a padded chain is made with or without its root; make it again")
        combined = self.directory / "chain+root.pem"
        if not combined.exists():
            text = self.chain.read_text().rstrip("\n") + "\n" + self.root.read_text()
            tmp = combined.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(combined)
        return replace(self, chain=combined, sends_root=True)


def _tlv(der: bytes, at: int) -> tuple[int, int]:
    """(start of the content, end of the element) of the DER element at `at`."""
    first = der[at + 1]
    if first < 0x80:
        return at + 2, at + 2 + first
    n = first & 0x7F
    length = int.from_bytes(der[at + 2 : at + 2 + n], "big")
    return at + 2 + n, at + 2 + n + length


def subject_der_bytes(cert: bytes) -> int:
    """DER bytes of an X.509 certificate's subject Name: the sixth field of its
    TBSCertificate (after [0] version, serial, signature, issuer and validity)."""
    tbs, _ = _tlv(cert, 0)
    at, _ = _tlv(cert, tbs)
    fields = []
    while len(fields) < 6:
        _, end = _tlv(cert, at)
        fields.append((at, end))
        at = end
    start, end = fields[5] if cert[fields[0][0]] == 0xA0 else fields[4]
    return end - start


# The engine's default subject alternative names: the lab's own server address among them.
DEFAULT_SANS = ("localhost", "127.0.0.1", "198.18.0.2")


def make_chain(
    directory: str | Path,
    ca: str | Algorithm,
    server: str | Algorithm,
    stack: str = stacks.DEFAULT_STACK,
    send_root: bool = False,
    server_address: str | None = None,
    purpose: str = "server",
    intermediates: tuple = (),
    chain_bytes: int | None = None,
) -> Chain:
    """A root CA (`ca`) and a server certificate (`server`) under `directory`, made once.

    `server_address`: the IP address clients connect to when it is not the lab's own (a
    remote server host): the certificate names it instead of 198.18.0.2 (an IPv4 address
    in place of another, so the certificate's size does not change). With
    `purpose="client"` the leaf is a client certificate (extended key usage clientAuth, for
    mutual TLS), kept apart from the server ones. `intermediates`: algorithms of the
    intermediate CAs, from the one the root signs to the server certificate's issuer;
    `chain_bytes`: the DER bytes the sent certificates take in all (padded server
    certificate; the root counts when `send_root`)."""
    if purpose not in ("server", "client"):
        raise ValueError(f"purpose must be server or client, not {purpose!r}")
    ca = ca if isinstance(ca, Algorithm) else catalog.resolve(ca, "sig")
    server = server if isinstance(server, Algorithm) else catalog.resolve(server, "sig")
    inter = [a if isinstance(a, Algorithm) else catalog.resolve(a, "sig") for a in intermediates]
    stacks.require_certificates([ca, *inter], "CA")
    stacks.require_certificates([server], f"{purpose} certificate")
    base = Path(directory)
    d = base / f"{slug(ca.name)}__{slug(server.name)}{'' if purpose == 'server' else '__client'}"
    if inter:
        d = d.with_name(d.name + "__via-" + "-".join(slug(a.name) for a in inter))
    if chain_bytes is not None:
        d = d.with_name(d.name + f"__{int(chain_bytes)}B" + ("+root" if send_root else ""))
    sans = None
    if server_address and server_address not in DEFAULT_SANS:
        sans = [*DEFAULT_SANS[:2], server_address]
        d = d.with_name(f"{d.name}__{slug(server_address)}")
    rec_path = d / "certs.json"
    paths = {
        "root": d / "root.crt.pem",
        "chain": d / "chain.pem",
        "key": d / "server.key.pem",
        "server_cert": d / "server.crt.pem",
    }
    if rec_path.exists() and all(p.exists() for p in paths.values()):
        record = json.loads(rec_path.read_text())
    else:
        extra = []
        if inter:
            specs = ",".join(stacks.certificate_key_spec(a) for a in inter)
            extra += ["--intermediate-alg", specs]
        if chain_bytes is not None:
            extra += ["--chain-bytes", str(int(chain_bytes))]
            extra += ["--chain-with-root"] if send_root else []
        record = _generate(base, d, ca, server, purpose, sans, extra)
        tmp = rec_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(rec_path)
    chain = Chain(ca=ca, server=server, stack=stack, directory=d, record=record, **paths)
    if chain_bytes is not None:
        return replace(chain, sends_root=send_root)
    return chain.sending_root() if send_root else chain


def _generate(
    base: Path,
    d: Path,
    ca: Algorithm,
    server: Algorithm,
    purpose: str = "server",
    sans=None,
    extra: list[str] = (),
) -> dict:
    private_dir(base)
    private_dir(d)
    root_dir = base / ROOTS / slug(ca.name)
    argv = [
        "tls",
        "certs",
        "--ca-alg",
        stacks.certificate_key_spec(ca),
        "--server-alg",
        stacks.certificate_key_spec(server),
        "--out-dir",
        str(d),
        "--purpose",
        purpose,
    ]
    if sans:
        argv += ["--san", ",".join(sans)]
    argv += list(extra)
    if (root_dir / "root.crt.pem").exists() and (root_dir / "root.key.pem").exists():
        argv += ["--ca-cert", str(root_dir / "root.crt.pem")]
        argv += ["--ca-key", str(root_dir / "root.key.pem")]
    records = engine.run(argv, timeout=600)
    record = next((r for r in records if r["type"] == "certs"), None)
    if record is None:
        raise UserError(f"the engine made no certificates in {d}")
    record["ca_sig"] = ca.name
    record["server_sig"] = server.name
    if not (root_dir / "root.crt.pem").exists():
        # One root per CA algorithm, shared by all its server certificates; made atomically so
        # concurrent runs never see half a root.
        private_dir(root_dir.parent)
        tmp_dir = root_dir.with_name(root_dir.name + f".tmp{os.getpid()}")
        private_dir(tmp_dir)
        for name in ("root.crt.pem", "root.key.pem", "root.crt.der"):
            shutil.copyfile(d / name, tmp_dir / name)
        os.chmod(tmp_dir / "root.key.pem", 0o600)
        try:
            tmp_dir.rename(root_dir)
        except OSError:  # another process made it first; theirs is as good
            shutil.rmtree(tmp_dir, ignore_errors=True)
    for key in d.glob("*.key.pem"):
        os.chmod(key, 0o600)
    return record
