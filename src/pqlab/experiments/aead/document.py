"""Document 001's chapter 5 throughputs (data/document001_aead.toml) and the two ratios its
section 5.4 quotes, derived from them per platform and set beside pqlab's: AES-NI on / off
per cipher and record size (5.4.2) and ChaCha20-Poly1305 / ChaCha20 (5.4.1)."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

# The document's AES-CCM numbers are not throughputs (OpenSSL 1.1.0f's speed ran CCM with
# one init for many updates, section 5.3.3): no ratio is derived from them.
NOT_THROUGHPUT = {"aes-128-ccm", "aes-256-ccm"}
# The mask the document turned AES-NI off with (pqlab's `--mask documents`).
DOCUMENT_MASK = "documents"


@functools.cache
def _data() -> dict:
    text = resources.files("pqlab.data").joinpath("document001_aead.toml").read_text()
    return tomllib.loads(text)


def platforms() -> list[dict]:
    """The document's platforms: name, label (OS and CPU) and the tables they come from."""
    return [
        {"name": p["name"], "label": p["label"], "tables": p["tables"]} for p in _data()["platform"]
    ]


def column(platform: str) -> str:
    """The column of a platform's value in pqlab's tables (document_amazon_linux ...)."""
    return "document_" + platform.replace("-", "_")


def throughput(platform: str, aesni: str, cipher: str, record_bytes: int) -> float | None:
    """The document's number (1000s of bytes per second) or None where it has none."""
    data = _data()
    sizes = data["record_bytes"]
    if record_bytes not in sizes:
        return None
    p = next((p for p in data["platform"] if p["name"] == platform), None)
    values = (p or {}).get(aesni, {}).get(cipher)
    return values[sizes.index(record_bytes)] if values else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num is not None and den else None


def aesni_columns(row: dict) -> dict:
    """The document's AES-NI on / off ratio of the row's cipher and record size, one column
    per platform; empty where the row's AES-NI-off mask is not the document's, or the
    document has no real throughput for it."""
    out = {}
    for p in platforms():
        value = None
        if row["off_mask"] == DOCUMENT_MASK and row["cipher"] not in NOT_THROUGHPUT:
            args = (row["cipher"], row["record_bytes"])
            value = _ratio(throughput(p["name"], "on", *args), throughput(p["name"], "off", *args))
        out[column(p["name"])] = value
    return out


def poly1305_columns(row: dict) -> dict:
    """The document's ChaCha20-Poly1305 / ChaCha20 throughput ratio at the row's AES-NI
    setting and record size, one column per platform; empty for a mask the document did not
    use."""
    setting = row["aesni"]
    documented = (setting == "on") or (row["cpu_mask"] == DOCUMENT_MASK)
    out = {}
    for p in platforms():
        value = None
        if documented:
            value = _ratio(
                throughput(p["name"], setting, "chacha20-poly1305", row["record_bytes"]),
                throughput(p["name"], setting, "chacha20", row["record_bytes"]),
            )
        out[column(p["name"])] = value
    return out


def platforms_html() -> str:
    """The document's platforms, for the report: which column is which machine."""
    items = "".join(
        f"<li><code>{column(p['name'])}</code>: {p['label']} (tables "
        f"{', '.join(p['tables']['on'] + p['tables']['off'])})</li>"
        for p in platforms()
    )
    return (
        "<p>The <code>document_*</code> columns are document 001's own ratio for the same "
        "cipher, setting and record size, computed from its tables (OpenSSL 1.1.0f, "
        "<code>openssl speed -elapsed -evp</code>, AES-NI off with its mask "
        "<code>~0x200000200000000</code>, so they are filled only on rows of that mask). "
        "Its AES-CCM numbers are not throughputs (section 5.3.3), so CCM rows have none.</p>"
        "<ul>" + items + "</ul>"
    )
