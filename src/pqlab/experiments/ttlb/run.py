"""Running the ttlb matrix: per link profile one topology, per (group, chain) one TLS server,
per response size one client run of warm-up + N fresh connections that each fetch n bytes;
each (profile, group, chain, size) cell committed on its own."""

from __future__ import annotations

import json

from pqlab.errors import EngineError
from pqlab.experiments.ttlb import analyse, schema
from pqlab.experiments.ttlb.plan import CELLS, Plan
from pqlab.net.shaping import build_hosts
from pqlab.progress import CellProgress
from pqlab.tls import predict, runner
from pqlab.tls.chains import Chain, make_chain
from pqlab.tls.negotiation import Expected

EXPERIMENT = "ttlb"
PORT = 44330


def _chains(plan: Plan, store, address: str | None = None) -> dict[tuple, Chain]:
    """One chain per algorithm and --chain-bytes size: root CA and server certificate both
    of the algorithm, both sent (the CA certificate stands in for the intermediate a public
    CA's chain carries), padded to the size when one is given. `address`: a remote server's,
    which its certificate must name."""
    out = {}
    for alg in plan.chains:
        for size in plan.chain_points():
            chain = make_chain(
                store.path / "certs",
                alg,
                alg,
                plan.stack.name,
                send_root=True,
                server_address=address,
                chain_bytes=size,
            )
            out[(alg.name, size)] = chain
            label = alg.name if size is None else f"{alg.name} {size} B"
            if store.query("SELECT 1 FROM ttlb_chains WHERE chain = ?", [label]):
                continue
            store.insert_rows(
                "ttlb_chains",
                [
                    {
                        "chain": label,
                        "key_spec": plan.stack.key_spec(alg),
                        "sigalg": plan.stack.sigalg_name(alg),
                        "chain_certs": chain.sent_certs,
                        "chain_der_bytes": chain.sent_der_bytes,
                        "record": json.dumps(chain.record),
                        "chain_bytes_requested": size,
                    }
                ],
            )
    return out


def _record_profile(store, profile, link, hosts) -> None:
    if store.query("SELECT 1 FROM ttlb_profiles WHERE profile = ?", [profile.name]):
        return
    store.insert_rows(
        "ttlb_profiles",
        [
            {
                "profile": profile.name,
                "shaper": link.kind,
                "choice": link.choice,
                # A real network has no link profile: no serialisation model is derived for
                # it (the pair and the hosts are in link_json and topology_json).
                "profile_json": json.dumps(
                    None if getattr(profile, "pair", None) else profile.describe()
                ),
                "link_json": json.dumps(link.describe(), default=str),
                "topology_json": json.dumps(hosts.describe(), default=str),
            }
        ],
    )


def gap_ms(profile) -> int:
    """The client's pause between two connections of a cell: a round trip of the profile's
    link and 10 ms. The client closes once it has read the server's close_notify; its FIN
    reaches the server half a round trip later, the server's FIN comes back a round trip
    after the close, and the client's ACK of it leaves then: 10 ms after that the next SYN
    leaves, behind every packet of the last connection (on a lossless link; a packet the
    link drops comes back after a retransmission timeout, longer than any pause here)."""
    return max(10, int(profile.rtt_s * 1e3 + 10))


def _mutual(store, plan: Plan, chain_alg, client):
    """A cell's mutual TLS: (what the server asks, what the client presents, the wire
    model's view of the client's certificate), or Nones without a client certificate."""
    if client is None:
        return None, None, None
    chain = make_chain(
        store.path / "certs", plan.client_ca or chain_alg, client, plan.stack.name, purpose="client"
    )
    auth, identity = runner.mutual(chain, client, plan.stack)
    model = predict.ClientAuth(client, tuple(chain.sent_der), chain.root_name_der_bytes)
    return auth, identity, model


def _run_sizes(store, plan: Plan, hosts, link, profile, cell, port: int, sizes, progress) -> None:
    """One server for (group, chain algorithm, chain size, client signer) and a client run
    per size."""
    group, chain_alg, chain_bytes, chain, client = cell
    # A client with a certificate offers its own scheme too (stacks sign only with theirs).
    offered = (chain_alg,) if client is None else (chain_alg, client)
    tls = runner.Tls(stack=plan.stack, groups=(group,), sigalgs=offered)
    client_auth, identity, model_auth = _mutual(store, plan, chain_alg, client)
    server_spec = runner.ServerSpec(
        tls=runner.Tls(stack=plan.stack, groups=(group,), sigalgs=(chain_alg,), events=False),
        chain=chain,
        listen=f"{hosts.server_ip}:{port}",
        client_auth=client_auth,
    )
    expected = Expected(group=group, sigalg=chain_alg, client_sigalg=client)
    gap = gap_ms(profile)
    stack = plan.stack
    # The wire model's view of the cell (no link model for a real network).
    hs, cliffs = None, []
    if getattr(profile, "pair", None) is None:
        hs = predict.of_chain(
            stack, group, chain_alg, chain, hosts.server_ip, client_auth=model_auth
        )
        cliffs = analyse.cliff_rows(hs, profile)
    with runner.start_server(server_spec, hosts) as server:
        seen = 0
        for size in sizes:
            what = f"{chain_alg.name}" + (f" {chain_bytes} B" if chain_bytes else "")
            progress.start(f"{profile.name} {group.name} {what} {size} B")
            client_spec = runner.ClientSpec(
                tls=tls,
                connect=f"{hosts.server_ip}:{port}",
                ca=chain.root,
                servername=hosts.server_ip,
                n=plan.n,
                warmup=plan.warmup,
                request_bytes=size,
                warmup_request_bytes=plan.warmup_bytes,
                gap_ms=gap,
                expected=expected,
                identity=identity,
            )
            clients = runner.run_client(client_spec, hosts, timeout=3600)
            total = plan.n + plan.warmup
            servers = server.wait_count(("connection", "connection_error"), seen + total, 30)
            servers, seen = servers[seen:], seen + total
            cols = analyse.rows(
                profile, link.kind, group.name, chain_alg.name, size, clients, servers,
                expected, stack,
            )  # fmt: skip
            if len(cols["idx"]) != plan.n:
                raise EngineError(f"expected {plan.n} connections, got {len(cols['idx'])}")
            cols["chain_bytes_requested"] = [chain_bytes] * len(cols["idx"])
            cols["client_sig"] = [client.name if client else "none"] * len(cols["idx"])
            model = (hs, cliffs)
            cell_key = (group, chain_alg, chain_bytes, size, client)
            _commit(store, plan, profile, cell_key, cols, model)
            progress.advance()


def _commit(store, plan: Plan, profile, cell: tuple, cols: dict, model: tuple) -> None:
    """One cell's rows, its prediction, its cliffs and its warnings, in one transaction.
    `model`: the wire model's handshake (None on a real network) and its cliffs."""
    group, chain_alg, chain_bytes, size, client = cell
    hs, cliffs = model
    cid = str(plan.cell_id(profile, group, chain_alg, size, chain_bytes, client))
    params = {
        "profile": profile.name,
        "group": group.name,
        "chain": chain_alg.name,
        "chain_bytes": chain_bytes,
        "data_bytes": size,
        "n": plan.n,
        "stack": plan.stack.name,
        "client_sig": client.name if client else "none",
    }
    pair = getattr(profile, "pair", None)
    if pair is not None:
        params["host_pair"] = pair.label
    prediction = analyse.prediction_rows(cid, hs, profile, size, cols) if hs is not None else []
    subject = f"ttlb {cid}"
    warnings = analyse.cell_warnings(profile, subject, cols, prediction)
    n_rows = len(cols["idx"])
    with store.cell(EXPERIMENT, cid, params):
        store.insert(
            "ttlb_raw",
            {
                **cols,
                "stack": [plan.stack.name] * n_rows,
                "host_pair": [pair.label if pair else None] * n_rows,
                "cell_id": [cid] * n_rows,
            },
        )
        store.insert_rows("ttlb_prediction", prediction)
        store.insert_rows("ttlb_cliffs", [{"cell_id": cid, **c} for c in cliffs])
        store.add_warnings(EXPERIMENT, cid, warnings)


def measure(plan: Plan, store) -> None:

    schema.ensure(store)
    done = CELLS.done(store)
    chains = _chains(plan, store)
    config = plan.remote.config if plan.remote is not None else ()
    with CellProgress("ttlb", plan.cells) as progress:
        for profile in plan.profiles:
            todo = [
                (g, c, b, cl, s)
                for g in plan.groups
                for c in plan.chains
                for b in plan.chain_points()
                for cl in plan.clients_of(c)
                for s in plan.sizes
                if plan.cell_id(profile, g, c, s, b, cl) not in done
            ]
            progress.advance(plan.cells // len(plan.profiles) - len(todo))
            if not todo:
                continue
            pair = getattr(profile, "pair", None)
            if pair is not None:  # a real host pair: the network is the link
                hosts = build_hosts(None, plan.shaper, None, pair, config)
            else:
                hosts = build_hosts(profile, plan.shaper)
            link = hosts.link
            progress.log(f"{profile.name} ({profile.summary()}): shaper {link.choice}")
            with hosts:
                if pair is not None:
                    chains = _chains(plan, store, hosts.server_ip)
                    hosts.record(store)
                _record_profile(store, profile, link, hosts)
                pairs = [
                    (g, c, b, cl)
                    for g in plan.groups
                    for c in plan.chains
                    for b in plan.chain_points()
                    for cl in plan.clients_of(c)
                ]
                for port_n, (g, c, b, cl) in enumerate(pairs):
                    sizes = [s for (*key, s) in todo if tuple(key) == (g, c, b, cl)]
                    if sizes:
                        cell = (g, c, b, chains[(c.name, b)], cl)
                        _run_sizes(
                            store, plan, hosts, link, profile, cell, PORT + port_n, sizes, progress
                        )
            _record_link_stats(store, profile, link)


def _record_link_stats(store, profile, link) -> None:
    """The emulator's own counters, known only after its topology is down."""
    if not hasattr(link, "direction_stats"):
        return
    stats = {
        k: {f: v for f, v in s.items() if f != "lateness_ns"}
        for k, s in link.direction_stats().items()
    }
    store.con.execute(
        "UPDATE ttlb_profiles SET link_json = ? WHERE profile = ?",
        [json.dumps({**link.describe(), "stats": stats}, default=str), profile.name],
    )
