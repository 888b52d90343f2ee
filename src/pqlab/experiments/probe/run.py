"""The probe's measuring loop: per configuration, a capture on the client's interface, the
engine's TLS client for -n connections (the client's key log beside the capture), the
connections taken apart, rows committed with the cell, and the verdict line printed."""

from __future__ import annotations

import sys
from pathlib import Path

from pqlab import files
from pqlab.errors import EngineError
from pqlab.experiments.probe import analyse, schema, verdict
from pqlab.experiments.probe.plan import AWAIT_CLOSE_MS, CELLS, NAME, Cell, Plan
from pqlab.progress import CellProgress
from pqlab.stats import Cause, Warning_
from pqlab.tls import runner
from pqlab.tls.negotiation import Expected

SNAPLEN = 262144  # whole packets: the key log decrypts their payloads


def client_spec(plan: Plan, cell: Cell, keylog: Path | None) -> runner.ClientSpec:
    """The engine client of one configuration: its groups and key shares, its signature
    scheme, every chain reported (never required), the server's certificates recorded."""
    tls = runner.Tls(
        stack=cell.stack,
        groups=cell.config.groups,
        key_shares=cell.config.shares,
        sigalgs=(cell.sig,) if cell.sig is not None else (),
        version="1.3",
        events=True,
        keylog=keylog,
        io_timeout=plan.timeout,
        verify="report",
    )
    # Each connection lives at most --timeout, from its TCP connect to its close, however the
    # server paces its bytes (the engine cuts it off and names the phase it was in); with
    # AWAIT_CLOSE_MS for the close and a margin per connection, a bound on the whole cell.
    per_connection = plan.timeout + AWAIT_CLOSE_MS / 1000 + 1
    return runner.ClientSpec(
        tls=tls,
        connect=plan.target.connect,
        ca=plan.ca,
        servername=plan.servername,
        n=plan.n,
        connection_timeout=plan.timeout,
        time_limit=int(plan.n * per_connection) + 30,
        expected=Expected("1.3", sigalg=cell.sig, verified=False),
        request_path=plan.path,
        await_close_ms=AWAIT_CLOSE_MS,
        peer_chain=True,
    )


def run_client(spec: runner.ClientSpec) -> tuple[list[dict], EngineError | None]:
    """The client's connection records (a failed one included), and the error that ended
    it. An error before any connection was tried (a refused option) is raised."""
    proc = runner.start_client(spec)
    error = None
    try:
        proc.finish(spec.time_limit + 60)
    except EngineError as e:
        error = e
    finally:
        proc.stop()
    records = [r for r in proc.records if r.get("type") in ("connection", "connection_error")]
    if error is not None and not records:
        raise error
    return records, error


def capture_stem(stack: str, config: str, sig: str) -> str:
    """The file name (without suffix) of a configuration's pcap and key log: its stack,
    configuration and signature choice, with '/' spelled out so that no two configurations
    share one."""
    text = f"{stack}_{config}_{sig}".replace("/", "_no-share_")
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in text)


def measure_cell(plan: Plan, cell: Cell, directory: files.Dir) -> dict:
    """One configuration: its rows and its verdict (not yet stored)."""
    slug = capture_stem(cell.stack.name, cell.config.name, cell.sig_name)
    for stale in (f"{slug}.pcap", f"{slug}.keys.log"):  # a cell measured again starts afresh
        directory.remove(stale)
    pcap_path = directory.path_of(f"{slug}.pcap")
    # The key log (made 0600 by the engine at the first secret) only serves to read the
    # capture: no capture, no secrets written.
    keylog_path = directory.path_of(f"{slug}.keys.log")
    spec = client_spec(plan, cell, keylog_path if plan.capture is not None else None)
    capture = None
    if plan.capture is not None:
        capture = runner.start_capture(
            None,
            "client",
            plan.target.port,
            pcap_path,
            SNAPLEN,
            spec.time_limit + 60,
            interface=plan.capture,
        )
    try:
        records, _ = run_client(spec)
    finally:
        summary = runner.stop_capture(capture) if capture is not None else None
    return rows_of(plan, cell, records, pcap_path if capture else None, keylog_path, summary)


def rows_of(plan, cell, records, pcap_path, keylog_path, capture_summary) -> dict:
    raw, messages, chain, warnings = [], [], [], []
    for idx, (rec, captured, events) in enumerate(
        analyse.wires_of(records, pcap_path, keylog_path, plan.target.port)
    ):
        w, agree = analyse.pick(captured, events)
        server_chain = analyse.server_chain(rec, captured)
        raw.append(analyse.raw_row(plan, cell, idx, rec, w, agree, server_chain))
        messages += analyse.message_rows(plan, cell, idx, rec, w)
        if not chain and server_chain[0]:
            chain = analyse.chain_rows(plan, cell, idx, server_chain)
        kept = analyse.chain_kept_note(rec, captured, cell.stack.name)
        if kept is not None:
            warnings.append(
                Warning_(
                    Cause.PROBE_CHAIN_KEPT,
                    f"{plan.name} {cell.config.name} ({cell.stack.name}), connection {idx}",
                    kept,
                )
            )
        if agree is False:
            warnings.append(
                Warning_(
                    Cause.PROBE_SOURCES_DISAGREE,
                    f"{plan.name} {cell.config.name} ({cell.stack.name}), connection {idx}",
                    "the records the client's stack reported differ from the capture's",
                )
            )
    if pcap_path is None:
        warnings.append(
            Warning_(
                Cause.PROBE_UNSEEN,
                f"{plan.name} {cell.config.name} ({cell.stack.name})",
                f"not captured ({plan.no_capture_reason})",
            )
        )
    if capture_summary and capture_summary.get("kernel_drops"):
        warnings.append(
            Warning_(
                Cause.CAPTURE_DROPS,
                f"{plan.name} {cell.config.name} ({cell.stack.name})",
                f"the kernel dropped {capture_summary['kernel_drops']} packets of the capture",
            )
        )
    outcome, line = verdict.config_verdict(cell, raw, chain, plan.timeout)
    return {
        "raw": raw,
        "messages": messages,
        "chain": chain,
        "warnings": warnings,
        "outcome": outcome,
        "verdict": line,
    }


def _store(store, plan: Plan, cell: Cell, result: dict) -> None:
    cid = plan.cell_id(cell)
    label = {"cell_id": str(cid)}
    with store.cell(NAME, cid, {"config": cell.config.name, "sig": cell.sig_name}):
        store.insert_rows("probe_raw", [{**label, **r} for r in result["raw"]])
        store.insert_rows("probe_messages", [{**label, **r} for r in result["messages"]])
        store.insert_rows("probe_chain", [{**label, **r} for r in result["chain"]])
        store.insert_rows(
            "probe_configs",
            [
                {
                    **label,
                    "probe": plan.name,
                    "target": plan.target.text,
                    "stack": cell.stack.name,
                    "config": cell.config.name,
                    "sig": cell.sig_name,
                    "connections": len(result["raw"]),
                    "outcome": result["outcome"],
                    "verdict": result["verdict"],
                }
            ],
        )
        store.add_warnings(NAME, cid, result["warnings"])


def _say(text: str) -> None:
    print(text, flush=True)


def _announce(plan: Plan, store) -> None:
    where = f"{plan.target.text} ({plan.target.connect}, name {plan.servername})"
    _say(f"probing {where} with {len(plan.cells)} configuration(s), {plan.n} connection(s) each")
    if plan.capture is not None:
        _say(f"capturing on {plan.capture}; pcap and key log in {store.path / 'captures'}")
    else:
        _say(
            f"not capturing ({plan.no_capture_reason}): no segments, round trips or "
            "waits for an ACK; message sizes come from the client's own events "
            "where its stack reports them"
        )
    for note in plan.skipped:
        _say(f"skipped {note}")


def measure(plan: Plan, store) -> None:
    schema.ensure(store)
    done = CELLS.done(store)
    directory = store.dir.sub("captures", private=True)
    _announce(plan, store)
    width = max(len(c.config.name) for c in plan.cells)
    with CellProgress(NAME, len(plan.cells)) as progress:
        for cell in plan.cells:
            label = cell.config.name + (f" {cell.sig_name}" if cell.sig is not None else "")
            progress.start(f"{label} ({cell.stack.name})")
            cid = plan.cell_id(cell)
            if cid in done:
                stored = store.query(
                    "SELECT verdict FROM probe_configs WHERE cell_id = ?", [str(cid)]
                )
                line = stored[0]["verdict"] if stored else "(measured before)"
            else:
                result = measure_cell(plan, cell, directory)
                _store(store, plan, cell, result)
                line = result["verdict"]
            stack = f" [{cell.stack.name}]" if len({c.stack.name for c in plan.cells}) > 1 else ""
            _say(f"{label:<{width}}{stack}  {line}")
            progress.advance()
    rows = store.query("SELECT * FROM probe_raw WHERE probe = ?", [plan.name])
    _say(verdict.server_verdict(plan.name, rows))
    sys.stdout.flush()
