"""One finished cell, from its files to its rows, in a worker process (`pqlab.workers`):
the engines' connection records read and paired, both captures read once, the clock
offset estimated (and the server's capture moved onto the client's clock across hosts),
each handshake's TLS records matched (the stack's callback events or the key log), every
handshake analysed. The lab commits the result (`run._commit`); everything a job needs is
in its `Job`, so cells of a batch are analysed side by side, after the batch's last round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pqlab.errors import EngineError
from pqlab.experiments.handshake import analyse, clocks, predicted
from pqlab.stages import StageClock
from pqlab.tls.negotiation import Expected


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
    model: predicted.CellModel | None = None


@dataclass
class Result:
    connections: int  # warm-ups included
    rows: list[dict]
    phase_rows: list[dict]
    clock_row: dict
    corrected_pcap: Path | None  # the server capture on the client's clock, when written
    seconds: dict = field(default_factory=dict)  # the job's time per stage


def read_records(path: Path) -> list[dict]:
    """An engine's connection records (`--connection-records`), in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def records_source(job: Job, server_pcap: Path):
    """Where the analysis takes each handshake's TLS records from (--messages)."""
    if job.messages == "keylog":
        return analyse.keylog_records(server_pcap, job.keylog, job.port)
    if job.messages == "both":
        return analyse.cross_checked_records(server_pcap, job.keylog, job.port)
    return analyse.callback_records


def run(job: Job) -> Result:
    """The cell's rows, phase rows and clock row (see the module docstring)."""
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
    return Result(
        connections=len(client_recs),
        rows=rows,
        phase_rows=phase_rows,
        clock_row=clocks.clock_row(job.cid, job.pair, cell_clock),
        corrected_pcap=cell_clock.server_pcap if cell_clock.applied else None,
        seconds=clock.summary()["seconds"],
    )
