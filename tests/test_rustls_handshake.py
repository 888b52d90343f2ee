"""The candidate signatures in real handshakes on the rustls stack, checked against
instruments pqlab does not contain: Wireshark's dissector (tshark) decrypting the kept
captures with the kept key logs, and a separate pcap parser counting the server's flight.
Refusals of what the stack cannot carry come in one line, before anything exists."""

from __future__ import annotations

import collections
import shutil
import subprocess

import duckdb
import pytest

from conftest import handshake_cells, netns_list, run_pqlab
from test_handshake_e2e import minimal_flight_counts

pytestmark = pytest.mark.net

PORT = 4466
SERVER_SIGS = ["MAYO-2", "CROSS-RSDP-128-balanced", "Falcon-512", "ML-DSA-44"]
# Handshake message type -> the handshake_raw column with its size (header included).
SERVER_MESSAGES = {
    2: "server_hello_bytes",
    8: "encrypted_extensions_bytes",
    11: "certificate_bytes",
    15: "certificate_verify_bytes",
    20: "server_finished_bytes",
}


def tshark_server_messages(pcap, keylog, port: int) -> dict[int, dict[int, int]]:
    """Per client port, the size (4-byte header included) of each handshake message the
    server sent, as Wireshark's TLS dissector decrypts them with the key log."""
    out = subprocess.run(
        [
            "tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}",
            "-o", "tls.desegment_ssl_records:TRUE", "-d", f"tcp.port=={port},tls",
            "-Y", f"tcp.srcport=={port} && tls.handshake.type",
            "-T", "fields", "-e", "tcp.dstport", "-e", "tls.handshake.type",
            "-e", "tls.handshake.length",
        ],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    by_port: dict[int, dict[int, int]] = collections.defaultdict(dict)
    for line in out.stdout.splitlines():
        dport, types, lengths = line.split("\t")
        for t, n in zip(types.split(","), lengths.split(","), strict=True):
            by_port[int(dport)][int(t)] = int(n) + 4
    return by_port


def test_candidate_signatures_on_rustls_agree_with_wireshark_and_the_capture(tmp_path):
    assert shutil.which("tshark"), "tshark is installed by scripts/bootstrap.sh"
    out = tmp_path / "R"
    run_pqlab(
        "handshake", "--stack", "rustls", "--groups", "X25519,X25519MLKEM768",
        "--server-sig", ",".join(SERVER_SIGS), "--ca-sig", "ML-DSA-44",
        "-n", "20", "--warmup", "2", "--keep-pcap", "--port", PORT, "--out", out,
        check=True, timeout=900,
    )  # fmt: skip
    summary = (out / "tables" / "handshake_summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 2 * len(SERVER_SIGS)
    assert all(line.count('"rustls"') == 1 for line in summary[1:])
    assert (out / "figures" / "handshake_flight_size_vs_sh_to_fin.png").exists()
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    # Each view's phases add up to the handshake.
    bad = con.execute("""
        SELECT count(*) FROM (
          SELECT p.cell_id, p.idx, p.view, sum(p.ns) AS s, any_value(r.total_ns) AS total
          FROM handshake_phase p JOIN handshake_raw r USING (cell_id, idx)
          GROUP BY p.cell_id, p.idx, p.view) WHERE s != total""").fetchone()[0]
    assert bad == 0
    assert con.execute("SELECT count(DISTINCT view) FROM handshake_phase").fetchone()[0] == 2
    cols = ", ".join(SERVER_MESSAGES.values())
    rows = con.execute(
        f'SELECT "group", server_sig, ca_sig, client_port, server_flight_segments, '
        f"negotiated_sigalg, {cols} FROM handshake_raw"
    ).fetchall()
    con.close()
    assert {r[1] for r in rows} == set(SERVER_SIGS)
    by_cell = collections.defaultdict(list)
    for r in rows:
        by_cell[r[:3]].append(r)
    cells = handshake_cells(out)
    for (g, s, c), cell in by_cell.items():
        pcap = out / "pcap" / f"{g}_{s}_{c}.server.pcap"
        keylog = out / "pcap" / f"{g}_{s}_{c}.keys.log"
        server_port, _ = cells[(g, s, c)]
        segments = minimal_flight_counts(pcap, server_port)
        wireshark = tshark_server_messages(pcap, keylog, server_port)
        for r in cell:
            port = r[3]
            assert segments[port] == r[4], f"{g}/{s}: flight segments"
            ours = dict(zip(SERVER_MESSAGES, r[6:], strict=True))
            assert wireshark[port] == ours, f"{g}/{s} port {port}"


def test_a_certificate_over_the_stacks_limit_is_refused_in_one_line(tmp_path):
    before = set(netns_list())
    proc = run_pqlab(
        "handshake", "--stack", "rustls", "--groups", "X25519", "--server-sig", "OV-Is",
        "--ca-sig", "ML-DSA-44", "--out", tmp_path / "x", timeout=60,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "OV-Is" in lines[0] and "64 KiB" in lines[0], lines[0]
    # A chain whose parts fit but whose certificate does not (a 43 KB key signed with a
    # 30 KB signature) is refused too.
    proc = run_pqlab(
        "handshake", "--stack", "rustls", "--groups", "X25519", "--server-sig", "OV-Ip-pkc",
        "--ca-sig", "SPHINCS+-SHA2-256s-simple", "--out", tmp_path / "y", timeout=60,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "OV-Ip-pkc" in lines[0] and "65535" in lines[0], lines[0]
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert set(netns_list()) == before


def test_algorithms_lists_the_candidates_as_rustls_signers():
    proc = run_pqlab("algorithms", "--tls", "--stack", "rustls", check=True, timeout=60)
    server_lines = [line for line in proc.stdout.splitlines() if "MAYO-1" in line]
    assert server_lines and any("server" in line for line in server_lines), proc.stdout


def test_the_same_cell_on_three_stacks_compares_cleanly(tmp_path):
    runs = {}
    for stack in ("openssl", "rustls", "rustls-aws-lc-rs"):
        runs[stack] = tmp_path / stack
        run_pqlab(
            "handshake", "--stack", stack, "--groups", "X25519MLKEM768", "--server-sig",
            "ML-DSA-44", "--ca-sig", "ML-DSA-44", "-n", "10", "--warmup", "2",
            "--port", PORT, "--out", runs[stack], "--no-report", check=True, timeout=300,
        )  # fmt: skip
    for a, b in (("openssl", "rustls"), ("rustls", "rustls-aws-lc-rs")):
        proc = run_pqlab("compare", runs[a], runs[b], check=True, timeout=120)
        out = proc.stdout
        assert f"TLS stack: {a} (" in out and f"->  {b} (" in out, out
        assert "the same tables, columns, row counts and cells" in out, out
        assert any(
            line.startswith("handshake") and "X25519MLKEM768 / ML-DSA-44 / ML-DSA-44" in line
            for line in out.splitlines()
        ), out
