"""Document 004's "TLS 1.3 data transmission size" from a handshake run: the bytes a
mutually authenticated TLS 1.3 connection puts on the wire, request and response included,
per (authentication algorithm, key exchange), beside the document's own 22 rows.

Every mutually authenticated connection of the handshake experiment sends pqlab's small
request after the handshake and reads a 22-byte answer (the size of document 004's reply),
so the whole connection's bytes are known from the capture: the sum of every TCP segment's payload each way (tcp.len,
as the document summed it in Wireshark, application data and closing alerts included), and
the same with IP and TCP headers; beside them the handshake's own IP bytes (SYN to the
client's Finished). A cell matches a document row when the server and the client sign with
the row's algorithm (or the standard that replaced it) under roots of that algorithm and the
key exchange is the row's (or its replacement). Document rows no cell of the run matches are
listed with why: not in this run (with the command that measures them), or no stack offers
that algorithm any more.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from pqlab import catalog
from pqlab.tls import stacks

COLUMNS = (
    "document_auth",
    "document_kex",
    "auth",
    "kex",
    "stack_impl",
    "ca_sig",
    "client_sig",
    "n",
    "negotiated_cipher",
    "client_payload_bytes",
    "server_payload_bytes",
    "total_payload_bytes",
    "document_total_bytes",
    "ratio_to_document",
    "client_ip_bytes",
    "server_ip_bytes",
    "handshake_ip_bytes",
    "note",
)

CELLS_SQL = """
SELECT any_value(t.stack) AS stack, "group", server_sig, ca_sig, client_sig, count(*) AS n,
       CAST(median(client_payload_bytes) AS BIGINT) AS client_payload_bytes,
       CAST(median(server_payload_bytes) AS BIGINT) AS server_payload_bytes,
       CAST(median(client_connection_ip_bytes) AS BIGINT) AS client_ip_bytes,
       CAST(median(server_connection_ip_bytes) AS BIGINT) AS server_ip_bytes,
       CAST(median(client_bytes + server_bytes) AS BIGINT) AS handshake_ip_bytes,
       any_value(negotiated_cipher) AS negotiated_cipher
FROM handshake_raw t
WHERE coalesce(client_sig, 'none') <> 'none' AND client_payload_bytes IS NOT NULL
GROUP BY cell_id, "group", server_sig, ca_sig, client_sig
ORDER BY server_sig, "group", ca_sig, client_sig
"""


@functools.cache
def document_rows() -> tuple[dict, ...]:
    text = resources.files("pqlab.data").joinpath("document004_wire_bytes.toml").read_text()
    return tuple(tomllib.loads(text)["rows"])


def _offered(alg: catalog.Algorithm, kind: str) -> bool:
    role = "server" if kind == "sig" else "group"
    return any(st.usable(alg, role) for st in stacks.all_stacks().values())


def today(name: str, kind: str) -> tuple[catalog.Algorithm | None, catalog.Algorithm]:
    """(the algorithm measured today in the place of document 004's `name`: itself where a
    stack offers it, else the standard that replaced it, else None; the document's own
    catalogue entry)."""
    entry = catalog.resolve(name, kind)
    if _offered(entry, kind):
        return entry, entry
    successors = [a for a in catalog.all_algorithms(kind) if a.predecessor == entry.name]
    offered = [a for a in successors if _offered(a, kind)]
    return (offered[0] if offered else None), entry


def _why_not(auth, kex, auth_entry, kex_entry, usable: set) -> str:
    for alg, entry in ((auth, auth_entry), (kex, kex_entry)):
        if alg is None:
            return (
                f"{entry.name} ({entry.standard}): no stack of this build offers it, nor a "
                "standard that replaced it"
            )
    if (auth.name, kex.name) not in usable:
        return "no stack of this build carries both"
    return (
        "not in this run: pqlab handshake --client-sig same "
        f"--server-sig {auth.name} --ca-sig {auth.name} --groups {kex.name}"
        + (" --stack rustls" if not stacks.get().usable(auth, "server") else "")
    )


def _usable_pairs() -> set:
    out = set()
    for st in stacks.all_stacks().values():
        for row in document_rows():
            auth, _ = today(row["auth"], "sig")
            kex, _ = today(row["kex"], "kem")
            if auth and kex and st.usable(auth, "server") and st.usable(kex, "group"):
                out.add((auth.name, kex.name))
    return out


def rows(store) -> list[dict]:
    """The table: every mutually authenticated cell of the run (with its document row where
    one matches), then the document's rows no cell matched, with why."""
    needed = {"client_sig", "client_payload_bytes", "negotiated_cipher"}
    made = store.has_table("handshake_raw") and needed <= store.columns("handshake_raw")
    cells = store.query(CELLS_SQL) if made else []  # a run made before these columns: none
    impls = {s.name: s.implementation for s in stacks.all_stacks().values()}
    out, matched = [], set()
    for c in cells:
        doc = _document_row(c)
        if doc is not None:
            matched.add((doc["auth"], doc["kex"]))
        total = (c["client_payload_bytes"] or 0) + (c["server_payload_bytes"] or 0)
        out.append(
            {
                "document_auth": doc["auth"] if doc else None,
                "document_kex": doc["kex"] if doc else None,
                "auth": c["server_sig"],
                "kex": c["group"],
                "stack_impl": impls.get(c["stack"], c["stack"]),
                "ca_sig": c["ca_sig"],
                "client_sig": c["client_sig"],
                "n": c["n"],
                "negotiated_cipher": c["negotiated_cipher"],
                "client_payload_bytes": c["client_payload_bytes"],
                "server_payload_bytes": c["server_payload_bytes"],
                "total_payload_bytes": total,
                "document_total_bytes": doc["total_bytes"] if doc else None,
                "ratio_to_document": round(total / doc["total_bytes"], 3) if doc else None,
                "client_ip_bytes": c["client_ip_bytes"],
                "server_ip_bytes": c["server_ip_bytes"],
                "handshake_ip_bytes": c["handshake_ip_bytes"],
                "note": None if doc else "no document 004 row for this pair",
            }
        )
    usable = _usable_pairs()
    for row in document_rows():
        if (row["auth"], row["kex"]) in matched:
            continue
        auth, auth_entry = today(row["auth"], "sig")
        kex, kex_entry = today(row["kex"], "kem")
        out.append(
            {
                "document_auth": row["auth"],
                "document_kex": row["kex"],
                "auth": auth.name if auth else None,
                "kex": kex.name if kex else None,
                "document_total_bytes": row["total_bytes"],
                "note": _why_not(auth, kex, auth_entry, kex_entry, usable),
            }
        )
    return out


def _document_row(cell: dict) -> dict | None:
    """The document row a cell reproduces: both certificates and the root of the row's
    authentication algorithm, the row's key exchange (today's names)."""
    if not (cell["server_sig"] == cell["client_sig"] == cell["ca_sig"]):
        return None
    for row in document_rows():
        auth, _ = today(row["auth"], "sig")
        kex, _ = today(row["kex"], "kem")
        if auth and kex and (auth.name, kex.name) == (cell["server_sig"], cell["group"]):
            return row
    return None
