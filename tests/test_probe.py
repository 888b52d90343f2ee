"""`pqlab probe`'s own logic: client configurations and targets, what each stack's client can
send, waits for an ACK from the client's side, outcomes and verdict lines, certificate
names; and, through the CLI, bad input refused before anything exists, a probe without a
capture, suites, resume, report and compare."""

from __future__ import annotations

import argparse
import json
import subprocess

import pytest

from conftest import is_root, run_pqlab
from pqlab import catalog
from pqlab.errors import UserError
from pqlab.experiments.probe import analyse, plan, verdict, wire
from pqlab.pcap import ACK, Connection, Segment
from pqlab.tls import stacks
from pqlab.tls.chains import make_chain
from probe_helpers import pqlab_serve, probe, rows, verdicts

# --- configurations and targets ---------------------------------------------------------------


def test_configurations_name_their_groups_and_key_shares():
    c = plan.parse_config("x25519mlkem768+X25519/secp256r1mlkem768")
    assert [g.name for g in c.groups] == ["X25519MLKEM768", "X25519", "SecP256r1MLKEM768"]
    assert [g.name for g in c.shares] == ["X25519MLKEM768", "X25519"]
    assert c.name == "X25519MLKEM768+X25519/SecP256r1MLKEM768"
    assert [g.name for g in c.post_quantum] == ["X25519MLKEM768", "SecP256r1MLKEM768"]
    assert plan.parse_config("X25519").name == "X25519"
    for bad, why in [
        ("X25519+", "empty group"),
        ("A/B/C", "one '/' at most"),
        ("X25519/", "after '/'"),
        ("X25519+x25519", "twice"),
        ("X25519+NOPE", "unknown KEM or key exchange 'NOPE'"),
        ("ML-DSA-44", "is a signature algorithm"),
    ]:
        with pytest.raises(UserError, match=why):
            plan.parse_config(bad)


def test_targets():
    t = plan.parse_target("127.0.0.1:4433")
    assert (t.host, t.port, t.address, t.path, t.connect) == (
        "127.0.0.1", 4433, "127.0.0.1", None, "127.0.0.1:4433"
    )  # fmt: skip
    t = plan.parse_target("[::1]:8443")
    assert (t.host, t.connect) == ("::1", "[::1]:8443")
    t = plan.parse_target("https://localhost/index.html?a=1")
    assert (t.host, t.port, t.path) == ("localhost", 443, "/index.html?a=1")
    assert plan.parse_target("https://127.0.0.1:9443").path == "/"
    for bad in ["example.com", "127.0.0.1:0", "127.0.0.1:70000", "http://x/", "https://:4/",
                "[::1", "::1:443", "[::1]443", "host:port"]:  # fmt: skip
        with pytest.raises(UserError):
            plan.parse_target(bad)
    with pytest.raises(UserError, match="cannot resolve"):
        plan.parse_target("no-such-host.invalid:443")


def _stack(kind: str, companions=None) -> stacks.Stack:
    base = stacks.get("openssl")
    from dataclasses import replace

    return replace(base, key_shares=kind, key_share_companions=companions or {})


def test_what_each_stacks_client_can_send():
    hybrid, x25519 = catalog.resolve("X25519MLKEM768", "kem"), catalog.resolve("X25519", "kem")
    p256 = catalog.resolve("P-256", "kem")
    anything = _stack("any")
    first = _stack("first", {hybrid.tls_group: x25519.tls_group})
    assert anything.key_shares_why_not([hybrid, x25519], [x25519]) is None
    # The first group's share, with the hybrid's classical half when that is offered too.
    assert first.key_shares_why_not([hybrid, x25519], [hybrid, x25519]) is None
    assert "X25519MLKEM768 and X25519" in first.key_shares_why_not([hybrid, x25519], [hybrid])
    assert first.key_shares_why_not([x25519, hybrid], [x25519]) is None
    assert first.key_shares_why_not([hybrid, p256], [hybrid]) is None
    assert first.key_shares_why_not([x25519, p256], [x25519, p256]) is not None
    # And what the engine reports for its real stacks.
    rustls = stacks.get("rustls-aws-lc-rs")
    assert rustls.key_shares == "first"
    assert rustls.key_share_companions == {hybrid.tls_group: x25519.tls_group}
    assert stacks.get("openssl").key_shares == "any"


# --- waits for an ACK, from the client's capture ------------------------------------------


def _flight(times_us: list[float], sizes: list[int], acks_us: list[tuple[float, int]]):
    """A connection whose server flight arrives as segments of `sizes` at `times_us`
    (after a SYN at 0 and its SYN/ACK at 20 ms), and client ACKs (time, bytes acked)."""
    conn = Connection(client=("c", 1), server=("s", 2))
    segs, offset = [], 0
    for t, n in zip(times_us, sizes, strict=True):
        segs.append(Segment(int(t * 1000), False, ACK, offset, offset + n, 0, n + 52))
        offset += n
    for t, acked in acks_us:
        segs.append(Segment(int(t * 1000), True, ACK, 0, 0, acked, 52))
    conn.segments = sorted(segs, key=lambda s: s.ts_ns)
    return conn, offset


RTT = 20_000_000  # ns


def test_a_flight_that_waits_one_round_trip_for_the_clients_ack():
    # 15 segments: 10 in a burst, the client ACKs the first two at once, the last 5 come
    # one round trip after that ACK (plus the burst's 0.1 ms).
    times = [100 + 10 * i for i in range(10)] + [20_100 + 10 * i for i in range(5)]
    conn, end = _flight(times, [1448] * 15, [(105, 2 * 1448), (195, 10 * 1448)])
    waits, waited, before = wire.flight_waits(conn, 0, end, RTT, 1448)
    assert waits == 1
    assert waited == (20_100 - 190) * 1000
    assert before == (10, 10 * 1448)


def test_a_server_computing_between_writes_is_no_wait_for_an_ack():
    # The same burst, then the last segments 3 ms later: the server was signing.
    times = [100 + 10 * i for i in range(10)] + [3_200 + 10 * i for i in range(5)]
    conn, end = _flight(times, [1448] * 15, [(105, 2 * 1448), (195, 10 * 1448)])
    assert wire.flight_waits(conn, 0, end, RTT, 1448)[0] == 0
    # Nor is a round-trip gap after too little of the flight to fill any window.
    times = [100, 20_110]
    conn, end = _flight(times, [1448, 1448], [(105, 1448)])
    assert wire.flight_waits(conn, 0, end, RTT, 1448)[0] == 0
    # On loopback (64 KiB segments) a 20 KB flight never fills a window either.
    conn, end = _flight([100, 20_110], [16_000, 5_000], [(105, 16_000)])
    assert wire.flight_waits(conn, 0, end, RTT, 65_483)[0] == 0


def test_segments_merged_by_receive_offload_are_counted_by_their_bytes():
    # Three 1448-byte segments merged into one packet, then two more alone.
    conn, end = _flight([100, 110, 120], [4344, 1448, 1000], [])
    assert wire.coalesced_segment_size(conn, 1460) == 1448
    conn2, _ = _flight([100, 110], [1448, 1000], [])
    assert wire.coalesced_segment_size(conn2, 1460) is None
    assert wire.coalesced_segment_size(conn2, 65483) is None  # loopback's segments


def test_two_waits_in_a_long_flight():
    times = (
        [100 + 10 * i for i in range(10)]
        + [20_100 + 10 * i for i in range(20)]
        + [40_200 + 10 * i for i in range(3)]
    )
    acks = [(105, 2 * 1448), (20_105, 12 * 1448)]
    conn, end = _flight(times, [1448] * 33, acks)
    waits, _, before = wire.flight_waits(conn, 0, end, RTT, 1448)
    assert (waits, before) == (2, (10, 10 * 1448))


# --- outcomes and verdicts ----------------------------------------------------------------


def _row(**kw) -> dict:
    base = {
        "outcome": "accepted",
        "group": "X25519MLKEM768",
        "post_quantum": True,
        "version": "TLSv1.3",
        "cipher": "TLS_AES_256_GCM_SHA384",
        "sigalg": "mldsa44",
        "verified": True,
        "offered_groups": "X25519MLKEM768",
        "server_flight_bytes": 7981,
        "server_flight_segments": 6,
        "round_trips": 2,
        "ack_waits": 0,
        "ttfb_ms": 2.0,
        "client_hello_bytes": 1406,
    }
    return {**base, **kw}


def _cell(text: str) -> plan.Cell:
    return plan.Cell(plan.parse_config(text), None, "openssl")


def test_verdict_lines():
    kind, line = verdict.config_verdict(_cell("X25519MLKEM768"), [_row(), _row()], [], 10)
    assert kind == "accepted"
    assert line.startswith("accepted X25519MLKEM768 (post-quantum); TLSv1.3")
    assert "flight 7,981 B in 6 segments, 2 RTT, no wait for an ACK" in line
    assert line.endswith("[2 connections]")
    fallback = _row(group="X25519", post_quantum=False, offered_groups="X25519MLKEM768,X25519")
    _, line = verdict.config_verdict(_cell("X25519MLKEM768+X25519"), [fallback], [], 10)
    assert line.startswith("fell back to X25519: no post-quantum group taken")
    hrr = _row(outcome="hello-retry", hello_retry=True, hello_retry_ms=0.11,
               hello_retry_bytes=1520, round_trips=3)  # fmt: skip
    kind, line = verdict.config_verdict(_cell("X25519/X25519MLKEM768"), [hrr], [], 10)
    assert kind == "hello-retry"
    assert line.startswith("HelloRetryRequest for X25519MLKEM768 (+1 RTT, +0.11 ms, +1,520 B)")
    refused = _row(outcome="refused", alert="handshake_failure (40)", group=None)
    kind, line = verdict.config_verdict(_cell("ML-KEM-768"), [refused], [], 10)
    assert (kind, line) == (
        "refused",
        "refused: the server answered after the ClientHello (1,406 B) with alert "
        "handshake_failure (40)",
    )
    timeout = _row(outcome="timeout", group=None, bytes_received=0, failed_in="handshake")
    assert verdict.config_verdict(_cell("X25519"), [timeout], [], 3)[1] == (
        "timed out after 3 s in the handshake: nothing received after the ClientHello (1,406 B)"
    )
    late = _row(outcome="timeout", bytes_received=20480, failed_in="response")
    assert verdict.config_verdict(_cell("X25519"), [late], [], 3)[1] == (
        "timed out after 3 s in the response: 20.0 KiB received"
    )
    kind, line = verdict.config_verdict(_cell("X25519"), [_row(), refused], [], 10)
    assert kind == "mixed" and line.startswith("mixed: 1 of 2 completed, then refused")


def test_the_server_line_names_its_post_quantum_groups():
    rows_ = [
        _row(offered_groups="X25519MLKEM768"),
        _row(outcome="refused", offered_groups="ML-KEM-768", post_quantum=None),
        _row(offered_groups="X25519", post_quantum=False),
        _row(offered_groups="X25519MLKEM768,X25519"),  # two groups: not one group's answer
    ]
    assert verdict.server_verdict("srv", rows_) == (
        "srv: post-quantum groups accepted: X25519MLKEM768; not: ML-KEM-768"
    )
    classical = [
        _row(outcome="refused", offered_groups="X25519MLKEM768"),
        _row(offered_groups="X25519", post_quantum=False),
    ]
    assert verdict.server_verdict("srv", classical) == (
        "srv: no post-quantum group accepted (classical only: X25519); refused: X25519MLKEM768"
    )


def test_outcomes_from_the_engine_and_the_wire():
    ok = {"type": "connection"}
    assert analyse.outcome(ok, wire.Wire()) == "accepted"
    assert analyse.outcome(ok, wire.Wire(hello_retry=True)) == "hello-retry"

    def err(kind, message, **w):
        return analyse.outcome({"type": "connection_error", "kind": kind, "message": message},
                               wire.Wire(**w))  # fmt: skip

    assert err("io", "TCP connect failed: refused") == "unreachable"
    assert err("peer", "x", alert=(2, 40)) == "refused"
    assert err("peer", "x", alert=(2, 70)) == "tls12"
    assert err("library", "x", server_version=0x0303) == "tls12"
    assert err("library", "x", not_tls=True) == "not-tls"
    assert err("library", "error:...:wrong version number:...") == "not-tls"
    assert err("io", "no data from the server for 2 s (--io-timeout)") == "timeout"
    assert err("peer", "the peer closed the connection (EOF)") == "closed"
    assert err("library", "excessive message size") == "failed"
    assert (
        verdict.reason(
            "connection 0 to 1.2.3.4:443: handshake failed: error:0A000098:SSL routines:"
            "read_state_machine:excessive message size:ssl/statem/statem.c:652:"
        )
        == "handshake failed: excessive message size"
    )
    checked = _row(outcome="failed", error_kind="check", certificate_bytes=4186,
                   error="connection 0: server signed with mldsa44, asked for ecdsa")  # fmt: skip
    assert verdict.config_verdict(_cell("X25519"), [checked], [], 10)[1] == (
        "completed, but failed the probe's check: server signed with mldsa44, asked for ecdsa"
    )


def test_certificates_are_named_by_their_algorithms(tmp_path):
    from pqlab.experiments.probe import chain

    for ca, server, key, sig in [
        ("ML-DSA-44", "ML-DSA-65", "ML-DSA-65", "ML-DSA-44"),
        ("ECDSA-P256", "RSA-2048", "RSA-2048", "ecdsa-with-SHA256"),
        ("ML-DSA-44", "MAYO-1", "MAYO-1", "ML-DSA-44"),  # a key cryptography cannot load
    ]:
        c = make_chain(tmp_path, ca, server, send_root=True)
        ders = [c.server_cert.with_suffix(".der").read_bytes(),
                (c.directory / "root.crt.der").read_bytes()]  # fmt: skip
        leaf, root = chain.describe(ders)
        assert (leaf["key_algorithm"], leaf["signature_algorithm"]) == (key, sig)
        assert leaf["der_bytes"] == len(ders[0]) and not leaf["self_signed"]
        assert root["self_signed"] and root["issuer"] == leaf["issuer"]
    assert "not a certificate" in chain.describe([b"junk"])[0]["subject"]


# --- through the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,words",
    [
        (["nohost"], "is not HOST:PORT"),
        (["127.0.0.1:443", "--groups", "X25519+NOPE"], "unknown KEM"),
        (["127.0.0.1:443", "--groups", ""], "is empty"),
        (["127.0.0.1:443", "--groups", ","], "names nothing"),
        (["127.0.0.1:443", "--sig", "ML-KEM-768"], "is a key exchange"),
        (["127.0.0.1:443", "-n", "0"], "-n '0' must be at least 1"),
        (["127.0.0.1:443", "--timeout", "601"], "--timeout"),
        (["127.0.0.1:443", "--path", "x"], "must start with /"),
        (["https://127.0.0.1/a", "--path", "/b"], "differ"),
        (["127.0.0.1:443", "--ca", "/nonexistent.pem"], "is not a file"),
        (
            ["127.0.0.1:443", "--stack", "rustls-aws-lc-rs", "--groups", "X25519MLKEM768/X25519"],
            "sends key shares for the first group offered only",
        ),
        (["127.0.0.1:443", "--interface", "nope0"], "no such interface"),
        (["127.0.0.1:443", "--name", "a|b"], "--name"),
    ],
)
def test_bad_input_is_one_line_before_anything_exists(tmp_path, args, words):
    if "--interface" in args and not is_root():
        pytest.skip("the interface is checked only when the probe may capture")
    out = tmp_path / "run"
    proc = run_pqlab("probe", *args, "--out", out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert not out.exists()


def test_default_configurations_a_stack_lacks_are_skipped_and_said(monkeypatch):
    # The rustls stack sends a hybrid's classical share along: every default runs on it.
    values = argparse.Namespace(**{**vars(_defaults()), "target": "127.0.0.1:1",
                                   "stack": "rustls-aws-lc-rs", "no_capture": True})  # fmt: skip
    p = plan.from_values(values)
    names = {c.config.name for c in p.cells}
    assert "X25519MLKEM768+X25519" in names
    assert all(c.stack.name == "rustls-aws-lc-rs" for c in p.cells)
    assert {c.config.name for c in p.cells} | {s.split(" on ")[0] for s in p.skipped} == set(
        plan.DEFAULT_CONFIGS
    )


def _defaults():
    from pqlab.experiments.probe import EXPERIMENT

    return EXPERIMENT.defaults()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with pqlab_serve(tmp_path_factory.mktemp("serve"), "--group", "X25519MLKEM768",
                     "--sig", "ML-DSA-44", "--send-root") as (port, root):  # fmt: skip
        yield port, root


def test_without_a_capture_the_client_tells_what_it_knows(tmp_path, served):
    port, root = served
    out = tmp_path / "run"
    proc = probe(out, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", root,
                 "--groups", "X25519MLKEM768", "-n", "2", "--no-capture")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not capturing (--no-capture)" in proc.stdout
    raw = rows(out, "SELECT * FROM probe_raw")
    assert {r["messages_from"] for r in raw} == {"client"}  # OpenSSL's own events
    assert all(r["server_flight_segments"] is None and r["round_trips"] is None for r in raw)
    msgs = rows(out, "SELECT sender, message, length_bytes FROM probe_messages WHERE idx = 0 "
                     "ORDER BY seq")  # fmt: skip
    names = [(m["sender"], m["message"]) for m in msgs]
    assert names == [("client", "ClientHello"), ("server", "ServerHello"),
                     ("server", "EncryptedExtensions"), ("server", "Certificate"),
                     ("server", "CertificateVerify"), ("server", "Finished"),
                     ("client", "Finished")]  # fmt: skip
    cert = next(m["length_bytes"] for m in msgs if m["message"] == "Certificate")
    chain = rows(out, "SELECT der_bytes FROM probe_chain WHERE idx = 0 ORDER BY position")
    # TLS 1.3 Certificate: 4 + 1 + 3, then per certificate 3 + DER + 2.
    assert cert == 8 + sum(5 + c["der_bytes"] for c in chain)
    warnings = rows(out, "SELECT code FROM warnings")
    assert {w["code"] for w in warnings} == {"probe-unseen"}
    if is_root():  # the same connections captured: the same messages
        out2 = tmp_path / "captured"
        probe(out2, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", root,
              "--groups", "X25519MLKEM768", "-n", "1")  # fmt: skip
        captured = rows(out2, "SELECT sender, message, length_bytes FROM probe_messages "
                              "WHERE idx = 0 ORDER BY seq")  # fmt: skip
        assert captured == msgs
        assert rows(out2, "SELECT messages_agree FROM probe_raw")[0]["messages_agree"] is True


def test_without_cap_net_raw_it_runs_and_says_what_it_cannot_see(tmp_path, served):
    import shutil
    import sys

    from conftest import pqlab_env

    if not is_root() or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_NET_RAW alone")
    port, root = served
    out = tmp_path / "run"
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-net_raw", sys.executable, "-m", "pqlab", "probe",
         f"127.0.0.1:{port}", "--servername", "localhost", "--ca", root, "--groups",
         "X25519MLKEM768", "-n", "1", "--out", out],
        capture_output=True, text=True, env=pqlab_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not capturing (this process lacks CAP_NET_RAW" in proc.stdout
    assert verdicts(out)["X25519MLKEM768"].startswith("accepted X25519MLKEM768")
    assert not list((out / "captures").iterdir())  # no pcap, and no secrets written


def test_suite_resume_report_and_compare(tmp_path, served):
    port, root = served
    suite = tmp_path / "probes.toml"
    step = (
        '[[step]]\nexperiment = "probe"\ntarget = "127.0.0.1:{port}"\nname = "{name}"\n'
        'servername = "localhost"\nca = "{root}"\ngroups = ["X25519MLKEM768", "X25519"]\n'
        "n = 3\nno-capture = true\n"
    )
    suite.write_text(step.format(port=port, root=root, name="web"))
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        proc = run_pqlab("suite", suite, "--out", out, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    assert verdicts(a)["X25519MLKEM768"].startswith("accepted X25519MLKEM768")
    assert verdicts(a)["X25519"].startswith("refused")
    assert (a / "tables" / "probe.csv").exists() and (a / "report.html").exists()
    assert "Probes of TLS servers" in (a / "report.html").read_text()
    assert "web: post-quantum groups accepted: X25519MLKEM768" in (a / "report.html").read_text()
    # Resume: nothing left to measure, the stored verdicts printed again.
    proc = run_pqlab("probe", f"127.0.0.1:{port}", "--name", "web", "--servername", "localhost",
                     "--ca", root, "--groups", "X25519MLKEM768,X25519", "-n", "3",
                     "--no-capture", "--out", a, "--resume")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("accepted X25519MLKEM768") == 1
    assert len(rows(a, "SELECT * FROM probe_raw")) == 3 + 1
    # The report is rebuilt from the database alone.
    (a / "tables" / "probe.csv").unlink()
    assert run_pqlab("report", a).returncode == 0
    assert (a / "tables" / "probe.csv").exists()
    # Two probes of the same name compare, measurement by measurement.
    proc = run_pqlab("compare", a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    compared = json.loads(proc.stdout)["rows"]
    labels = {(r["experiment"], r["key"]) for r in compared}
    assert ("probe ttfb", "web / X25519MLKEM768 / default / openssl") in labels
