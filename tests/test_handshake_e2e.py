"""End to end: real namespaces, real handshakes, real captures (root only).

The issue's check at small n: tables and figures exist, each view's phases add up to the
handshake time, and the server-flight segment counts equal a count made independently from
the kept pcap with tcpdump. Nothing is left behind, also after Ctrl-C.
"""

from __future__ import annotations

import collections
import csv
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import duckdb
import pytest

from conftest import handshake_cells, netns_list, pqlab_env, query, run_pqlab
from tls_helpers import tshark_content_types, tshark_segments_to_certificate_verify

# TLS record content types (RFC 8446 5.1).
ALERT, APPLICATION_DATA = 21, 23

pytestmark = pytest.mark.net

TCPDUMP_LINE = re.compile(r"IP (\S+)\.(\d+) > (\S+)\.(\d+): Flags \[([^\]]*)\].* length (\d+)")


def tcpdump_flight_counts(pcap_path, port: int) -> dict[int, int]:
    """Per client port: data segments the server sent between the client's first data
    segment (ClientHello) and its second (Finished), counted from tcpdump's text."""
    out = subprocess.run(
        ["tcpdump", "-nn", "-r", str(pcap_path)], capture_output=True, text=True, check=True
    ).stdout
    client_data = collections.Counter()
    counts: dict[int, int] = {}
    for line in out.splitlines():
        m = TCPDUMP_LINE.search(line)
        if not m:
            continue
        sport, dport, length = int(m.group(2)), int(m.group(4)), int(m.group(6))
        if length == 0:
            continue
        if dport == port:
            client_data[sport] += 1
            counts.setdefault(sport, 0)
        elif sport == port and client_data[dport] == 1:
            counts[dport] += 1
    return counts


def _has_application_data_record(payload: bytes) -> bool:
    """Whether a TCP payload that starts on a TLS record boundary holds an application_data
    record (type 23): in TLS 1.3 the client's first one is its encrypted Finished."""
    pos = 0
    while pos + 5 <= len(payload):
        if payload[pos] == 23:
            return True
        pos += 5 + struct.unpack_from("!H", payload, pos + 3)[0]
    return False


def minimal_flight_counts(pcap_path, port: int) -> dict[int, int]:
    """Per client port: data segments the server sent after the client's ClientHello (its
    first data segment) and before the client's segment with its Finished (the first one
    holding an application_data record: the client may send a ChangeCipherSpec of its own
    before, as rustls does while the flight still arrives). A separate few-line pcap parser
    (Ethernet/IPv4/TCP only, records read from the segment's first byte)."""
    raw = pcap_path.read_bytes()
    endian = "<" if raw[:4] in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1") else ">"
    pos, client_data, counts, finished = 24, collections.Counter(), {}, set()
    while pos + 16 <= len(raw):
        incl = struct.unpack_from(endian + "I", raw, pos + 8)[0]
        frame = raw[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        if frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 0xF) * 4
        total = struct.unpack_from("!H", frame, 16)[0]
        tcp = 14 + ihl
        sport, dport = struct.unpack_from("!HH", frame, tcp)
        start = tcp + (frame[tcp + 12] >> 4) * 4
        length = total - ihl - (frame[tcp + 12] >> 4) * 4
        if length == 0:
            continue
        if dport == port:
            client_data[sport] += 1
            counts.setdefault(sport, 0)
            if client_data[sport] > 1 and _has_application_data_record(frame[start:]):
                finished.add(sport)
        elif sport == port and client_data[dport] >= 1 and dport not in finished:
            counts[dport] += 1
    return counts


def client_hello_randoms(pcap_path, port: int) -> set[str]:
    """client_random of every ClientHello in a whole-packet capture (hex), read from the
    first data segment of each connection: record header 5 + handshake header 4 +
    legacy_version 2 bytes, then 32 random bytes."""
    raw = pcap_path.read_bytes()
    endian = "<" if raw[:4] in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1") else ">"
    pos, seen, randoms = 24, set(), set()
    while pos + 16 <= len(raw):
        incl = struct.unpack_from(endian + "I", raw, pos + 8)[0]
        frame = raw[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        if frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        tcp = 14 + (frame[14] & 0xF) * 4
        sport, dport = struct.unpack_from("!HH", frame, tcp)
        payload = frame[tcp + (frame[tcp + 12] >> 4) * 4 :]
        if dport == port and payload and sport not in seen:
            seen.add(sport)
            assert payload[0] == 22 and payload[5] == 1, "first client data is a ClientHello"
            randoms.add(payload[11:43].hex())
    return randoms


def pqlab_processes(marker: str) -> list[str]:
    """Processes whose command line contains `marker` (a run directory, an address)."""
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if int(line.split()[0]) != os.getpid()]


def leaked_namespaces(before: set[str]) -> set[str]:
    """New pqlab namespaces whose creating process is gone (other jobs on the machine may
    own live ones)."""
    leaked = set()
    for name in set(netns_list()) - before:
        m = re.match(r"pqlab-(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            leaked.add(name)
    return leaked


def test_issue_check_small_matrix(tmp_path):
    before = set(netns_list())
    out = tmp_path / "D"
    run_pqlab(
        "handshake",
        "--groups",
        "X25519,X25519MLKEM768",
        "--server-sig",
        "ML-DSA-44,RSA-2048",
        "--ca-sig",
        "RSA-2048",
        "-n",
        "50",
        "--warmup",
        "5",
        "--keep-pcap",
        "--port",
        "4455",
        "--out",
        out,
        check=True,
        timeout=900,
    )
    tables = out / "tables"
    for name in (
        "handshake_summary",
        "handshake_phases",
        "handshake_message_sizes",
        "handshake_client_processing",
    ):
        assert (tables / f"{name}.csv").stat().st_size > 0
    header = (tables / "handshake_summary.csv").read_text().splitlines()[0]
    assert header.replace('"', "").startswith(
        "group,server_sig,ca_sig,n,median_ms,mean_ms,p90_ms,server_flight_segments,"
        "server_flight_bytes,client_bytes,server_bytes"
    )
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert "handshake_flight_size_vs_sh_to_fin.png" in figures
    assert "handshake_sh_cert_size_vs_sh_to_cert.png" in figures
    assert any(f.startswith("handshake_phases_group-") for f in figures)
    assert (out / "report.html").exists()
    # The chains of one CA, made side by side, are under its one root.
    roots = {p.read_bytes() for p in (out / "certs").glob("RSA-2048__*/root.crt.pem")}
    assert len(list((out / "certs").glob("RSA-2048__*/root.crt.pem"))) == 2 and len(roots) == 1

    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM handshake_raw").fetchone()[0] == 4 * 50
    # Each view's phases add up to 1 -> 9, and without the last phase to 1 -> 8.
    bad = con.execute("""
        SELECT count(*) FROM (
          SELECT p.cell_id, p.idx, p.view, sum(p.ns) AS s,
                 sum(p.ns) FILTER (WHERE p.phase_order < 11) AS s8,
                 any_value(r.total_ns) AS total, any_value(r.handshake_ns) AS hs
          FROM handshake_phase p JOIN handshake_raw r USING (cell_id, idx)
          GROUP BY p.cell_id, p.idx, p.view) WHERE s != total OR s8 != hs""").fetchone()[0]
    assert bad == 0
    n_views = con.execute("SELECT count(DISTINCT view) FROM handshake_phase").fetchone()[0]
    assert n_views == 2
    assert con.execute("SELECT min(handshake_ns) FROM handshake_raw").fetchone()[0] > 0
    # Segment counts against tcpdump, connection by connection.
    rows = con.execute(
        'SELECT "group", server_sig, ca_sig, client_port, server_flight_segments FROM handshake_raw'
    ).fetchall()
    con.close()
    by_cell = collections.defaultdict(dict)
    for g, s, c, port, segs in rows:
        by_cell[(g, s, c)][port] = segs
    # The four cells ran side by side on ports 4455-4458, in interleaved rounds.
    cells = handshake_cells(out)
    assert sorted(p for p, _ in cells.values()) == [4455, 4456, 4457, 4458]
    for (g, s, c), ours in by_cell.items():
        pcap_path = out / "pcap" / f"{g}_{s}_{c}.server.pcap"
        server_port, connections = cells[(g, s, c)]
        independent = minimal_flight_counts(pcap_path, server_port)
        # Warm-up connections are in the capture too: 5 in the first round, 1 in each later.
        assert len(independent) == connections == 50 + 5 + 9
        assert {p: independent[p] for p in ours} == ours
        if shutil.which("tcpdump"):
            theirs = tcpdump_flight_counts(pcap_path, server_port)
            assert {p: theirs[p] for p in ours} == ours
        # Wireshark pairs keylog lines with connections by client_random: every
        # captured handshake must have its secrets in the keylog.
        keylog = (out / "pcap" / f"{g}_{s}_{c}.keys.log").read_text().split("\n")
        logged = {
            line.split()[1]
            for line in keylog
            if line.startswith("SERVER_HANDSHAKE_TRAFFIC_SECRET ")
        }
        randoms = client_hello_randoms(pcap_path, server_port)
        assert len(randoms) == connections and randoms <= logged
        # Without a client certificate a connection ends at the handshake: decrypted by
        # Wireshark, no application data either way, only each side's close_notify after it.
        if shutil.which("tshark"):
            keys = out / "pcap" / f"{g}_{s}_{c}.keys.log"
            records = tshark_content_types(pcap_path, keys, server_port)
            assert len(records) == connections
            for got in records.values():
                assert not [r for r in got if r[1] == APPLICATION_DATA], got
                assert sorted(r for r in got if r[1] == ALERT) == [
                    ("client", ALERT),
                    ("server", ALERT),
                ]
    assert not leaked_namespaces(before)
    assert not pqlab_processes(str(out))


def test_bad_names_fail_before_anything_is_created(tmp_path):
    before = set(netns_list())
    proc = run_pqlab("handshake", "--groups", "X25519,NOPE", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "NOPE" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_pqlab("handshake", "-n", "0", "--out", tmp_path / "y")
    assert proc.returncode == 2 and "-n" in proc.stderr
    proc = run_pqlab("handshake", "--profile", "no-such-profile", "--out", tmp_path / "z")
    assert proc.returncode == 2 and "profile" in proc.stderr
    assert not leaked_namespaces(before)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["--groups", "X25519", "--server-sig", "MAYO-1", "--ca-sig", "P-256", "-n", "5"],
            "MAYO-1",
        ),
        (["--groups", "BIKE-L1"], "BIKE-L1"),
        (["--ca-sig", "Falcon-512"], "Falcon-512"),
        (["--server-sig", "SPHINCS+-SHA2-128f-simple"], "SPHINCS+-SHA2-128f-simple"),
        (["--warmup", "100000000000000000000"], "--warmup"),
        (["--profile", "rtt=10ms,rate=0.4bit"], "rate"),
    ],
)
def test_names_the_stack_cannot_use_fail_in_one_line_before_any_namespace(tmp_path, argv, needle):
    before = set(netns_list())
    proc = run_pqlab("handshake", *argv, "--out", tmp_path / "x", timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert needle in lines[0]
    assert not (tmp_path / "x").exists()
    assert set(netns_list()) == before


def test_key_log_and_callback_agree_for_every_handshake_of_a_matrix(tmp_path):
    """--messages both: the key-log source must give the callback's records (types, lengths,
    stream offsets) for every handshake, or the cell fails; and --messages keylog alone gives
    the same phases."""
    out = tmp_path / "both"
    common = [
        "--groups",
        "X25519,X25519MLKEM768,ML-KEM-1024",
        "--server-sig",
        "RSA-2048,ML-DSA-44,ECDSA-P256",
        "--ca-sig",
        "ML-DSA-65",
        "-n",
        "10",
        "--warmup",
        "1",
        "--port",
        "4461",
    ]
    run_pqlab("handshake", *common, "--messages", "both", "--out", out, check=True, timeout=900)
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT message_source, count(*) FROM handshake_raw GROUP BY 1").fetchall()
    assert rows == [("both", 90)]
    con.close()
    only = tmp_path / "keylog"
    run_pqlab(
        "handshake",
        *common[:4],
        "--ca-sig",
        "ML-DSA-65",
        "-n",
        "10",
        "--warmup",
        "1",
        "--port",
        "4462",
        "--messages",
        "keylog",
        "--out",
        only,
        check=True,
        timeout=900,
    )
    con = duckdb.connect(str(only / "results.duckdb"), read_only=True)
    sizes = con.execute(
        'SELECT "group", server_sig, any_value(certificate_bytes), any_value(client_hello_bytes),'
        " count(*) FROM handshake_raw WHERE message_source = 'keylog' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    con.close()
    assert len(sizes) == 9 and all(r[2] and r[3] and r[4] == 10 for r in sizes)


# The handshake command with the writing of a batch's second cell failing: what the lab does
# when it is interrupted (or fails) between the batch's first written cell and its commit.
FAIL_SECOND_WRITE = """
import sys
import pqlab.experiments.handshake.run as run
run._Inserts.INSERT_ROWS = 1  # every cell's rows inserted as it comes
write, calls = run._write, []
def failing(*args):
    calls.append(1)
    if len(calls) == 2:
        raise KeyboardInterrupt
    return write(*args)
run._write = failing
from pqlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_batch_is_committed_whole_or_not_at_all(tmp_path):
    """A batch's cells are measured together (their rounds interleaved) and committed in one
    transaction: an interruption after its first cell's rows were written leaves no cell of
    it done and none of its rows, and a resume measures the whole batch again."""
    out = tmp_path / "B"
    args = [
        "handshake",
        "--groups",
        "X25519",
        "--server-sig",
        "RSA-2048,ECDSA-P256",
        "--ca-sig",
        "ECDSA-P256",
        "-n",
        "5",
        "--port",
        "4470",
        "--out",
        str(out),
    ]
    failed = subprocess.run(
        [sys.executable, "-c", FAIL_SECOND_WRITE, *args],
        env=pqlab_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert failed.returncode != 0
    done = query(out, "SELECT count(*) FROM cells WHERE experiment = 'handshake'")
    rows = query(out, "SELECT count(*) FROM handshake_raw")
    assert done == [(0,)] and rows == [(0,)]
    resumed = run_pqlab(*args, "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    per_cell = query(out, "SELECT cell_id, count(*) FROM handshake_raw GROUP BY 1 ORDER BY 1")
    assert [n for _, n in per_cell] == [5, 5]


def test_ctrl_c_leaves_nothing(tmp_path):
    before = set(netns_list())
    out = tmp_path / "C"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pqlab",
            "handshake",
            "--groups",
            "X25519",
            "--server-sig",
            "RSA-2048",
            "--ca-sig",
            "RSA-2048",
            "-n",
            "100000",
            "--port",
            "4456",
            "--out",
            str(out),
        ],
        env=pqlab_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not pqlab_processes("198.18.0.2:4456"):
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    time.sleep(0.5)
    assert not leaked_namespaces(before)
    assert not any(n.startswith(f"pqlab-{proc.pid}-") for n in netns_list())
    assert not pqlab_processes(str(out))
    assert not list(out.glob(".work/*"))


def test_cwnd_stalls_seen_only_when_the_window_is_small(tmp_path):
    """Real handshakes whose first 4096-byte write (3 segments) meets initcwnd 2: the
    server must wait for ACKs; with initcwnd 10 it never does."""
    from pqlab import catalog
    from pqlab.experiments.handshake import plan as hs
    from pqlab.experiments.handshake import run as hs_run
    from pqlab.store import RunStore

    result = {}
    for initcwnd in (2, 10):
        plan = hs.Plan(
            groups=[catalog.resolve("X25519", "kem")],
            server_sigs=[catalog.resolve("ML-DSA-44", "sig")],
            ca_sigs=[catalog.resolve("ML-DSA-44", "sig")],
            n=20,
            warmup=2,
            keep_pcap=False,
            port=4471,
            profile=None,
            initcwnd=initcwnd,
        )
        store = RunStore.create(tmp_path / f"cw{initcwnd}", "handshake")
        try:
            hs_run.measure(plan, store)
            result[initcwnd] = store.query(
                "SELECT avg(cwnd_stalls) AS stalls, min(writes_predicted) AS writes "
                "FROM handshake_raw"
            )[0]
        finally:
            store.close()
    assert result[2]["writes"] >= 2
    assert result[2]["stalls"] >= 1.0
    assert result[10]["stalls"] == 0


def test_send_root_reproduces_table_9_of_the_document(tmp_path):
    """With the root CA sent too (as the document's servers did), the server flight of
    X25519 handshakes takes the document's table 9 segment counts."""
    out = tmp_path / "R"
    run_pqlab(
        "handshake",
        "--groups",
        "X25519",
        "--server-sig",
        "RSA-2048,ML-DSA-44",
        "--ca-sig",
        "RSA-2048,ML-DSA-44",
        "-n",
        "10",
        "--warmup",
        "2",
        "--send-root",
        "--keep-pcap",
        "--port",
        "4472",
        "--out",
        out,
        check=True,
        timeout=600,
    )
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT server_sig, ca_sig, min(server_flight_segments), "
        "max(server_flight_segments), any_value(chain_sent) FROM handshake_raw "
        "GROUP BY ALL"
    ).fetchall()
    to_cv = con.execute(
        'SELECT "group", server_sig, ca_sig, client_port, segments_sh_to_cv FROM handshake_raw'
    ).fetchall()
    con.close()
    # The segments from ServerHello to CertificateVerify, connection by connection, as
    # Wireshark's dissector finds CertificateVerify in the decrypted capture.
    cells = handshake_cells(out)
    by_cell = collections.defaultdict(dict)
    for g, s, c, port, n in to_cv:
        by_cell[(g, s, c)][port] = n
    for (g, s, c), ours in by_cell.items():
        pcap_path = out / "pcap" / f"{g}_{s}_{c}.server.pcap"
        keys = out / "pcap" / f"{g}_{s}_{c}.keys.log"
        theirs = tshark_segments_to_certificate_verify(pcap_path, keys, cells[(g, s, c)][0])
        assert {p: theirs[p] for p in ours} == ours
    # The document's mark beside each cell of tables 10-12, and the document's own values.
    with open(out / "tables" / "handshake_client_processing_cells.csv") as f:
        marks = {(r["server_sig"], r["ca_sig"]): r for r in csv.DictReader(f) if r["cell_id"]}
    for row in marks.values():
        assert row["document_client_processing_ms"]
        assert row["shaded_4096_8192"] == (
            "true" if 4096 <= int(row["server_hello_certificate_bytes"]) < 8192 else "false"
        )
    # RSA-2048 under an ML-DSA-44 root: ServerHello + Certificate between two buffers, as in
    # the document (its 7450 bytes); ML-DSA-44 under its own root: more than two.
    assert marks[("RSA-2048", "ML-DSA-44")]["shaded_4096_8192"] == "true"
    assert marks[("RSA-2048", "ML-DSA-44")]["document_shaded_4096_8192"] == "true"
    assert marks[("ML-DSA-44", "ML-DSA-44")]["shaded_4096_8192"] == "false"
    got = {(s, c): (lo, hi, chain) for s, c, lo, hi, chain in rows}
    table_9 = {
        ("RSA-2048", "RSA-2048"): 2,
        ("ML-DSA-44", "RSA-2048"): 5,
        ("RSA-2048", "ML-DSA-44"): 6,
        ("ML-DSA-44", "ML-DSA-44"): 9,
    }
    assert got == {k: (v, v, "server+root") for k, v in table_9.items()}


def test_engine_failure_mid_cell_leaves_nothing(tmp_path):
    """The client fails after captures and server are up: one error line, exit 3, and
    every namespace and process is gone."""
    from pqlab import engine

    real = engine.engine_path()
    wrapper = tmp_path / "engine-wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = tls ] && [ "$2" = client ]; then\n'
        '  echo \'{"type":"error","message":"injected client failure"}\'; exit 2\n'
        "fi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    before = set(netns_list())
    out = tmp_path / "E"
    env = {**pqlab_env(), "PQLAB_ENGINE": str(wrapper)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pqlab",
            "handshake",
            "--groups",
            "X25519",
            "--server-sig",
            "RSA-2048",
            "--ca-sig",
            "RSA-2048",
            "-n",
            "5",
            "--port",
            "4473",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stderr
    assert "injected client failure" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not leaked_namespaces(before)
    assert not pqlab_processes(str(out))
    assert not list(out.glob(".work/*"))


def test_shaped_link_profile_shows_the_congestion_window_round_trip(tmp_path):
    """Through --profile (the network-emulation module's shaped link, captured on its TUN
    interfaces): a 10970-byte flight with initcwnd 4 must wait one round trip for ACKs."""
    out = tmp_path / "P"
    run_pqlab(
        "handshake",
        "--groups",
        "X25519",
        "--server-sig",
        "ML-DSA-44",
        "--ca-sig",
        "ML-DSA-44",
        "-n",
        "10",
        "--warmup",
        "2",
        "--send-root",
        "--profile",
        "rtt=10ms,rate=100mbit,initcwnd=4",
        "--port",
        "4474",
        "--no-report",
        "--out",
        out,
        check=True,
        timeout=600,
    )
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    stalls, sh_to_cert, hs_ns = con.execute(
        "SELECT min(cwnd_stalls), min(sh_to_cert_ns), min(handshake_ns) FROM handshake_raw"
    ).fetchone()
    # The flight model's prediction (the window runs out before CertificateVerify) is what
    # the capture shows, handshake by handshake.
    disagree = con.execute(
        "SELECT count(*) FROM handshake_raw WHERE cv_stall_predicted != (cwnd_stalls > 0)"
    ).fetchone()[0]
    con.close()
    assert disagree == 0
    assert stalls >= 1
    assert sh_to_cert >= 8_000_000  # one 10 ms round trip (less the flight's own time)
    assert hs_ns >= 30_000_000  # SYN, ClientHello and the stalled flight: 3 round trips


def test_a_busy_start_falls_on_every_cell_alike(tmp_path):
    """Something else burns both CPUs for the first seconds of a matrix (a compile on the
    same machine): the cells run interleaved in rounds, so the hybrid group, which does
    strictly more work, still has the larger median, every cell's earlier rounds show the
    drift, and no negative difference is called significant."""
    out = tmp_path / "run"
    burners = [
        subprocess.Popen(["timeout", "4", "sh", "-c", "while :; do :; done"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        run_pqlab(
            "handshake", "--groups", "X25519,X25519MLKEM768", "--server-sig", "ML-DSA-44",
            "--ca-sig", "ML-DSA-44", "-n", "300", "--warmup", "5", "--seed", "7",
            "--out", out, check=True, timeout=600,
        )  # fmt: skip
    finally:
        for b in burners:
            b.kill()
            b.wait()
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    medians = dict(
        con.execute('SELECT "group", median(handshake_ns) FROM handshake_raw GROUP BY 1').fetchall()
    )
    order = con.execute(
        'SELECT "round", position, cell_id, seed FROM handshake_order ORDER BY position'
    ).fetchall()
    con.close()
    assert medians["X25519MLKEM768"] > medians["X25519"], medians
    # Ten rounds, each cell once per round, the recorded seed the one asked for.
    assert [r for r, *_ in order] == sorted(r for r in range(10) for _ in range(2))
    assert {s for *_, s in order} == {7}
    import csv

    with open(out / "tables" / "summary.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "handshake time (median)"]
    assert rows
    for r in rows:
        assert r["drift_pct"] != ""
        if float(r["change_pct"]) < 0:
            assert r["significant"] == "False", r
