"""The TLS 1.2 key-exchange study (document 002) and its TLS 1.3 counterparts.

Each cell is (TLS version, key exchange, server certificate): a pqlab-engine TLS server in
the server namespace and the engine client in the client namespace, AES-128-GCM fixed,
`-n` fresh full handshakes, each verified by the client (chain, host name, version, group)
and here again (suite, group, DH size). The sample is the client's time from the start of
the TCP connect to handshake complete. Cells that TLS 1.2 does not define (RSA key
exchange or DHE with an ECDSA certificate) are listed in the table with n = 0 and a note.
"""

from __future__ import annotations

import contextlib
import html
import os
import subprocess
import threading
import time
from dataclasses import dataclass

from pqlab import engine, figures, stats
from pqlab.errors import EngineError, UserError
from pqlab.progress import CellProgress
from pqlab.report import Section

EXPERIMENT = "tls12"
SUITE12 = "AES128-GCM-SHA256"  # the bulk cipher fixed by the document
SUITE13 = "TLS_AES_128_GCM_SHA256"
EVP_PKEY_DH = 28


@dataclass(frozen=True)
class Kex:
    label: str  # as in the tables: RSA, DHE-2048, ECDHE-X25519, FFDHE-2048
    family: str  # rsa | dhe | ecdhe | ffdhe
    group: str | None = None  # OpenSSL group name (what the client must negotiate)
    dh_bits: int | None = None


KEX12 = [
    Kex("RSA", "rsa"),
    *[Kex(f"DHE-{b}", "dhe", dh_bits=b) for b in (1024, 2048, 3072, 4096)],
    Kex("ECDHE-P-256", "ecdhe", "secp256r1"),
    Kex("ECDHE-P-384", "ecdhe", "secp384r1"),
    Kex("ECDHE-P-521", "ecdhe", "secp521r1"),
    Kex("ECDHE-X25519", "ecdhe", "x25519"),
    Kex("ECDHE-X448", "ecdhe", "x448"),
]
# TLS 1.3 has no RSA key exchange and no 1024-bit FFDHE group (RFC 7919 starts at 2048).
KEX13 = [Kex(f"FFDHE-{b}", "ffdhe", f"ffdhe{b}", b) for b in (2048, 3072, 4096)] + [
    k for k in KEX12 if k.family == "ecdhe"
]
CERTS = {"RSA-2048": "RSA:2048", "ECDSA-P-256": "EC:P-256"}
KEX_NAMES = {k.label.lower(): k for k in KEX12 + KEX13}


@dataclass(frozen=True)
class CellSpec:
    version: str  # "1.2" | "1.3"
    kex: Kex
    cert: str  # key of CERTS
    suite: str | None  # OpenSSL cipher name expected; None: not defined
    note: str = ""

    @property
    def cell_id(self) -> str:
        return f"{self.version}|{self.kex.label}|{self.cert}"


def cell_spec(version: str, kex: Kex, cert: str) -> CellSpec:
    ecdsa = cert.startswith("ECDSA")
    if version == "1.3":
        return CellSpec(version, kex, cert, SUITE13)
    if kex.family == "rsa":
        if ecdsa:
            return CellSpec(
                version,
                kex,
                cert,
                None,
                "RSA key exchange encrypts to the certificate's RSA key; an ECDSA "
                "certificate cannot do it",
            )
        return CellSpec(version, kex, cert, SUITE12)
    if kex.family == "dhe":
        if ecdsa:
            return CellSpec(
                version,
                kex,
                cert,
                None,
                "TLS 1.2 defines no DHE-ECDSA cipher suite (RFC 5246/5288 only "
                "have DHE_RSA and DHE_DSS); not measured",
            )
        return CellSpec(version, kex, cert, "DHE-RSA-" + SUITE12)
    return CellSpec(version, kex, cert, ("ECDHE-ECDSA-" if ecdsa else "ECDHE-RSA-") + SUITE12)


@dataclass
class Plan:
    versions: list[str]
    kexes: list[str]  # labels
    certs: list[str]
    n: int
    warmup: int
    server_cpu: float | None
    profile: object | None  # pqlab.net.profiles.LinkProfile
    shaper: str

    def cells(self) -> list[CellSpec]:
        out = []
        for version in self.versions:
            table = KEX12 if version == "1.2" else KEX13
            for kex in table:
                if kex.label.lower() not in self.kexes:
                    continue
                for cert in self.certs:
                    out.append(cell_spec(version, kex, cert))
        return out


def tls_args(spec: CellSpec) -> tuple[list[str], list[str], str | None]:
    """(server args, client args, group the client must negotiate) for a defined cell."""
    common = ["--tls-version", spec.version, "--events", "off"]
    server, client = list(common), list(common)
    expect = None
    if spec.version == "1.3":
        server += ["--ciphersuites", SUITE13, "--groups", spec.kex.group]
        client += ["--ciphersuites", SUITE13, "--groups", spec.kex.group]
        expect = spec.kex.group
    else:
        server += ["--ciphers", spec.suite]
        client += ["--ciphers", spec.suite]
        if spec.kex.family == "dhe":
            server += ["--dh-bits", str(spec.kex.dh_bits)]
            if spec.kex.dh_bits < 2048:
                # OpenSSL's default security level 2 refuses DH below 2048 bits.
                client += ["--security-level", "1"]
        elif spec.kex.family == "ecdhe":
            groups = spec.kex.group
            if spec.cert.startswith("ECDSA") and groups != "secp256r1":
                # TLS 1.2 (RFC 4492): the client's supported groups also govern the curve of
                # an ECDSA certificate, so P-256 must be offered too; the measured group is
                # listed first and must be the one negotiated (the document did the same).
                groups += ":secp256r1"
            server += ["--groups", groups]
            client += ["--groups", groups]
            expect = spec.kex.group
    return server, client, expect


DDL = [
    """CREATE TABLE IF NOT EXISTS tls12_handshakes (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, idx INTEGER,
        connect_to_handshake_ns BIGINT, tcp_connect_ns BIGINT, handshake_ns BIGINT,
        server_handshake_ns BIGINT, negotiated_version TEXT, cipher TEXT, grp TEXT,
        sigalg TEXT, peer_tmp_key_bits INTEGER, bytes_received BIGINT, bytes_sent BIGINT)""",
    """CREATE TABLE IF NOT EXISTS tls12_cells (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, suite TEXT, grp TEXT,
        dh_bits INTEGER, n INTEGER, note TEXT, server_cpu DOUBLE, cpu_mechanism TEXT,
        server_cpu_ms DOUBLE, connections INTEGER, profile TEXT, link TEXT, client_security_level INTEGER)""",
]


def _ensure_certs(store, plan: Plan) -> dict[str, dict]:
    """One CA + server certificate per certificate type (CA of the same algorithm), made by
    the engine into the run directory, kept for reruns (--resume)."""
    out = {}
    for cert in plan.certs:
        d = store.path / "certs" / cert.lower()
        files = {"chain": d / "chain.pem", "key": d / "server.key.pem", "ca": d / "root.crt.pem"}
        if not all(p.exists() for p in files.values()):
            d.mkdir(parents=True, exist_ok=True)
            engine.run(
                [
                    "tls",
                    "certs",
                    "--ca-alg",
                    CERTS[cert],
                    "--server-alg",
                    CERTS[cert],
                    "--out-dir",
                    str(d),
                    "--cn",
                    "server.pqlab.test",
                    "--san",
                    "server.pqlab.test,198.18.0.2",
                ],
                timeout=120,
            )
        out[cert] = {k: str(v) for k, v in files.items()}
    return out


class _Drain(threading.Thread):
    """Read a child's stdout into a list so its pipe never fills up."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.first = threading.Event()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line)
            self.first.set()
        self.first.set()


def _topology(plan: Plan):
    from pqlab.net.topology import TwoHosts

    if plan.profile is None:
        return TwoHosts(), "veth (no shaping)"
    from pqlab.net import shaping

    link = shaping.make_link(plan.profile, plan.shaper)
    topo = TwoHosts(link=link, tcp=plan.profile.tcp_settings(), mtu=plan.profile.mtu)
    return topo, getattr(link, "choice", type(link).__name__)


def measure(store, plan: Plan) -> None:
    from pqlab.net import privileges

    privileges.require_net_admin()
    for ddl in DDL:
        store.ensure_table(ddl)
    done = store.cells_done(EXPERIMENT)
    cells = [c for c in plan.cells() if c.cell_id not in done]
    certs = _ensure_certs(store, plan)
    profile_name = getattr(plan.profile, "name", None) or "none"
    quota_cm = contextlib.nullcontext(None)
    if plan.server_cpu is not None:
        from pqlab.cpuquota import CpuQuota

        quota_cm = CpuQuota(plan.server_cpu)
    with quota_cm as quota, CellProgress("tls12", len(cells)) as progress:
        topo, link_desc = _topology(plan)
        with topo:
            for spec in cells:
                progress.start(f"TLS {spec.version} {spec.kex.label} {spec.cert}")
                if spec.suite is None:
                    with store.cell(EXPERIMENT, spec.cell_id, {"note": spec.note}):
                        store.insert_rows(
                            "tls12_cells",
                            [_cell_row(spec, plan, 0, quota, None, profile_name, link_desc, None)],
                        )
                    progress.advance()
                    continue
                rows, used_ms, level = _run_cell(topo, spec, plan, certs[spec.cert], quota)
                with store.cell(
                    EXPERIMENT,
                    spec.cell_id,
                    {
                        "version": spec.version,
                        "kex": spec.kex.label,
                        "cert": spec.cert,
                        "n": plan.n,
                    },
                ):
                    store.insert_rows("tls12_handshakes", rows)
                    store.insert_rows(
                        "tls12_cells",
                        [
                            _cell_row(
                                spec,
                                plan,
                                len(rows),
                                quota,
                                used_ms,
                                profile_name,
                                link_desc,
                                level,
                            )
                        ],
                    )
                    summary = stats.summarize([r["connect_to_handshake_ns"] for r in rows])
                    store.add_warnings(
                        EXPERIMENT,
                        spec.cell_id,
                        stats.noise_warnings(
                            f"TLS {spec.version} {spec.kex.label} {spec.cert}", summary
                        ),
                    )
                progress.advance()


def _cell_row(spec, plan, n, quota, used_ms, profile_name, link_desc, level) -> dict:
    return {
        "cell_id": spec.cell_id,
        "version": spec.version,
        "kex": spec.kex.label,
        "cert": spec.cert,
        "suite": spec.suite,
        "grp": spec.kex.group,
        "dh_bits": spec.kex.dh_bits,
        "n": n,
        "note": spec.note,
        "server_cpu": plan.server_cpu,
        "cpu_mechanism": quota.mechanism if quota is not None else None,
        "server_cpu_ms": used_ms,
        "connections": (plan.n + plan.warmup) if n else 0,
        "profile": profile_name,
        "link": link_desc,
        "client_security_level": level,
    }


def _run_cell(topo, spec: CellSpec, plan: Plan, cert: dict, quota):
    server_args, client_args, expect = tls_args(spec)
    total = plan.warmup + plan.n
    server_argv = engine.command(
        [
            "tls",
            "server",
            "--listen",
            f"{topo.server_ip}:0",
            "--cert-chain",
            cert["chain"],
            "--key",
            cert["key"],
            "--max-connections",
            str(total),
            *server_args,
        ]
    )
    kw = {"preexec_fn": quota.join} if quota is not None else {}
    proc = topo.popen(
        "server", server_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
    )
    drain = _Drain(proc.stdout)
    drain.start()
    try:
        if not drain.first.wait(60) or not drain.lines:
            err = proc.stderr.read() if proc.poll() is not None else ""
            raise EngineError(
                f"TLS server for {spec.cell_id} did not start: "
                f"{err.strip().splitlines()[-1:] or 'no output'}"
            )
        listening = engine.parse_line(drain.lines[0])
        port = listening["port"]
        args = [
            "tls",
            "client",
            "--connect",
            f"{topo.server_ip}:{port}",
            "--ca",
            cert["ca"],
            "--servername",
            "server.pqlab.test",
            "-n",
            str(plan.n),
            "--warmup",
            str(plan.warmup),
            *client_args,
        ]
        if expect:
            args += ["--expect-group", expect]
        records = engine.run(args, netns=topo.client_ns, timeout=600 + plan.n * 30)
        usage = _wait_rusage(proc, timeout=60)
        drain.join(timeout=10)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    # The server's own CPU time (user + system) for the whole cell, start-up included.
    used = (usage.ru_utime + usage.ru_stime) * 1000.0
    server_recs = [engine.parse_line(x) for x in drain.lines[1:] if x.strip()]
    bad = [r for r in server_recs if r["type"] != "connection"]
    if bad:
        raise EngineError(f"{spec.cell_id}: server reported {bad[0].get('message', bad[0])}")
    if proc.returncode != 0 or len(server_recs) != total:
        raise EngineError(
            f"{spec.cell_id}: server handled {len(server_recs)} of {total} "
            f"connections (exit {proc.returncode})"
        )
    server_by_idx = {r["index"]: r for r in server_recs}
    conns = [r for r in records if r["type"] == "connection" and not r["warmup"]]
    if len(conns) != plan.n:
        raise EngineError(f"{spec.cell_id}: client reported {len(conns)} of {plan.n} handshakes")
    rows = []
    level = None
    for c in conns:
        neg = c["negotiated"]
        _check(spec, c, expect)
        level = c.get("security_level")
        srv = server_by_idx.get(c["index"] + plan.warmup, {})
        tmp = neg.get("peer_tmp_key") or {}
        d = c["durations"]
        rows.append(
            {
                "cell_id": spec.cell_id,
                "version": spec.version,
                "kex": spec.kex.label,
                "cert": spec.cert,
                "idx": c["index"],
                "connect_to_handshake_ns": d["connect_to_handshake_ns"],
                "tcp_connect_ns": d["tcp_connect_ns"],
                "handshake_ns": d["handshake_ns"],
                "server_handshake_ns": srv.get("handshake_ns"),
                "negotiated_version": neg["version"],
                "cipher": neg["cipher"],
                "grp": neg.get("group"),
                "sigalg": neg.get("sigalg"),
                "peer_tmp_key_bits": tmp.get("bits"),
                "bytes_received": c.get("bytes_received"),
                "bytes_sent": c.get("bytes_sent"),
            }
        )
    return rows, used, level


def _wait_rusage(proc: subprocess.Popen, timeout: float):
    """Wait for the server to exit and return its resource usage (CPU time)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.01)


def _check(spec: CellSpec, c: dict, expect: str | None) -> None:
    """Every sample is a verified handshake with the asked-for suite and group."""
    neg = c["negotiated"]
    where = f"{spec.cell_id} connection {c['index']}"
    want_version = "TLSv1.3" if spec.version == "1.3" else "TLSv1.2"
    if not c.get("verified"):
        raise EngineError(f"{where}: certificate chain not verified")
    if neg["version"] != want_version:
        raise EngineError(f"{where}: negotiated {neg['version']}, asked for {want_version}")
    got_suite = neg["cipher"] if spec.version == "1.2" else neg.get("cipher_standard_name")
    if got_suite != spec.suite:
        raise EngineError(f"{where}: negotiated suite {got_suite}, asked for {spec.suite}")
    tmp = neg.get("peer_tmp_key") or {}
    if spec.kex.family == "rsa":
        if tmp:
            raise EngineError(f"{where}: RSA key exchange but the server sent a key share")
    elif spec.kex.family == "dhe":
        if tmp.get("pkey_id") != EVP_PKEY_DH or tmp.get("bits") != spec.kex.dh_bits:
            raise EngineError(f"{where}: server DH key {tmp}, asked for {spec.kex.dh_bits}-bit DHE")
    else:
        got = (neg.get("group") or "").lower().replace("-", "").replace("_", "")
        if got != (expect or "").lower().replace("-", "").replace("_", ""):
            raise EngineError(f"{where}: negotiated group {neg.get('group')}, asked for {expect}")


# --- export --------------------------------------------------------------------------------


def _summary_rows(store) -> list[dict]:
    cells = store.query("SELECT * FROM tls12_cells")
    samples: dict[str, list[int]] = {}
    for r in store.query(
        "SELECT cell_id, connect_to_handshake_ns AS ns, "
        "server_handshake_ns AS sns FROM tls12_handshakes"
    ):
        samples.setdefault(r["cell_id"], []).append(r)
    meta = {
        r["cell_id"]: r
        for r in store.query(
            "SELECT cell_id, any_value(sigalg) AS sigalg, any_value(grp) AS grp, "
            "any_value(cipher) AS cipher, any_value(peer_tmp_key_bits) AS tmp_bits, "
            "median(bytes_received) AS server_bytes FROM tls12_handshakes GROUP BY cell_id"
        )
    }
    base = None
    for c in cells:
        if c["version"] == "1.2" and c["kex"] == "RSA" and c["cert"] == "RSA-2048" and c["n"]:
            base = stats.summarize([s["ns"] for s in samples[c["cell_id"]]])
    order = {("1.2", k.label): i for i, k in enumerate(KEX12)}
    order.update({("1.3", k.label): 100 + i for i, k in enumerate(KEX13)})
    rows = []
    for c in sorted(
        cells,
        key=lambda c: (order.get((c["version"], c["kex"]), 999), list(CERTS).index(c["cert"])),
    ):
        row = {"version": c["version"], "kex": c["kex"], "cert": c["cert"], "n": c["n"]}
        s = samples.get(c["cell_id"])
        if s:
            summ = stats.summarize([x["ns"] / 1e6 for x in s])
            srv = [x["sns"] / 1e6 for x in s if x["sns"] is not None]
            m = meta[c["cell_id"]]
            row.update(
                {
                    "mean_ms": round(summ["mean"], 4),
                    "median_ms": round(summ["median"], 4),
                    "p90_ms": round(summ["p90"], 4),
                    "sd_ms": round(summ["sd"], 4),
                    "robust_cv": round(summ["robust_cv"], 4),
                    "ratio_vs_rsa": round(summ["mean"] / (base["mean"] / 1e6), 3) if base else None,
                    "median_ratio_vs_rsa": (
                        round(summ["median"] / (base["median"] / 1e6), 3) if base else None
                    ),
                    "server_median_ms": round(float(stats.percentiles(srv, (50,))["p50"]), 4)
                    if srv
                    else None,
                    "suite": m["cipher"],
                    "group": m["grp"] or (f"DH {m['tmp_bits']} bit" if m["tmp_bits"] else "-"),
                    "server_sigalg": m["sigalg"] or "-",
                    "bytes_from_server": int(m["server_bytes"]) if m["server_bytes"] else None,
                }
            )
        if c.get("server_cpu_ms") is not None and c.get("connections"):
            row["server_cpu_ms_per_handshake"] = round(c["server_cpu_ms"] / c["connections"], 4)
        row.update({"server_cpu": c["server_cpu"], "profile": c["profile"], "note": c["note"]})
        rows.append(row)
    return rows


COLUMNS = [
    "version",
    "kex",
    "cert",
    "n",
    "mean_ms",
    "median_ms",
    "p90_ms",
    "ratio_vs_rsa",
    "median_ratio_vs_rsa",
    "sd_ms",
    "robust_cv",
    "server_median_ms",
    "suite",
    "group",
    "server_sigalg",
    "bytes_from_server",
    "server_cpu_ms_per_handshake",
    "server_cpu",
    "profile",
    "note",
]


def export(store) -> Section | None:
    if not store.has_table("tls12_cells") or not store.query("SELECT 1 FROM tls12_cells LIMIT 1"):
        return None
    rows = _summary_rows(store)
    import pyarrow as pa

    table = pa.table({c: [r.get(c) for r in rows] for c in COLUMNS})
    store.con.register("_tls12_summary", table)
    try:
        csv_path = store.export_table("tls12", "SELECT * FROM _tls12_summary")
    finally:
        store.con.unregister("_tls12_summary")
    cells = store.query(
        "SELECT DISTINCT server_cpu, cpu_mechanism, profile, link, "
        "client_security_level FROM tls12_cells WHERE n > 0"
    )
    section = Section(title="TLS 1.2 key exchange (and TLS 1.3 counterparts)")
    cpu = cells[0] if cells else {}
    section.intro = (
        "<p>Full handshakes between the client and the server namespace, bulk cipher fixed "
        "to AES-128-GCM (TLS 1.2 <code>*-AES128-GCM-SHA256</code>, TLS 1.3 "
        "<code>TLS_AES_128_GCM_SHA256</code>), as in the document's Raspberry Pi table. The "
        "sample is the client's time from the start of the TCP connect to handshake "
        "complete, for each fresh connection (no session resumption); warm-up connections "
        "are not counted. Every sample is a verified handshake: the client checks the chain "
        "against the run's CA and the host name, and the negotiated version, suite and group "
        "(for DHE: the server's DH key size) are checked against what the cell asked for. "
        "<b>ratio_vs_rsa</b> is mean / mean of TLS 1.2 RSA key exchange with the RSA-2048 "
        "certificate, for every row (ECDSA rows too), as the document's 'RSA 2048bit比' "
        "column; <b>median_ratio_vs_rsa</b> is the same with medians, which is the steadier "
        "one on a shared machine.</p>"
        "<p>DHE uses the RFC 2409 (1024) and RFC 3526 (2048-4096) MODP groups as server "
        "parameters; TLS 1.3 uses the RFC 7919 FFDHE groups (none below 2048 bits). "
        "OpenSSL recognises the RFC 3526 and RFC 7919 primes as named groups and uses short "
        "private exponents with them (225/275/325 bits for 2048/3072/4096), but not the "
        "RFC 2409 1024-bit prime, which gets a full 1023-bit exponent: so DHE-1024 costs "
        "about as much as DHE-2048 here, unlike in the document, whose generated parameters "
        "had full-length exponents at every size. TLS 1.2 "
        "has no DHE-ECDSA suite and RSA key exchange needs an RSA certificate: those rows "
        "have n = 0 and say so. For ECDHE-ECDSA in TLS 1.2 the client also offers P-256 "
        "(after the measured group), because TLS 1.2 ties the certificate's curve to the "
        "supported groups, as the document did; the negotiated group is checked.</p>"
        f"<p>Server CPU: {'limited to ' + str(cpu.get('server_cpu')) + ' of one core by ' + html.escape(str(cpu.get('cpu_mechanism'))) if cpu.get('server_cpu') else 'not limited'}; "
        f"link: {html.escape(str(cpu.get('link', '?')))} (profile {html.escape(str(cpu.get('profile', 'none')))}); "
        f"client security level {cpu.get('client_security_level')} (1 for DHE-1024, which "
        "level 2 refuses).</p>"
    )
    section.table(csv_path, "Handshake time per key exchange and certificate (ms)")
    _figure(store, section, rows)
    return section


def _figure(store, section: Section, rows: list[dict]) -> None:
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.get("n")]
    if not measured:
        return
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(measured) + 1.2))
    labels = [f"TLS {r['version']} {r['kex']} / {r['cert']}" for r in measured]
    y = range(len(measured))
    colors = ["#4477aa" if r["cert"].startswith("RSA") else "#ee7733" for r in measured]
    ax.barh(list(y), [r["median_ms"] for r in measured], color=colors)
    ax.errorbar(
        [r["median_ms"] for r in measured],
        list(y),
        xerr=[[0] * len(measured), [max(0.0, r["p90_ms"] - r["median_ms"]) for r in measured]],
        fmt="none",
        ecolor="#333",
        capsize=2,
        linewidth=0.8,
    )
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("handshake time, connect to complete (ms): median, whisker to p90")
    png = figures.save(fig, store, "tls12_handshake_times")
    section.figure(
        png,
        "Median handshake time per key exchange (blue: RSA-2048 "
        "certificate, orange: ECDSA P-256), whiskers to the 90th percentile",
    )


def parse_kexes(text: str | None) -> list[str]:
    if not text:
        return [k.lower() for k in KEX_NAMES]
    out = []
    for item in text.split(","):
        key = item.strip().lower()
        if not key:
            continue
        if key not in KEX_NAMES:
            raise UserError(
                f"unknown key exchange {item.strip()!r} in --kex; choose from "
                + ", ".join(k.label for k in KEX12 + KEX13[:3])
            )
        out.append(key)
    if not out:
        raise UserError("--kex is empty")
    return out
