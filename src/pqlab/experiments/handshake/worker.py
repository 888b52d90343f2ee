"""One finished cell, from its files to its rows, in a worker process (`pqlab.workers`):
the engines' connection records read and paired, both captures read once, the clock
offset estimated (and the server's capture moved onto the client's clock across hosts),
each handshake's TLS records matched (the stack's callback events or the key log), every
handshake analysed, the wire model's cliffs found, and the rows made into Arrow tables
with the cell's labels, and the warnings its rows call for. The lab commits the result
(`run._commit`); everything a job needs is in its `Job`, so cells of a batch are analysed
side by side, after the batch's last round.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow as pa

from pqlab import files, stats
from pqlab.errors import EngineError
from pqlab.experiments.handshake import analyse, clocks, predicted
from pqlab.stages import StageClock
from pqlab.tls.negotiation import Expected

# A cell whose median moved this much (relative) between its earlier and later rounds is
# named in the warnings; comparisons use the drift whatever its size.
DRIFT_WARNING = 0.05


@dataclass(frozen=True)
class Job:
    cid: str
    pair: str | None  # the host pair's label across hosts
    port: int
    client_pcap: Path
    server_pcap: Path
    keylog: Path | None
    client_records: Path  # JSON lines, the engines' `connection` records
    server_records: Path
    expected: Expected
    stack: object  # pqlab.tls.stacks.Stack
    congestion_control: str | None
    initcwnd: int
    messages: str  # callback | keylog | both
    clocks: clocks.HostClocks
    labels: dict  # the cell's columns in every table (cell_id, group, ... stack)
    raw_columns: dict  # and in handshake_raw (chain_sent, message_source, ...)
    shaped: bool = False
    model: predicted.CellModel | None = None


@dataclass
class Result:
    connections: int  # warm-ups included
    raw: pa.Table | None  # handshake_raw rows, labels included
    phases: pa.Table | None  # handshake_phase rows
    cliffs: list[dict]  # handshake_cliffs rows
    clock_row: dict
    warnings: list  # stats.Warning_ of the cell's rows
    corrected_pcap: Path | None  # the server capture on the client's clock, when written
    seconds: dict = field(default_factory=dict)  # the job's time per stage


def table(rows: list[dict] | dict[str, list], labels: dict) -> pa.Table | None:
    """Rows (dicts, or columns: name -> values) as an Arrow table, the cell's labels first
    as constant columns."""
    columns = rows if isinstance(rows, dict) else None
    n = len(next(iter(columns.values()), [])) if columns is not None else len(rows)
    if not n:
        return None
    out = {k: pa.repeat(v, n) for k, v in labels.items()}
    for k in columns if columns is not None else rows[0]:
        if k not in labels:
            out[k] = pa.array(columns[k] if columns is not None else [r[k] for r in rows])
    return pa.table(out)


# The cliffs found so far by this worker, by the model they depend on (pickled: its
# algorithms hold dicts, so the model does not hash).
_CLIFFS: dict[bytes, list[dict]] = {}


def cliff_rows(cid: str, model: predicted.CellModel | None) -> list[dict]:
    """The cell's cliffs. Cells that differ only in their CA share them (a chain of as many
    certificates, whatever its bytes): found once per worker."""
    if model is None:
        return []
    key = pickle.dumps(model.for_cliffs())
    if key not in _CLIFFS:
        _CLIFFS[key] = predicted.cliff_rows("", model)
    return [{**r, "cell_id": cid} for r in _CLIFFS[key]]


def warnings(job: Job, rows: list[dict], clock_row: dict) -> list:
    """What the cell's rows warn about: noise, the prediction, drift, clock order."""
    cid = job.cid
    out = list(
        stats.noise_warnings(f"handshake {cid}", stats.summarize([r["handshake_ns"] for r in rows]))
    )
    if rows and job.model is not None:
        out += predicted.warnings(cid, rows, job.shaped, job.model.initcwnd)
    moved = stats.drift([r["handshake_ns"] for r in rows], [r["round"] for r in rows])
    if moved is not None and abs(moved) >= DRIFT_WARNING:
        out.append(
            stats.Warning_(
                stats.Cause.DRIFT,
                cid,
                f"the median handshake moved {moved * 100:+.1f} % from the cell's earlier "
                "rounds to its later ones",
            )
        )
    disagreed = sum(1 for r in rows if r.get("order_disagreements"))
    if disagreed:
        out.append(
            stats.Warning_(
                stats.Cause.CLOCK_ORDER,
                cid,
                f"{disagreed} of {len(rows)} handshakes had events on the two hosts in an "
                "order the two capture clocks cannot resolve (within "
                f"{clock_row['uncertainty_ns'] / 1e3:.1f} us)",
            )
        )
    return out


def read_records(path: Path) -> list[dict]:
    """An engine's connection records (`--connection-records`), in order. (orjson: a
    cell's records are some 15 MB of JSON, most of it their message events.)"""
    data = files.read_input(
        path, f"the connection records {path}", "connection records", follow=False
    )
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def records_source(job: Job, server_pcap: Path):
    """Where the analysis takes each handshake's TLS records from (--messages)."""
    if job.messages == "keylog":
        return analyse.keylog_records(server_pcap, job.keylog, job.port)
    if job.messages == "both":
        return analyse.cross_checked_records(server_pcap, job.keylog, job.port)
    return analyse.callback_records


@contextlib.contextmanager
def _no_cycle_collection():
    """The cyclic garbage collector paused. A cell's records and captures are some 200,000
    containers, none in a reference cycle (reference counting frees them all), and the
    collector's passes over them cost some 30 % of the cell's analysis."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run(job: Job) -> Result:
    """The cell's rows, phase rows and clock row (see the module docstring)."""
    with _no_cycle_collection():
        return _run(job)


def _run(job: Job) -> Result:
    clock = StageClock()
    with clock.stage("record_matching"):
        client_recs = read_records(job.client_records)
        server_recs = read_records(job.server_records)
        if len(server_recs) != len(client_recs):
            raise EngineError(
                f"the client reported {len(client_recs)} connections and the server "
                f"{len(server_recs)}"
            )
        pairs = analyse.pair_records(client_recs, server_recs)
    with clock.stage("reading_captures"):
        captures = analyse.read_captures(job.client_pcap, job.server_pcap, job.port)
    # Across hosts the server's capture is moved onto the client's clock first.
    with clock.stage("analysis"):
        cell_clock = clocks.correct(captures.clock_samples(), job.server_pcap, job.clocks)
    if cell_clock.applied:
        with clock.stage("reading_captures"):
            captures = analyse.read_captures(job.client_pcap, cell_clock.server_pcap, job.port)
    with clock.stage("record_matching"):
        records = analyse.match_records(pairs, records_source(job, cell_clock.server_pcap))
    # The server's io events are on its own clock: moved as its capture was.
    shift = cell_clock.estimate.offset_ns if cell_clock.applied else 0.0
    with clock.stage("analysis"):
        rows, phase_rows = analyse.analyse_cell(
            captures,
            pairs,
            job.initcwnd,
            job.expected,
            job.stack,
            job.congestion_control,
            records=records,
            clock_tolerance_ns=cell_clock.phase_uncertainty_ns,
            writes_of=lambda srec: predicted.io_writes(srec, shift),
            model=job.model,
        )
        for row, (crec, _) in zip(rows, analyse.measured(pairs), strict=True):
            row["round"] = crec["round"]
        phase_rows = clocks.tag_phases(phase_rows, cell_clock, job.pair)
        clock_row = clocks.clock_row(job.cid, job.pair, cell_clock)
        cliffs = cliff_rows(job.cid, job.model)
        found = warnings(job, rows, clock_row)
    with clock.stage("database_writes"):
        raw = table(rows, {**job.labels, **job.raw_columns})
        phases = table(phase_rows, job.labels)
    return Result(
        connections=len(client_recs),
        raw=raw,
        phases=phases,
        cliffs=cliffs,
        clock_row=clock_row,
        warnings=found,
        corrected_pcap=cell_clock.server_pcap if cell_clock.applied else None,
        seconds=clock.summary()["seconds"],
    )
