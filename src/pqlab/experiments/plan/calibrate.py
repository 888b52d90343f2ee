"""`pqlab plan --calibrate`: what a measurement on this machine holds beyond the network,
measured once per configuration and added to the wire model.

A measured connection over an emulated link contains, besides the profile's delays and
rate, the time the machine spends forwarding each packet (a userspace emulator reads it
from one TUN device, waits for its timer and writes it to the other: tenths of a
millisecond per packet here; a kernel netem much less) and the CPU time of the handshake
itself (key shares, signing, verifying, hashing, on both sides). Both are measured the way
`pqlab ttlb` measures, through the same shaper, on a short link with no rate (`rtt=5ms`:
a delay, so that an emulator's timers and wake-ups are part of what each packet costs, as
on the links predicted; with no delay at all a userspace emulator forwards at once and
costs half as much), where what the profile does not explain is the machine: per
configuration, fresh connections of the configuration's own stack, group and chain, each
checked as ttlb checks it.

- **per packet**: half of what the median TCP connect (SYN to SYN-ACK: one packet each
  way; the server's kernel answers a SYN in microseconds) takes beyond the link's RTT;
- **handshake CPU**: the median TTFB (connect start to the handshake complete at the
  client, as ttlb measures it) less the wire model's on the same link (per-packet time
  included, no CPU). The model places it before the server's flight: both sides' work is
  serial on a handshake's path, and ttlb's TTFB ends after the client's own processing of
  the flight, which the model's (the arrival of the server's Finished) does not hold.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from pqlab.errors import CheckError, EngineError
from pqlab.net.profiles import parse_profile
from pqlab.net.shaping import build_hosts
from pqlab.tls import negotiation, predict, runner, wire
from pqlab.tls.chains import Chain
from pqlab.tls.negotiation import Expected

# The calibration link: a short delay and no rate; what a connection takes beyond the
# profile is the machine's.
PROFILE = "rtt=5ms"
CONNECTIONS = 20
WARMUP = 2
GAP_MS = 10  # the client's pause between connections (nothing to wait for on this link)
# What one connection takes on the calibration link, counted as fixed by the estimate: the
# pause, three round trips (TCP, the handshake, the close) and about 1 ms of CPU.
CONNECTION_S = GAP_MS / 1e3 + 3 * 0.005 + 0.001
PORT = 44390


@dataclass(frozen=True)
class Calibration:
    """A configuration's calibration: the shaper it was measured through, the time each
    packet takes to be forwarded (each direction) and the handshake's CPU time (seconds)."""

    shaper: str
    per_packet_s: float
    cpu_s: float
    connections: int

    def link(self, link: wire.Link) -> wire.Link:
        return replace(link, per_packet_s=self.per_packet_s)

    def timing(self) -> predict.Timing:
        return predict.Timing(server_writes=(self.cpu_s,))


def _median_s(values) -> float:
    return statistics.median(v for v in values if v is not None) / 1e9


def columns(clients: list[dict], servers: list[dict], expected: Expected, stack) -> dict:
    """The measured connections' TCP connect and TTFB (ns), as ttlb reads them from the
    client's records, each connection checked as ttlb checks it: both ends negotiated what
    was asked, the server's side did not fail, nothing was asked and nothing received."""
    by_peer = {s.get("peer"): s for s in servers}
    cols: dict[str, list] = {"idx": [], "tcp_connect_ns": [], "ttfb_ns": []}
    for c in clients:
        if c.get("warmup"):
            continue
        what = f"calibration connection {c['index']}"
        srv = by_peer.get(c.get("local"))
        if srv is not None and srv.get("type") == "connection_error":
            raise EngineError(f"server side of {what} failed: {srv.get('message')}")
        negotiation.check(c, expected, stack, what=f"{what} (client)")
        if srv is not None:
            negotiation.check(srv, expected, stack, what=f"{what} (server)")
        if c.get("app_bytes_received", 0) != 0:
            raise CheckError(f"{what} received {c.get('app_bytes_received')} bytes, asked for 0")
        d = c["durations"]
        cols["idx"].append(int(c["index"]))
        cols["tcp_connect_ns"].append(int(d["tcp_connect_ns"]))
        cols["ttfb_ns"].append(int(d["connect_to_handshake_ns"]))
    return cols


def from_connections(
    hs: predict.Handshake, cols: dict, shaper: str, rtt_s: float = 0.0
) -> Calibration:
    """A calibration from the measured connections (`columns`) over a calibration link of
    `rtt_s`, no rate."""
    if not cols["idx"]:
        raise EngineError("the calibration made no connection")
    per_packet = max(0.0, _median_s(cols["tcp_connect_ns"]) - rtt_s) / 2
    link = replace(wire.Link.symmetric(rtt_s), per_packet_s=per_packet)
    network = predict.predict(hs, link).wire.ttfb_s
    cpu = max(0.0, _median_s(cols["ttfb_ns"]) - network)
    return Calibration(shaper, per_packet, cpu, len(cols["idx"]))


def measure(stack, shaper: str, handshakes: list[tuple[predict.Handshake, Chain]]):
    """One calibration per handshake (its sizes and its chain as built), through `shaper`
    on the calibration link: fresh connections of `stack` fetching nothing."""
    profile = parse_profile(PROFILE)
    out = []
    with build_hosts(profile, shaper) as hosts:
        link = hosts.link
        for i, (hs, chain) in enumerate(handshakes):
            tls = runner.Tls(stack=stack, groups=(hs.group,), sigalgs=(hs.signer,))
            server = runner.ServerSpec(
                tls=runner.Tls(stack=stack, groups=(hs.group,), sigalgs=(hs.signer,), events=False),
                chain=chain,
                listen=f"{hosts.server_ip}:{PORT + i}",
            )
            expected = Expected(group=hs.group, sigalg=hs.signer)
            with runner.start_server(server, hosts) as srv:
                client = runner.ClientSpec(
                    tls=tls,
                    connect=f"{hosts.server_ip}:{PORT + i}",
                    ca=chain.root,
                    servername=hosts.server_ip,
                    n=CONNECTIONS,
                    warmup=WARMUP,
                    request_bytes=0,
                    gap_ms=GAP_MS,
                    expected=expected,
                )
                clients = runner.run_client(client, hosts, timeout=600)
                servers = srv.wait_count(
                    ("connection", "connection_error"), CONNECTIONS + WARMUP, 30
                )
            cols = columns(clients, servers, expected, stack)
            out.append(from_connections(hs, cols, link.kind, profile.rtt_s))
    return out
