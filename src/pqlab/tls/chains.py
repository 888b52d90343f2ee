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

Private keys are 0600 in 0700 directories. A chain is made in a new directory of a private
name and renamed into place once complete (`pqlab.files`): nothing is written through a link
planted in the directory, a half-made chain is never found, and runs that share a directory
(`pqlab serve --cert-dir`, `pqlab memory --certs`) never see each other's half-made files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from pqlab import catalog, engine, files
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.tls import stacks

ROOTS = "roots"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+]+", "-", name).strip("-")


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
        der = files.read_input(
            self.directory / "root.crt.der", f"{self.directory}/root.crt.der", "certificate",
            follow=False,
        )  # fmt: skip
        return subject_der_bytes(der)

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
        with files.Dir.open(self.directory, "certificate directory", private=True) as d:
            if not d.check_file("chain+root.pem"):
                chain, root = (
                    files.read_input_text(p, str(p), "certificate", follow=False)
                    for p in (self.chain, self.root)
                )
                text = chain.rstrip("\n") + "\n" + root
                d.write("chain+root.pem", text)
            combined = d.path_of("chain+root.pem")
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
    name = f"{slug(ca.name)}__{slug(server.name)}{'' if purpose == 'server' else '__client'}"
    if inter:
        name += "__via-" + "-".join(slug(a.name) for a in inter)
    if chain_bytes is not None:
        name += f"__{int(chain_bytes)}B" + ("+root" if send_root else "")
    sans = None
    if server_address and server_address not in DEFAULT_SANS:
        sans = [*DEFAULT_SANS[:2], server_address]
        name += f"__{slug(server_address)}"
    with files.Dir.open(directory, "certificate directory", create=True, private=True) as base:
        record = _made(base, name)
        if record is None:
            extra = []
            if inter:
                specs = ",".join(stacks.certificate_key_spec(a) for a in inter)
                extra += ["--intermediate-alg", specs]
            if chain_bytes is not None:
                extra += ["--chain-bytes", str(int(chain_bytes))]
                extra += ["--chain-with-root"] if send_root else []
            record = _generate(base, name, ca, server, purpose, sans, extra)
        d = base.path_of(name)
    paths = {p: d / f for p, f in CHAIN_FILES.items()}
    chain = Chain(ca=ca, server=server, stack=stack, directory=d, record=record, **paths)
    if chain_bytes is not None:
        return replace(chain, sends_root=send_root)
    return chain.sending_root() if send_root else chain


# A chain directory's files (Chain field -> file name); certs.json, written last, says it
# is complete.
CHAIN_FILES = {
    "root": "root.crt.pem",
    "chain": "chain.pem",
    "key": "server.key.pem",
    "server_cert": "server.crt.pem",
}
RECORD = "certs.json"
ROOT_FILES = {"root.crt.pem": 0o644, "root.key.pem": 0o600, "root.crt.der": 0o644}


def _made(base: files.Dir, name: str) -> dict | None:
    """The record of the chain `name` in `base` if it is there complete (regular files of
    the user's own; a link or another user's file is refused), else None."""
    st = base.entry(name)
    if st is None:
        return None
    d = base.sub(name, private=True, create=False)
    if not all(d.check_file(f) for f in (RECORD, *CHAIN_FILES.values())):
        return None
    return json.loads(d.read_bytes(RECORD))


def _generate(
    base: files.Dir,
    name: str,
    ca: Algorithm,
    server: Algorithm,
    purpose: str = "server",
    sans=None,
    extra: list[str] = (),
) -> dict:
    """Make the chain `name` in a new directory of its own, then rename it into place (a
    chain of that name another process made meanwhile is used instead)."""
    made = base.fresh_sub(f".{name}.", private=True)
    roots = base.sub(ROOTS, private=True)
    root_name = slug(ca.name)
    argv = [
        "tls",
        "certs",
        "--ca-alg",
        stacks.certificate_key_spec(ca),
        "--server-alg",
        stacks.certificate_key_spec(server),
        "--out-dir",
        str(made.path),
        "--purpose",
        purpose,
    ]
    if sans:
        argv += ["--san", ",".join(sans)]
    argv += list(extra)
    root = roots.sub(root_name, private=True, create=False) if roots.entry(root_name) else None
    if root is not None and root.check_file("root.crt.pem") and root.check_file("root.key.pem"):
        argv += ["--ca-cert", str(root.path_of("root.crt.pem"))]
        argv += ["--ca-key", str(root.path_of("root.key.pem"))]
    else:
        root = None
    try:
        records = engine.run(argv, timeout=600)
        record = next((r for r in records if r["type"] == "certs"), None)
        if record is None:
            raise UserError(f"the engine made no certificates in {base.path_of(name)}")
        record["ca_sig"] = ca.name
        record["server_sig"] = server.name
        if root is None:
            _publish_root(made, roots, root_name)
        made.write(RECORD, json.dumps(record, indent=1))
        if base.entry(name) is not None:
            base.remove_tree(name)  # an incomplete chain of that name: made again
        if base.rename(made.path.name, name):
            return record
    finally:
        base.remove_tree(made.path.name)  # gone when renamed; else what failed
    theirs = _made(base, name)
    if theirs is None:
        raise UserError(f"the chain {base.path_of(name)} keeps being replaced")
    return theirs


def _publish_root(made: files.Dir, roots: files.Dir, root_name: str) -> None:
    """One root per CA algorithm, shared by all its server certificates; published whole
    (a new directory renamed into place), so concurrent runs never see half a root. A root
    another process published first is as good."""
    new = roots.fresh_sub(f".{root_name}.", private=True)
    try:
        for file, mode in ROOT_FILES.items():
            made.copy_into(file, new, mode, "certificate")
        roots.rename(new.path.name, root_name)
    finally:
        roots.remove_tree(new.path.name)
