"""The certs experiment's tables and report section, from the database alone."""

from __future__ import annotations

from pqlab.report.section import Section


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
