"""A probe over a 20 ms round trip: `pqlab serve --send-root` with an ML-DSA-87 chain in one
network namespace, `pqlab probe` in another, joined by pqlab's emulated link. The server's
flight (about 21 KB, more than the 10-segment initial congestion window) must wait one
round trip for the client's ACK, as `pqlab handshake` shows for the same cell from the
server's side."""

from __future__ import annotations

import statistics
import sys

import pytest

from conftest import pqlab_env, run_pqlab
from pqlab.net.profiles import load_profiles
from pqlab.net.shaping import build_hosts
from probe_helpers import assert_messages_equal_tshark, pqlab_serve, rows

PROFILE = "rtt=20ms"
CELL = ["--group", "X25519MLKEM768", "--sig", "ML-DSA-87", "--ca", "ML-DSA-87", "--send-root"]


@pytest.mark.net
def test_the_flight_waits_one_round_trip_for_an_ack_as_handshake_shows(tmp_path, no_leaks):
    profile = load_profiles([PROFILE])[0]
    with build_hosts(profile, "auto") as topo:
        with pqlab_serve(tmp_path / "certs", *CELL, listen=topo.server_ip,
                         netns=topo.server_ns) as (port, root):  # fmt: skip
            out = tmp_path / "probe"
            proc = topo.run(
                "client",
                [sys.executable, "-m", "pqlab", "probe", f"{topo.server_ip}:{port}",
                 "--ca", root, "--groups", "X25519MLKEM768", "-n", "5", "--out", out],
                env=pqlab_env(),
                timeout=600,
            )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    raw = rows(out, "SELECT * FROM probe_raw ORDER BY idx")
    assert len(raw) == 5 and all(r["outcome"] == "accepted" for r in raw)
    for r in raw:
        assert 19 <= r["tcp_rtt_ms"] <= 30, r["tcp_rtt_ms"]
        assert r["server_flight_segments"] > 10  # MSS-sized segments on the emulated link
        assert r["server_flight_bytes"] > 14_480  # more than 10 segments of 1448 bytes
        assert r["ack_waits"] == 1, r
        # It waited about one round trip (the client's ACK to the server and back).
        assert 0.7 * r["tcp_rtt_ms"] <= r["ack_wait_ms"] <= 2 * r["tcp_rtt_ms"], r
        assert r["round_trips"] == 3
        # The initial window: 10 segments before the wait. OpenSSL's first 4096-byte write
        # leaves as 1448 + 1448 + 1200 bytes, so they carry 14,232 bytes (document 000's
        # threshold for a flight that stalls after one write buffer).
        assert r["flight_before_wait_segments"] == 10, r
        assert r["flight_before_wait_bytes"] == 14_232, r
    chain = rows(out, "SELECT DISTINCT position, key_algorithm, self_signed FROM probe_chain")
    assert sorted((c["position"], c["key_algorithm"], c["self_signed"]) for c in chain) == [
        (0, "ML-DSA-87", False),
        (1, "ML-DSA-87", True),
    ]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("X25519MLKEM768"))
    print("\n" + line)
    assert "for an ACK after 10 segments (congestion window) in 5/5" in line, line
    assert assert_messages_equal_tshark(out, port) == 5

    # The same cell in `pqlab handshake`, from the server's capture.
    hs = tmp_path / "handshake"
    res = run_pqlab(
        "handshake", "--profile", PROFILE, "--groups", "X25519MLKEM768", "--server-sig",
        "ML-DSA-87", "--ca-sig", "ML-DSA-87", "--send-root", "-n", "5", "--warmup", "1",
        "--out", hs, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    server = rows(hs, "SELECT * FROM handshake_raw")
    # The server's capture counts every segment an ACK released (the ACKs of the first
    # window release the last five segments in a few bursts); the client waited once, and
    # both see the same flight and the same total wait: one round trip.
    assert all(r["cwnd_stalls"] >= 1 and r["cv_stall_predicted"] for r in server), server
    assert {r["server_flight_bytes"] for r in server} == {raw[0]["server_flight_bytes"]}
    assert {r["server_flight_segments"] for r in server} == {raw[0]["server_flight_segments"]}
    probe_wait = statistics.median(r["ack_wait_ms"] for r in raw)
    server_wait = statistics.median(r["cwnd_stall_wait_ns"] / 1e6 for r in server)
    print(f"\nwait for the ACK: probe (client side) {probe_wait:.2f} ms, "
          f"handshake (server side) {server_wait:.2f} ms")  # fmt: skip
    assert abs(probe_wait - server_wait) <= 0.25 * 20
