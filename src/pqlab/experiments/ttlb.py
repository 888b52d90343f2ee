"""Time to first byte and time to last byte of TLS 1.3 connections over emulated links
(source document 003): for each link profile, key-exchange group, certificate chain and
response size, fresh connections where the client sends `GET <n>` after the handshake and
the server answers with n bytes. Per connection: TTFB (connect start -> handshake done,
the document's handshake time), TTLB (connect start -> last response byte), TCP
retransmissions of both ends (TCP_INFO) and the bytes each side put on the wire.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from pqlab import catalog, engine
from pqlab.errors import EngineError, UserError
from pqlab.experiments import ttlb_model
from pqlab.net.profiles import LinkProfile

EXPERIMENT = "ttlb"
DEFAULT_GROUPS = ["X25519", "X25519MLKEM768"]
DEFAULT_CHAINS = ["RSA-2048", "ML-DSA-44"]
DEFAULT_SIZES = ["0", "1KiB", "10KiB", "50KiB", "100KiB", "200KiB"]
PERCENTILES = (50, 75, 90)
PORT = 44330
CLOSE_NOTIFY_BYTES = 24  # TLS 1.3 alert record: 5 header + 2 alert + 1 type + 16 tag

RAW_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_raw (
    profile TEXT, shaper TEXT, grp TEXT, chain TEXT, data_bytes BIGINT, idx INTEGER,
    ttfb_ns BIGINT, ttlb_ns BIGINT, tcp_connect_ns BIGINT,
    client_retrans INTEGER, server_retrans INTEGER, retransmits INTEGER,
    client_hello_bytes BIGINT, server_flight_bytes BIGINT, record_bytes_sent BIGINT,
    record_bytes_received BIGINT, chain_der_bytes BIGINT, negotiated_group TEXT,
    negotiated_sigalg TEXT, rtt_us BIGINT)
"""
PROFILES_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_profiles (
    profile TEXT PRIMARY KEY, shaper TEXT, choice TEXT, profile_json JSON, link_json JSON,
    topology_json JSON)
"""
CHAINS_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_chains (
    chain TEXT PRIMARY KEY, key_spec TEXT, sigalg TEXT, chain_certs INTEGER,
    chain_der_bytes INTEGER, record JSON)
"""


# --- inputs ----------------------------------------------------------------------------------
def resolve_groups(names: list[str]) -> list[catalog.Algorithm]:
    out = []
    for name in names:
        alg = catalog.resolve(name)
        if alg.kind not in ("kem", "kex") or not alg.tls_group:
            raise UserError(f"--groups: {alg.name} is not a TLS key-exchange group")
        out.append(alg)
    return out


def key_spec(alg: catalog.Algorithm) -> str:
    """The engine's key spec (RSA:2048, EC:P-256, ML-DSA-44, ...)."""
    params = alg.params or {}
    if not alg.openssl:
        raise UserError(f"--chain: {alg.name} is not provided by OpenSSL in this build")
    if alg.openssl.upper() == "RSA":
        return f"RSA:{int(params.get('bits', 2048))}"
    if alg.openssl.upper() in ("EC", "ECDSA"):
        return f"EC:{params.get('curve', 'P-256')}"
    return alg.openssl


def resolve_chains(names: list[str]) -> list[catalog.Algorithm]:
    out = []
    for name in names:
        alg = catalog.resolve(name, "sig")
        if not alg.tls_name:
            raise UserError(f"--chain: {alg.name} has no TLS 1.3 signature scheme")
        key_spec(alg)
        out.append(alg)
    return out


def make_chain(alg: catalog.Algorithm, directory: Path) -> dict:
    """A two-certificate chain of `alg`: root CA and server certificate both `alg`, and the
    server sends both (the CA certificate stands in for the intermediate a public CA's
    chain carries; clients trust the root file)."""
    d = directory / re.sub(r"[^A-Za-z0-9.]+", "-", alg.name)
    saved = d / "certs.json"
    if saved.exists():  # --resume keeps the chain the finished cells were measured with
        rec = json.loads(saved.read_text())
    else:
        recs = engine.run(
            [
                "tls",
                "certs",
                "--ca-alg",
                key_spec(alg),
                "--server-alg",
                key_spec(alg),
                "--out-dir",
                str(d),
                "--chain-with-root",
            ],
            timeout=600,
        )
        rec = next(r for r in recs if r["type"] == "certs")
        saved.write_text(json.dumps(rec, indent=1))
    return {
        "alg": alg,
        "root": rec["files"]["root_cert"],
        "chain": rec["files"]["chain"],
        "key": rec["files"]["server_key"],
        "sigalg": alg.tls_name,
        "record": rec,
    }


# --- one (group, chain) server and its clients -------------------------------------------------
class _Server:
    """The engine's TLS server in the server namespace; records collected in a thread."""

    def __init__(self, topo, args: list[str]):
        self.proc = topo.popen(
            "server",
            engine.command(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.records: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        first = self.records.get(timeout=30)
        if isinstance(first, Exception) or first.get("type") != "listening":
            self.stop()
            raise EngineError(f"TLS server did not start: {first}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                try:
                    self.records.put(engine.parse_line(line))
                except EngineError as e:
                    self.records.put(e)
        self.records.put(EngineError("TLS server exited"))

    def drain(self) -> list[dict]:
        out = []
        while True:
            try:
                r = self.records.get_nowait()
            except queue.Empty:
                return out
            if isinstance(r, dict) and r.get("type") in ("connection", "connection_error"):
                out.append(r)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout=5)


def _offset(events: list[dict], dirn: str, msg: str) -> int | None:
    for ev in events or []:
        if ev.get("ev") == "handshake" and ev.get("dir") == dirn and ev.get("msg") == msg:
            return ev.get("offset_end")
    return None


def _rows(
    profile: LinkProfile,
    shaper: str,
    group: str,
    chain: str,
    size: int,
    clients: list[dict],
    servers: list[dict],
) -> dict[str, list]:
    by_peer = {s.get("peer"): s for s in servers}
    cols: dict[str, list] = {
        k: []
        for k in (
            "profile",
            "shaper",
            "grp",
            "chain",
            "data_bytes",
            "idx",
            "ttfb_ns",
            "ttlb_ns",
            "tcp_connect_ns",
            "client_retrans",
            "server_retrans",
            "retransmits",
            "client_hello_bytes",
            "server_flight_bytes",
            "record_bytes_sent",
            "record_bytes_received",
            "chain_der_bytes",
            "negotiated_group",
            "negotiated_sigalg",
            "rtt_us",
        )
    }
    for c in clients:
        if c.get("warmup"):
            continue
        d = c["durations"]
        srv = by_peer.get(c.get("local"))
        if srv is not None and srv.get("type") == "connection_error":
            raise EngineError(
                f"server side of connection {c['index']} failed: {srv.get('message')}"
            )
        if c.get("app_bytes_received", 0) != size:
            raise EngineError(
                f"connection {c['index']} received "
                f"{c.get('app_bytes_received')} bytes, asked for {size}"
            )
        ci = c.get("tcp_info") or {}
        si = (srv or {}).get("tcp_info") or {}
        client_retrans = int(ci.get("total_retrans", 0))
        server_retrans = int(si.get("total_retrans", 0)) if srv else None
        events = c.get("events") or []
        ch = _offset(events, "sent", "client_hello")
        flight = _offset(events, "recv", "finished")
        values = {
            "profile": profile.name,
            "shaper": shaper,
            "grp": group,
            "chain": chain,
            "data_bytes": size,
            "idx": int(c["index"]),
            "ttfb_ns": int(d["connect_to_handshake_ns"]),
            "ttlb_ns": int(d.get("last_byte_ns", d["connect_to_handshake_ns"])),
            "tcp_connect_ns": int(d["tcp_connect_ns"]),
            "client_retrans": client_retrans,
            "server_retrans": server_retrans,
            "retransmits": client_retrans + (server_retrans or 0),
            "client_hello_bytes": ch,
            "server_flight_bytes": flight,
            "record_bytes_sent": c.get("record_bytes_sent"),
            "record_bytes_received": c.get("record_bytes_received"),
            "chain_der_bytes": sum(c.get("peer_chain_der_bytes") or [0]),
            "negotiated_group": c["negotiated"].get("group"),
            "negotiated_sigalg": c["negotiated"].get("sigalg"),
            "rtt_us": ci.get("rtt_us"),
        }
        for k, v in values.items():
            cols[k].append(v)
    return cols


def measure(
    store,
    profiles: list[LinkProfile],
    groups: list[str],
    chains: list[str],
    sizes: list[int],
    n: int,
    shaper: str,
    warmup: int = 1,
    progress=None,
) -> None:
    from pqlab.net.shaping import make_link
    from pqlab.net.topology import TwoHosts

    group_algs = resolve_groups(groups)
    chain_algs = resolve_chains(chains)
    for ddl in (RAW_DDL, PROFILES_DDL, CHAINS_DDL):
        store.ensure_table(ddl)
    done = store.cells_done(EXPERIMENT)
    cert_dir = store.path / "certs"
    chain_info = {}
    for alg in chain_algs:
        info = make_chain(alg, cert_dir)
        chain_info[alg.name] = info
        if not store.query("SELECT 1 FROM ttlb_chains WHERE chain = ?", [alg.name]):
            rec = info["record"]
            store.insert_rows(
                "ttlb_chains",
                [
                    {
                        "chain": alg.name,
                        "key_spec": key_spec(alg),
                        "sigalg": alg.tls_name,
                        "chain_certs": rec.get("chain_certs"),
                        "chain_der_bytes": rec.get("chain_der_bytes"),
                        "record": json.dumps(rec),
                    }
                ],
            )

    def cell_id(p, g, c, s):
        return f"{p.name}|{g.name}|{c.name}|{s}"

    for profile in profiles:
        todo = [
            (g, c, s)
            for g in group_algs
            for c in chain_algs
            for s in sizes
            if cell_id(profile, g, c, s) not in done
        ]
        if not todo:
            continue
        link = make_link(profile, shaper)
        if progress:
            progress.log(f"{profile.name} ({profile.summary()}): shaper {link.choice}")
        with TwoHosts(link=link, mtu=profile.mtu, tcp=profile.tcp_settings()) as topo:
            topo_desc = topo.describe()
            if not store.query("SELECT 1 FROM ttlb_profiles WHERE profile = ?", [profile.name]):
                store.insert_rows(
                    "ttlb_profiles",
                    [
                        {
                            "profile": profile.name,
                            "shaper": link.kind,
                            "choice": link.choice,
                            "profile_json": json.dumps(profile.describe()),
                            "link_json": json.dumps(link.describe(), default=str),
                            "topology_json": json.dumps(topo_desc, default=str),
                        }
                    ],
                )
            gap_ms = max(10, int(profile.rtt_s * 1e3 * 2))
            for port_n, (g, c) in enumerate((g, c) for g in group_algs for c in chain_algs):
                cells = [s for (gg, cc, s) in todo if gg is g and cc is c]
                if not cells:
                    continue
                info = chain_info[c.name]
                port = PORT + port_n
                server = _Server(
                    topo,
                    [
                        "tls",
                        "server",
                        "--listen",
                        f"{topo.server_ip}:{port}",
                        "--cert-chain",
                        info["chain"],
                        "--key",
                        info["key"],
                        "--groups",
                        g.tls_name,
                        "--sigalgs",
                        info["sigalg"],
                        "--events",
                        "off",
                    ],
                )
                try:
                    for size in cells:
                        if progress:
                            progress.start(f"{profile.name} {g.name} {c.name} {size} B")
                        clients = engine.run(
                            [
                                "tls",
                                "client",
                                "--connect",
                                f"{topo.server_ip}:{port}",
                                "--ca",
                                info["root"],
                                "--servername",
                                topo.server_ip,
                                "--groups",
                                g.tls_name,
                                "--sigalgs",
                                info["sigalg"],
                                "-n",
                                n,
                                "--warmup",
                                warmup,
                                "--request-bytes",
                                size,
                                "--gap-ms",
                                gap_ms,
                                "--events",
                                "on",
                            ],
                            netns=topo.client_ns,
                            timeout=3600,
                        )
                        clients = [r for r in clients if r.get("type") == "connection"]
                        servers = _wait_servers(server, n + warmup)
                        cols = _rows(profile, link.kind, g.name, c.name, size, clients, servers)
                        if len(cols["idx"]) != n:
                            raise EngineError(f"expected {n} connections, got {len(cols['idx'])}")
                        with store.cell(
                            EXPERIMENT,
                            cell_id(profile, g, c, size),
                            {
                                "profile": profile.name,
                                "group": g.name,
                                "chain": c.name,
                                "data_bytes": size,
                                "n": n,
                            },
                        ):
                            store.insert("ttlb_raw", cols)
                            store.add_warnings(
                                EXPERIMENT,
                                cell_id(profile, g, c, size),
                                cell_warnings(profile, g.name, c.name, size, cols),
                            )
                        if progress:
                            progress.advance()
                finally:
                    server.stop()
        if hasattr(link, "direction_stats"):
            stats = {
                k: {f: v for f, v in s.items() if f != "lateness_ns"}
                for k, s in link.direction_stats().items()
            }
            store.con.execute(
                "UPDATE ttlb_profiles SET link_json = ? WHERE profile = ?",
                [json.dumps({**link.describe(), "stats": stats}, default=str), profile.name],
            )


def cell_warnings(profile: LinkProfile, group: str, chain: str, size: int, cols: dict):
    """Warnings worth a user's attention, each with what to do."""
    from pqlab.stats import Warning_

    out = []
    subject = f"ttlb {profile.name} {group} {chain} {size} B"
    n = len(cols["idx"])
    if n < 10:
        out.append(
            Warning_(
                "few-samples",
                subject,
                f"percentiles from only {n} connections",
                "use -n 20 or more (the document used 100s) for stable p75/p90",
            )
        )
    lossless = not (
        profile.c2s.loss_pct or profile.s2c.loss_pct or profile.c2s.jitter_s or profile.s2c.jitter_s
    )
    if lossless and n and cols["server_flight_bytes"][0]:

        def med(k):
            return int(np.median([v for v in cols[k] if v is not None] or [0]))

        flight = med("server_flight_bytes")
        _, model_ttlb = ttlb_model.model(
            profile,
            client_hello_bytes=med("client_hello_bytes"),
            server_flight_bytes=flight,
            client_finish_bytes=max(0, med("record_bytes_sent") - med("client_hello_bytes")),
            response_bytes=max(0, med("record_bytes_received") - flight - CLOSE_NOTIFY_BYTES),
            data_bytes=size,
        )
        measured = float(np.median(cols["ttlb_ns"])) / 1e9
        error = measured / model_ttlb - 1 if model_ttlb > 0 else 0.0
        if model_ttlb > 0.005 and abs(error) > 0.10:
            out.append(
                Warning_(
                    "off-model",
                    subject,
                    f"median TTLB {measured * 1e3:.1f} ms is {error:+.0%} from the serialisation "
                    f"model ({model_ttlb * 1e3:.1f} ms) on a link without loss or jitter",
                    "check the link with 'pqlab linktest --profile ...'; a busy machine or a "
                    "receive window smaller than initcwnd can cause this",
                )
            )
    if sum(cols["retransmits"]) and lossless:
        out.append(
            Warning_(
                "retransmissions",
                subject,
                f"{sum(cols['retransmits'])} TCP retransmissions on a link without configured loss",
                "the queue limit overflowed or the emulator fell behind; raise limit= or check "
                "with 'pqlab linktest'",
            )
        )
    return out


def _wait_servers(server: _Server, count: int) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out += server.drain()
        if len(out) < count:
            time.sleep(0.02)
    return out


# --- analysis --------------------------------------------------------------------------------
def _pct(values, p) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), p))


def summarize(store) -> list[dict]:
    """One row per (profile, group, chain, size): percentiles, retransmissions, bytes, model."""
    raw = store.query("SELECT * FROM ttlb_raw ORDER BY profile, grp, chain, data_bytes, idx")
    profiles = {
        r["profile"]: json.loads(r["profile_json"])
        for r in store.query("SELECT profile, profile_json FROM ttlb_profiles")
    }
    groups: dict[tuple, list[dict]] = {}
    for r in raw:
        groups.setdefault(
            (r["profile"], r["shaper"], r["grp"], r["chain"], r["data_bytes"]), []
        ).append(r)
    out = []
    for (profile, shaper, grp, chain, size), rows in groups.items():
        ttfb = [r["ttfb_ns"] / 1e6 for r in rows]
        ttlb = [r["ttlb_ns"] / 1e6 for r in rows]

        def med(k: str, rows=rows) -> int:
            return int(np.median([r[k] for r in rows if r[k] is not None] or [0]))

        row = {
            "profile": profile,
            "shaper": shaper,
            "group": grp,
            "chain": chain,
            "data_bytes": size,
            "n": len(rows),
        }
        for p in PERCENTILES:
            row[f"ttfb_p{p}_ms"] = _pct(ttfb, p)
        for p in PERCENTILES:
            row[f"ttlb_p{p}_ms"] = _pct(ttlb, p)
        row["retransmits_mean"] = float(np.mean([r["retransmits"] for r in rows]))
        row["client_hello_bytes"] = med("client_hello_bytes")
        row["server_flight_bytes"] = med("server_flight_bytes")
        row["chain_der_bytes"] = med("chain_der_bytes")
        row["bytes_received"] = med("record_bytes_received")
        prof = profiles.get(profile)
        if prof and row["server_flight_bytes"]:
            lp = _profile_from_json(prof)
            response = max(
                0, row["bytes_received"] - row["server_flight_bytes"] - CLOSE_NOTIFY_BYTES
            )
            finish = max(0, med("record_bytes_sent") - row["client_hello_bytes"])
            m_ttfb, m_ttlb = ttlb_model.model(
                lp,
                client_hello_bytes=row["client_hello_bytes"],
                server_flight_bytes=row["server_flight_bytes"],
                client_finish_bytes=finish,
                response_bytes=response,
                data_bytes=size,
            )
            row["model_ttfb_ms"] = m_ttfb * 1e3
            row["model_ttlb_ms"] = m_ttlb * 1e3
            row["ttlb_model_error_pct"] = (row["ttlb_p50_ms"] / row["model_ttlb_ms"] - 1) * 100
        else:
            row["model_ttfb_ms"] = row["model_ttlb_ms"] = row["ttlb_model_error_pct"] = None
        out.append(row)
    return out


def _profile_from_json(d: dict) -> LinkProfile:
    from pqlab.net.profiles import Direction

    def direction(x: dict) -> Direction:
        return Direction(
            delay_s=x["delay_ms"] / 1e3,
            jitter_s=x["jitter_ms"] / 1e3,
            dist=x["dist"],
            delay_corr_pct=x["delay_corr_pct"],
            loss_pct=x["loss_pct"],
            loss_corr_pct=x["loss_corr_pct"],
            rate_bps=x["rate_bps"],
            limit=x["limit"],
        )

    return LinkProfile(
        name=d["name"],
        c2s=direction(d["c2s"]),
        s2c=direction(d["s2c"]),
        initcwnd=d["initcwnd"],
        initrwnd=d["initrwnd"],
        congestion_control=d["congestion_control"],
        mtu=d["mtu"],
        spec=d.get("spec", ""),
    )


def increases(summary: list[dict], baseline_group: str, baseline_chain: str) -> list[dict]:
    """Percentage increase of every other (group, chain) over the baseline, per profile,
    size and percentile, for TTFB and TTLB."""
    base = {
        (r["profile"], r["data_bytes"]): r
        for r in summary
        if r["group"] == baseline_group and r["chain"] == baseline_chain
    }
    out = []
    for r in summary:
        if (r["group"], r["chain"]) == (baseline_group, baseline_chain):
            continue
        b = base.get((r["profile"], r["data_bytes"]))
        if not b:
            continue
        for p in PERCENTILES:
            out.append(
                {
                    "profile": r["profile"],
                    "group": r["group"],
                    "chain": r["chain"],
                    "baseline": f"{baseline_group} + {baseline_chain}",
                    "data_bytes": r["data_bytes"],
                    "percentile": p,
                    "ttfb_increase_pct": (r[f"ttfb_p{p}_ms"] / b[f"ttfb_p{p}_ms"] - 1) * 100,
                    "ttlb_increase_pct": (r[f"ttlb_p{p}_ms"] / b[f"ttlb_p{p}_ms"] - 1) * 100,
                    "ttlb_baseline_ms": b[f"ttlb_p{p}_ms"],
                    "ttlb_ms": r[f"ttlb_p{p}_ms"],
                }
            )
    return out


def baseline(store) -> tuple[str, str] | None:
    """The classical combination: the first group and chain of the run's command line
    (by default X25519 with an RSA-2048 chain)."""
    rows = store.query("SELECT params FROM cells WHERE experiment = 'ttlb' ORDER BY rowid")
    meta = store.query(
        "SELECT metadata FROM invocations WHERE experiment = 'ttlb' ORDER BY id LIMIT 1"
    )
    if meta:
        m = json.loads(meta[0]["metadata"])
        if m.get("ttlb_groups") and m.get("ttlb_chains"):
            return m["ttlb_groups"][0], m["ttlb_chains"][0]
    if rows:
        p = json.loads(rows[0]["params"])
        return p["group"], p["chain"]
    return None


def _write_table(store, name: str, rows: list[dict]):
    if not rows:
        return None
    import pyarrow as pa

    table = pa.Table.from_pylist(rows)
    store.con.register("_ttlb_tmp", table)
    try:
        return store.export_table(name, "SELECT * FROM _ttlb_tmp")
    finally:
        store.con.unregister("_ttlb_tmp")


def export(store):
    from pqlab import figures
    from pqlab.report import Section

    if not store.has_table("ttlb_raw"):
        return None
    summary = summarize(store)
    if not summary:
        return None
    section = Section(
        "Time to first byte and time to last byte over emulated links",
        "<p>Each connection is a fresh TCP connection and full TLS 1.3 handshake between the "
        "client and server namespaces over the shaped link; the client then sends "
        "<code>GET n</code> and the server answers with n bytes. <b>TTFB</b> is the time from "
        "the client starting the TCP connection to the handshake completing (the document's "
        "handshake time); <b>TTLB</b> is the time to the last byte of the response. Both are "
        "reported at the 50th, 75th and 90th percentiles. A <i>chain</i> is a root CA and a "
        "server certificate both of that algorithm, the server sending both (the CA "
        "certificate standing in for the intermediate of a real chain). "
        "<code>retransmits_mean</code> counts TCP retransmissions of both ends per "
        "connection (TCP_INFO). <code>model_ttlb_ms</code> is the serialisation model: the "
        "same bytes on the wire replayed through the link's delay and rate with TCP slow "
        "start from initcwnd, no CPU time and no loss; <code>ttlb_model_error_pct</code> "
        "shows how far the median is from physics (CPU time and the emulator's timer "
        "accuracy make it slightly positive; loss and jitter make it larger).</p>"
        "<p>The increase table compares every post-quantum combination with the classical "
        "one at the same profile, size and percentile: as in the document, the handshake's "
        "extra kilobytes matter less as the response grows.</p>",
    )
    table_cols = [
        "profile",
        "shaper",
        "group",
        "chain",
        "data_bytes",
        "n",
        "ttfb_p50_ms",
        "ttfb_p75_ms",
        "ttfb_p90_ms",
        "ttlb_p50_ms",
        "ttlb_p75_ms",
        "ttlb_p90_ms",
        "retransmits_mean",
        "client_hello_bytes",
        "server_flight_bytes",
        "chain_der_bytes",
        "model_ttfb_ms",
        "model_ttlb_ms",
        "ttlb_model_error_pct",
    ]
    csv = _write_table(store, "ttlb", [{k: r[k] for k in table_cols} for r in summary])
    section.table(csv, "TTFB and TTLB percentiles per profile, group, chain and response size")
    base = baseline(store)
    inc = increases(summary, *base) if base else []
    if inc:
        csv = _write_table(store, "ttlb_increase", inc)
        section.table(
            csv,
            f"Increase over the classical combination ({base[0]} + {base[1]}) "
            "per size and percentile",
            max_rows=90,
        )
    _figures(store, summary, inc, base, section, figures)
    return section


def _figures(store, summary, inc, base, section, figures) -> None:
    import matplotlib.pyplot as plt

    profiles = sorted({r["profile"] for r in summary})
    combos = sorted({(r["group"], r["chain"]) for r in summary})
    colors = {
        p: c for p, c in zip(PERCENTILES, ("tab:blue", "tab:orange", "tab:green"), strict=True)
    }
    for profile in profiles:
        pq = sorted({(r["group"], r["chain"]) for r in inc if r["profile"] == profile})
        if pq:
            # Document figure 1: handshake-time increase at p50/p75/p90, one bar per combo.
            fig, ax = plt.subplots(figsize=(6, 3.5))
            width = 0.8 / len(pq)
            for i, combo in enumerate(pq):
                vals = [
                    next(
                        (
                            r["ttfb_increase_pct"]
                            for r in inc
                            if r["profile"] == profile
                            and (r["group"], r["chain"]) == combo
                            and r["percentile"] == p
                            and r["data_bytes"]
                            == min(x["data_bytes"] for x in inc if x["profile"] == profile)
                        ),
                        np.nan,
                    )
                    for p in PERCENTILES
                ]
                ax.bar(np.arange(3) + i * width, vals, width, label=" + ".join(combo))
            ax.set_xticks(np.arange(3) + width * (len(pq) - 1) / 2, [f"p{p}" for p in PERCENTILES])
            ax.set_ylabel("handshake time (TTFB) increase (%)")
            ax.set_title(f"{profile}: TTFB increase over {base[0]} + {base[1]}", fontsize=9)
            ax.legend(fontsize=7)
            png = figures.save(fig, store, f"ttlb_ttfb_increase_{figures.safe_name(profile)}")
            section.figure(
                png,
                f"Handshake time increase per percentile ({profile}); cf. the document's figure 1",
            )
            # Document figures 2-5: TTLB increase vs response size, one line per percentile.
            for combo in pq:
                fig, ax = plt.subplots(figsize=(6, 3.5))
                for p in PERCENTILES:
                    pts = sorted(
                        (r["data_bytes"] / 1024, r["ttlb_increase_pct"])
                        for r in inc
                        if r["profile"] == profile
                        and r["percentile"] == p
                        and (r["group"], r["chain"]) == combo
                    )
                    ax.plot(
                        [x for x, _ in pts],
                        [y for _, y in pts],
                        marker="o",
                        color=colors[p],
                        label=f"p{p}",
                    )
                ax.axhline(0, color="grey", lw=0.6)
                ax.set_xlabel("data sent by the server (KiB)")
                ax.set_ylabel("TTLB increase (%)")
                ax.set_title(f"{profile}: {' + '.join(combo)} vs {base[0]} + {base[1]}", fontsize=9)
                ax.legend(fontsize=7)
                png = figures.save(
                    fig,
                    store,
                    "ttlb_increase_" + figures.safe_name(f"{profile}_{combo[0]}_{combo[1]}"),
                )
                section.figure(
                    png,
                    f"TTLB increase by response size ({profile}, "
                    f"{' + '.join(combo)}); cf. the document's figures 2-5",
                )
    # Document figure 6: CDF of TTLB at the largest size, one line per profile, per combo.
    raw = store.query("SELECT profile, grp, chain, data_bytes, ttlb_ns FROM ttlb_raw")
    largest = max(r["data_bytes"] for r in raw)
    for combo in combos:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for profile in profiles:
            v = np.sort(
                [
                    r["ttlb_ns"] / 1e6
                    for r in raw
                    if r["profile"] == profile
                    and (r["grp"], r["chain"]) == combo
                    and r["data_bytes"] == largest
                ]
            )
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=profile)
        lows = [ln.get_xdata().min() for ln in ax.get_lines() if len(ln.get_xdata())]
        highs = [ln.get_xdata().max() for ln in ax.get_lines() if len(ln.get_xdata())]
        if lows and min(lows) > 0 and max(highs) / min(lows) > 20:
            ax.set_xscale("log")  # profiles an order of magnitude apart (1 Gbit/s vs 1 Mbit/s)
        ax.set_xlabel(f"TTLB (ms), {largest / 1024:g} KiB from the server")
        ax.set_ylabel("CDF")
        ax.set_title(" + ".join(combo), fontsize=9)
        ax.legend(fontsize=7)
        png = figures.save(fig, store, "ttlb_cdf_" + figures.safe_name("_".join(combo)))
        section.figure(
            png,
            f"CDF of TTLB at {largest / 1024:g} KiB ({' + '.join(combo)}); "
            "cf. the document's figure 6",
        )
