"""The serialisation model of a TLS 1.3 connection over a shaped link: what TTFB and TTLB
would be from the bytes on the wire, the one-way delays, the rate and TCP's initial
congestion window alone (no CPU time, no loss, no jitter).

It replays the connection packet by packet through netem's own arithmetic (arrival =
max(send + delay, previous arrival) + wire length * 8 / rate, per direction):
SYN / SYN-ACK, the ClientHello, the server's handshake flight under the server's congestion
window and the client's receive window (slow start: +1 segment per acknowledged segment
while cwnd-limited; the receive window opens at about 64 KiB (44 segments) or initrwnd and
grows by 2 per segment received; the receiver acknowledges every segment), the client's
Finished and request, then the response continuing from the windows the handshake left.
TTFB = arrival of the last byte of the server flight; TTLB = arrival of
the last response byte (for 0 bytes, TTLB = TTFB plus the request's write, as measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from pqlab.net.profiles import Direction, LinkProfile

ETH = 14
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
SYN_BYTES = 60  # IPv4 + TCP with MSS, SACK-permitted, timestamps, window scale
LINUX_INITCWND = 10
# About 64 KiB: the first window the client lets the server use. (A 10-segment window, the
# kernel's TCP_DEFAULT_INIT_RCVWND, predicts stalls at 1 Mbit/s that measurements here do not
# show; anything from 20 segments up fits them.)
LINUX_INITRWND = 44


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


@dataclass
class _Receiver:
    """The client's receive window in segments: about 64 KiB at first (or initrwnd), growing
    by 2 MSS per full segment received (tcp_grow_window), so it only binds early."""

    initial: int
    received: int = 0

    def window(self) -> int:
        return self.initial + 2 * self.received


def _segments(nbytes: int, mss: int) -> list[int]:
    full, rest = divmod(nbytes, mss)
    return [mss] * full + ([rest] if rest else [])


def _transfer(
    t0: float, nbytes: int, mss: int, sender: _Sender, receiver: _Receiver, fwd: _Pipe, back: _Pipe
) -> float:
    """Send `nbytes` from t0 under min(cwnd, rwnd); return the last byte's arrival.

    Slow start as Linux does it: +1 segment per acknowledged segment, but only while the
    flow is cwnd-limited (cwnd < 2 x the most segments in flight), so a window held back
    by the receiver does not grow."""
    segs = _segments(nbytes, mss)
    if not segs:
        return t0
    acks: list[float] = []  # arrival times of ACKs at the sender, in order
    sent = acked = 0
    now = t0
    last_arrival = t0
    rwnd = receiver.window()  # as advertised in the last ACK the sender has seen
    max_in_flight = 0
    while acked < len(segs):
        while sent < len(segs) and sent - acked < min(int(sender.cwnd), rwnd):
            arrival = fwd.send(now, segs[sent] + TCP_IP_HEADERS)
            last_arrival = arrival
            acks.append(back.send(arrival, TCP_IP_HEADERS))
            sent += 1
            max_in_flight = max(max_in_flight, sent - acked)
        now = max(now, acks[acked])
        acked += 1
        receiver.received += 1
        rwnd = receiver.window()
        if sender.cwnd < 2 * max_in_flight:
            sender.cwnd += 1
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
    client = _Receiver(initial=profile.initrwnd or LINUX_INITRWND)
    ttfb = _transfer(t_ch, server_flight_bytes, mss, server, client, s2c, c2s)
    if data_bytes == 0:
        return ttfb, ttfb
    t_req = ttfb
    for seg in _segments(client_finish_bytes, mss):
        t_req = c2s.send(ttfb, seg + TCP_IP_HEADERS)
    ttlb = _transfer(t_req, response_bytes, mss, server, client, s2c, c2s)
    return ttfb, ttlb
