"""The offset between two hosts' capture clocks, estimated from the captured exchanges.

Each TCP connection captured on both hosts gives two NTP-style four-timestamp samples:

    T1 client sends SYN (client clock)         T2 server receives it (server clock)
    T3 server sends SYN/ACK (server clock)     T4 client receives it (client clock)

and the same for the first ClientHello segment (T1, T2) and the first ServerHello segment
(T3, T4). With theta = server clock - client clock:

    offset = ((T2 - T1) + (T3 - T4)) / 2 = theta + (d_out - d_back) / 2
    delay  = (T4 - T1) - (T3 - T2)       = d_out + d_back

Neither one-way delay can be negative, so theta lies within offset +- delay / 2 for every
sample whatever the path's asymmetry (RFC 5905's bound). Queueing only adds delay, so the
samples with the smallest delay bound theta tightest.

`estimate` keeps, in each of `BINS` equal stretches of time, the samples whose delay is in
that stretch's lowest `KEEP_QUANTILE`, fits offset(t) = a + b t through them by Theil-Sen
(the median of pairwise slopes: robust to the odd sample a late timestamp spoiled), and
states as the uncertainty the largest |residual| + delay / 2 over the kept samples: at each
kept sample the true offset is within delay / 2 of the sample and the fit within |residual|
of it, so the fitted line is within that bound of the true offset at every kept sample and,
for a constant drift, everywhere between them. That is at least half the minimum round trip.
A constant offset (b = 0, a = the median) gets the same bound; where it is tighter (a cell
too short for its drift to stand out of the timestamps' noise) it is the estimate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pqlab import pcap
from pqlab.errors import UserError

KEEP_QUANTILE = 0.2  # in each time bin, the samples with the lowest fifth of the delays
BINS = 10
MIN_KEPT = 8  # below this many kept samples, keep the lowest-delay samples overall
MAX_KEPT = 4000  # Theil-Sen is quadratic in the kept samples


@dataclass(frozen=True)
class Sample:
    """One four-timestamp exchange: t_ns its midpoint on the client's clock."""

    t_ns: int
    offset_ns: float
    delay_ns: int
    kind: str  # "syn" (SYN -> SYN/ACK) or "hello" (ClientHello -> ServerHello)
    client_port: int = 0


def sample(t1: int, t2: int, t3: int, t4: int, kind: str, client_port: int = 0) -> Sample:
    return Sample(
        t_ns=(t1 + t4) // 2,
        offset_ns=((t2 - t1) + (t3 - t4)) / 2,
        delay_ns=(t4 - t1) - (t3 - t2),
        kind=kind,
        client_port=client_port,
    )


@dataclass(frozen=True)
class Estimate:
    """offset(t) = offset_ns + drift_ppm * 1e-6 * (t - t_ref_ns): server clock minus client
    clock, in ns, as a function of the client clock's time."""

    offset_ns: float
    drift_ppm: float
    t_ref_ns: int
    uncertainty_ns: float
    delay_min_ns: int
    samples: int
    kept: int
    residual_max_ns: float
    span_s: float
    method: str = (
        f"four-timestamp samples (SYN/SYN-ACK, ClientHello/ServerHello); per {BINS} time bins "
        f"the lowest {KEEP_QUANTILE:.0%} delays; Theil-Sen fit; uncertainty = max over kept "
        "samples of |residual| + delay/2"
    )

    def at(self, t_ns: int | float) -> float:
        return self.offset_ns + self.drift_ppm * 1e-6 * (t_ns - self.t_ref_ns)

    def as_dict(self) -> dict:
        return asdict(self)


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line: median pairwise slope, median intercept."""
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return 0.0, float(np.median(y))
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    ok = dx != 0
    slope = float(np.median((y[j] - y[i])[ok] / dx[ok]))
    return slope, float(np.median(y - slope * x))


def keep_min_delay(samples: list[Sample], bins: int = BINS, q: float = KEEP_QUANTILE):
    """The samples kept for the fit (see the module docstring)."""
    if len(samples) <= MIN_KEPT:
        return list(samples)
    ordered = sorted(samples, key=lambda s: s.t_ns)
    t0, t1 = ordered[0].t_ns, ordered[-1].t_ns
    width = (t1 - t0) / bins if t1 > t0 else 1
    groups: dict[int, list[Sample]] = {}
    for s in ordered:
        groups.setdefault(min(bins - 1, int((s.t_ns - t0) / width)), []).append(s)
    kept = []
    for group in groups.values():
        limit = float(np.quantile([s.delay_ns for s in group], q))
        kept += [s for s in group if s.delay_ns <= limit]
    if len(kept) < MIN_KEPT:
        kept = sorted(samples, key=lambda s: s.delay_ns)[:MIN_KEPT]
    if len(kept) > MAX_KEPT:
        kept = sorted(kept, key=lambda s: s.delay_ns)[:MAX_KEPT]
    return sorted(kept, key=lambda s: s.t_ns)


def estimate(samples: list[Sample]) -> Estimate:
    """The offset line and its uncertainty; UserError without any sample."""
    if not samples:
        raise UserError(
            "no four-timestamp sample: the two captures share no complete TCP or TLS "
            "exchange, so the clock offset between the hosts cannot be estimated"
        )
    kept = keep_min_delay(samples)
    t_ref = int(np.median([s.t_ns for s in kept]))
    x = np.array([(s.t_ns - t_ref) / 1e9 for s in kept], dtype=float)  # seconds
    y = np.array([s.offset_ns for s in kept], dtype=float)
    delays = np.array([s.delay_ns for s in kept], dtype=float)
    # Two models, each with a bound that holds at every kept sample: a constant offset
    # (the median) and a drifting one (Theil-Sen). Over a short cell the drift is lost in
    # the timestamps' noise and the constant bounds tighter; the tighter one is used.
    fits = []
    for slope, intercept in ((0.0, float(np.median(y))), theil_sen(x, y)):
        residual = y - (intercept + slope * x)
        fits.append((float(np.max(np.abs(residual) + delays / 2)), slope, intercept, residual))
    bound, slope, intercept, residual = min(fits, key=lambda f: f[0])  # slope: ns/s == ppm*1e3
    span = (max(s.t_ns for s in samples) - min(s.t_ns for s in samples)) / 1e9
    return Estimate(
        offset_ns=intercept,
        drift_ppm=slope / 1e3,
        t_ref_ns=t_ref,
        uncertainty_ns=bound,
        delay_min_ns=int(min(s.delay_ns for s in samples)),
        samples=len(samples),
        kept=len(kept),
        residual_max_ns=float(np.max(np.abs(residual))),
        span_s=span,
    )


# --- samples from two captures -------------------------------------------------------------


def _exchange(segments: list[pcap.Segment]) -> tuple:
    """The segments of one capture's connection the samples use, each kind the one segment
    of its kind or None when there is none or more than one (a retransmission makes the
    exchange ambiguous: which copy did the other side see?): (the client's SYN, the
    server's SYN/ACK, the client's first data, the server's first data). One pass."""
    found: tuple[list, list, list, list] = ([], [], [], [])
    syn, ack = pcap.SYN, pcap.ACK
    for s in segments:
        if s.flags & syn:
            if s.from_client and not s.flags & ack:
                found[0].append(s)
            elif not s.from_client and s.flags & ack:
                found[1].append(s)
        if s.start == 0 and s.end > 0:
            found[2 if s.from_client else 3].append(s)
    return tuple(f[0] if len(f) == 1 else None for f in found)


def connection_samples(client: pcap.Connection, server: pcap.Connection) -> list[Sample]:
    """The two samples one connection gives (fewer where a packet was retransmitted)."""
    port = client.client[1]
    c, s = _exchange(client.segments), _exchange(server.segments)
    out = []
    for kind, first, second in (("syn", 0, 1), ("hello", 2, 3)):
        a_c, a_s, b_s, b_c = c[first], s[first], s[second], c[second]
        if a_c and a_s and b_s and b_c:
            out.append(sample(a_c.ts_ns, a_s.ts_ns, b_s.ts_ns, b_c.ts_ns, kind, port))
    return out


def samples_from_connections(
    client: list[pcap.Connection], server: list[pcap.Connection]
) -> list[Sample]:
    """Every sample of the connections found in both captures, each side's connections in
    the order of their SYNs (a client port that comes back pairs with its connections in
    turn)."""
    by_port: dict[int, list[pcap.Connection]] = {}
    for conn in server:
        by_port.setdefault(conn.client[1], []).append(conn)
    out = []
    for conn in client:
        peers = by_port.get(conn.client[1])
        if peers:
            out += connection_samples(conn, peers.pop(0))
    return out


def samples_from_captures(client_pcap: Path, server_pcap: Path, port: int) -> list[Sample]:
    """Every sample of the connections to `port` found in both captures."""
    return samples_from_connections(
        pcap.connections(client_pcap, port), pcap.connections(server_pcap, port)
    )


# --- moving a capture's timestamps ---------------------------------------------------------


def rewrite_pcap(src: Path, dst: Path, new_ts: Callable[[int], int], mode: int = 0o644) -> int:
    """Write `src` to `dst` (whole, replacing it; `src` itself may be `dst`) with every
    timestamp t replaced by new_ts(t); frames and link type unchanged. Returns the number of
    frames."""
    linktype, frames = pcap.read_pcap(src)
    snaplen = pcap.read_snaplen(src)
    moved = [pcap.Frame(new_ts(f.ts_ns), f.data, f.orig_len) for f in frames]
    pcap.write_pcap(dst, moved, linktype=linktype, snaplen=snaplen, mode=mode)
    return len(moved)


def correct_server_capture(src: Path, dst: Path, est: Estimate) -> int:
    """The server's capture on the client's clock: t - offset(t) for every packet."""
    # Integer arithmetic: a timestamp (~1.7e18 ns) as a float is only good to 256 ns.
    return rewrite_pcap(src, dst, lambda t: t - round(est.at(t)))


# --- the test-only offset hook -------------------------------------------------------------

TEST_OFFSET_ENV = "PQLAB_TEST_CLOCK_OFFSET"
_TEST_OFFSET_RE = re.compile(r"^(client|server)=([+-]?\d+(?:\.\d+)?)(ns|us|ms|s)$")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def test_offsets() -> dict[str, int]:
    """TEST ONLY. `PQLAB_TEST_CLOCK_OFFSET=server=+3.000ms` adds 3 ms to every timestamp of
    the captures fetched from the server's host, as if its clock ran 3 ms ahead: the tests
    check that the offset estimate recovers it. Refused for a host that shares this
    machine's clock; announced on stderr and recorded in the run's metadata when set."""
    text = os.environ.get(TEST_OFFSET_ENV, "").strip()
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        m = _TEST_OFFSET_RE.match(item.strip())
        if not m:
            raise UserError(
                f"{TEST_OFFSET_ENV}={text!r}: use side=offset, e.g. server=+3.000ms "
                "(a test-only hook: unset it for real measurements)"
            )
        side, value, unit = m.groups()
        out[side] = round(float(value) * _UNIT_NS[unit])
    return out
