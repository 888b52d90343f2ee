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
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pqlab import catalog, engine, estimate, figures, stats, units
from pqlab.cpuquota import CpuQuota, parse_fraction
from pqlab.errors import CheckError, EngineError, UserError
from pqlab.experiment import CellId, Cells, CompareSpec, Experiment, Option
from pqlab.experiments import hosts as remote_hosts
from pqlab.experiments import tls12_dhe
from pqlab.net import profiles
from pqlab.net.shaping import build_hosts, check_shaper, shaper_option
from pqlab.progress import CellProgress
from pqlab.report.section import Section, template
from pqlab.tls import negotiation, runner, stacks
from pqlab.tls.chains import Chain, make_chain
from pqlab.tls.negotiation import Expected

NAME = "tls12"
# The cipher lists and key-exchange names below are OpenSSL's: tls12 runs the OpenSSL stack.
STACK = stacks.DEFAULT_STACK
CELLS = Cells(NAME, ("version", "kex", "cert"), tls=True)
# Runs made before host pairs: the host pair a row ran on (None: this machine's namespaces).
MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS {t} ADD COLUMN IF NOT EXISTS host_pair TEXT"
    for t in ("tls12_handshakes", "tls12_cells")
) + (
    # Runs made before DHE parameter sources.
    "ALTER TABLE IF EXISTS tls12_cells ADD COLUMN IF NOT EXISTS dh_params TEXT",
    "ALTER TABLE IF EXISTS tls12_cells ADD COLUMN IF NOT EXISTS dh_private_bits INTEGER",
    # Runs made before the server reported its DH exponent per connection.
    "ALTER TABLE IF EXISTS tls12_handshakes ADD COLUMN IF NOT EXISTS server_dh_private_bits "
    "INTEGER",
)
SUITE12 = "AES128-GCM-SHA256"  # the bulk cipher fixed by the document
SUITE13 = "TLS_AES_128_GCM_SHA256"
EVP_PKEY_DH = 28


@dataclass(frozen=True)
class Kex:
    label: str  # as in the tables: RSA, DHE-2048, ECDHE-X25519, FFDHE-2048
    family: str  # rsa | dhe | ecdhe | ffdhe
    group: str | None = None  # OpenSSL group name (what the client must negotiate)
    dh_bits: int | None = None
    dh_source: str | None = None  # DHE: "rfc" (named primes) or "generated" (a new prime)

    def with_source(self, source: str) -> Kex:
        """This DHE key exchange with the parameters of `source` (its label says which,
        except for the RFC primes, the label documents and earlier runs used)."""
        label = self.label if source == "rfc" else f"{self.label}-{source}"
        return Kex(label, self.family, self.group, self.dh_bits, source)


KEX12 = [
    Kex("RSA", "rsa"),
    *[Kex(f"DHE-{b}", "dhe", dh_bits=b, dh_source="rfc") for b in (1024, 2048, 3072, 4096)],
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
# Certificate label (as in the tables) -> catalogue algorithm of root and server key.
CERTS = {"RSA-2048": "RSA-2048", "ECDSA-P-256": "ECDSA-P256"}
KEX_NAMES = {k.label.lower(): k for k in KEX12 + KEX13}
DH_SOURCES = ("rfc", "generated")
# Document 002's handshake time / RSA key exchange's, RSA-2048 and ECDSA P-256 certificates
# (OpenSSL 1.1.1 in nginx on a Raspberry Pi 2; its DHE used parameters the server
# generated, so full-length private exponents).
DOCUMENT_RATIOS = {
    ("RSA", "RSA-2048"): 1.0,
    ("DHE-1024", "RSA-2048"): 1.51,
    ("DHE-2048", "RSA-2048"): 4.75,
    ("DHE-3072", "RSA-2048"): 10.85,
    ("DHE-4096", "RSA-2048"): 22.16,
    ("ECDHE-P-256", "RSA-2048"): 0.96,
    ("ECDHE-P-384", "RSA-2048"): 2.44,
    ("ECDHE-P-521", "RSA-2048"): 4.24,
    ("ECDHE-X25519", "RSA-2048"): 0.95,
    ("ECDHE-X448", "RSA-2048"): 1.33,
    ("ECDHE-P-256", "ECDSA-P-256"): 0.40,
    ("ECDHE-P-384", "ECDSA-P-256"): 1.93,
    ("ECDHE-P-521", "ECDSA-P-256"): 3.89,
    ("ECDHE-X25519", "ECDSA-P-256"): 0.44,
    ("ECDHE-X448", "ECDSA-P-256"): 0.71,
}


@dataclass(frozen=True)
class CellSpec:
    version: str  # "1.2" | "1.3"
    kex: Kex
    cert: str  # key of CERTS
    suite: str | None  # OpenSSL cipher name expected; None: not defined
    note: str = ""

    @property
    def cell_id(self) -> str:
        return str(self.cell())

    def cell(self, pair: str | None = None) -> CellId:
        # TLS 1.2's cipher lists and key exchanges are OpenSSL's (see `cell_spec`).
        return CELLS.id(self.version, self.kex.label, self.cert, stack=STACK, pair=pair)


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
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs
    dh_sources: list[str] = field(default_factory=lambda: ["rfc"])

    @property
    def pairs(self) -> list:
        return list(self.remote.pairs) if self.remote is not None else [None]

    def cell_id(self, spec: CellSpec, pair) -> CellId:
        """The cell's id; with several host pairs, once per pair."""
        several = pair is not None and len(self.pairs) > 1
        return spec.cell(pair.label if several else None)

    def cells(self) -> list[CellSpec]:
        out = []
        for version in self.versions:
            table = KEX12 if version == "1.2" else KEX13
            for base in table:
                if base.label.lower() not in self.kexes:
                    continue
                variants = [base.with_source(s) for s in self.dh_sources]
                for kex in variants if base.family == "dhe" else [base]:
                    for cert in self.certs:
                        out.append(cell_spec(version, kex, cert))
        return out


def tls_config(spec: CellSpec) -> tuple[runner.Tls, runner.Tls, Expected, int | None]:
    """(server TLS, client TLS, what must be negotiated, DH bits of the RFC primes) for a
    defined cell (generated DHE parameters come from a file: `dh_params_file`)."""
    common = {"version": spec.version, "events": False}
    if spec.version == "1.3":
        group = catalog.resolve(spec.kex.group, "kem")
        tls = runner.Tls(groups=(group,), ciphersuites=SUITE13, **common)
        return tls, tls, Expected("1.3", group=group, cipher=SUITE13), None
    expected = Expected("1.2", cipher=spec.suite)
    if spec.kex.family == "dhe":
        # OpenSSL's default security level 2 refuses DH below 2048 bits.
        level = 1 if spec.kex.dh_bits < 2048 else None
        server = runner.Tls(ciphers=spec.suite, **common)
        client = runner.Tls(ciphers=spec.suite, security_level=level, **common)
        rfc = spec.kex.dh_source == "rfc"
        return server, client, expected, spec.kex.dh_bits if rfc else None
    if spec.kex.family == "ecdhe":
        group = catalog.resolve(spec.kex.group, "kem")
        groups = (group,)
        if spec.cert.startswith("ECDSA") and spec.kex.group != "secp256r1":
            # TLS 1.2 (RFC 4492): the client's supported groups also govern the curve of an
            # ECDSA certificate, so P-256 must be offered too; the measured group is listed
            # first and must be the one negotiated (the document did the same).
            groups += (catalog.resolve("secp256r1", "kem"),)
        tls = runner.Tls(groups=groups, ciphers=spec.suite, **common)
        return tls, tls, Expected("1.2", group=group, cipher=spec.suite), None
    tls = runner.Tls(ciphers=spec.suite, **common)
    return tls, tls, expected, None


DDL = [
    """CREATE TABLE IF NOT EXISTS tls12_handshakes (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, idx INTEGER,
        connect_to_handshake_ns BIGINT, tcp_connect_ns BIGINT, handshake_ns BIGINT,
        server_handshake_ns BIGINT, negotiated_version TEXT, cipher TEXT, grp TEXT,
        sigalg TEXT, peer_tmp_key_bits INTEGER, bytes_received BIGINT, bytes_sent BIGINT,
        host_pair TEXT, server_dh_private_bits INTEGER)""",
    """CREATE TABLE IF NOT EXISTS tls12_cells (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, suite TEXT, grp TEXT,
        dh_bits INTEGER, n INTEGER, note TEXT, server_cpu DOUBLE, cpu_mechanism TEXT,
        server_cpu_ms DOUBLE, connections INTEGER, profile TEXT, link TEXT, client_security_level INTEGER,
        host_pair TEXT, dh_params TEXT, dh_private_bits INTEGER)""",
]


def _chains(store, plan: Plan) -> dict[str, Chain]:
    """One root CA + server certificate per certificate type (the CA of the same
    algorithm), made into the run directory and kept for --resume."""
    return {cert: make_chain(store.path / "certs", CERTS[cert], CERTS[cert]) for cert in plan.certs}


def generated_dh_file(bits: int) -> Path:
    """The generated DHE parameters of a size: a safe prime with generator 2, made by
    `pqlab-engine dhparams --source generated` (OpenSSL's DH_generate_parameters, as
    `openssl dhparam` makes for nginx's `ssl_dhparam`) and shipped with pqlab. A handshake's
    cost depends on the prime's size and on the length of the exponents drawn with it, which
    is the same for every prime of no named group; a new search costs from seconds to many
    minutes at random (4096 bits: 27 s to 9 min on 2 cores)."""
    return Path(str(resources.files("pqlab.data").joinpath("dhparams", f"dh{bits}.pem")))


def dh_params(plan: Plan) -> dict[tuple[int, str], dict]:
    """For every DHE size and source of the plan: the parameters file (generated ones:
    `generated_dh_file`) and what the engine's OpenSSL does with them (`dhparams` record:
    prime size, private exponent length)."""
    out = {}
    for spec in plan.cells():
        kex = spec.kex
        if kex.family != "dhe" or spec.suite is None or (kex.dh_bits, kex.dh_source) in out:
            continue
        if kex.dh_source == "rfc":
            args, path = ["--source", "rfc", "--bits", str(kex.dh_bits)], None
        else:
            path = generated_dh_file(kex.dh_bits)
            args = ["--in", str(path)]
        rec = next(
            r for r in engine.run(["dhparams", *args], timeout=60) if r["type"] == "dhparams"
        )
        if rec["prime_bits"] != kex.dh_bits:
            raise CheckError(f"{path}: a {rec['prime_bits']}-bit prime, not {kex.dh_bits}")
        out[(kex.dh_bits, kex.dh_source)] = {**rec, "path": path}
    return out


def _hosts(plan: Plan, pair):

    if pair is not None:
        config = plan.remote.config
        hosts = build_hosts(None, plan.shaper, None, pair, config)
        return hosts, hosts.link.choice
    hosts = build_hosts(plan.profile, plan.shaper)
    link = getattr(hosts.link, "choice", None) if plan.profile else "veth (no shaping)"
    return hosts, link or type(hosts.link).__name__


def measure(plan: Plan, store) -> None:
    for ddl in DDL:
        store.ensure_table(ddl)
    done = CELLS.done(store)
    todo = [(p, c) for p in plan.pairs for c in plan.cells() if plan.cell_id(c, p) not in done]
    if not todo:
        return
    chains = _chains(store, plan)
    quota_cm = contextlib.nullcontext(None)
    if plan.server_cpu is not None:
        quota_cm = CpuQuota(plan.server_cpu)
    with quota_cm as quota, CellProgress("tls12", len(todo)) as progress:
        dh = dh_params(plan)
        for pair in plan.pairs:
            cells = [c for p, c in todo if p is pair]
            if cells:
                _measure_pair(store, plan, pair, cells, (chains, dh), quota, progress)


def _measure_pair(store, plan: Plan, pair, cells, inputs, quota, progress) -> None:
    chains, dh = inputs
    profile_name = getattr(plan.profile, "name", None) or "none"
    label = pair.label if pair is not None else None
    if pair is not None:
        profile_name = f"network:{label}"
    hosts, link_desc = _hosts(plan, pair)
    with hosts:
        if pair is not None:
            hosts.record(store)
        for spec in cells:
            progress.start(f"TLS {spec.version} {spec.kex.label} {spec.cert}")
            cid = str(plan.cell_id(spec, pair))
            if spec.suite is None:
                with store.cell(NAME, cid, {"note": spec.note}):
                    row = _cell_row(spec, plan, 0, quota, None, profile_name, link_desc, None)
                    store.insert_rows("tls12_cells", [{**row, "cell_id": cid, "host_pair": label}])
                progress.advance()
                continue
            dh_rec = (
                dh.get((spec.kex.dh_bits, spec.kex.dh_source)) if spec.kex.family == "dhe" else None
            )
            rows, used_ms, level = _run_cell(hosts, spec, plan, (chains[spec.cert], dh_rec), quota)
            params = {"version": spec.version, "kex": spec.kex.label, "cert": spec.cert}
            if label is not None:
                params["host_pair"] = label
            with store.cell(NAME, cid, {**params, "n": plan.n}):
                store.insert_rows(
                    "tls12_handshakes", [{**r, "cell_id": cid, "host_pair": label} for r in rows]
                )
                row = _cell_row(
                    spec, plan, len(rows), quota, used_ms, profile_name, link_desc, level
                )
                if dh_rec is not None:
                    row |= {
                        "dh_params": spec.kex.dh_source,
                        "dh_private_bits": dh_rec["private_bits"],
                    }
                store.insert_rows("tls12_cells", [{**row, "cell_id": cid, "host_pair": label}])
                summary = stats.summarize([r["connect_to_handshake_ns"] for r in rows])
                store.add_warnings(
                    NAME,
                    cid,
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


def _run_cell(hosts, spec: CellSpec, plan: Plan, inputs, quota):
    chain, dh_rec = inputs  # the server chain; DHE: the parameters' record (dh_params)
    server_tls, client_tls, expected, dh_bits = tls_config(spec)
    total = plan.warmup + plan.n
    server_spec = runner.ServerSpec(
        tls=server_tls,
        chain=chain,
        listen=f"{hosts.server_ip}:0",
        max_connections=total,
        dh_bits=dh_bits,
        dh_params=(dh_rec or {}).get("path"),
    )
    preexec = quota.join if quota is not None else None
    limit = 600 + plan.n * 30
    with runner.start_server(
        server_spec, hosts, preexec_fn=preexec, lifetime=limit + 120
    ) as server:
        client_spec = runner.ClientSpec(
            tls=client_tls,
            connect=f"{hosts.server_ip}:{server.listening['port']}",
            ca=chain.root,
            servername="server.pqlab.test",
            n=plan.n,
            warmup=plan.warmup,
            time_limit=limit,
            expected=Expected(spec.version, group=expected.group),
        )
        records = runner.run_client(client_spec, hosts, timeout=limit)
        server_recs = [r for r in server.finish(60) if r["type"] != "listening"]
        # The server's own CPU time (user + system) for the whole cell, start-up included.
        cpu = server.cpu_seconds()  # a remote server's: `times`, in clock ticks (10 ms)
        used = cpu * 1000.0 if cpu is not None else None
    bad = [r for r in server_recs if r["type"] != "connection"]
    if bad:
        raise EngineError(f"{spec.cell_id}: server reported {bad[0].get('message', bad[0])}")
    if len(server_recs) != total:
        raise EngineError(
            f"{spec.cell_id}: server handled {len(server_recs)} of {total} connections"
        )
    server_by_idx = {r["index"]: r for r in server_recs}
    conns = [r for r in records if not r["warmup"]]
    if len(conns) != plan.n:
        raise EngineError(f"{spec.cell_id}: client reported {len(conns)} of {plan.n} handshakes")
    rows = []
    level = None
    for c in conns:
        what = f"{spec.cell_id} connection {c['index']}"
        srv = server_by_idx.get(c["index"] + plan.warmup, {})
        runner_check(c, srv, expected, what)
        _check_kex(spec, c, what)
        _check_server_exponent(spec, srv, dh_rec, what)
        level = c.get("security_level")
        neg = c["negotiated"]
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
                "server_dh_private_bits": srv.get("dh_private_bits"),
            }
        )
    return rows, used, level


def runner_check(client: dict, server: dict, expected: Expected, what: str) -> None:
    """Both ends negotiated the cell's version, suite and group (the one check)."""

    stack = stacks.get()
    negotiation.check(client, expected, stack, what=f"{what} (client)")
    if server:
        negotiation.check(server, expected, stack, what=f"{what} (server)")


def _check_kex(spec: CellSpec, c: dict, where: str) -> None:
    """The key exchange itself: no key share for RSA key exchange, the asked-for DH size."""
    tmp = (c["negotiated"].get("peer_tmp_key")) or {}
    if spec.kex.family == "rsa" and tmp:
        raise CheckError(f"{where}: RSA key exchange but the server sent a key share")
    if spec.kex.family == "dhe" and (
        tmp.get("pkey_id") != EVP_PKEY_DH or tmp.get("bits") != spec.kex.dh_bits
    ):
        raise CheckError(f"{where}: server DH key {tmp}, asked for {spec.kex.dh_bits}-bit DHE")


def _check_server_exponent(spec: CellSpec, srv: dict, dh_rec: dict | None, where: str) -> None:
    """DHE: the server reported the private exponent it drew, and it is no longer than the
    exponents the engine's `dhparams` drew with the same parameters (the largest of many)."""
    if spec.kex.family != "dhe" or dh_rec is None:
        return
    bits = srv.get("dh_private_bits")
    if bits is None:
        raise CheckError(f"{where}: the server reported no DH private exponent length")
    if not 0 < bits <= dh_rec["private_bits"]:
        raise CheckError(
            f"{where}: the server drew a {bits}-bit DH exponent; its parameters give at most "
            f"{dh_rec['private_bits']} bits"
        )


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
            "median(bytes_received) AS server_bytes, "
            "max(server_dh_private_bits) AS server_dh_bits "
            "FROM tls12_handshakes GROUP BY cell_id"
        )
    }
    bases = {}  # per host pair (None: this machine): the TLS 1.2 RSA / RSA-2048 cell
    for c in cells:
        if c["version"] == "1.2" and c["kex"] == "RSA" and c["cert"] == "RSA-2048" and c["n"]:
            bases[c.get("host_pair")] = stats.summarize([s["ns"] for s in samples[c["cell_id"]]])
    order = {("1.2", k.label): i for i, k in enumerate(KEX12)}
    order.update({("1.2", k.with_source("generated").label): i + 0.5 for i, k in enumerate(KEX12)})
    order.update({("1.3", k.label): 100 + i for i, k in enumerate(KEX13)})
    rows = []
    for c in sorted(
        cells,
        key=lambda c: (order.get((c["version"], c["kex"]), 999), list(CERTS).index(c["cert"])),
    ):
        row = {"version": c["version"], "kex": c["kex"], "cert": c["cert"], "n": c["n"]}
        row["host_pair"] = c.get("host_pair")
        row["dh_params"] = c.get("dh_params")
        # The longest exponent the server drew in the cell (older runs: what `dhparams`
        # drew with the same parameters).
        m = meta.get(c["cell_id"]) or {}
        row["dh_private_bits"] = m.get("server_dh_bits") or c.get("dh_private_bits")
        base_kex = c["kex"].removesuffix("-generated")
        row["document_ratio_vs_rsa"] = (
            DOCUMENT_RATIOS.get((base_kex, c["cert"])) if c["version"] == "1.2" else None
        )
        base = bases.get(c.get("host_pair"))
        s = samples.get(c["cell_id"])
        if s:
            row["_ms"] = [x["ns"] / 1e6 for x in s]
            summ = stats.summarize(row["_ms"])
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
    "document_ratio_vs_rsa",
    "dh_params",
    "dh_private_bits",
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
    csv_path = store.export_rows("tls12", rows, COLUMNS)
    cells = store.query(
        "SELECT DISTINCT server_cpu, cpu_mechanism, profile, link, "
        "client_security_level FROM tls12_cells WHERE n > 0"
    )
    section = Section(title="TLS 1.2 key exchange (and TLS 1.3 counterparts)")
    cpu = cells[0] if cells else {}
    limit = (
        f"limited to {cpu.get('server_cpu')} of one core by {cpu.get('cpu_mechanism')}"
        if cpu.get("server_cpu")
        else "not limited"
    )
    section.intro = template(
        "tls12_intro",
        server_cpu=html.escape(limit),
        link=html.escape(str(cpu.get("link", "?"))),
        profile=html.escape(str(cpu.get("profile", "none"))),
        level=html.escape(str(cpu.get("client_security_level"))),
    )
    section.table(csv_path, "Handshake time per key exchange and certificate (ms)")
    dhe = tls12_dhe.table(rows)
    if dhe:
        section.text(tls12_dhe.text(dhe))
        section.table(store.export_rows("tls12_dhe", dhe, tls12_dhe.COLUMNS), tls12_dhe.CAPTION)
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


# --- the experiment ---------------------------------------------------------------------------

OPTIONS = (
    Option(
        "n",
        "measured handshakes per (version, kex, cert) cell (1-100000)",
        default="200",
        short="-n",
        metavar="N",
    ),
    Option("warmup", "unrecorded handshakes before each cell", default="3", metavar="N"),
    Option("versions", "TLS versions: 1.2, 1.3 or 1.2,1.3", default="1.2,1.3", metavar="LIST"),
    Option(
        "kex",
        "key exchanges, comma separated (default: all): "
        + ", ".join(k.label for k in KEX12 + KEX13[:3]),
        metavar="LIST",
    ),
    Option(
        "dh-params",
        "TLS 1.2 DHE parameters: rfc (the RFC primes; OpenSSL draws short private exponents "
        "for the named 2048-4096-bit groups), generated (a safe prime the server makes, "
        "full-length exponents, as document 002's nginx had; made once per size and cached), "
        "or rfc,generated for both",
        default="rfc",
        metavar="LIST",
    ),
    Option(
        "certs",
        "server certificates: " + ", ".join(CERTS),
        default=",".join(CERTS),
        metavar="LIST",
    ),
    Option(
        "server-cpu",
        "limit the server to this fraction of one CPU core (cgroup CPU quota), e.g. 0.25, "
        "to see the ranking on weaker hardware",
        metavar="FRACTION",
    ),
    Option(
        "profile",
        "link profile (preset, key=value list or .toml file naming one profile, see "
        "'pqlab linktest'); default: an unshaped veth link",
        metavar="PROFILE",
    ),
    shaper_option(),
    *remote_hosts.OPTIONS,
)


def _dh_sources(text: str | None) -> list[str]:
    sources = units.parse_list(text or "rfc", "--dh-params", example="rfc,generated")
    if not sources or any(x not in DH_SOURCES for x in sources):
        raise UserError(f"--dh-params {text!r}: use rfc, generated or rfc,generated")
    return list(dict.fromkeys(sources))


def from_values(values) -> Plan:
    n = units.parse_positive_int(values.n, "-n")
    if n > 100_000:
        raise UserError(f"-n {values.n!r} is more than 100000 handshakes per cell")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if warmup > 10_000:
        raise UserError(f"--warmup {values.warmup!r}: at most 10000")
    versions = units.parse_list(values.versions, "--versions", example="1.2,1.3")
    if not versions or any(v not in ("1.2", "1.3") for v in versions):
        raise UserError(f"--versions {values.versions!r}: use 1.2, 1.3 or 1.2,1.3")
    kexes = parse_kexes(values.kex)
    certs = []
    for c in units.parse_list(values.certs, "--certs", example="RSA-2048"):
        match = [k for k in CERTS if k.lower() == c.lower()]
        if not match:
            raise UserError(f"unknown certificate {c!r} in --certs; use " + ", ".join(CERTS))
        certs.append(match[0])
    if not certs:
        raise UserError("--certs is empty; use RSA-2048, ECDSA-P-256 or both")
    server_cpu = None
    if values.server_cpu is not None:
        server_cpu = parse_fraction(values.server_cpu)

    check_shaper(values.shaper or "auto")
    profile = None
    if values.profile:
        loaded = profiles.load_profiles([values.profile])
        if len(loaded) != 1:
            raise UserError(
                f"--profile {values.profile!r} names {len(loaded)} profiles; give exactly one"
            )
        profile = loaded[0]
    plan = Plan(
        dh_sources=_dh_sources(values.dh_params),
        versions=list(dict.fromkeys(versions)),
        kexes=kexes,
        certs=list(dict.fromkeys(certs)),
        n=n,
        warmup=warmup,
        server_cpu=server_cpu,
        profile=profile,
        shaper=values.shaper or "auto",
    )
    if not plan.cells():
        raise UserError(
            "no cells: the chosen --kex do not exist in the chosen --versions "
            "(RSA and DHE are TLS 1.2 only, FFDHE TLS 1.3 only)"
        )
    remote_hosts.refuse_profile_values(values, "tls12")
    if plan.server_cpu is not None and (
        getattr(values, "server_host", None) or getattr(values, "inventory", None)
    ):
        raise UserError(
            "--server-cpu limits the server with a cgroup on this machine; it cannot limit a "
            "server on a remote host"
        )
    plan.remote = remote_hosts.plan(values, needs_capture=False, what="tls12")
    return plan


class Tls12(Experiment):
    name = NAME
    help = "TLS 1.2 key exchange study (and TLS 1.3 counterparts)"
    description = (
        "TLS 1.2 handshake time per key exchange (RSA, DHE, ECDHE) and server certificate "
        "(RSA-2048, ECDSA P-256), AES-128-GCM fixed, with the TLS 1.3 counterparts (FFDHE and "
        "the same ECDHE curves), between two network namespaces (document 002). Needs root "
        "(CAP_NET_ADMIN). Results: tables/tls12.csv, a figure, a report section."
    )
    needs_net = True
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    compare = (
        CompareSpec(
            "tls12",
            "tls12_handshakes",
            ("version", "kex", "cert"),
            "connect_to_handshake_ns / 1e6",
            "ms",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "server_cpu": plan.server_cpu,
            "profile": getattr(plan.profile, "spec", None) or None,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
            "dh_params": plan.dh_sources,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per defined cell a server and a client run of warm-up + -n handshakes, each priced
        from the measured table of this experiment's handshakes
        (`estimate.TLS12_HANDSHAKES`; over a link profile plus its round trips)."""
        cells = [c for c in plan.cells() if c.suite is not None]
        pairs = len(plan.pairs)
        work = estimate.Work("", cells=len(plan.cells()) * pairs)
        each = plan.n + plan.warmup
        work.add("tls12.cell", len(cells) * pairs)
        rtt = plan.profile.rtt_s if plan.profile is not None else 0.0
        for spec in cells:
            seconds = estimate.tls12_handshake_s(spec.version, spec.kex, spec.cert)
            if plan.server_cpu:
                seconds /= plan.server_cpu  # the server gets that share of a CPU
            work.add("handshake_seconds", seconds * each * pairs)
            # over a link profile: TCP's round trip, then TLS 1.2's two or TLS 1.3's one
            work.exact_s += (3 if spec.version == "1.2" else 2) * rtt * each * pairs
        work.size = f"{estimate.count(len(cells) * pairs, 'cell')} x {plan.n} handshakes (+{plan.warmup} warm-up)"
        if plan.remote is not None:
            work.notes.append("the network between the hosts is not in the estimate")
        return work

    def metadata(self, plan: Plan) -> dict:
        return {
            "tls12_plan": {
                "versions": plan.versions,
                "kex": plan.kexes,
                "certs": plan.certs,
                "n": plan.n,
                "warmup": plan.warmup,
                "server_cpu": plan.server_cpu,
                "profile": getattr(plan.profile, "spec", None) or None,
            },
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }


EXPERIMENT = Tls12()
