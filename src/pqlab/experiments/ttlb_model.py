"""The serialisation model of a TLS 1.3 connection over a shaped link: what TTFB and TTLB
would be from the bytes on the wire, the one-way delays, the rate and TCP's initial
congestion window alone (no CPU time, no loss, no jitter).

It replays the connection packet by packet through netem's own arithmetic (arrival =
max(send + delay, previous arrival) + wire length * 8 / rate, per direction):
SYN / SYN-ACK, the ClientHello, the server's handshake flight under the server's congestion
window (slow start: +1 segment per acknowledged segment, the receiver acknowledging every
segment), the client's Finished and request, then the response continuing from the window
the handshake left. TTFB = arrival of the last byte of the server flight; TTLB = arrival of
the last response byte (for 0 bytes, TTLB = TTFB plus the request's write, as measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from pqlab.net.profiles import Direction, LinkProfile

ETH = 14
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
SYN_BYTES = 60  # IPv4 + TCP with MSS, SACK-permitted, timestamps, window scale
LINUX_INITCWND = 10


class _Pipe:
    """One direction of the link with netem's arithmetic (no jitter, no loss)."""

    def __init__(self, d: Direction):
        self.delay = d.delay_s
        self.rate = d.rate_bps
        self.last = float("-inf")

    def send(self, t: float, ip_bytes: int) -> float:
        ser = (ip_bytes + ETH) * 8 / self.rate if self.rate else 0.0
        arrival = max(t + self.delay, self.last) + ser
        self.last = arrival
        return arrival


@dataclass
class _Sender:
    cwnd: float


def _segments(nbytes: int, mss: int) -> list[int]:
    full, rest = divmod(nbytes, mss)
    return [mss] * full + ([rest] if rest else [])


def _transfer(t0: float, nbytes: int, mss: int, sender: _Sender, fwd: _Pipe, back: _Pipe) -> float:
    """Send `nbytes` from t0 under the sender's window; return the last byte's arrival."""
    segs = _segments(nbytes, mss)
    if not segs:
        return t0
    acks: list[float] = []  # arrival times of ACKs at the sender, in order
    sent = acked = 0
    now = t0
    last_arrival = t0
    while acked < len(segs):
        while sent < len(segs) and sent - acked < int(sender.cwnd):
            arrival = fwd.send(now, segs[sent] + TCP_IP_HEADERS)
            last_arrival = arrival
            acks.append(back.send(arrival, TCP_IP_HEADERS))
            sent += 1
        now = max(now, acks[acked])
        acked += 1
        sender.cwnd += 1  # slow start (no loss in the model)
    return last_arrival


def model(
    profile: LinkProfile,
    *,
    client_hello_bytes: int,
    server_flight_bytes: int,
    client_finish_bytes: int,
    response_bytes: int,
    data_bytes: int,
) -> tuple[float, float]:
    """(TTFB, TTLB) in seconds from the connection's TCP payload byte counts."""
    mss = profile.mtu - TCP_IP_HEADERS
    c2s, s2c = _Pipe(profile.c2s), _Pipe(profile.s2c)
    t_syn = c2s.send(0.0, SYN_BYTES)
    t_connected = s2c.send(t_syn, SYN_BYTES)
    # The client's ACK of the SYN-ACK rides with the ClientHello.
    t_ch = t_connected
    for seg in _segments(client_hello_bytes, mss):
        t_ch = c2s.send(t_connected, seg + TCP_IP_HEADERS)
    server = _Sender(cwnd=float(profile.initcwnd or LINUX_INITCWND))
    ttfb = _transfer(t_ch, server_flight_bytes, mss, server, s2c, c2s)
    if data_bytes == 0:
        return ttfb, ttfb
    t_req = ttfb
    for seg in _segments(client_finish_bytes, mss):
        t_req = c2s.send(ttfb, seg + TCP_IP_HEADERS)
    ttlb = _transfer(t_req, response_bytes, mss, server, s2c, c2s)
    return ttfb, ttlb
