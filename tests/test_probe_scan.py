"""`pqlab probe --targets`: a scan of a fleet on 127.0.0.0/8. Its targets file read and
refused line by line before anything is sent; one row per target with the verdict its
server's own configuration implies (Go's crypto/tls with the hybrid, Debian's nginx,
`openssl s_server` with ML-DSA and with TLS 1.2 only, `pqlab serve` on every stack, hostile
servers, closed ports, a name that does not resolve); the same per-configuration results a
single `pqlab probe` of each real server gets; rows written as targets finish, kept once
each by a scan killed with SIGKILL and resumed; `pqlab compare` of two scans naming the
target that changed."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import pqlab_env, run_pqlab
from pqlab.errors import UserError
from pqlab.experiments.probe import targets
from probe_helpers import go_server, probe, rows
from scan_helpers import Server, fleet, scan_argv

GROUPS = "X25519MLKEM768+X25519,X25519MLKEM768,SecP256r1MLKEM768,X25519"


# --- the targets file ------------------------------------------------------------------------


def test_target_lines_are_read_with_their_names_and_line_numbers():
    text = (
        "# the fleet\n"
        "127.0.0.1:4433\n"
        "\n"
        "[::1]:8443   v6 server   # a comment\n"
        "https://localhost/index.html  web\n"
    )
    lines = targets.parse_lines(text, "fleet.txt")
    assert [(t.line, t.name, t.host, t.port, t.path) for t in lines] == [
        (2, "127.0.0.1:4433", "127.0.0.1", 4433, None),
        (4, "v6 server", "::1", 8443, None),
        (5, "web", "localhost", 443, "/index.html"),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("127.0.0.1:443\n127.0.0.1\n", "fleet.txt:2: '127.0.0.1' is not HOST:PORT"),
        ("a:1 x\nb:2 x\n", "fleet.txt:2: the target 'x' is named on line 1 too"),
        ("http://example.com/\n", "fleet.txt:1: 'http://example.com/': a URL target is https://"),
        ("127.0.0.1:70000\n", "fleet.txt:1: '127.0.0.1:70000' is not HOST:PORT"),
        ("a:1 +x\n", "fleet.txt:1: name '+x'"),
        ("# nothing\n\n", "fleet.txt names no target"),
    ],
)
def test_a_bad_target_line_is_named_by_its_line(text, message):
    with pytest.raises(UserError) as e:
        targets.parse_lines(text, "fleet.txt")
    assert str(e.value).startswith(message), str(e.value)


def test_an_ansible_inventory_group(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[web]\nweb[1:2] ansible_host=127.0.0.1\n[web:vars]\nhttps_port=8443\n"
        "[db]\ndb1 ansible_host=127.0.0.3\n"
    )
    got = targets.from_inventory(str(inv), "web")
    assert [(t.name, t.host, t.port) for t in got] == [
        ("web1", "127.0.0.1", 8443),
        ("web2", "127.0.0.1", 8443),
    ]
    with pytest.raises(UserError, match="neither a group nor a host"):
        targets.from_inventory(str(inv), "nosuch")


def test_a_bad_line_stops_the_scan_before_anything_is_sent(tmp_path):
    """Nothing connects to the good targets before the bad line, and nothing is created."""
    accepted = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def count():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.close()

    t = threading.Thread(target=count, daemon=True)
    t.start()
    try:
        port = listener.getsockname()[1]
        (tmp_path / "t.txt").write_text(f"127.0.0.1:{port} good\n127.0.0.1:{port}x bad\n")
        out = tmp_path / "run"
        proc = run_pqlab("probe", "--targets", tmp_path / "t.txt", "--out", out, "--no-capture")
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=5)
        listener.close()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 't.txt'}:2: '127.0.0.1:{port}x' is not HOST:PORT (e.g. "
        "127.0.0.1:4433, example.com:443, [::1]:443)"
    ]
    assert not out.exists() and accepted == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["127.0.0.1:1"], "give TARGET ('127.0.0.1:1') or --targets FILE, not both"),
        (["--name", "x"], "--name names one server"),
        (["--parallel", "0"], "--parallel"),
        (["--parallel", "257"], "--parallel"),
        (["--rate", "0"], "--rate '0': new connections a second"),
        (["--rate", "nan"], "--rate 'nan'"),
        (["--plan-sig", "NoSuchAlg"], "NoSuchAlg"),
    ],
)
def test_bad_scan_options_are_one_line(tmp_path, args, message):
    (tmp_path / "t.txt").write_text("127.0.0.1:1\n")
    proc = run_pqlab("probe", "--targets", tmp_path / "t.txt", "--out", tmp_path / "run", *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()


# --- scans of real, hostile and closed servers -----------------------------------------------


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with fleet(tmp_path_factory.mktemp("fleet")) as got:
        yield got


def _targets_file(path, servers: list[Server], copies: int = 1) -> dict[str, Server]:
    """Each server as `copies` targets (named NAME, NAME-2, ...); name -> server."""
    named = {}
    for s in servers:
        for i in range(copies):
            named[s.name if i == 0 else f"{s.name}-{i + 1}"] = s
    path.write_text("".join(f"{s.target} {name}\n" for name, s in named.items()))
    return named


def _scan(targets_file, out, ca, *args, timeout=900):
    proc = subprocess.run(
        scan_argv(targets_file, out, ca, "--groups", GROUPS, "--timeout", "3", *args),
        capture_output=True, text=True, env=pqlab_env(), timeout=timeout,
    )  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_a_scan_gives_each_target_the_verdict_of_its_server(tmp_path, servers):
    fleet_servers, ca = servers
    named = _targets_file(tmp_path / "t.txt", fleet_servers, copies=2)
    out = tmp_path / "run"
    proc = _scan(tmp_path / "t.txt", out, ca, "--parallel", "8", "--rate", "100")
    assert proc.returncode == 0, proc.stderr
    got = {r["target"]: r for r in rows(out, "SELECT * FROM probe_targets")}
    assert {n: r["verdict"] for n, r in got.items()} == {n: s.verdict for n, s in named.items()}
    reasons = {n: got[n]["unreachable_reason"] for n in ("closed", "garbage", "silent", "no-dns")}
    assert reasons == {"closed": "refused", "garbage": "not-tls", "silent": "timeout",
                       "no-dns": "dns"}  # fmt: skip
    # What the rows say of the servers, from their own configurations.
    assert got["go-hybrid"]["browser_group"] == "X25519MLKEM768"
    assert got["go-hybrid"]["pq_accepted"] == "X25519MLKEM768,SecP256r1MLKEM768"
    assert got["go-hybrid"]["chain_algorithms"] == "ECDSA-P256 <- ECDSA-P256"
    assert got["go-hybrid"]["chain_certs"] == 2 and got["go-hybrid"]["chain_expiry"]
    assert got["nginx"]["pq_refused"] == "X25519MLKEM768,SecP256r1MLKEM768"
    assert got["nginx"]["browser_group"] == "X25519"
    assert got["go-p256-hybrid"]["pq_accepted"] == "SecP256r1MLKEM768"
    assert got["s_server-tls12"]["tls_versions"] == "TLS 1.2 or older"
    for st in ("openssl", "rustls", "rustls-aws-lc-rs", "wolfssl"):
        assert got[f"serve-{st}"]["chain_algorithms"].startswith("ML-DSA-44"), got[f"serve-{st}"]
    # Captures are off when scanning; a wait for an ACK is then not known.
    assert not (out / "captures").exists()
    assert all(r["first_flight_waited_for_ack"] is None for r in got.values())
    # A target with no TLS service stops after its first configuration.
    assert got["closed"]["configurations"] == 1 and got["silent"]["configurations"] == 1
    # The files: each target once, as in the database.
    with open(out / "tables" / "probe_targets.csv", newline="") as f:
        assert sorted(r["target"] for r in csv.DictReader(f)) == sorted(named)
    jsonl = (out / "tables" / "probe_targets.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["target"] for line in jsonl) == sorted(named)
    # Every completed target's flight predicted with ML-DSA chains on the default paths, and
    # an ML-DSA chain is never smaller than the ECDSA one it replaces.
    plans = rows(out, "SELECT * FROM probe_target_plans WHERE target = 'go-hybrid'")
    assert {(p["sig"], p["path"]) for p in plans} == {
        (s, p) for s in ("ML-DSA-44", "ML-DSA-65")
        for p in ("rtt=20ms,initcwnd=10", "rtt=100ms,rate=20mbit,initcwnd=10")
    }  # fmt: skip
    assert all(p["planned_flight_bytes"] > p["today_flight_bytes"] for p in plans)
    html = (out / "report.html").read_text()
    assert "Targets per verdict" in html and "table.data th" in html  # sortable
    assert f"verdicts: pq-ready {2 * 6}" in proc.stdout


def test_verdicts_match_a_single_probe_of_each_server(tmp_path, servers):
    """Every configuration of every real server: the scan's outcome and group are the ones
    a `pqlab probe` of that server alone gets."""
    fleet_servers, ca = servers
    real = [s for s in fleet_servers if s.real]
    _targets_file(tmp_path / "t.txt", real)
    scan_out = tmp_path / "scan"
    assert _scan(tmp_path / "t.txt", scan_out, ca, "--parallel", "4").returncode == 0
    scanned = rows(scan_out, "SELECT probe, config, outcome, verdict FROM probe_configs")
    for s in real:
        out = tmp_path / s.name
        proc = probe(out, s.target, "--groups", GROUPS, "-n", "1", "--timeout", "3",
                     "--no-capture", "--ca", ca)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        single = {r["config"]: r for r in rows(out, "SELECT * FROM probe_raw")}
        ours = {r["config"]: r for r in rows(scan_out, "SELECT * FROM probe_raw WHERE probe = ?",
                                             [s.name])}  # fmt: skip
        assert set(ours) == set(single), s.name
        for config, r in single.items():
            assert (ours[config]["outcome"], ours[config]["group"]) == (
                r["outcome"], r["group"]), (s.name, config)  # fmt: skip
        line = proc.stdout.strip().splitlines()[-1]
        verdict = next(v["verdict"] for v in rows(
            scan_out, "SELECT verdict FROM probe_targets WHERE target = ?", [s.name]))  # fmt: skip
        # The single probe's server line says the same as the scan's one word.
        if verdict in ("pq-ready", "pq-with-hrr"):
            assert "post-quantum groups accepted" in line, (s.name, line)
        else:  # a TLS 1.2-only server completes no TLS 1.3 handshake at all
            assert "no post-quantum group accepted" in line or (
                "no configuration completed a handshake" in line
            ), (s.name, line)
    assert len(scanned) >= len(real)


def test_a_scan_killed_with_sigkill_resumes_without_duplicate_rows(tmp_path, servers):
    fleet_servers, ca = servers
    named = _targets_file(tmp_path / "t.txt", fleet_servers, copies=3)
    out = tmp_path / "run"
    argv = scan_argv(tmp_path / "t.txt", out, ca, "--groups", GROUPS, "--timeout", "3",
                     "--parallel", "2", "--rate", "20")  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=pqlab_env())  # fmt: skip
    live = out / "tables" / "probe_targets.jsonl"
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if live.exists() and len(live.read_text().splitlines()) >= 6:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    before = len(rows(out, "SELECT * FROM probe_targets"))
    assert 0 < before < len(named)
    resumed = _scan(tmp_path / "t.txt", out, ca, "--parallel", "8", "--rate", "100", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"({before} done before)" in resumed.stdout
    names = [r["target"] for r in rows(out, "SELECT target FROM probe_targets")]
    assert sorted(names) == sorted(named)
    cells = [r["cell_id"] for r in rows(out, "SELECT cell_id FROM probe_configs")]
    assert len(cells) == len(set(cells))
    done = [r["cell_id"] for r in rows(out, "SELECT cell_id FROM cells")]
    assert len(done) == len(set(done)) == len(cells)
    with open(out / "tables" / "probe_targets.csv", newline="") as f:
        assert sorted(r["target"] for r in csv.DictReader(f)) == sorted(named)
    lines = live.read_text().splitlines()
    assert sorted(json.loads(line)["target"] for line in lines) == sorted(named)


def test_compare_of_two_scans_names_the_target_that_changed(tmp_path, servers):
    fleet_servers, ca = servers
    keep = [s for s in fleet_servers if s.name in ("nginx", "closed")]
    from pqlab.tls.chains import make_chain
    from probe_helpers import go_server_binary

    chain = make_chain(tmp_path / "certs", "ECDSA-P256", "ECDSA-P256")
    binary = go_server_binary(tmp_path)
    runs = []
    for i, groups in enumerate(("X25519", "X25519MLKEM768,X25519")):
        with go_server(binary, chain.chain, chain.key, "-groups", groups) as port:
            # The same target name, the server upgraded between the two scans.
            _targets_file(
                tmp_path / "t.txt", [*keep, Server("edge", f"127.0.0.1:{port}", "", True)]
            )
            out = tmp_path / f"scan{i}"
            assert _scan(tmp_path / "t.txt", out, ca).returncode == 0
            runs.append(out)
    proc = run_pqlab("compare", *runs)
    assert proc.returncode == 0, proc.stderr
    changed = [line.strip() for line in proc.stdout.splitlines() if line.startswith("  edge:")]
    assert len(changed) == 1, proc.stdout
    assert "verdict classical-only -> pq-ready" in changed[0]
    assert "browser_group X25519 -> X25519MLKEM768" in changed[0]
    assert not any(line.startswith(("  nginx", "  closed")) for line in proc.stdout.splitlines())
