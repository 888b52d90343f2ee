"""The AEAD throughput experiment: matrix, measurement through the engine, and its report.

Cells are (cipher, AES-NI on/off with a CPU mask, mode, direction, record size). The AES-NI
mask is applied by starting the engine with OPENSSL_ia32cap in its environment (OpenSSL
reads it before main); the engine reports the capability vector OpenSSL really uses, and
that is stored with every cell.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict, dataclass

from pqlab import engine, estimate, figures, process
from pqlab.errors import EngineError, UserError
from pqlab.experiment import CellId, Cells, CompareSpec, Experiment, Option
from pqlab.experiments.aead import document as aead_document
from pqlab.progress import CellProgress
from pqlab.report.section import Section
from pqlab.stats import Cause, Warning_
from pqlab.units import parse_list, parse_size

NAME = "aead"
CELLS = Cells(NAME, ("cipher", "aesni", "mask", "mode", "direction", "record_bytes"), aux=("cpu",))
CIPHERS = [
    "aes-128-gcm",
    "aes-256-gcm",
    "aes-128-ccm",
    "aes-256-ccm",
    "chacha20-poly1305",
    "aes-128-ecb",
    "aes-256-ecb",
    "aes-128-ctr",
    "aes-256-ctr",
    "chacha20",
]
AEADS = {"aes-128-gcm", "aes-256-gcm", "aes-128-ccm", "aes-256-ccm", "chacha20-poly1305"}
MAX_RECORD = 16 * 1024 * 1024 - 1  # CCM with a 12-byte nonce has a 3-byte length field
MAX_SECONDS = 30.0
ENV_VAR = "OPENSSL_ia32cap"

# The documents' mask clears bit 57 (AES-NI) and bit 33 (PCLMULQDQ) of CPUID(1) ECX:EDX.
# Because it has no ':' part, OpenSSL 3.5 also zeroes every further word (CPUID 7: AVX2,
# AVX-512, VAES, VPCLMULQDQ, BMI2, ADX, SHA-NI). The precise mask clears the same two bits,
# then bits 41/42 (VAES, VPCLMULQDQ = CPUID(7).ECX bits 9/10) of the second word, and passes
# '~0' for the three remaining words so that OpenSSL keeps them.
MASKS = {
    "documents": "~0x200000200000000",
    "precise": "~0x200000200000000:~0x60000000000:~0:~0:~0",
}


@dataclass
class Plan:
    ciphers: list[str]
    sizes: list[int]
    aesni: list[str]
    masks: list[str]
    modes: list[str]
    directions: list[str]
    seconds: float

    def environments(self) -> list[tuple[str, str, str | None]]:
        """(aesni, mask name, OPENSSL_ia32cap value or None) for each engine environment."""
        out = []
        if "on" in self.aesni:
            out.append(("on", "none", None))
        if "off" in self.aesni:
            out += [("off", m, MASKS[m]) for m in self.masks]
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def cell_id(cipher, aesni, mask, mode, direction, size) -> CellId:
    return CELLS.id(cipher, aesni, mask, mode, direction, size)


DDL = [
    """CREATE TABLE IF NOT EXISTS aead_cpu (
        aesni TEXT, mask TEXT, ia32cap_env TEXT, openssl_ia32cap TEXT, aes_gcm_path TEXT,
        features JSON)""",
    """CREATE TABLE IF NOT EXISTS aead_windows (
        cell_id TEXT, cipher TEXT, aesni TEXT, mask TEXT, mode TEXT, direction TEXT,
        record_bytes BIGINT, window_index INTEGER, records BIGINT, bytes BIGINT, ns BIGINT,
        cpu_ns BIGINT)""",
    """CREATE TABLE IF NOT EXISTS aead_cells (
        cell_id TEXT, cipher TEXT, aesni TEXT, mask TEXT, ia32cap_env TEXT,
        openssl_ia32cap TEXT, aes_gcm_path TEXT, mode TEXT, direction TEXT,
        record_bytes BIGINT, records BIGINT, bytes BIGINT, ns BIGINT, cpu_ns BIGINT,
        verified_records BIGINT,
        windows INTEGER, batch_records INTEGER, aad_bytes INTEGER, key_set_per_record BOOLEAN,
        nonce TEXT, seconds_requested DOUBLE)""",
]


def _engine_env(value: str | None) -> dict:
    return {ENV_VAR: value} if value is not None else {}


def probe_cpu(value: str | None) -> dict:
    """The engine's `cpu` record when started with this mask."""
    for rec in engine.run(["aead", "--cpu-only"], env=_engine_env(value), timeout=60):
        if rec["type"] == "cpu":
            return rec
    raise EngineError("engine 'aead --cpu-only' printed no cpu record")


def measure(plan: Plan, store) -> None:
    for ddl in DDL:
        store.ensure_table(ddl)
    _drop_user_mask(store)
    done = CELLS.done(store)
    cpus = {(a, m): _probe_environment(store, a, m, v, done) for a, m, v in plan.environments()}
    jobs = _jobs(plan, done)
    with CellProgress("aead", sum(len(j[-1]) for j in jobs)) as progress:
        for job in jobs:
            _run_job(store, plan, job, cpus, progress)
    _contention_warning(store)


def _drop_user_mask(store) -> None:
    """pqlab sets OPENSSL_ia32cap itself per --aesni/--mask; a user's value would skew every
    cell, so it is removed (and the run says so)."""
    user_mask = os.environ.pop(ENV_VAR, None)
    if user_mask is not None:
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.ENV_MASK_IGNORED,
                    ENV_VAR,
                    f"the environment had {ENV_VAR}={user_mask}, which pqlab removed",
                    "pqlab sets the mask itself per --aesni/--mask; unset it",
                )
            ],
        )


def _probe_environment(store, aesni: str, mask: str, value, done: set) -> dict:
    """OpenSSL's capabilities under this mask, checked to be what was asked, and stored."""
    cpu = probe_cpu(value)
    feats = cpu.get("features", {})
    if cpu.get("arch") != "x86_64" and aesni == "off":
        raise EngineError(
            f"--aesni off needs an x86_64 CPU: OPENSSL_ia32cap has no effect on {cpu.get('arch')}"
        )
    if aesni == "off" and feats.get("aesni"):
        raise EngineError(
            f"the {mask} mask {value} did not turn AES-NI off: OpenSSL still "
            f"reports {cpu.get('openssl_ia32cap')}"
        )
    if aesni == "on" and not feats.get("aesni"):
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.NO_AESNI,
                    "AES-NI on",
                    "this CPU (or OpenSSL) has no AES-NI, so 'on' measures software AES",
                    "run on a CPU with AES-NI to compare",
                )
            ],
        )
    cid = CELLS.auxiliary("cpu", aesni, mask)
    if cid not in done:
        with store.cell(NAME, cid, {"aesni": aesni, "mask": mask}):
            store.insert_rows(
                "aead_cpu",
                [
                    {
                        "aesni": aesni,
                        "mask": mask,
                        "ia32cap_env": value,
                        "openssl_ia32cap": cpu["openssl_ia32cap"],
                        "aes_gcm_path": cpu["aes_gcm_path"],
                        "features": json.dumps(feats),
                    }
                ],
            )
    return cpu


def _jobs(plan: Plan, done: set) -> list[tuple]:
    """One engine run per (environment, mode, cipher, direction) with its sizes not done."""
    jobs = []
    for aesni, mask, value in plan.environments():
        for mode in plan.modes:
            for cipher in plan.ciphers:
                for direction in plan.directions:
                    todo = [
                        s
                        for s in plan.sizes
                        if cell_id(cipher, aesni, mask, mode, direction, s) not in done
                    ]
                    if todo:
                        jobs.append((aesni, mask, value, mode, cipher, direction, todo))
    return jobs


def _run_job(store, plan: Plan, job: tuple, cpus: dict, progress) -> None:
    aesni, mask, value, mode, cipher, direction, todo = job
    progress.start(
        f"{cipher} {mode} {direction} AES-NI {aesni}"
        + (f" ({mask} mask)" if aesni == "off" else "")
    )
    window_ms = max(1.0, min(100.0, plan.seconds * 1000 / 10))
    args = [
        "aead",
        "--cipher",
        cipher,
        "--mode",
        mode,
        "--directions",
        direction,
        "--sizes",
        ",".join(map(str, todo)),
        "--seconds",
        f"{plan.seconds:g}",
        "--window-ms",
        f"{window_ms:g}",
    ]
    cpu = cpus[(aesni, mask)]
    windows: list[dict] = []
    cells: list[tuple] = []
    timeout = len(todo) * (plan.seconds * 20 + 30)
    for rec in process.stream(args, env=_engine_env(value), timeout=timeout):
        if rec["type"] == "cpu" and rec["openssl_ia32cap"] != cpu["openssl_ia32cap"]:
            raise EngineError(
                f"OpenSSL's capability vector changed between runs: {rec['openssl_ia32cap']}"
            )
        if rec["type"] == "window":
            windows.append(rec)
        elif rec["type"] == "cell":
            cells.append(_cell_rows(plan, rec, windows, aesni, mask, value, cpu))
            windows = []
            progress.advance()
    _save_cells(store, cells)


def _contention_warning(store) -> None:
    contended = store.query(
        "SELECT count(*) AS n, min(cpu_ns * 1.0 / ns) AS worst FROM aead_cells "
        "WHERE cpu_ns < 0.9 * ns"
    )[0]
    if contended["n"]:
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.CPU_CONTENDED,
                    "aead",
                    f"in {contended['n']} cells the engine had the CPU for less than 90 % of "
                    f"the timed wall-clock time (worst {contended['worst']:.0%}): other "
                    "processes ran, so wall-clock MB/s (mb_per_s) understate the ciphers",
                    "compare cpu_mb_per_s (per CPU-second, like openssl speed without "
                    "-elapsed), or rerun on an idle machine",
                )
            ],
        )


def _cell_rows(plan, rec, windows, aesni, mask, value, cpu) -> tuple:
    """One cell's (id, parameters, window rows, cell row), checked: every record verified, the
    windows adding up to the cell."""
    size = rec["record_bytes"]
    cid = str(cell_id(rec["cipher"], aesni, mask, rec["mode"], rec["direction"], size))
    if rec["verified_records"] != rec["records"] or rec["records"] <= 0:
        raise EngineError(
            f"{cid}: {rec['verified_records']} of {rec['records']} records "
            "verified; refusing to store an unverified number"
        )
    if sum(w["records"] for w in windows) != rec["records"]:
        raise EngineError(f"{cid}: window samples do not add up to the cell total")
    params = {
        "cipher": rec["cipher"],
        "aesni": aesni,
        "mask": mask,
        "mode": rec["mode"],
        "direction": rec["direction"],
        "record_bytes": size,
    }
    window_rows = [
        {
            **params,
            "cell_id": cid,
            "window_index": w["index"],
            "records": w["records"],
            "bytes": w["bytes"],
            "ns": w["ns"],
            "cpu_ns": w["cpu_ns"],
        }
        for w in windows
    ]
    cell_row = {
        **params,
        "cell_id": cid,
        "ia32cap_env": value,
        "openssl_ia32cap": cpu["openssl_ia32cap"],
        "aes_gcm_path": cpu["aes_gcm_path"],
        "records": rec["records"],
        "bytes": rec["bytes"],
        "ns": rec["ns"],
        "cpu_ns": rec["cpu_ns"],
        "verified_records": rec["verified_records"],
        "windows": rec["windows"],
        "batch_records": rec["batch_records"],
        "aad_bytes": rec["aad_bytes"],
        "key_set_per_record": rec["key_set_per_record"],
        "nonce": rec["nonce"],
        "seconds_requested": plan.seconds,
    }
    return cid, params, window_rows, cell_row


def _save_cells(store, cells: list[tuple]) -> None:
    """The cells of one engine run, stored in one transaction with their 'done' marks."""
    if not cells:
        return
    with store.cells(NAME) as mark:
        store.insert_rows("aead_windows", [w for c in cells for w in c[2]])
        store.insert_rows("aead_cells", [c[3] for c in cells])
        for cid, params, _, _ in cells:
            mark(cid, params)


# --- export --------------------------------------------------------------------------------

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


# --- the experiment ---------------------------------------------------------------------------

OPTIONS = (
    Option(
        "ciphers",
        "comma-separated ciphers (default: all): " + ", ".join(CIPHERS),
        default=",".join(CIPHERS),
        metavar="LIST",
    ),
    Option(
        "sizes",
        "record sizes in bytes, comma separated",
        default="16,64,256,1024,8192,16384",
        metavar="LIST",
    ),
    Option("aesni", "on, off or on,off", default="on,off", metavar="LIST"),
    Option(
        "mask",
        "CPU mask for AES-NI off: documents (~0x200000200000000, as the documents; also "
        "disables AVX2/AVX-512/VAES), precise (AES-NI, PCLMULQDQ, VAES, VPCLMULQDQ only), or "
        "both",
        default="documents",
        metavar="NAME",
    ),
    Option("mode", "fair, speed-compatible or both", default="fair", metavar="MODE"),
    Option("speed-compatible", "same as --mode speed-compatible", flag=True),
    Option("directions", "encrypt, decrypt or both", default="encrypt,decrypt", metavar="LIST"),
    Option(
        "seconds",
        "timed seconds per cell, like openssl speed's 3 s",
        default="3",
        metavar="S",
    ),
)


def _choose(text: str, option: str, accepted: tuple[str, ...], both: list[str] | None = None):
    """A comma-separated choice from `accepted` ("both" meaning `both`), or UserError."""
    values = parse_list(text, option)
    if both is not None and values == ["both"]:
        return list(both)
    if not values or any(v not in accepted for v in values):
        words = ", ".join(accepted) + (" or both" if both else "")
        raise UserError(f"{option} {text!r}: use {words}")
    return list(dict.fromkeys(values))


def _record_sizes(text: str, ciphers: list[str]) -> list[int]:
    sizes = []
    for item in parse_list(text, "--sizes", example="16,1024,16384"):
        n = parse_size(item, "record size")
        if not 1 <= n <= MAX_RECORD:
            raise UserError(f"record size {item!r} is outside 1..{MAX_RECORD} bytes")
        sizes.append(n)
    if not sizes:
        raise UserError("--sizes is empty; give e.g. 16,1024,16384")
    for c in ciphers:
        bad = [s for s in sizes if s % 16]
        if c.endswith("-ecb") and bad:
            raise UserError(
                f"{c} encrypts whole 16-byte blocks; record size {bad[0]} is not a multiple of 16"
            )
    return list(dict.fromkeys(sizes))


def from_values(args) -> Plan:
    """Validate everything before the first measurement; raise UserError on bad input."""
    ciphers = [c.lower() for c in parse_list(args.ciphers, "--ciphers")]
    if not ciphers:
        raise UserError("--ciphers is empty; choose from " + ", ".join(CIPHERS))
    for c in ciphers:
        if c not in CIPHERS:
            raise UserError(f"unknown cipher {c!r} in --ciphers; choose from " + ", ".join(CIPHERS))
    mode_text = "speed-compatible" if args.speed_compatible else args.mode
    modes = ("fair", "speed-compatible")
    try:
        seconds = float(args.seconds)
    except ValueError:
        raise UserError(f"--seconds {args.seconds!r} is not a number of seconds") from None
    if not 0 < seconds <= MAX_SECONDS:
        raise UserError(f"--seconds {args.seconds!r} must be above 0 and at most {MAX_SECONDS:g}")
    return Plan(
        ciphers=list(dict.fromkeys(ciphers)),
        sizes=_record_sizes(args.sizes, ciphers),
        aesni=_choose(args.aesni, "--aesni", ("on", "off")),
        masks=_choose(args.mask, "--mask", tuple(MASKS), both=list(MASKS)),
        modes=_choose(mode_text, "--mode", modes, both=list(modes)),
        directions=_choose(
            args.directions, "--directions", ("encrypt", "decrypt"), both=["encrypt", "decrypt"]
        ),
        seconds=seconds,
    )


# The estimate's cost of each mode's checks, per timed second (pqlab.estimate.COSTS).
CHECK_COSTS = {
    "fair": "aead.checks_fair_reference",
    "speed-compatible": "aead.checks_speed-compatible",
}


class Aead(Experiment):
    name = NAME
    help = "AEAD / cipher throughput, AES-NI on and off"
    description = (
        "AEAD and cipher throughput through OpenSSL, AES-NI on and off. Every record is a full "
        "init-update-final with a fresh nonce by default (fair); --mode speed-compatible "
        "drives OpenSSL as `openssl speed -evp` does, so the two can be compared. Every "
        "record is checked. Results: tables/aead.csv, figures, report section."
    )
    cells = CELLS
    options = OPTIONS
    compare = (
        CompareSpec(
            "aead",
            "aead_windows",
            ("cipher", "aesni", "mode", "direction", "record_bytes"),
            "bytes * 1e3 / ns",
            "MB/s",
            better="higher",
            where="ns > 0",
        ),
    )

    def metadata(self, plan: Plan) -> dict:
        return {"aead_plan": plan.as_dict()}

    def resume_key(self, plan: Plan) -> dict:
        return {"seconds": plan.seconds}

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell --seconds of timed work (fixed by the plan), the checks beside it (in
        proportion to it, at the mode's cost) and the cell's own start and rows."""
        runs = len(plan.environments()) * len(plan.modes) * len(plan.ciphers)
        runs *= len(plan.directions)
        cells = runs * len(plan.sizes)
        work = estimate.Work(f"{estimate.count(cells, 'cell')} x {plan.seconds:g} s", cells=cells)
        work.exact_s = cells * plan.seconds
        for mode in plan.modes:  # each mode checks its records its own way
            work.add(CHECK_COSTS[mode], cells // len(plan.modes) * plan.seconds)
        work.add("aead.cell", cells)
        return work


EXPERIMENT = Aead()
