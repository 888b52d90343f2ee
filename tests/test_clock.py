"""pqlab.net.clock: the offset between two capture clocks from four-timestamp samples.

Synthetic exchanges with a known offset, drift and (asymmetric) queueing noise: the estimate
must recover the offset within its own stated uncertainty, and that uncertainty must hold
even for a path whose asymmetry the samples cannot see. Then the same from real pcap files
(synthetic frames with known timestamps), the capture rewrite, and the test-only hook."""

from __future__ import annotations

import numpy as np
import pytest

from pqlab import pcap
from pqlab.errors import UserError
from pqlab.net import clock

MS = 1_000_000


def exchanges(
    n=400,
    offset_ns=3 * MS,
    drift_ppm=0.0,
    fwd_ns=1 * MS,
    back_ns=1 * MS,
    noise_ns=200_000,
    span_s=20.0,
    seed=1,
    processing_ns=50_000,
):
    """Samples of n exchanges over span_s seconds. The server's clock reads true time +
    offset(t); each one-way delay is its base plus exponential queueing noise."""
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000 * 10**9

    def theta(t):
        return offset_ns + drift_ppm * 1e-6 * (t - t0)

    out = []
    for i in range(n):
        t1 = t0 + int(i * span_s * 1e9 / n)
        d_f = fwd_ns + rng.exponential(noise_ns)
        d_b = back_ns + rng.exponential(noise_ns)
        arrive = t1 + d_f
        t2 = arrive + theta(arrive)
        t3 = t2 + processing_ns
        t4 = arrive + processing_ns + d_b
        out.append(clock.sample(int(t1), int(t2), int(t3), int(t4), "syn"))
    return out, theta


def worst_error(est: clock.Estimate, samples, theta) -> float:
    ts = [s.t_ns for s in samples]
    grid = np.linspace(min(ts), max(ts), 50)
    return max(abs(est.at(t) - theta(t)) for t in grid)


def test_sample_is_rfc5905():
    s = clock.sample(100, 1150, 1160, 230, "syn")
    assert s.offset_ns == ((1150 - 100) + (1160 - 230)) / 2
    assert s.delay_ns == (230 - 100) - (1160 - 1150)


def test_constant_offset_is_recovered_within_the_stated_uncertainty():
    samples, theta = exchanges()
    est = clock.estimate(samples)
    assert worst_error(est, samples, theta) <= est.uncertainty_ns
    # Symmetric path: the minimum-delay samples are nearly exact.
    assert est.offset_ns == pytest.approx(3 * MS, abs=60_000)
    # At least half the minimum round trip, and not much more on a clean path.
    assert est.delay_min_ns / 2 <= est.uncertainty_ns <= est.delay_min_ns / 2 + 200_000
    assert est.samples == 400 and 0 < est.kept < 400


def test_drift_is_fitted_over_the_run():
    samples, theta = exchanges(drift_ppm=25.0, span_s=100.0, n=1000)  # 2.5 ms over the run
    est = clock.estimate(samples)
    assert est.drift_ppm == pytest.approx(25.0, abs=2.0)
    assert worst_error(est, samples, theta) <= est.uncertainty_ns
    # A constant would be off by more than a millisecond at the ends.
    const = float(np.median([s.offset_ns for s in samples]))
    assert max(abs(const - theta(s.t_ns)) for s in samples) > 1 * MS


def test_an_asymmetric_path_stays_inside_the_bound():
    # 1 ms out, 3 ms back: every sample says 1 ms less than the truth; no method can see
    # that from the timestamps, so the bound (>= half the round trip) must cover it.
    samples, theta = exchanges(fwd_ns=1 * MS, back_ns=3 * MS, noise_ns=50_000)
    est = clock.estimate(samples)
    assert est.offset_ns == pytest.approx(2 * MS, abs=50_000)
    assert worst_error(est, samples, theta) <= est.uncertainty_ns
    assert est.uncertainty_ns >= 2 * MS


def test_queueing_outliers_are_not_kept():
    samples, theta = exchanges(noise_ns=20_000, seed=3)
    # Every fifth exchange waited 30 ms in a queue on the way back only.
    bad = []
    for i, s in enumerate(samples):
        if i % 5 == 0:
            bad.append(clock.Sample(s.t_ns, s.offset_ns - 15 * MS, s.delay_ns + 30 * MS, "hello"))
        else:
            bad.append(s)
    est = clock.estimate(bad)
    assert est.offset_ns == pytest.approx(3 * MS, abs=50_000)
    assert worst_error(est, samples, theta) <= est.uncertainty_ns
    assert est.uncertainty_ns < 2 * MS


def test_shared_clock_gives_zero():
    samples, theta = exchanges(offset_ns=0)
    est = clock.estimate(samples)
    assert abs(est.offset_ns) <= est.uncertainty_ns
    assert abs(est.offset_ns) < 60_000


def test_no_samples_is_an_error():
    with pytest.raises(UserError, match="no four-timestamp sample"):
        clock.estimate([])


def test_theil_sen_ignores_a_wild_point():
    x = np.arange(20, dtype=float)
    y = 3 + 2 * x
    y[7] = 1000
    slope, intercept = clock.theil_sen(x, y)
    assert slope == pytest.approx(2.0) and intercept == pytest.approx(3.0)


# --- from captures --------------------------------------------------------------------------

C, S, PORT = "198.18.0.1", "198.18.0.2", 4433


def _conn_frames(cport, t_c, t_s, offset, syn_retransmit=False):
    """Client- and server-capture frames of one connection: SYN, SYN/ACK, ACK, ClientHello
    (300 B), ServerHello (200 B). t_c: client-clock times of sending; one-way delay 1 ms."""
    d = 1 * MS
    f = pcap.build_tcp_frame
    client, server = [], []
    syn = (C, S, cport, PORT, 1000, 0, pcap.SYN, 0)
    if syn_retransmit:
        client.append(f(t_c - 1000 * MS, *syn))
    client.append(f(t_c, *syn))
    server.append(f(t_c + d + offset, *syn))
    synack = (S, C, PORT, cport, 5000, 1001, pcap.SYN | pcap.ACK, 0)
    server.append(f(t_c + d + offset + 20_000, *synack))
    client.append(f(t_c + 2 * d + 20_000, *synack))
    ack = (C, S, cport, PORT, 1001, 5001, pcap.ACK, 0)
    client.append(f(t_c + 2 * d + 30_000, *ack))
    server.append(f(t_c + 3 * d + 30_000 + offset, *ack))
    ch = (C, S, cport, PORT, 1001, 5001, pcap.ACK | pcap.PSH, 300)
    client.append(f(t_c + 2 * d + 40_000, *ch))
    server.append(f(t_c + 3 * d + 40_000 + offset, *ch))
    sh = (S, C, PORT, cport, 5001, 1301, pcap.ACK | pcap.PSH, 200)
    server.append(f(t_c + 3 * d + 500_000 + offset, *sh))
    client.append(f(t_c + 4 * d + 500_000, *sh))
    return client, server


def test_samples_from_two_captures(tmp_path):
    t0 = 1_700_000_000 * 10**9
    client, server = [], []
    for i in range(6):
        c, s = _conn_frames(40000 + i, t0 + i * 10 * MS, 0, 3 * MS, syn_retransmit=(i == 2))
        client += c
        server += s
    cp, sp = tmp_path / "c.pcap", tmp_path / "s.pcap"
    pcap.write_pcap(cp, sorted(client, key=lambda f: f.ts_ns))
    pcap.write_pcap(sp, sorted(server, key=lambda f: f.ts_ns))
    samples = clock.samples_from_captures(cp, sp, PORT)
    # 6 connections x 2 exchanges, minus the SYN of the one whose SYN was retransmitted.
    assert len(samples) == 11
    assert sorted({s.kind for s in samples}) == ["hello", "syn"]
    for s in samples:
        assert s.offset_ns == 3 * MS
        assert s.delay_ns == 2 * MS
    est = clock.estimate(samples)
    assert est.offset_ns == 3 * MS and est.uncertainty_ns == 1 * MS

    # Moving the server capture onto the client's clock removes the offset.
    fixed = tmp_path / "s.corrected.pcap"
    clock.correct_server_capture(sp, fixed, est)
    again = clock.samples_from_captures(cp, fixed, PORT)
    assert all(abs(s.offset_ns) <= 1 for s in again)
    _, before = pcap.read_pcap(sp)
    _, after = pcap.read_pcap(fixed)
    assert [f.data for f in before] == [f.data for f in after]
    assert [b.ts_ns - a.ts_ns for a, b in zip(after, before, strict=True)] == [3 * MS] * len(before)


def test_test_offsets_hook(monkeypatch):
    monkeypatch.delenv(clock.TEST_OFFSET_ENV, raising=False)
    assert clock.test_offsets() == {}
    monkeypatch.setenv(clock.TEST_OFFSET_ENV, "server=+3.000ms")
    assert clock.test_offsets() == {"server": 3 * MS}
    monkeypatch.setenv(clock.TEST_OFFSET_ENV, "client=-250us,server=1s")
    assert clock.test_offsets() == {"client": -250_000, "server": 10**9}
    for bad in ("server=3", "both=+1ms", "server=+1 ms", "server"):
        monkeypatch.setenv(clock.TEST_OFFSET_ENV, bad)
        with pytest.raises(UserError, match="test-only"):
            clock.test_offsets()
