"""The wire model (pqlab.tls.wire): netem's serialisation, Linux's initial window counted in
segments, writes coalescing behind a full window, ACK-clocked rounds and slow start only
while the window is used, each against a number worked out by hand or read off a capture."""

from __future__ import annotations

import dataclasses

import pytest

from pqlab.net.profiles import parse_profile
from pqlab.tls import flight, wire


def _hello(n: int = 200) -> wire.Side:
    return wire.Side.at_once([n])


def _conn(link, flight_writes, response=None, **kw) -> wire.Prediction:
    resp = wire.Side.at_once(response) if response is not None else None
    return wire.connection(
        link, _hello(), wire.Side.at_once(flight_writes), wire.Side.at_once([80, 120]), resp, **kw
    )


def test_a_rate_that_dominates_costs_the_wire_bytes():
    """At 1 Mbit/s each packet takes (IP bytes + 14) x 8 / rate: the handshake is the
    handshake's RTTs plus every packet's serialisation in order."""
    link = wire.Link.from_profile(parse_profile("rtt=50ms,rate=1mbit"))
    p = _conn(link, [2400])
    syn = 2 * (60 + 14) * 8 / 1e6
    hello = (200 + 52 + 14) * 8 / 1e6
    flight_wire = (1448 + 66 + 952 + 66) * 8 / 1e6  # two segments of 2400 bytes
    assert [s.end for s in p.flight] == [1448, 2400]
    # The server's ACK of the ClientHello goes out with the hello's arrival, ahead of the
    # flight on the same direction.
    ack = (52 + 14) * 8 / 1e6
    assert p.ttfb_s == pytest.approx(0.1 + syn + hello + ack + flight_wire, rel=1e-9)


def test_a_flight_above_the_initial_window_waits_one_round_trip():
    link = wire.Link.symmetric(0.1, initcwnd=10)
    small = _conn(link, [14_000])  # 10 segments: 9 x 1448 + 968
    big = _conn(link, [16_000])  # 12 segments
    assert (len(small.flight), small.round_trips) == (10, 2)
    assert (len(big.flight), big.round_trips) == (12, 3)
    assert big.ttfb_s - small.ttfb_s == pytest.approx(0.1)
    assert [s.round for s in big.flight] == [1] * 10 + [2, 2]


def test_writes_behind_a_full_window_leave_in_full_segments():
    """An X25519 / ML-DSA-87 / CA ML-DSA-87 flight with the root, as OpenSSL writes it
    (4096, 15420, 20077, 20151): `pqlab handshake --profile rtt=20ms` captured 15 segments,
    only the first write's tail (at 4096) short, because CertificateVerify and Finished were
    written while the rest of Certificate waited behind the initial window; on the bare link,
    where the client's ACKs come back while the server builds Certificate and signs, 16 in
    one round (what `pqlab handshake` measured there)."""
    writes = [4096, 15420, 20077, 20151]
    shaped = _conn(wire.Link.symmetric(0.02), writes)
    ends = [s.end for s in shaped.flight]
    assert len(ends) == 15 and ends[2] == 4096 and ends[9] == 14232
    assert all(b - a == 1448 for a, b in zip(ends[2:-1], ends[3:-1], strict=False))
    assert shaped.round_trips == 3
    # A 50 us round trip, the rest of Certificate written 100 us after the first buffer
    # (acknowledged by then), the signature 1 ms later: nothing waits, the tail leaves alone.
    late = wire.connection(
        wire.Link.symmetric(50e-6),
        _hello(),
        wire.Side(((0.0, 4096), (1e-4, 15420), (1e-3, 20077), (1e-3, 20151))),
        wire.Side.at_once([80]),
    )
    assert len(late.flight) == 16 and late.round_trips == 2
    # Both first writes at once: the eleventh segment waits for the first ACK, one round.
    early = wire.connection(
        wire.Link.symmetric(50e-6),
        _hello(),
        wire.Side(((0.0, 4096), (0.0, 15420), (1e-3, 20077), (1e-3, 20151))),
        wire.Side.at_once([80]),
    )
    assert len(early.flight) == 16 and early.round_trips == 3


def test_slow_start_grows_only_a_window_in_use():
    """Linux grows cwnd in slow start only while it had at least half of it in flight (RFC
    7661): a one-segment flight leaves the window at 10, a six-segment one at 16, so a
    100 KiB response takes a round trip less after the larger handshake."""
    link = wire.Link.symmetric(0.05)
    response = flight.OPENSSL.writes([16_406] * 6 + [4_118])  # 100 KiB in records
    small = _conn(link, [900], response=response)
    large = _conn(link, [8000], response=response)
    assert [s.round for s in small.response][-1] == 4
    assert [s.round for s in large.response][-1] == 3
    assert (small.ttlb_s - small.ttfb_s) - (large.ttlb_s - large.ttfb_s) == pytest.approx(0.05)


def test_cut_is_the_flight_models_segmentation():
    assert flight.segments([4096, 10161, 12677]) == wire.cut([4096, 10161, 12677])
    assert wire.cut([4096]) == [1448, 2896, 4096]
    assert wire.cut([100, 200], mss=1448) == [100, 200]


def test_the_forwarding_time_per_packet_is_paid_on_every_crossing():
    """A link whose forwarding costs each packet 0.2 ms: the TCP connect takes two
    crossings more, the handshake's serial path (SYN, SYN-ACK, ClientHello, flight) four,
    and a response of two rounds two more crossings each for its request and its ACKs."""
    plain = wire.Link.symmetric(0.01)
    slow = dataclasses.replace(plain, per_packet_s=0.0002)
    a, b = _conn(plain, [2400]), _conn(slow, [2400])
    assert b.ttfb_s - a.ttfb_s == pytest.approx(4 * 0.0002)
    a, b = _conn(plain, [2400], [20_000]), _conn(slow, [2400], [20_000])
    # the request crosses once, the first round of the response once, its ACKs and the
    # second round once each
    assert [s.round for s in b.response][-1] == 2
    assert b.ttlb_s - a.ttlb_s == pytest.approx(8 * 0.0002)
