"""Key, ciphertext and signature sizes: raw (as the algorithm defines them) and encoded as
in practice (DER SubjectPublicKeyInfo, PKCS#8, DER signatures), with observed min-max where
the encoding varies (RSA private keys, ECDSA signatures, Falcon signatures).

Both `pqlab sizes` and `pqlab primitives` store the engine's `sizes` records in
`primitive_sizes` (one row per algorithm, backend and field, `store_sizes`); `export()`
builds tables/sizes.csv from all of them.
"""

from __future__ import annotations

from pqlab import catalog, figures
from pqlab.errors import UserError
from pqlab.report.section import Section
from pqlab.store import RunStore

SIZES_DDL = """
CREATE TABLE IF NOT EXISTS primitive_sizes (
    experiment TEXT, algorithm TEXT, backend TEXT, kind TEXT, field TEXT,
    min_bytes BIGINT, max_bytes BIGINT, observed INTEGER, note TEXT)
"""


RAW_FIELDS = ("public_key", "secret_key", "ciphertext", "shared_secret", "signature")


ENCODED_FIELDS = ("public_key_der", "secret_key_der", "signature_der")


LEADING = ["algorithm", "kind", *RAW_FIELDS]


COLUMNS = LEADING + [
    "public_key_der_min",
    "public_key_der_max",
    "secret_key_der_min",
    "secret_key_der_max",
    "signature_der_min",
    "signature_der_max",
    "signature_min",
    "secret_key_min",
    "encoding_source",
    "catalogue_check",
    "backends",
    "notes",
]


def store_sizes(store: RunStore, experiment: str, cell, record: dict) -> None:
    """Store one engine `sizes` record (called inside the cell's transaction)."""
    notes = record.get("notes") or {}
    rows = []
    for field in RAW_FIELDS + ENCODED_FIELDS:
        v = record.get(field)
        rows.append(
            {
                "experiment": experiment,
                "algorithm": cell.algorithm.name,
                "backend": cell.backend,
                "kind": cell.algorithm.kind,
                "field": field,
                "min_bytes": v["min"] if v else None,
                "max_bytes": v["max"] if v else None,
                "observed": record.get("outputs_observed")
                if field in ("ciphertext", "shared_secret", "signature", "signature_der")
                else record.get("keys_observed"),
                "note": notes.get(field) if isinstance(notes.get(field), str) else None,
            }
        )
    store.insert_rows("primitive_sizes", rows)


def _catalogue_check(alg_name: str, raw: dict) -> str:
    """Compare observed raw sizes with the catalogue's (FIPS 203/204/205, RFCs)."""
    try:
        alg = catalog.resolve(alg_name)
    except UserError:
        return "not in catalogue"
    problems = []
    for field, expected in (alg.sizes or {}).items():
        if field not in raw or raw[field] is None:
            continue
        lo, hi = raw[field]
        if field == "signature" and lo != hi:
            ok = hi <= expected  # variable-length signatures: the catalogue gives the maximum
        else:
            ok = lo <= expected <= hi
        if not ok:
            seen = f"{lo}" if lo == hi else f"{lo}-{hi}"
            problems.append(f"{field} {seen} != {expected}")
    return "mismatch: " + "; ".join(problems) if problems else "ok"


def _raw_sizes(backends: dict) -> tuple[dict, list[str]]:
    """Raw sizes are the algorithm's: take them from any backend (they must agree, except
    secret key formats); (field -> (min, max) or None, disagreements)."""
    raw: dict[str, tuple | None] = {}
    disagree = []
    for field in RAW_FIELDS:
        vals = {
            b: f[field][:2] for b, f in backends.items() if f.get(field) and f[field][0] is not None
        }
        if not vals:
            raw[field] = None
            continue
        if len(set(vals.values())) > 1 and field != "secret_key":
            disagree.append(f"{field}: " + ", ".join(f"{b} {v[0]}-{v[1]}" for b, v in vals.items()))
        raw[field] = (min(v[0] for v in vals.values()), max(v[1] for v in vals.values()))
    return raw, disagree


def _encoding(backends: dict) -> tuple[str | None, dict]:
    """Encodings: OpenSSL's own encoder where it has one, else the computed liboqs form."""
    for b in ("openssl", "liboqs"):
        f = backends.get(b)
        if f and f.get("public_key_der") and f["public_key_der"][0] is not None:
            return b, f
    return None, {}


def _notes(backends: dict, source: str | None, disagree: list[str]) -> list[str]:
    notes = []
    if source == "liboqs":
        notes.append("encodings computed from the catalogue OID (liboqs has no encoder)")
    if source is None:
        why = next(
            (
                f["public_key_der"][2]
                for f in backends.values()
                if f.get("public_key_der") and f["public_key_der"][2]
            ),
            "no encoder for this algorithm",
        )
        notes.append("no DER encoding: " + why)
    if disagree:
        notes.append("backends disagree on " + "; ".join(disagree))
    ossl, oqs = backends.get("openssl", {}), backends.get("liboqs", {})
    if (
        ossl.get("secret_key")
        and oqs.get("secret_key")
        and (ossl["secret_key"][:2] != oqs["secret_key"][:2])
    ):
        notes.append("secret key formats differ between backends; shown: both ranges")
    return notes


def rows(store: RunStore) -> list[dict]:
    data = store.query(
        "SELECT algorithm, backend, kind, field, min(min_bytes) AS lo, max(max_bytes) AS hi, "
        "any_value(note) AS note FROM primitive_sizes GROUP BY ALL"
    )
    order = [
        r["algorithm"]
        for r in store.query(
            "SELECT algorithm, min(rowid) AS k FROM primitive_sizes GROUP BY 1 ORDER BY 2"
        )
    ]
    by_alg: dict[str, dict] = {}
    for r in data:
        a = by_alg.setdefault(r["algorithm"], {"kind": r["kind"], "backends": {}})
        a["backends"].setdefault(r["backend"], {})[r["field"]] = (r["lo"], r["hi"], r["note"])
    out = []
    for name in order:
        a = by_alg[name]
        backends = a["backends"]
        raw, disagree = _raw_sizes(backends)
        source, enc = _encoding(backends)
        notes = _notes(backends, source, disagree)

        def enc_val(field, i, enc=enc):
            v = enc.get(field)
            return v[i] if v and v[i] is not None else None

        def raw_max(field, raw=raw):
            return raw[field][1] if raw.get(field) else None

        def raw_min(field, raw=raw):
            return raw[field][0] if raw.get(field) else None

        out.append(
            {
                "algorithm": name,
                "kind": a["kind"],
                **{f: raw_max(f) for f in RAW_FIELDS},
                "public_key_der_min": enc_val("public_key_der", 0),
                "public_key_der_max": enc_val("public_key_der", 1),
                "secret_key_der_min": enc_val("secret_key_der", 0),
                "secret_key_der_max": enc_val("secret_key_der", 1),
                "signature_der_min": enc_val("signature_der", 0),
                "signature_der_max": enc_val("signature_der", 1),
                "signature_min": raw_min("signature"),
                "secret_key_min": raw_min("secret_key"),
                "encoding_source": source or "",
                "catalogue_check": _catalogue_check(name, {k: v for k, v in raw.items() if v}),
                "backends": ",".join(sorted(backends)),
                "notes": "; ".join(notes),
            }
        )
    return out


def write_table(store: RunStore):
    table = rows(store)
    types = {c: "BIGINT" for c in COLUMNS}
    for c in ("algorithm", "kind", "encoding_source", "catalogue_check", "backends", "notes"):
        types[c] = "TEXT"
    store.con.execute(
        "CREATE OR REPLACE TEMP TABLE sizes_summary ("
        + ", ".join(f"{c} {types[c]}" for c in COLUMNS)
        + ")"
    )
    if table:
        store.insert_rows("sizes_summary", table)
    return store.export_table("sizes", "SELECT * FROM sizes_summary ORDER BY rowid"), table


def _figure(store: RunStore, table: list[dict]):
    import matplotlib.pyplot as plt

    if not table:
        return None
    names = [r["algorithm"] for r in table]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(names) + 1)))
    y = range(len(names))
    # What a TLS handshake carries: the raw key share for key exchange, the SPKI inside the
    # certificate for signature keys.
    pk = [
        (r["public_key_der_max"] or r["public_key"] or 0)
        if r["kind"] == "sig"
        else (r["public_key"] or 0)
        for r in table
    ]
    second = [
        (r["signature_der_max"] or r["signature"] or 0)
        if r["kind"] == "sig"
        else (r["ciphertext"] or 0)
        for r in table
    ]
    ax.barh(
        [i - 0.2 for i in y],
        pk,
        height=0.4,
        label="public key (key share; signatures: certificate SPKI)",
    )
    ax.barh(
        [i + 0.2 for i in y],
        second,
        height=0.4,
        label="ciphertext or peer key share; signatures: DER signature",
    )
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("bytes (log scale)")
    ax.axvline(1448, color="grey", lw=0.8, ls="--", label="one TCP segment (MSS 1448)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("What travels in a handshake: public key and ciphertext / signature")
    return figures.save(fig, store, "sizes")


def export(store: RunStore) -> Section | None:
    if not store.has_table("primitive_sizes"):
        return None
    csv_path, table = write_table(store)
    section = Section(
        "Sizes",
        intro=(
            "<p>Sizes in bytes. The first columns are the raw sizes as each algorithm defines "
            "them (for RSA the modulus; for ECDSA the EC point and r||s; for key agreements "
            "<i>ciphertext</i> is the peer's key share, as in the documents' table 1). The "
            "<code>_der</code> columns are the encodings used in practice: DER "
            "SubjectPublicKeyInfo (certificates), PKCS#8 (key files), DER signatures (TLS, "
            "X.509), with the smallest and largest value observed over the run's keys and "
            "signatures: RSA private keys and ECDSA signatures vary because DER integers "
            "drop leading zeros. <code>catalogue_check</code> compares the raw sizes with the "
            "standards' values in pqlab's catalogue.</p>"
        ),
    )
    section.table(csv_path, "Sizes (bytes): raw, then encoded min/max")
    bad = [r for r in table if r["catalogue_check"].startswith("mismatch")]
    if bad:
        section.text(
            "<div class=warn>Size mismatches with the catalogue: "
            + ", ".join(f"{r['algorithm']} ({r['catalogue_check']})" for r in bad)
            + "</div>"
        )
    png = _figure(store, table)
    if png:
        section.figure(png, "Public key and ciphertext/signature sizes per algorithm")
    return section
