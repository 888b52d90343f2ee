"""Computing `pqlab plan`: per configuration its certificates made once by the certificate
builder (exact DER sizes) and its stack's ClientHello, then per chain size and path the
wire model's prediction (`pqlab.tls.predict`), its cliffs, and the migration table; each
cell committed on its own, like a measurement."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pqlab.experiments.plan import calibrate, schema
from pqlab.experiments.plan.plan import CELLS, MIGRATION_RESPONSE, Config, Plan
from pqlab.progress import CellProgress
from pqlab.tls import predict, wire
from pqlab.tls.chains import Chain, make_chain

EXPERIMENT = "plan"
# The server address pqlab's clients connect to: an IP address, so no SNI is sent.
SERVER_NAME = "198.18.0.2"


@dataclass
class Built:
    """A configuration's sizes: the handshake with its own chain, and that chain."""

    handshake: predict.Handshake
    own_der: tuple[int, ...]
    chain: Chain


def build(plan: Plan, config: Config, store) -> Built:
    """The configuration's certificates (made by the one builder, reused in the run's
    certs/) and its ClientHello (the stack's own, `tls hello`)."""
    stack = plan.stack
    chain = make_chain(
        store.path / "certs",
        config.ca_sig,
        config.server_sig,
        plan.stack.name,
        send_root=plan.send_root,
        intermediates=config.intermediate_algs,
    )
    auth = None
    if config.client_sig is not None:
        client = make_chain(
            store.path / "certs",
            config.client_ca_sig,
            config.client_sig,
            plan.stack.name,
            purpose="client",
        )
        auth = predict.ClientAuth(
            config.client_sig, tuple(client.sent_der), client.root_name_der_bytes
        )
    hs = predict.of_chain(
        stack, config.group, config.server_sig, chain, SERVER_NAME, client_auth=auth
    )
    return Built(hs, tuple(chain.sent_der), chain)


def variants(hs: predict.Handshake) -> list[tuple[str, predict.Handshake]]:
    """The handshake once when its sizes are fixed, else its smallest and largest."""
    low, high = hs.extremes()
    if low == high:
        return [("exact", high)]
    return [("smallest", low), ("largest", high)]


def _path_row(path, mss: int) -> dict:
    return {
        "path": path.name,
        "rtt_ms": path.rtt_s * 1e3,
        "bandwidth_bps": path.s2c.rate_bps,
        "loss_pct": path.s2c.loss_pct,
        "initcwnd": path.initcwnd or wire.LINUX_INITCWND,
        "mss": mss,
    }


def _p_no_loss(out: predict.Outcome, loss_pct: float) -> float:
    """The chance that none of the handshake's packets is lost at `loss_pct` per packet:
    SYN, SYN-ACK, the ClientHello's, the server flight's and the client's second flight's
    segments (each direction loses independently, as netem does)."""
    w = out.wire
    packets = 2 + len(w.client_hello) + len(w.flight) + len(w.client_flight)
    return (1 - loss_pct / 100) ** packets


def cell_row(hs: predict.Handshake, out: predict.Outcome, cliff_list, chain_total: int) -> dict:
    """The sizes and predictions of one handshake (one variant of a cell)."""
    f, w = out.flight, out.wire
    next_cliff = next((b for _, b in cliff_list if b > chain_total), None)
    return {
        "signature_bytes": hs.signature,
        "client_hello_bytes": hs.client_hello,
        "client_hello_segments": len(w.client_hello),
        "server_hello_bytes": f.server_hello,
        "encrypted_extensions_bytes": f.encrypted_extensions,
        "certificate_request_bytes": f.certificate_request,
        "certificate_bytes": f.certificate,
        "certificate_verify_bytes": f.certificate_verify,
        "finished_bytes": f.finished,
        "bytes_through_certificate": f.flight().through_certificate,
        "server_flight_bytes": f.bytes,
        "server_flight_records": json.dumps(f.record_sizes()),
        "server_writes": json.dumps(out.writes),
        "server_flight_segments": len(w.flight),
        "flight_rounds": w.flight_rounds,
        "cwnd_stalls": w.stalls,
        "round_trips": w.round_trips,
        "ttfb_ms": w.ttfb_s * 1e3,
        "client_flight_bytes": w.client_flight[-1].end - w.client_flight[0].start,
        "handshake_bytes": hs.client_hello + f.bytes + sum(hs.client_writes(None)[-1:]),
        "next_cliff_chain_bytes": next_cliff,
        "headroom_bytes": next_cliff - chain_total if next_cliff is not None else None,
        "write_model": hs.write_model.describe(),
    }


class _Cliffs:
    """Cliffs per (sizes that matter, link), computed once: they do not depend on the
    path's delay or rate when no CPU time is modelled, only on the flight and the window."""

    def __init__(self):
        self.memo: dict = {}

    def get(self, hs: predict.Handshake, link: wire.Link) -> list[tuple[int, int]]:
        key = (
            hs.group.name,
            hs.signature,
            hs.certificate_request,
            len(hs.chain_der),
            hs.client_hello,
            hs.write_model,
            link.mss,
            link.initcwnd,
        )
        if key not in self.memo:
            self.memo[key] = predict.cliffs(
                hs, wire.Link.symmetric(0.1, None, link.mss, link.initcwnd)
            )
        return self.memo[key]


def _measure_cell(
    store, plan: Plan, config: Config, built: Built, point, path, cliffs, cal=None
) -> None:
    """One cell's rows, committed together; `cal`: the configuration's calibration
    (`--calibrate`), else the network alone."""
    count = len(built.own_der)
    own = sum(built.own_der)
    base = built.handshake
    if point is not None:
        base = base.with_chain(predict.chain_of(point, count))
    total = point if point is not None else own
    link = wire.Link.from_profile(path, plan.mss)
    timing = predict.NO_CPU
    if cal is not None:
        link, timing = cal.link(link), cal.timing()
    cid = str(plan.cell_id(config, point, path))
    labels = {
        "cell_id": cid,
        "stack": plan.stack.name,
        "group": config.group.name,
        "server_sig": config.server_sig.name,
        "ca_sig": config.ca_sig.name,
        "intermediates": config.intermediates,
        "send_root": plan.send_root,
        "client_sig": config.client_sig.name if config.client_sig else None,
    }
    rows, ttlb, cliff_rows = [], [], []
    for variant, hs in variants(base):
        out = predict.predict(hs, link, timing=timing)
        cliff_list = cliffs.get(hs, link)
        row = {
            **labels,
            "intermediate_sig": config.intermediate_algs[0].name if config.intermediates else None,
            "chain": plan.chain_label(config, point),
            "chain_bytes_requested": point,
            "chain_own_bytes": own,
            "chain_der_bytes": total,
            "chain_certs": count,
            "padding_bytes": total - own,
            **_path_row(path, plan.mss),
            "variant": variant,
            **cell_row(hs, out, cliff_list, total),
            "p_no_loss": _p_no_loss(out, path.s2c.loss_pct),
            "cpu_ms": cal.cpu_s * 1e3 if cal is not None else None,
            "per_packet_us": cal.per_packet_s * 1e6 if cal is not None else None,
        }
        rows.append(row)
        for size in plan.sizes:
            r = predict.predict(hs, link, response_bytes=size, timing=timing)
            resp = r.wire.response
            ttlb.append(
                {
                    "cell_id": cid,
                    "variant": variant,
                    "data_bytes": size,
                    "ttlb_ms": r.wire.ttlb_s * 1e3,
                    "response_segments": len(resp),
                    "response_rounds": resp[-1].round if resp else 0,
                    # the request and the response's rounds after the handshake's
                    "ttlb_round_trips": r.wire.round_trips + (resp[-1].round if resp else 0),
                }
            )
        for rt, chain_bytes in cliff_list:
            flight = hs.with_chain(predict.chain_of(chain_bytes, count)).server_flight()
            cliff_rows.append(
                {
                    **{k: labels[k] for k in ("cell_id", "stack", "group", "server_sig")},
                    **{k: labels[k] for k in ("ca_sig", "intermediates", "send_root")},
                    "client_sig": labels["client_sig"],
                    "chain_certs": count,
                    "path": path.name,
                    "initcwnd": link.initcwnd,
                    "mss": link.mss,
                    "variant": variant,
                    "round_trips": rt,
                    "chain_der_bytes": chain_bytes,
                    "server_flight_bytes": flight.bytes,
                }
            )
    params = {**labels, "chain": plan.chain_label(config, point), "path": path.name}
    with store.cell(EXPERIMENT, cid, params):
        store.insert_rows("plan_cells", rows)
        store.insert_rows("plan_ttlb", ttlb)
        store.insert_rows("plan_cliffs", cliff_rows)


def _largest(store, cid: str) -> tuple[dict, float] | None:
    """A cell's row with its largest signature (the conservative end of a range) and its
    TTLB at MIGRATION_RESPONSE."""
    rows = store.query(
        "SELECT c.*, t.ttlb_ms FROM plan_cells c JOIN plan_ttlb t ON t.cell_id = c.cell_id "
        "AND t.variant = c.variant AND t.data_bytes = ? WHERE c.cell_id = ? "
        "ORDER BY c.signature_bytes DESC LIMIT 1",
        [MIGRATION_RESPONSE, cid],
    )
    return (rows[0], rows[0]["ttlb_ms"]) if rows else None


def migration_row(plan: Plan, path, before: tuple[dict, float], after: tuple[dict, float]) -> dict:
    """One row of the migration table: the configuration today and the planned one on one
    path, each with its largest signatures."""
    (b, b_ttlb), (a, a_ttlb) = before, after
    today, planned = plan.migration

    def pct(new: float, old: float) -> float | None:
        return (new / old - 1) * 100 if old else None

    return {
        **_path_row(path, plan.mss),
        "stack": plan.stack.name,
        "from": today.label(),
        "to": planned.label(),
        "response_bytes": MIGRATION_RESPONSE,
        "from_handshake_bytes": b["handshake_bytes"],
        "to_handshake_bytes": a["handshake_bytes"],
        "extra_bytes": a["handshake_bytes"] - b["handshake_bytes"],
        "from_round_trips": b["round_trips"],
        "to_round_trips": a["round_trips"],
        "extra_round_trips": a["round_trips"] - b["round_trips"],
        "from_ttfb_ms": b["ttfb_ms"],
        "to_ttfb_ms": a["ttfb_ms"],
        "extra_ttfb_ms": a["ttfb_ms"] - b["ttfb_ms"],
        "extra_ttfb_pct": pct(a["ttfb_ms"], b["ttfb_ms"]),
        "from_ttlb_ms": b_ttlb,
        "to_ttlb_ms": a_ttlb,
        "extra_ttlb_ms": a_ttlb - b_ttlb,
        "extra_ttlb_pct": pct(a_ttlb, b_ttlb),
        "to_headroom_bytes": a["headroom_bytes"],
    }


def _calibrations(plan: Plan, store) -> dict[str, calibrate.Calibration]:
    """Each configuration's calibration (`--calibrate`): the one stored in the run (a
    resumed run keeps the calibration its first cells were predicted with), else measured
    now, all through one topology, and stored."""
    stored = {
        r["configuration"]: calibrate.Calibration(
            r["shaper"], r["per_packet_us"] / 1e6, r["cpu_ms"] / 1e3, r["connections"]
        )
        for r in store.query("SELECT * FROM plan_calibration WHERE stack = ?", [plan.stack.name])
    }
    todo = [c for c in plan.configs if c.label() not in stored]
    if todo:
        built = [build(plan, c, store) for c in todo]
        cals = calibrate.measure(plan.stack, plan.shaper, [(b.handshake, b.chain) for b in built])
        rows = []
        for config, cal in zip(todo, cals, strict=True):
            stored[config.label()] = cal
            rows.append(
                {
                    "configuration": config.label(),
                    "stack": plan.stack.name,
                    "shaper": cal.shaper,
                    "per_packet_us": cal.per_packet_s * 1e6,
                    "cpu_ms": cal.cpu_s * 1e3,
                    "connections": cal.connections,
                    "profile": calibrate.PROFILE,
                }
            )
        store.insert_rows("plan_calibration", rows)
    return stored


def measure(plan: Plan, store) -> None:
    schema.ensure(store)
    done = CELLS.done(store)
    cliffs = _Cliffs()
    cals = _calibrations(plan, store) if plan.calibrate else {}
    with CellProgress("plan", plan.cells) as progress:
        for config in plan.configs:
            built = None
            cal = cals.get(config.label())
            for point in plan.chain_points():
                for path in plan.paths:
                    if plan.cell_id(config, point, path) not in done:
                        label = f"{config.label()} {plan.chain_label(config, point)} {path.name}"
                        progress.start(label)
                        built = built or build(plan, config, store)
                        _measure_cell(store, plan, config, built, point, path, cliffs, cal)
                    progress.advance()
    if plan.migration is not None:
        _migration(plan, store)


def _migration(plan: Plan, store) -> None:
    """The migration table from the two configurations' stored cells, one row per path
    (rows of an earlier --from/--to in the run are kept)."""
    today, planned = plan.migration
    rows = []
    for path in plan.paths:
        before = _largest(store, str(plan.cell_id(today, None, path)))
        after = _largest(store, str(plan.cell_id(planned, None, path)))
        if before and after:
            rows.append(migration_row(plan, path, before, after))
    store.con.execute(
        'DELETE FROM plan_migration WHERE "from" = ? AND "to" = ? AND stack = ?',
        [today.label(), planned.label(), plan.stack.name],
    )
    store.insert_rows("plan_migration", rows)
