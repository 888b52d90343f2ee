"""Measuring the tls12 experiment: per cell an engine server and client, each handshake
checked by the client and again here (suite, group, DH size).
"""

from __future__ import annotations

import contextlib
from importlib import resources
from pathlib import Path

from pqlab import catalog, engine, stats
from pqlab.cpuquota import CpuQuota
from pqlab.errors import CheckError, EngineError
from pqlab.experiments.tls12.plan import CELLS, CERTS, NAME, SUITE13, CellSpec, Plan
from pqlab.experiments.tls12.schema import DDL
from pqlab.net.shaping import build_hosts
from pqlab.progress import CellProgress
from pqlab.tls import negotiation, runner, stacks
from pqlab.tls.chains import Chain, make_chain
from pqlab.tls.negotiation import Expected

EVP_PKEY_DH = 28


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
