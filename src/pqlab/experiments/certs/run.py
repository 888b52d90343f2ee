"""Measuring the certs experiment: one chain per (CA, server) pair from the certificate
builder, its DER sizes, and whether the stack can serve it.
"""

from __future__ import annotations

import hashlib
import json

from pqlab import files
from pqlab.catalog import Algorithm
from pqlab.experiment import CellId
from pqlab.experiments.certs.plan import CELLS, NAME, Plan
from pqlab.experiments.certs.schema import RAW_DDL
from pqlab.progress import CellProgress
from pqlab.tls.chains import make_chain


def not_usable(stack, ca: Algorithm, srv: Algorithm) -> str | None:
    """Why `stack` cannot serve a chain of `srv` under `ca` in TLS 1.3 (None: it can)."""
    return stack.why_not(srv, "server") or stack.why_not(ca, "ca") or stack.chain_why_not(srv, ca)


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
    chain = make_chain(cert_dir, ca, srv, plan.stack.name)
    r = chain.record
    why = not_usable(plan.stack, ca, srv)
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
                        files.read_input(
                            chain.directory / "root.crt.der",
                            f"{chain.directory}/root.crt.der",
                            "certificate",
                            follow=False,
                        )
                    ).hexdigest(),
                    "record": json.dumps(r),
                    "stack": plan.stack.name,
                    "usable_in_tls": why is None,
                    "not_usable_because": why,
                }
            ],
        )
