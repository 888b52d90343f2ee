"""The aead experiment's tables, figures and report section, from the database alone."""

from __future__ import annotations

import html
import json

from pqlab import figures
from pqlab.experiments.aead import document as aead_document
from pqlab.experiments.aead.plan import CIPHERS
from pqlab.report.section import Section

AEADS = {"aes-128-gcm", "aes-256-gcm", "aes-128-ccm", "aes-256-ccm", "chacha20-poly1305"}


_ORDER = "CASE cipher " + " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(CIPHERS)) + " END"


MAIN_SQL = f"""
WITH w AS (
    SELECT cell_id,
           quantile_cont(bytes * 1000.0 / ns, 0.5) AS med,
           quantile_cont(bytes * 1000.0 / ns, 0.25) AS q1,
           quantile_cont(bytes * 1000.0 / ns, 0.75) AS q3
    FROM aead_windows WHERE ns > 0 GROUP BY cell_id)
SELECT c.cipher, c.aesni, c.mode, c.record_bytes, c.direction,
       round(c.bytes * 1000.0 / c.ns, 2) AS mb_per_s,
       round(c.bytes * 1000000.0 / c.ns, 2) AS openssl_kbytes_per_s,
       c.mask AS cpu_mask,
       round(c.bytes * 1000.0 / nullif(c.cpu_ns, 0), 2) AS cpu_mb_per_s,
       round(c.cpu_ns * 1.0 / c.ns, 3) AS cpu_share,
       coalesce(c.ia32cap_env, '') AS ia32cap_env,
       c.openssl_ia32cap, c.aes_gcm_path,
       round(w.med, 2) AS window_median_mb_per_s,
       round((w.q3 - w.q1) / nullif(w.med, 0), 4) AS window_robust_cv,
       c.windows, c.records, c.verified_records,
       round(c.ns / 1e9, 3) AS timed_seconds,
       c.aad_bytes, c.key_set_per_record, c.nonce
FROM aead_cells c JOIN w USING (cell_id)
ORDER BY c.mode, c.aesni DESC, c.mask, {_ORDER.replace("cipher", "c.cipher")},
         c.direction DESC, c.record_bytes
"""


def _ratio_sql(num: str, den: str, name: str) -> str:
    return f"""
SELECT a.aesni, a.mask AS cpu_mask, a.mode, a.direction, a.record_bytes,
       round(a.bytes * 1000.0 / a.cpu_ns, 2) AS {num.replace("-", "_")}_cpu_mb_per_s,
       round(b.bytes * 1000.0 / b.cpu_ns, 2) AS {den.replace("-", "_")}_cpu_mb_per_s,
       round((a.bytes * 1.0 / a.cpu_ns) / (b.bytes * 1.0 / b.cpu_ns), 3) AS {name}
FROM aead_cells a JOIN aead_cells b
  ON a.aesni = b.aesni AND a.mask = b.mask AND a.mode = b.mode
 AND a.direction = b.direction AND a.record_bytes = b.record_bytes
WHERE a.cipher = '{num}' AND b.cipher = '{den}'
ORDER BY a.mode, a.aesni DESC, a.mask, a.direction DESC, a.record_bytes
"""


POLY_SQL = """
SELECT a.aesni, a.mask AS cpu_mask, a.mode, a.direction, a.record_bytes,
       round(a.bytes * 1000.0 / a.cpu_ns, 2) AS chacha20_cpu_mb_per_s,
       round(b.bytes * 1000.0 / b.cpu_ns, 2) AS chacha20_poly1305_cpu_mb_per_s,
       round((b.bytes * 1.0 / b.cpu_ns) / (a.bytes * 1.0 / a.cpu_ns), 3)
           AS chacha20_poly1305_over_chacha20,
       round(100.0 * ((a.bytes * 1.0 / a.cpu_ns) / (b.bytes * 1.0 / b.cpu_ns) - 1), 1)
           AS poly1305_overhead_pct
FROM aead_cells a JOIN aead_cells b
  ON a.aesni = b.aesni AND a.mask = b.mask AND a.mode = b.mode
 AND a.direction = b.direction AND a.record_bytes = b.record_bytes
WHERE a.cipher = 'chacha20' AND b.cipher = 'chacha20-poly1305'
ORDER BY a.mode, a.aesni DESC, a.mask, a.direction DESC, a.record_bytes
"""


# Document 001 section 5.4.2: each cipher's throughput with AES-NI over its throughput
# without, per record size (and per mask that turned AES-NI off).
AESNI_SQL = f"""
SELECT a.cipher, a.mode, a.direction, a.record_bytes, b.mask AS off_mask,
       round(a.bytes * 1000.0 / a.cpu_ns, 2) AS aesni_on_cpu_mb_per_s,
       round(b.bytes * 1000.0 / b.cpu_ns, 2) AS aesni_off_cpu_mb_per_s,
       round((a.bytes * 1.0 / a.cpu_ns) / (b.bytes * 1.0 / b.cpu_ns), 3) AS on_over_off
FROM aead_cells a JOIN aead_cells b
  ON a.cipher = b.cipher AND a.mode = b.mode AND a.direction = b.direction
 AND a.record_bytes = b.record_bytes
WHERE a.aesni = 'on' AND b.aesni = 'off'
ORDER BY a.mode, b.mask, {_ORDER.replace("cipher", "a.cipher")}, a.direction DESC,
         a.record_bytes
"""


MODES_SQL = f"""
SELECT f.cipher, f.aesni, f.mask AS cpu_mask, f.direction, f.record_bytes,
       round(f.bytes * 1000.0 / f.cpu_ns, 2) AS fair_cpu_mb_per_s,
       round(s.bytes * 1000.0 / s.cpu_ns, 2) AS speed_compatible_cpu_mb_per_s,
       round((s.bytes * 1.0 / s.cpu_ns) / (f.bytes * 1.0 / f.cpu_ns), 3) AS speed_over_fair
FROM aead_cells f JOIN aead_cells s
  ON f.cipher = s.cipher AND f.aesni = s.aesni AND f.mask = s.mask
 AND f.direction = s.direction AND f.record_bytes = s.record_bytes
WHERE f.mode = 'fair' AND s.mode = 'speed-compatible'
ORDER BY f.aesni DESC, f.mask, {_ORDER.replace("cipher", "f.cipher")}, f.direction DESC,
         f.record_bytes
"""


def _count(store, sql: str) -> int:
    return int(store.query(f"SELECT count(*) AS n FROM ({sql})")[0]["n"])


# The document's platform drawn beside pqlab's ratios: its Linux machine (Core i7).
FIGURE_PLATFORM = "linux"


def _ratio_panel(ax, rows: list[dict], panel: tuple[str, str, str]) -> None:
    """One panel of the AES-NI figure: pqlab's ratio per cipher (solid: authenticated, dashed:
    baselines) and, where the panel's mask is the document's, the document's (dotted, the
    same colour)."""
    doc_col = aead_document.column(FIGURE_PLATFORM)
    for cipher in CIPHERS:
        mine = sorted(
            (r["record_bytes"], r["on_over_off"], r[doc_col])
            for r in rows
            if (r["mode"], r["direction"], r["off_mask"]) == panel and r["cipher"] == cipher
        )
        if not mine:
            continue
        (line,) = ax.plot(
            [p[0] for p in mine],
            [p[1] for p in mine],
            marker="o",
            markersize=3,
            label=cipher,
            linestyle="-" if cipher in AEADS else "--",
        )
        doc = [(p[0], p[2]) for p in mine if p[2] is not None]
        if doc:
            ax.plot(
                [p[0] for p in doc],
                [p[1] for p in doc],
                marker="x",
                markersize=4,
                linestyle=":",
                linewidth=0.9,
                color=line.get_color(),
            )


def _aesni_figure(store, section: Section, rows: list[dict]) -> None:
    """On/off ratio against record size, one line per cipher, one panel per mode,
    direction and mask (document 001's section 5.4.2 as a figure), the document's own ratios
    dotted beside pqlab's."""
    import matplotlib.pyplot as plt

    panels = sorted({(r["mode"], r["direction"], r["off_mask"]) for r in rows}, reverse=True)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 4), sharey=True, squeeze=False
    )
    for ax, panel in zip(axes[0], panels, strict=True):
        _ratio_panel(ax, rows, panel)
        ax.axhline(1, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("record size (bytes)")
        ax.set_title(f"{panel[1]}, {panel[0]}, off = {panel[2]} mask", fontsize=9)
    axes[0][0].set_ylabel("throughput AES-NI on / off")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    png = figures.save(fig, store, "aead_aesni_ratio")
    label = next(p["label"] for p in aead_document.platforms() if p["name"] == FIGURE_PLATFORM)
    section.figure(
        png,
        "What AES-NI is worth: throughput with AES-NI over throughput without, per record "
        "size (above 1: AES-NI faster; 1: the cipher does not use it). Dotted, in each "
        f"cipher's colour: document 001's own ratio on its Linux machine ({label}), drawn "
        "where the panel's mask is the document's (AES-CCM excepted: its numbers were not "
        "throughputs).",
    )


def _figures(store, section: Section) -> None:
    import matplotlib.pyplot as plt

    rows = store.query(
        "SELECT cipher, aesni, mask, mode, direction, record_bytes, "
        "bytes * 1000.0 / cpu_ns AS mbps FROM aead_cells"
    )
    combos = sorted({(r["mode"], r["direction"]) for r in rows}, reverse=True)
    off_masks = sorted({r["mask"] for r in rows if r["aesni"] == "off"})
    for mode, direction in combos:
        panels = [("on", "none")] if any(r["aesni"] == "on" for r in rows) else []
        panels += [("off", m) for m in off_masks]
        if not panels:
            continue
        fig, axes = plt.subplots(
            1, len(panels), figsize=(5.2 * len(panels), 4), sharey=True, squeeze=False
        )
        for ax, (aesni, mask) in zip(axes[0], panels, strict=True):
            for cipher in CIPHERS:
                pts = sorted(
                    (r["record_bytes"], r["mbps"])
                    for r in rows
                    if r["cipher"] == cipher
                    and r["aesni"] == aesni
                    and r["mask"] == mask
                    and r["mode"] == mode
                    and r["direction"] == direction
                )
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        marker="o",
                        markersize=3,
                        label=cipher,
                        linestyle="-" if cipher in AEADS else "--",
                    )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("record size (bytes)")
            ax.set_title(f"AES-NI {aesni}" + (f" ({mask} mask)" if aesni == "off" else ""))
        axes[0][0].set_ylabel("MB per CPU-second (10^6 bytes/s)")
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle(f"{direction}, {mode} mode")
        png = figures.save(fig, store, f"aead_{mode}_{direction}")
        section.figure(
            png,
            f"Throughput against record size, {direction}, {mode} mode: "
            "one line per cipher (solid: authenticated, dashed: "
            "unauthenticated baselines), AES-NI on and off side by side.",
        )


def export(store) -> Section | None:
    if not store.has_table("aead_cells") or not store.query("SELECT 1 FROM aead_cells LIMIT 1"):
        return None
    section = Section(title="Symmetric cipher throughput (AEAD), AES-NI on and off")
    cpu_rows = store.query("SELECT * FROM aead_cpu ORDER BY aesni DESC, mask")
    modes = {r["mode"] for r in store.query("SELECT DISTINCT mode FROM aead_cells")}
    section.intro = (
        "<p>Throughput of each cipher through OpenSSL's EVP interface (the engine's vendored "
        "OpenSSL 3.5.4), per record size and direction. <b>mb_per_s</b> is 10<sup>6</sup> "
        "bytes per second; <b>openssl_kbytes_per_s</b> is the unit of <code>openssl speed"
        "</code> (1000s of bytes per second), so the numbers compare directly with the "
        "documents' tables. Each cell ran for the requested timed seconds; raw samples (one "
        "per timing window) are in <code>aead_windows</code>, and "
        "<code>window_robust_cv</code> shows how steady the windows were. "
        "<b>mb_per_s</b> uses wall-clock time, like <code>openssl speed -elapsed</code>; "
        "<b>cpu_mb_per_s</b> uses the engine thread's CPU time over the same batches (the "
        "scheduler's run time, user and system), like <code>openssl speed</code> without "
        "<code>-elapsed</code> on a quiet machine (speed divides by user time alone, which "
        "reads high when other processes keep preempting it), and <b>cpu_share</b> is "
        "CPU time / wall-clock time: below about 0.95 other processes took the CPU during "
        "the measurement and the wall-clock figure understates the cipher. The derived "
        "ratios and the figures use CPU time, because cells measured at different moments "
        "of a busy machine are only comparable that way; on an idle machine the two agree."
        "</p>"
        "<p><b>Every record is checked</b>: records are encrypted (or decrypted) in timed "
        "batches, each in place in a slot of its own that starts on a 64-byte boundary (a "
        "record layer encrypts and decrypts in place too), and right after each batch, "
        "outside the timed region, every record of it is checked. In fair mode, before timing, one batch of reference records (one per "
        "nonce of the batch) is encrypted and each is decrypted back, its tag verified and "
        "its output compared with the plaintext; every encryption must then reproduce its "
        "reference record byte for byte, ciphertext and tag, and every decryption reads one "
        "(the tag check is part of the timed operation) and must give the plaintext. A "
        "failed check stops the run with an error; no number comes from an unchecked "
        "record.</p>"
        "<p><b>fair</b> mode (the default) does for every record what a TLS record layer "
        "does: the key is set once, then each record is a complete init with a nonce of its "
        "own in its batch (every batch uses the same ones: a nonce's value does not change "
        "what a record costs), (CCM: message length), 13 bytes of additional data, update, "
        "final and tag, for every cipher, the unauthenticated ones included (an IV of its "
        "own, no AAD).</p>"
    )
    section.text(
        "<h3>Why CCM looked so fast in the documents, and what <code>openssl speed</code> "
        "does</h3><p>In the documents' tables (OpenSSL 1.1.0f) AES-CCM grows in exact "
        "proportion to the record size: about 21 million calls per second at every size, "
        "i.e. 337,223 k at 16 bytes and 357,049,445 k (357 GB/s) at 16 KiB. A cipher cannot "
        "do that; those calls did not encrypt the data. CCM cannot be streamed (it needs the "
        "message length before any data), and <code>openssl speed</code> ran it with one "
        "initialisation for many updates, so later calls did no work. pqlab's fair mode "
        "initialises every record completely for every cipher, so CCM's real cost (CBC-MAC "
        "plus CTR: two AES passes that cannot be interleaved like GCM's) shows.</p>"
        "<p>OpenSSL 3.5.4's <code>apps/speed.c</code> has changed: GCM and CCM (its 'AE' "
        "modes) now re-set <i>key</i> and the same fixed IV on every call (CCM also its "
        "length), without additional data unless <code>-aead</code> is given; "
        "ChaCha20-Poly1305, which OpenSSL 3 reports as a stream cipher (mode 0), and the "
        "unauthenticated ciphers are initialised once and fed as one long stream, so "
        "Poly1305 computes a single tag for the whole run and never pays per-record "
        "set-up. <code>--mode speed-compatible</code> reproduces exactly that (each record "
        "in a slot of its own so it can be checked); the <code>aead_modes</code> "
        "table shows the ratio speed-compatible / fair per cell. Expect speed-compatible "
        "GCM/CCM to be <i>slower</i> than fair at small records (key schedule per call) and "
        "ChaCha20-Poly1305 to be <i>faster</i> (no per-record nonce, AAD or tag).</p>"
    )
    section.text(_mask_html(cpu_rows))

    section.table(
        store.export_table("aead", MAIN_SQL),
        "Throughput per cipher, AES-NI setting, mode, direction and record size",
    )
    _document_tables(store, section)
    for gcm in ("aes-128-gcm", "aes-256-gcm"):
        sql = _ratio_sql(gcm, "chacha20-poly1305", "gcm_over_chacha")
        if _count(store, sql):
            name = f"aead_{gcm.replace('-', '_')}_vs_chacha"
            section.table(
                store.export_table(name, sql),
                f"{gcm} / ChaCha20-Poly1305 throughput ratio (above 1: GCM faster)",
            )
    if "fair" in modes and "speed-compatible" in modes and _count(store, MODES_SQL):
        section.table(
            store.export_table("aead_modes", MODES_SQL),
            "speed-compatible / fair throughput, per cell",
        )
    _figures(store, section)
    return section


def _with_document(store, sql: str, columns) -> list[dict]:
    """The rows of a derived table with document 001's value of the same ratio beside."""
    return [{**r, **columns(r)} for r in store.query(sql)]


POLY_CAPTION = (
    "Poly1305's cost as document 001 states it (section 5.4.1: ChaCha20-Poly1305 runs at "
    "about 0.7 times ChaCha20's throughput, 'about 30 % less'): "
    "chacha20_poly1305_over_chacha20 is that throughput ratio, document_* the document's own "
    "per platform; poly1305_overhead_pct is today's extra-time figure, the same measurement "
    "read the other way (a ratio of 0.7 is 43 % more time per byte). Like with like: the "
    "document's ratio came from openssl speed, which streams both ciphers (one init, one "
    "Poly1305 tag for the whole run), so compare it with the speed-compatible rows of the "
    "same AES-NI setting; fair rows also pay Poly1305's per-record key, padding and tag, as "
    "every TLS record does, and read lower at small records"
)


AESNI_CAPTION = (
    "What AES-NI is worth (document 001 section 5.4.2): throughput with AES-NI over "
    "throughput without, per cipher, record size, mode, direction and the mask that turned "
    "it off, beside the document's own ratio per platform (document_*; it quotes AES-GCM at "
    "12-15x on a Core i7 and about 5x on a Xeon, ChaCha20-Poly1305 at about 1x, or 1.6-2x "
    "above 256 bytes where its mask also removed the vector code). The document's mask is "
    "pqlab's documents mask, so only those rows have the document's values; the precise "
    "mask isolates AES-NI itself"
)


def _document_tables(store, section: Section) -> None:
    """Document 001's derived tables: Poly1305's cost and AES-NI's worth, each beside the
    document's own values."""
    if _count(store, POLY_SQL):
        rows = _with_document(store, POLY_SQL, aead_document.poly1305_columns)
        path = store.export_rows("aead_poly1305_overhead", rows, list(rows[0]))
        section.table(path, POLY_CAPTION)
    if _count(store, AESNI_SQL):
        rows = _with_document(store, AESNI_SQL, aead_document.aesni_columns)
        path = store.export_rows("aead_aesni_ratio", rows, list(rows[0]))
        section.table(path, AESNI_CAPTION)
        _aesni_figure(store, section, rows)
    if _count(store, POLY_SQL) or _count(store, AESNI_SQL):
        section.text(aead_document.platforms_html())


def _mask_html(cpu_rows: list[dict]) -> str:
    parts = [
        "<h3>AES-NI off: which mask, and what was really in use</h3>"
        "<p>AES-NI is switched off by starting the engine with <code>OPENSSL_ia32cap</code> "
        "in its environment; OpenSSL applies it before the program starts. The documents' "
        "mask <code>~0x200000200000000</code> clears AES-NI (bit 57) and PCLMULQDQ (bit 33), "
        "but because it has no <code>:</code> part OpenSSL 3.5 also zeroes every further "
        "capability word: AVX2, AVX-512, VAES, VPCLMULQDQ, BMI2, ADX and SHA-NI go too, so "
        "ChaCha20 and Poly1305 lose their vector code paths as well. Masking only AES-NI "
        "(<code>...:~0</code>) is no better on CPUs with VAES/VPCLMULQDQ: OpenSSL then takes "
        "its VAES AES-GCM path, which ignores the AES-NI bit, and GCM stays fast. The "
        "<b>precise</b> mask <code>~0x200000200000000:~0x60000000000:~0:~0:~0</code> clears "
        "AES-NI, PCLMULQDQ, VAES and VPCLMULQDQ and keeps everything else (the three "
        "<code>~0</code> words stop OpenSSL from zeroing the rest). The table shows the "
        "capability vector OpenSSL reported in each setting (same format as <code>openssl "
        "info -cpusettings</code>) and the AES-GCM code path that vector selects in OpenSSL "
        "3.5.4.</p><table><tr><th>AES-NI</th><th>mask</th><th>OPENSSL_ia32cap</th>"
        "<th>vector OpenSSL used</th><th>AES-GCM path</th><th>features on</th>"
        "<th>features off</th></tr>"
    ]
    for r in cpu_rows:
        feats = json.loads(r["features"]) if isinstance(r["features"], str) else r["features"]
        on = ", ".join(k for k, v in sorted(feats.items()) if v)
        off = ", ".join(k for k, v in sorted(feats.items()) if not v)
        parts.append(
            f"<tr><td>{html.escape(r['aesni'])}</td><td>{html.escape(r['mask'])}</td>"
            f"<td><code>{html.escape(r['ia32cap_env'] or '(unset)')}</code></td>"
            f"<td><code>{html.escape(r['openssl_ia32cap'])}</code></td>"
            f"<td>{html.escape(r['aes_gcm_path'])}</td><td>{html.escape(on)}</td>"
            f"<td>{html.escape(off or '-')}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)
