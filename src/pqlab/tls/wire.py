"""The wire model: a TLS 1.3 connection replayed packet by packet over a link, from the
bytes each side writes and when, to every TCP segment's departure and arrival, the
congestion-window rounds the server's flight takes, the handshake's round trips, TTFB and
TTLB. The one model behind `pqlab plan` and the predictions `handshake` and `ttlb` store
beside their measurements.

What it models, as Linux does it (see docs/plan.md for where this is wrong):

- **the link**, one direction at a time, with netem's arithmetic: a packet sent at t
  arrives at max(t + delay, previous arrival) + (IP bytes + 14) x 8 / rate, plus the time
  the machine's forwarding takes per packet where it is known (`Link.per_packet_s`: a
  userspace emulator's reads, timers and writes, measured by `pqlab plan --calibrate`); no
  loss, no jitter, no reordering;
- **the sender's writes**: every write (its time and the stream offset it ends at; a
  stack's write model, `pqlab.tls.flight.WriteModel`, gives the offsets) is cut into
  segments of MSS bytes and a short tail at once (TCP_NODELAY); data written while an
  unsent tail waits for the window is appended to that tail first, so queued data leaves
  in full segments (tcp_sendmsg's "copy to the tail skb");
- **the congestion window**, in segments (Linux counts packets, RFC 6928's initcwnd 10):
  slow start adds one segment per segment acknowledged while the sender is
  window-limited (it had at least half the window in flight, RFC 7661), so a window the
  sender never filled does not grow; no restart after idle (the gaps here are below the
  retransmission timeout);
- **the receiver**: it acknowledges every segment on arrival (Linux's quick-ack mode at the
  start of a connection, which covers a handshake and the first response segments), and
  its window starts at about 64 KiB (or initrwnd) and grows by 2 segments per segment
  received (tcp_grow_window), so it binds only early and only on fast links.

A segment's **round** is 1 when it leaves as soon as it is written, and one more than the
round of the segment whose ACK released it when it waited for the window; never less than
the round of the segment before it. A flight's rounds are its last segment's; the
handshake's round trips are the TCP handshake's one plus the flight's rounds (TTFB is taken,
as `pqlab handshake` measures it, from the client's SYN to the arrival of the server's
Finished).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ETH = 14
TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
SYN_BYTES = 60  # IPv4 + TCP with MSS, SACK-permitted, timestamps, window scale
LINUX_INITCWND = 10
# About 64 KiB: the first window the client lets the server use. (A 10-segment window, the
# kernel's TCP_DEFAULT_INIT_RCVWND, predicts stalls at 1 Mbit/s that measurements here do not
# show; anything from 20 segments up fits them.)
LINUX_INITRWND = 44
DEFAULT_MSS = 1448


@dataclass(frozen=True)
class Direction:
    """One direction of the link: one-way delay and rate (None: unlimited)."""

    delay_s: float = 0.0
    rate_bps: float | None = None


@dataclass(frozen=True)
class Link:
    """What the model needs of a path: both directions, the MSS, the server's initial
    congestion window and the client's initial receive window (segments)."""

    c2s: Direction
    s2c: Direction
    mss: int = DEFAULT_MSS
    initcwnd: int = LINUX_INITCWND
    initrwnd: int = LINUX_INITRWND
    # What forwarding one packet costs the machine beyond the profile's delay, per direction
    # (seconds): 0 for the profile alone.
    per_packet_s: float = 0.0

    @classmethod
    def from_profile(cls, profile, mss: int | None = None) -> Link:
        """The link of a `pqlab.net.profiles.LinkProfile` (its jitter and loss are not
        modelled); the MSS is the MTU less IPv4, TCP and timestamp headers."""
        return cls(
            Direction(profile.c2s.delay_s, profile.c2s.rate_bps),
            Direction(profile.s2c.delay_s, profile.s2c.rate_bps),
            mss=mss or profile.mtu - TCP_IP_HEADERS,
            initcwnd=profile.initcwnd or LINUX_INITCWND,
            initrwnd=profile.initrwnd or LINUX_INITRWND,
        )

    @classmethod
    def symmetric(
        cls,
        rtt_s: float,
        rate_bps: float | None = None,
        mss: int = DEFAULT_MSS,
        initcwnd: int = LINUX_INITCWND,
    ) -> Link:
        d = Direction(rtt_s / 2, rate_bps)
        return cls(d, d, mss=mss, initcwnd=initcwnd)

    @property
    def rtt_s(self) -> float:
        return self.c2s.delay_s + self.s2c.delay_s

    def with_rtt(self, rtt_s: float) -> Link:
        """The same link with its one-way delays scaled to `rtt_s` (split evenly when it
        had none)."""
        if self.rtt_s <= 0:
            c, s = rtt_s / 2, rtt_s / 2
        else:
            c, s = (d.delay_s * rtt_s / self.rtt_s for d in (self.c2s, self.s2c))
        return replace(self, c2s=replace(self.c2s, delay_s=c), s2c=replace(self.s2c, delay_s=s))


class Pipe:
    """One direction of the link with netem's arithmetic (no jitter, no loss)."""

    __slots__ = ("delay", "rate", "last", "per_packet")

    def __init__(self, d: Direction, per_packet_s: float = 0.0):
        self.delay = d.delay_s
        self.rate = d.rate_bps
        self.per_packet = per_packet_s
        self.last = float("-inf")

    def send(self, t: float, ip_bytes: int) -> float:
        ser = (ip_bytes + ETH) * 8 / self.rate if self.rate else 0.0
        arrival = max(t + self.delay, self.last) + ser
        self.last = arrival
        return arrival + self.per_packet


@dataclass(slots=True)
class Segment:
    start: int  # stream offsets of its payload [start, end)
    end: int
    ready: float  # when its last byte was written
    sent: float = 0.0
    arrival: float = 0.0
    round: int = 1


@dataclass
class _Receiver:
    """The receiving side's window in segments: `initial`, growing by 2 per segment
    received (tcp_grow_window)."""

    initial: int
    received: int = 0

    def window(self) -> int:
        return self.initial + 2 * self.received


@dataclass
class Sender:
    """One side's TCP sender: its write queue, congestion window and the segments it sent."""

    mss: int
    cwnd: float
    fwd: Pipe
    back: Pipe
    receiver: _Receiver
    offset: int = 0  # stream bytes written so far
    segments: list[Segment] = field(default_factory=list)
    max_in_flight: int = 0

    def _queue(self, t: float, end: int, queue: list[Segment]) -> None:
        """Data up to stream offset `end`, written at t: the unsent tail first, then
        segments of MSS bytes."""
        if end <= self.offset:
            return
        if queue and queue[-1].end - queue[-1].start < self.mss:
            tail = queue[-1]
            tail.end = min(end, tail.start + self.mss)
            tail.ready = t
        start = queue[-1].end if queue else self.offset
        while start < end:
            stop = min(end, start + self.mss)
            queue.append(Segment(start, stop, t))
            start = stop
        self.offset = end

    def transfer(self, writes: list[tuple[float, int]]) -> list[Segment]:
        """Send the data of `writes` ((time, stream offset it ends at), in order) and run
        until every byte is acknowledged; the segments, in the order they left."""
        queue: list[Segment] = []
        sent: list[Segment] = []
        acks: list[tuple[float, int]] = []  # (arrival at the sender, index in `sent`)
        acked = 0
        pending = sorted(writes)
        i = 0
        now = pending[0][0] if pending else 0.0
        released_by: int | None = None  # the segment whose ACK is being processed
        while True:
            while i < len(pending) and pending[i][0] <= now:
                self._queue(pending[i][0], pending[i][1], queue)
                i += 1
                self._send(now, queue, sent, acks, acked, released_by)
            self._send(now, queue, sent, acks, acked, released_by)
            released_by = None
            next_write = pending[i][0] if i < len(pending) else None
            next_ack = acks[acked][0] if acked < len(acks) else None
            if next_write is None and next_ack is None:
                break
            if next_ack is not None and (next_write is None or next_ack <= next_write):
                now = next_ack
                released_by = acks[acked][1]
                acked += 1
                self.receiver.received += 1
                if self.cwnd < 2 * self.max_in_flight:
                    self.cwnd += 1
            else:
                now = next_write
        self.segments += sent
        return sent

    def _send(self, now, queue, sent, acks, acked, released_by) -> None:
        if not queue:
            return
        window = min(int(self.cwnd), self.receiver.window())
        forward, back = self.fwd.send, self.back.send
        most = self.max_in_flight
        while queue and len(sent) - acked < window:
            seg = queue.pop(0)
            seg.sent = now
            waited = seg.ready < now and released_by is not None
            base = sent[released_by].round + 1 if waited else 1
            if sent and sent[-1].round > base:
                base = sent[-1].round
            seg.round = base
            seg.arrival = arrival = forward(now, seg.end - seg.start + TCP_IP_HEADERS)
            acks.append((back(arrival, TCP_IP_HEADERS), len(sent)))
            sent.append(seg)
            if len(sent) - acked > most:
                most = len(sent) - acked
        self.max_in_flight = most


def cut(writes: list[int], mss: int = DEFAULT_MSS) -> list[int]:
    """Stream offsets at the end of each TCP segment of writes ending at `writes`, all made
    at once with the window open: each write leaves as full segments and a short tail."""
    unlimited = 1 << 30
    sender = Sender(mss, unlimited, Pipe(Direction()), Pipe(Direction()), _Receiver(unlimited))
    return [s.end for s in sender.transfer([(0.0, w) for w in writes])]


@dataclass(frozen=True)
class Side:
    """What one side writes, as (seconds after the moment it may start, stream bytes
    written by then, counted from the start of this part) per write."""

    writes: tuple[tuple[float, int], ...]

    @classmethod
    def at_once(cls, offsets: list[int]) -> Side:
        return cls(tuple((0.0, o) for o in offsets))

    @property
    def bytes(self) -> int:
        return self.writes[-1][1] if self.writes else 0


@dataclass
class Prediction:
    client_hello: list[Segment]
    flight: list[Segment]  # the server's flight through Finished
    ttfb_s: float
    ttlb_s: float | None = None
    response: list[Segment] = field(default_factory=list)
    client_flight: list[Segment] = field(default_factory=list)

    @property
    def flight_rounds(self) -> int:
        return self.flight[-1].round if self.flight else 0

    @property
    def round_trips(self) -> int:
        """The TCP handshake's round trip and one per round of the server's flight."""
        return 1 + self.flight_rounds

    @property
    def stalls(self) -> int:
        """Times the server's flight waited for the client's ACKs."""
        return self.flight_rounds - 1 if self.flight else 0


def _shift(side: Side, t0: float, base: int) -> list[tuple[float, int]]:
    return [(t0 + t, base + o) for t, o in side.writes]


def connection(
    link: Link,
    client_hello: Side,
    server_flight: Side,
    client_flight: Side,
    response: Side | None = None,
    client_hello_delay_s: float = 0.0,
) -> Prediction:
    """One connection: SYN and SYN-ACK; the ClientHello `client_hello_delay_s` after the
    client saw the SYN-ACK; the server's flight (its write times counted from the
    ClientHello's arrival); the client's second flight (Finished, its certificate and
    CertificateVerify in mutual TLS, and the request) when the server's Finished has
    arrived; the response (write times from the request's arrival), if any."""
    c2s, s2c = Pipe(link.c2s, link.per_packet_s), Pipe(link.s2c, link.per_packet_s)
    t_syn = c2s.send(0.0, SYN_BYTES)
    t_connected = s2c.send(t_syn, SYN_BYTES)
    client = Sender(link.mss, link.initcwnd, c2s, s2c, _Receiver(LINUX_INITRWND))
    server = Sender(link.mss, link.initcwnd, s2c, c2s, _Receiver(link.initrwnd))
    ch = client.transfer(_shift(client_hello, t_connected + client_hello_delay_s, 0))
    t_ch = ch[-1].arrival
    flight = server.transfer(_shift(server_flight, t_ch, 0))
    ttfb = flight[-1].arrival
    second = client.transfer(_shift(client_flight, ttfb, client.offset))
    out = Prediction(ch, flight, ttfb, client_flight=second)
    if response is not None:
        if response.bytes == 0:
            out.ttlb_s = ttfb
        else:
            out.response = server.transfer(_shift(response, second[-1].arrival, server.offset))
            out.ttlb_s = out.response[-1].arrival
    return out
