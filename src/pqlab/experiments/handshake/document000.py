"""Document 000's tables 10-12 cell by cell: the client's processing time (ServerHello
received to its Finished sent) beside the document's, with the mark the document shades
(ServerHello + Certificate of 4096 bytes or more and less than 8192: OpenSSL's first
4096-byte buffer leaves with part of Certificate, and the rest waits for CertificateVerify
and Finished, so the client waits for it) and the TCP segments from ServerHello to
CertificateVerify (the document's 10-, 13- and 16-segment cases), both from this run's
captures. The document's own mark is recomputed from its certificate sizes (its tables 14
and 15, the root sent too) and the ServerHello of its group, since the text lost the colour.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from pqlab import catalog
from pqlab.tls import messages

# The document's shading: ServerHello + Certificate in [SHADE_LOW, SHADE_HIGH) bytes (two
# of OpenSSL's 4096-byte write buffers).
SHADE_LOW, SHADE_HIGH = 4096, 8192

COLUMNS = (
    "group",
    "server_sig",
    "ca_sig",
    "stack",
    "chain_sent",
    "chain_bytes_requested",
    "client_sig",
    "n",
    "client_processing_mean_ms",
    "server_hello_certificate_bytes",
    "shaded_4096_8192",
    "segments_sh_to_cv",
    "server_flight_segments",
    "document_table",
    "document_client_processing_ms",
    "document_server_hello_certificate_bytes",
    "document_shaded_4096_8192",
    "cell_id",
    "note",
)

CELLS_SQL = """
SELECT "group", server_sig, ca_sig, any_value(stack) AS stack,
       any_value(chain_sent) AS chain_sent,
       any_value(chain_bytes_requested) AS chain_bytes_requested,
       any_value(coalesce(client_sig, 'none')) AS client_sig, count(*) AS n,
       avg(client_processing_ns) / 1e6 AS client_processing_mean_ms,
       CAST(median(server_hello_bytes + certificate_bytes) AS BIGINT)
         AS server_hello_certificate_bytes,
       CAST(mode(segments_sh_to_cv) AS INTEGER) AS segments_sh_to_cv,
       CAST(mode(server_flight_segments) AS INTEGER) AS server_flight_segments, cell_id
FROM handshake_raw
GROUP BY cell_id, "group", server_sig, ca_sig
ORDER BY cell_id
"""


def shaded(server_hello_certificate_bytes: int | None) -> bool | None:
    """The document's mark for a flight whose ServerHello and Certificate take that many
    bytes (handshake messages, 4-byte headers included)."""
    if server_hello_certificate_bytes is None:
        return None
    return SHADE_LOW <= server_hello_certificate_bytes < SHADE_HIGH


@functools.cache
def document() -> dict:
    text = resources.files("pqlab.data").joinpath("document000_client_processing.toml")
    return tomllib.loads(text.read_text())


def document_cells() -> dict[tuple[str, str, str], dict]:
    """(group, server signer, CA signer) -> the document's table, time, ServerHello +
    Certificate bytes (its certificates, its root sent, its group's ServerHello with a
    32-byte session id) and mark."""
    d = document()
    signers = d["signers"]
    out = {}
    for group, table in d["client_processing_ms"].items():
        sh = messages.server_hello(catalog.resolve(group, "kem"))
        for server in signers:
            for i, ca in enumerate(signers):
                der = [d["server_der_bytes"][server][ca], d["root_der_bytes"][ca]]
                total = sh + messages.certificate(der)
                out[(group, server, ca)] = {
                    "document_table": table["table"],
                    "document_client_processing_ms": table[server][i],
                    "document_server_hello_certificate_bytes": total,
                    "document_shaded_4096_8192": shaded(total),
                }
    return out


def rows(store) -> list[dict]:
    """Every cell of the run with its mark and segments (and the document's row where the
    cell is one of its tables' cells), then the document's cells this run did not measure,
    with the command that does."""
    needed = {"segments_sh_to_cv", "server_hello_bytes", "certificate_bytes"}
    if not store.has_table("handshake_raw") or not needed <= store.columns("handshake_raw"):
        return []  # a run made before these columns
    doc = document_cells()
    out, seen = [], set()
    for c in store.query(CELLS_SQL):
        key = (c["group"], c["server_sig"], c["ca_sig"])
        row = dict(c)
        row["shaded_4096_8192"] = shaded(c["server_hello_certificate_bytes"])
        like_document = c["chain_sent"] == "server+root" and c["client_sig"] == "none"
        if key in doc and like_document and c["chain_bytes_requested"] is None:
            row.update(doc[key])
            seen.add(key)
        elif key in doc:
            row["note"] = "the document's servers sent the root too: --send-root"
        out.append(row)
    for (group, server, ca), d in doc.items():
        if (group, server, ca) in seen:
            continue
        out.append(
            {
                "group": group,
                "server_sig": server,
                "ca_sig": ca,
                **d,
                "note": "not in this run: pqlab handshake --send-root "
                f"--groups {group} --server-sig {server} --ca-sig {ca}",
            }
        )
    return out
