"""`pqlab certs`: a root CA and a server certificate per (CA algorithm, server algorithm)
pair, made by the engine's certificate builder (`pqlab.tls.chains`), and their DER sizes
(the source document's tables 14 and 15), with whether the chosen TLS stack can serve each
chain and, when it cannot, why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pqlab import catalog, estimate, units
from pqlab.catalog import Algorithm
from pqlab.experiment import CellId, Cells, Experiment, Option, parse_stack, stack_option
from pqlab.progress import CellProgress
from pqlab.report.section import Section
from pqlab.tls import stacks
from pqlab.tls.chains import make_chain

NAME = "certs"
CELLS = Cells(NAME, ("ca_sig", "server_sig"), tls=True)
DEFAULT_SIGS = ["RSA-2048", "RSA-3072", "ECDSA-P256", "ML-DSA-44"]

RAW_DDL = """
CREATE TABLE IF NOT EXISTS certs_raw (
    ca_sig TEXT, server_sig TEXT, ca_key_spec TEXT, server_key_spec TEXT,
    ca_signature_algorithm TEXT, server_cert_signature_algorithm TEXT,
    root_der_bytes INTEGER, server_cert_der_bytes INTEGER,
    root_public_key_der_bytes INTEGER, server_public_key_der_bytes INTEGER,
    root_signature_bytes INTEGER, server_cert_signature_bytes INTEGER,
    chain_certs INTEGER, chain_bytes INTEGER, chain_tls13_list_bytes INTEGER,
    root_sha256 TEXT, record JSON, stack TEXT, usable_in_tls BOOLEAN,
    not_usable_because TEXT)
"""
MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS certs_raw ADD COLUMN IF NOT EXISTS {name} {kind}"
    for name, kind in (
        ("stack", "TEXT"),
        ("usable_in_tls", "BOOLEAN"),
        ("not_usable_because", "TEXT"),
    )
)


def resolve_sigs(text: str | None, role: str, stack, option: str) -> list[Algorithm]:
    """The algorithms of --ca-sig / --server-sig: names (any the certificate builder can
    make keys of, whether or not the stack can serve them), 'all' (every catalogue signature
    the stack can use in that role) or the default set."""
    names = units.parse_list(text, option, example="ML-DSA-44,all") if text else DEFAULT_SIGS
    if [n.lower() for n in names] == ["all"]:
        return [a for a in catalog.all_algorithms("sig") if stack.why_not(a, role) is None]
    algs = catalog.resolve_list(names, "sig")
    stacks.require_certificates(algs, option)
    return algs


def not_usable(stack, ca: Algorithm, srv: Algorithm) -> str | None:
    """Why `stack` cannot serve a chain of `srv` under `ca` in TLS 1.3 (None: it can)."""
    return stack.why_not(srv, "server") or stack.why_not(ca, "ca") or stack.chain_why_not(srv, ca)


@dataclass
class Plan:
    ca_sigs: list[Algorithm]
    server_sigs: list[Algorithm]
    stack: str = stacks.DEFAULT_STACK

    def cell_id(self, ca: Algorithm, srv: Algorithm) -> CellId:
        return CELLS.id(ca, srv, stack=self.stack)


def measure(plan: Plan, store) -> None:
    """Generate every pair into the run directory and store the sizes, cell by cell."""

    store.ensure_table(RAW_DDL)
    done = CELLS.done(store)
    cert_dir = store.path / "certs"
    with CellProgress("certs", len(plan.ca_sigs) * len(plan.server_sigs)) as progress:
        for ca in plan.ca_sigs:
            for srv in plan.server_sigs:
                progress.start(f"CA {ca.name}, server {srv.name}")
                cell = plan.cell_id(ca, srv)
                if cell not in done:
                    _measure_pair(store, cert_dir, plan, ca, srv, cell)
                progress.advance()


def _measure_pair(store, cert_dir, plan: Plan, ca: Algorithm, srv: Algorithm, cell: CellId) -> None:
    chain = make_chain(cert_dir, ca, srv, plan.stack)
    r = chain.record
    why = not_usable(stacks.get(plan.stack), ca, srv)
    with store.cell(NAME, cell, {"ca_sig": ca.name, "server_sig": srv.name}):
        store.insert_rows(
            "certs_raw",
            [
                {
                    "ca_sig": ca.name,
                    "server_sig": srv.name,
                    "ca_key_spec": r["ca_alg"],
                    "server_key_spec": r["server_alg"],
                    "ca_signature_algorithm": r["ca_sig_alg"],
                    "server_cert_signature_algorithm": r["server_cert_sig_alg"],
                    "root_der_bytes": r["root_der_bytes"],
                    "server_cert_der_bytes": r["server_cert_der_bytes"],
                    "root_public_key_der_bytes": r["root_public_key_der_bytes"],
                    "server_public_key_der_bytes": r["server_public_key_der_bytes"],
                    "root_signature_bytes": r["root_signature_bytes"],
                    "server_cert_signature_bytes": r["server_cert_signature_bytes"],
                    "chain_certs": r["chain_certs"],
                    "chain_bytes": r["chain_der_bytes"],
                    "chain_tls13_list_bytes": r["chain_tls13_list_bytes"],
                    "root_sha256": hashlib.sha256(
                        (chain.directory / "root.crt.der").read_bytes()
                    ).hexdigest(),
                    "record": json.dumps(r),
                    "stack": plan.stack,
                    "usable_in_tls": why is None,
                    "not_usable_because": why,
                }
            ],
        )


def export(store):

    if not store.has_table("certs_raw"):
        return None
    root_csv = store.export_table(
        "certs_root",
        """
        SELECT ca_sig AS algorithm,
               CAST(median(root_der_bytes) AS INTEGER) AS root_der_bytes,
               min(root_der_bytes) AS root_der_bytes_min,
               max(root_der_bytes) AS root_der_bytes_max,
               CAST(median(root_public_key_der_bytes) AS INTEGER) AS public_key_der_bytes,
               CAST(median(root_signature_bytes) AS INTEGER) AS signature_bytes,
               count(DISTINCT root_sha256) AS n_roots
        FROM certs_raw GROUP BY ca_sig ORDER BY median(root_der_bytes), ca_sig""",
    )
    server_csv = store.export_table(
        "certs_server",
        """
        SELECT server_sig, ca_sig, server_cert_der_bytes, chain_bytes, chain_certs,
               chain_tls13_list_bytes, server_public_key_der_bytes,
               server_cert_signature_bytes, server_cert_signature_algorithm,
               stack, usable_in_tls, not_usable_because
        FROM certs_raw ORDER BY server_sig, server_cert_der_bytes, ca_sig""",
    )
    s = Section(
        title="Certificate sizes",
        intro=(
            "<p>For each CA algorithm a self-signed root, and for each (CA, server) pair a "
            "server certificate signed by that root, with realistic content: subject, "
            "subjectAltName (DNS and IP), key usage, extended key usage serverAuth, basic "
            "constraints, subject and authority key identifiers, one-year validity. Sizes "
            "are DER bytes of the certificates the engine's builder made (keys and "
            "signatures of OpenSSL or liboqs; OpenSSL's verifier and liboqs check them). "
            "<b>usable_in_tls</b> says whether the run's TLS stack can serve the chain, "
            "and <b>not_usable_because</b> why not (a limit of the stack, such as rustls's "
            "64 KiB certificates, or an algorithm it lacks).</p>"
            "<p>A server certificate carries the server's public key and the CA's "
            "signature, so its size grows with both algorithms: an ML-DSA-44 key adds about "
            "1.3 KB, an ML-DSA-44 CA signature about 2.4 KB. <b>chain_bytes</b> is what "
            "the server sends in its Certificate message (the server certificate; the root "
            "stays with the client); <b>chain_tls13_list_bytes</b> adds TLS 1.3's 5 bytes "
            "of framing per certificate. One root is made per CA algorithm and signs all "
            "its server certificates. ECDSA signatures vary by a byte or two between "
            "certificates (DER integer encoding).</p>"
        ),
    )
    s.table(root_csv, "Root certificate size per algorithm (DER bytes; document table 14)")
    s.table(
        server_csv,
        "Server certificate and chain size per server x CA algorithm "
        "(DER bytes; document table 15)",
    )
    return s


def from_values(values) -> Plan:
    stack = parse_stack(values)
    return Plan(
        ca_sigs=resolve_sigs(values.ca_sig, "ca", stack, "--ca-sig"),
        server_sigs=resolve_sigs(values.server_sig, "server", stack, "--server-sig"),
        stack=stack.name,
    )


class Certs(Experiment):
    name = NAME
    help = "certificate sizes per CA x server signature algorithm"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = (
        Option(
            "ca-sig",
            "CA signature algorithms, comma separated, or 'all' "
            f"(default: {','.join(DEFAULT_SIGS)})",
            metavar="LIST",
        ),
        Option(
            "server-sig",
            "server certificate algorithms, comma separated (any the engine can make "
            "certificates of; the table says which the stack can serve), or 'all' (every "
            f"catalogue signature the stack supports in TLS; default: {','.join(DEFAULT_SIGS)})",
            metavar="LIST",
        ),
        stack_option(),
    )

    def work(self, plan: Plan) -> estimate.Work:
        """Per (CA, server) pair one chain (an engine run and the server's key), per CA
        its root's key."""
        cells = len(plan.ca_sigs) * len(plan.server_sigs)
        size = estimate.count(len(plan.ca_sigs), "CA") + " x "
        size += estimate.count(len(plan.server_sigs), "server algorithm")
        work = estimate.Work(size, cells=cells)
        work.add("chain", cells)
        for alg in plan.ca_sigs:
            work.add("operation_seconds", estimate.keygen_s(alg))
        for alg in plan.server_sigs:
            work.add("operation_seconds", len(plan.ca_sigs) * estimate.keygen_s(alg))
        return work


EXPERIMENT = Certs()
