"""The two capture clocks of a handshake cell: offset estimate, correction, flags, tables.

Phases that start on one host and end on the other ("SYN sending": client sends SYN ->
server receives it) subtract timestamps of two captures. In the one-machine lab both
namespaces capture with the same kernel clock, so the difference is exact. Across hosts
each capture has its host's clock; per cell `correct` estimates the offset between them
from the captures themselves (`pqlab.net.clock`), moves the server capture's timestamps
onto the client's clock before the analysis (`phases.py` takes them as they are), and
`tag_phases` marks the phases that cross hosts and those shorter than the uncertainty.
Where the clock is shared the estimate is still made and recorded (it must come out ~0:
a check of the method), but nothing is moved and the phases carry no clock uncertainty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pqlab import metadata
from pqlab.net import clock
from pqlab.tls import phases as hp

CLOCK_DDL = """
CREATE TABLE IF NOT EXISTS handshake_clock (
    cell_id TEXT, host_pair TEXT, shared_clock BOOLEAN, applied BOOLEAN,
    samples INTEGER, kept INTEGER, offset_ns DOUBLE, drift_ppm DOUBLE, t_ref_ns BIGINT,
    uncertainty_ns DOUBLE, delay_min_ns BIGINT, residual_max_ns DOUBLE, span_s DOUBLE,
    phase_uncertainty_ns DOUBLE, method TEXT, chrony_bound_ns DOUBLE,
    clock_client JSON, clock_server JSON, test_injected_ns BIGINT)
"""
CROSS_HOST = {
    view: {name for name, a, b, _ in table if a.isdigit() != b.isdigit()}
    for view, table in hp.VIEWS.items()
}


def ensure(store) -> None:
    store.ensure_table(CLOCK_DDL)


@dataclass
class CellClock:
    estimate: clock.Estimate
    shared: bool
    server_pcap: Path  # the capture the analysis reads (corrected when applied)
    states: dict  # side -> clock source and synchronisation state
    injected_ns: int = 0

    @property
    def applied(self) -> bool:
        return not self.shared

    @property
    def phase_uncertainty_ns(self) -> float:
        """How far a cross-host phase may be off because of the clocks."""
        return 0.0 if self.shared else self.estimate.uncertainty_ns


@dataclass(frozen=True)
class HostClocks:
    """What the cells of a batch share about the two hosts' clocks: whether they are one
    clock, each host's clock source and synchronisation state (read once per batch: its
    cells ran interleaved, at the same time), and a test-only injected offset."""

    shared: bool
    states: dict
    injected_ns: int = 0


def host_clocks(hosts) -> HostClocks:
    shared = bool(getattr(hosts, "shared_clock", True))
    if hasattr(hosts, "clock_states"):
        states = hosts.clock_states()
    else:
        state = metadata.local_clock()
        states = {"client": state, "server": state}
    remote = getattr(hosts, "remote_side", lambda side: None)("server")
    injected = getattr(remote, "test_offset_ns", 0) if remote is not None else 0
    return HostClocks(shared, states, injected)


def correct(samples: list[clock.Sample], server_pcap: Path, hosts: HostClocks) -> CellClock:
    """Estimate the offset of the server's capture clock from the cell's `samples`
    (`pqlab.experiments.handshake.analyse.Captures.clock_samples`); on separate clocks
    write the server capture moved onto the client's clock next to it
    (`*.corrected.pcap`)."""
    est = clock.estimate(samples)
    target = server_pcap
    if not hosts.shared:
        target = server_pcap.with_name(server_pcap.name.replace(".pcap", ".corrected.pcap"))
        clock.correct_server_capture(server_pcap, target, est)
    return CellClock(est, hosts.shared, target, hosts.states, hosts.injected_ns)


def tag_phases(phases: dict[str, list], cc: CellClock, pair: str | None) -> dict[str, list]:
    """The phase rows (columns, `analyse.analyse_cell`) with each one's pair, whether it
    crosses hosts, the clock uncertainty it carries and whether it is shorter than that
    uncertainty."""
    u = cc.phase_uncertainty_ns
    cross = [p in CROSS_HOST[v] for v, p in zip(phases["view"], phases["phase"], strict=True)]
    phases["host_pair"] = [pair] * len(cross)
    phases["cross_host"] = cross
    phases["clock_uncertainty_ns"] = [u if c else 0.0 for c in cross]
    phases["below_clock_uncertainty"] = [
        bool(c and u > 0 and abs(ns) < u) for c, ns in zip(cross, phases["ns"], strict=True)
    ]
    return phases


def _chrony_bound_ns(states: dict) -> float | None:
    """chrony's error bounds of both clocks, added: what NTP alone would promise."""
    bounds = []
    for side in ("client", "server"):
        c = (states.get(side) or {}).get("chrony") or {}
        if c.get("max_error_s") is None:
            return None
        bounds.append(c["max_error_s"])
    return sum(bounds) * 1e9


def clock_row(cell_id: str, pair: str | None, cc: CellClock) -> dict:
    e = cc.estimate
    return {
        "cell_id": cell_id,
        "host_pair": pair,
        "shared_clock": cc.shared,
        "applied": cc.applied,
        "samples": e.samples,
        "kept": e.kept,
        "offset_ns": e.offset_ns,
        "drift_ppm": e.drift_ppm,
        "t_ref_ns": e.t_ref_ns,
        "uncertainty_ns": e.uncertainty_ns,
        "delay_min_ns": e.delay_min_ns,
        "residual_max_ns": e.residual_max_ns,
        "span_s": e.span_s,
        "phase_uncertainty_ns": cc.phase_uncertainty_ns,
        "method": e.method,
        "chrony_bound_ns": _chrony_bound_ns(cc.states),
        "clock_client": json.dumps(cc.states.get("client"), default=str),
        "clock_server": json.dumps(cc.states.get("server"), default=str),
        "test_injected_ns": cc.injected_ns or None,
    }


def record_metadata(store) -> None:
    """The run's clock offsets per pair, in the invocation's metadata (and metadata.json)."""
    if store.invocation_id is None or not store.has_table("handshake_clock"):
        return
    rows = store.query(
        "SELECT host_pair, bool_and(shared_clock) AS shared, count(*) AS cells, "
        "min(offset_ns) AS offset_min_ns, max(offset_ns) AS offset_max_ns, "
        "max(uncertainty_ns) AS uncertainty_max_ns, max(abs(drift_ppm)) AS drift_max_ppm, "
        "max(test_injected_ns) AS test_injected_ns FROM handshake_clock GROUP BY host_pair"
    )
    summary = {str(r.pop("host_pair") or "local"): r for r in rows}
    metadata.add_to_invocation(store, "clock_offsets", summary)


# --- export ------------------------------------------------------------------------------------


def extend_section(store, section) -> None:
    """Add the clock tables to the handshake section: per cell the offset and its
    uncertainty, and the cross-host phases with the uncertainty next to them."""
    if section is None or not store.has_table("handshake_clock"):
        return
    if not store.query("SELECT 1 FROM handshake_clock LIMIT 1"):
        return
    clocks = store.export_table(
        "handshake_clock",
        "SELECT cell_id, host_pair, shared_clock, applied, samples, kept, "
        "round(offset_ns / 1e6, 4) AS offset_ms, round(uncertainty_ns / 1e6, 4) AS "
        "uncertainty_ms, round(drift_ppm, 3) AS drift_ppm, round(delay_min_ns / 1e6, 4) "
        "AS min_round_trip_ms, round(chrony_bound_ns / 1e6, 4) AS chrony_bound_ms, "
        "test_injected_ns FROM handshake_clock ORDER BY host_pair, cell_id",
    )
    section.text(_clock_text(store))
    section.table(
        clocks,
        "Clock offset between the hosts' captures per cell (server minus client), estimated "
        "from the captured SYN/SYN-ACK and ClientHello/ServerHello exchanges, with its "
        "uncertainty; chrony's own bound where both hosts run chrony",
    )
    phases = store.export_table(
        "handshake_cross_host_phases",
        'SELECT "group", server_sig, ca_sig, host_pair, view, phase, count(*) AS n, '
        "round(avg(ns) / 1e6, 4) AS mean_ms, round(median(ns) / 1e6, 4) AS median_ms, "
        "round(max(clock_uncertainty_ns) / 1e6, 4) AS clock_uncertainty_ms, "
        "bool_or(below_clock_uncertainty) AS shorter_than_uncertainty "
        "FROM handshake_phase WHERE cross_host GROUP BY ALL "
        'ORDER BY host_pair, "group", server_sig, ca_sig, view, min(phase_order)',
    )
    section.table(
        phases,
        "Phases from one host to the other (they subtract two hosts' timestamps): mean and "
        "median with the clock uncertainty they carry (0 on one shared clock); "
        "shorter_than_uncertainty marks a phase some handshake measured shorter than that",
        max_rows=48,
    )
    pairs = store.query("SELECT DISTINCT host_pair FROM handshake_raw WHERE host_pair IS NOT NULL")
    if len(pairs) > 1:
        per_pair = store.export_table(
            "handshake_pairs",
            'SELECT host_pair, "group", server_sig, ca_sig, count(*) AS n, '
            "round(median(handshake_ns) / 1e6, 4) AS median_handshake_ms, "
            "round(avg(handshake_ns) / 1e6, 4) AS mean_handshake_ms, "
            "median(server_flight_segments) AS server_flight_segments "
            'FROM handshake_raw GROUP BY ALL ORDER BY host_pair, "group", server_sig, ca_sig',
        )
        section.table(
            per_pair,
            "Per host pair: the tables above pool every pair of the run; these are per pair",
        )


def _clock_text(store) -> str:
    import html

    rows = store.query(
        "SELECT host_pair, bool_and(shared_clock) AS shared, max(uncertainty_ns) AS u, "
        "min(offset_ns) AS lo, max(offset_ns) AS hi FROM handshake_clock GROUP BY host_pair"
    )
    parts = []
    for r in rows:
        pair = r["host_pair"] or "one machine"
        if r["shared"]:
            parts.append(
                f"{pair}: both captures use one kernel clock; the estimate "
                f"({r['lo'] / 1e3:+.1f} to {r['hi'] / 1e3:+.1f} us) is a check of the method "
                "and is not applied"
            )
        else:
            parts.append(
                f"{pair}: server capture corrected by {r['lo'] / 1e6:+.3f} to "
                f"{r['hi'] / 1e6:+.3f} ms; cross-host phases are uncertain by up to "
                f"+-{r['u'] / 1e6:.3f} ms"
            )
    return "<p><b>Clocks:</b> " + "<br>".join(html.escape(p) for p in parts) + "</p>"
