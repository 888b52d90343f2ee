"""A lossy link: `pqlab handshake --profile 'rtt=20ms,loss=5%'` completes, every message is
placed on the segment or retransmission that delivered it, and the retransmissions are
counted per direction and per phase (root only: real namespaces, the userspace link
emulator, real captures).

Checked against Wireshark on the kept captures: per connection and direction, the segments
tshark flags as sent again in the sender's capture are the ones pqlab counts, and every
handshake message's time in either capture is the frame at which tshark's decryption (with
the run's key log, reassembling out-of-order segments as the receiving TCP does) first
shows that message.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import needs_root, query, run_pqlab
from pqlab import pcap
from pqlab.experiments.handshake import phases as hp

pytestmark = needs_root

# The command (with its captures kept for the checks).
COMMAND = [
    "handshake", "--profile", "rtt=20ms,loss=5%", "--groups", "X25519MLKEM768",
    "--server-sig", "ML-DSA-44", "--ca-sig", "ML-DSA-44", "-n", "30",
]  # fmt: skip
# Wireshark's flags for a segment that carries sequence space sent before, as seen in the
# sender's own capture: which one it picks depends on its timing heuristics (a
# retransmission soon after new data is "out of order", one of bytes already acknowledged
# "spurious"); a sender's capture holds no other reason for such a segment.
SENT_AGAIN = (
    "tcp.analysis.retransmission",
    "tcp.analysis.fast_retransmission",
    "tcp.analysis.spurious_retransmission",
    "tcp.analysis.out_of_order",
)
# Handshake message types (RFC 8446 4) and where pqlab puts each: sender's point in the
# sender's capture, receiver's point in the receiver's.
POINTS = {
    ("client", 1): ("4", "D"),  # ClientHello
    ("server", 2): ("E", "5"),  # ServerHello
    ("server", 11): ("F", "6"),  # Certificate
    ("server", 15): ("G", "7"),  # CertificateVerify
    ("server", 20): ("H", "8"),  # Finished
    ("client", 20): ("9", "I"),  # Finished
}


def _tshark(pcap: Path, *args: str) -> list[list[str]]:
    out = subprocess.run(
        ["tshark", "-r", str(pcap), *args], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    return [line.split("\t") for line in out.splitlines()]


def _ns(epoch: str) -> int:
    return int(Decimal(epoch) * 1_000_000_000)


def tshark_retransmissions(pcap: Path, port: int, from_client: bool) -> dict[int, list]:
    """Per connection (keyed by the time of its first SYN in this capture), the frames of
    one direction Wireshark flags as sent again: [(time ns, tcp.len)]."""
    rows = _tshark(
        pcap, "-T", "fields", "-e", "tcp.stream", "-e", "frame.time_epoch", "-e", "tcp.srcport",
        "-e", "tcp.len", *(x for flag in SENT_AGAIN for x in ("-e", flag)),
    )  # fmt: skip
    start: dict[str, int] = {}
    out: dict[int, list] = defaultdict(list)
    for stream, epoch, sport, length, *flags in rows:
        if stream not in start:
            start[stream] = _ns(epoch)
        mine = (int(sport) == port) != from_client
        if mine and any(flags):
            out[start[stream]].append((_ns(epoch), int(length)))
        out.setdefault(start[stream], [])
    return out


def tshark_messages(pcap: Path, keylog: Path, port: int) -> dict[int, dict]:
    """Per connection (keyed by the time of its first SYN), the time of the frame at which
    tshark's decryption first shows each handshake message: {(sender, type): ns}."""
    rows = _tshark(
        pcap, "-o", f"tls.keylog_file:{keylog}", "-o", "tcp.reassemble_out_of_order:TRUE",
        "-d", f"tcp.port=={port},tls", "-T", "fields", "-e", "tcp.stream",
        "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tls.handshake.type",
    )  # fmt: skip
    start: dict[str, int] = {}
    out: dict[int, dict] = defaultdict(dict)
    for stream, epoch, sport, types in rows:
        t = _ns(epoch)
        start.setdefault(stream, t)
        sender = "server" if int(sport) == port else "client"
        for kind in filter(None, types.split(",")):
            out[start[stream]].setdefault((sender, int(kind)), t)
    return out


@pytest.fixture(scope="module")
def lossy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lossy") / "run"
    proc = run_pqlab(*COMMAND, "--shaper", "userspace", "--keep-pcap", "--out", out, timeout=900)
    return proc, out


def test_the_command_completes_and_says_where_retransmissions_fell(lossy_run):
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    assert "precedes" not in proc.stderr
    ((n, resent_c, resent_s),) = query(
        out,
        "SELECT count(*), sum(client_retransmissions), sum(server_retransmissions) "
        "FROM handshake_raw",
    )
    assert n == 30
    # 5 % of some 20 packets a handshake each way: dozens of losses, some of them recovered
    # by retransmissions inside the handshake.
    assert resent_c + resent_s > 0
    with open(out / "tables" / "handshake_phases.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:9] == [
        "group", "server_sig", "ca_sig", "view", "phase", "mean_ms", "median_ms",
        "retransmissions", "handshakes_with_retransmissions",
    ]  # fmt: skip
    per_view = defaultdict(int)
    for r in rows:
        per_view[r["view"]] += int(r["retransmissions"])
    # Each retransmission sent between the SYN and the client's Finished falls in exactly
    # one phase of each view.
    in_handshake = query(
        out,
        "SELECT view, sum(retransmissions) FROM handshake_phase GROUP BY view ORDER BY view",
    )
    assert dict(in_handshake) == dict(per_view) and per_view["client"] == per_view["server"] > 0
    # The phases still add up to the handshake, in both views.
    bad = query(
        out,
        "SELECT r.idx FROM handshake_raw r JOIN handshake_phase p USING (cell_id, idx) "
        "GROUP BY r.idx, p.view, r.total_ns HAVING sum(p.ns) <> r.total_ns",
    )
    assert bad == []


def ours(pcap_path: Path, port: int, from_client: bool) -> dict[int, list]:
    """The same from pqlab's reader: per connection (keyed by its first SYN's time), the
    segments `phases.retransmissions` finds one direction sending again."""
    return {
        conn.syn_ns: [(s.ts_ns, s.end - s.start) for s in hp.retransmissions(conn, from_client)]
        for conn in pcap.connections(pcap_path, port)
    }


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_retransmission_counts_equal_tsharks_flags_each_way(lossy_run):
    """Every connection's retransmitted segments, each way in the sender's capture, are the
    very frames Wireshark flags (warm-ups included), and handshake_raw counts them; the
    server's agree with its kernel's count (TCP_INFO, read before it closes: a
    retransmission of its closing alert may come after)."""
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    ((port,),) = query(out, "SELECT DISTINCT port FROM handshake_order")
    client_pcap = next((out / "pcap").glob("*.client.pcap"))
    server_pcap = next((out / "pcap").glob("*.server.pcap"))
    theirs_c = tshark_retransmissions(client_pcap, port, from_client=True)
    theirs_s = tshark_retransmissions(server_pcap, port, from_client=False)
    ours_c = ours(client_pcap, port, from_client=True)
    ours_s = ours(server_pcap, port, from_client=False)
    assert ours_c == dict(theirs_c) and ours_s == dict(theirs_s)
    flagged = sum(map(len, theirs_c.values())) + sum(map(len, theirs_s.values()))
    rows = query(
        out,
        "SELECT t_syn_ns, client_retransmissions, client_retransmitted_bytes, "
        "server_retransmissions, server_retransmitted_bytes, server_total_retrans, points "
        "FROM handshake_raw",
    )
    for t_syn, n_c, bytes_c, n_s, bytes_s, kernel_s, points in rows:
        got_c = ours_c[t_syn]  # the client capture's SYN is the row's t_syn_ns
        assert (n_c, bytes_c) == (len(got_c), sum(n for _, n in got_c)), t_syn
        # The server capture's connection starts at A (the SYN's arrival).
        got_s = ours_s[t_syn + json.loads(points)["A"]]
        assert (n_s, bytes_s) == (len(got_s), sum(n for _, n in got_s)), t_syn
        assert kernel_s <= n_s, t_syn
    print(f"\n{flagged} segments sent again, as tshark flags them; rows: {rows and len(rows)}")
    assert flagged > 0


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_every_message_is_where_tsharks_decryption_shows_it(lossy_run):
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    ((port,),) = query(out, "SELECT DISTINCT port FROM handshake_order")
    keylog = next((out / "pcap").glob("*.keys.log"))
    captures = {
        side: tshark_messages(next((out / "pcap").glob(f"*.{side}.pcap")), keylog, port)
        for side in ("client", "server")
    }
    checked = 0
    for t_syn, points in query(out, "SELECT t_syn_ns, points FROM handshake_raw"):
        p = {k: t_syn + v for k, v in json.loads(points).items()}
        seen = {"client": captures["client"][t_syn], "server": captures["server"][p["A"]]}
        for (sender, kind), (at_sender, at_receiver) in POINTS.items():
            receiver = "server" if sender == "client" else "client"
            assert seen[sender][(sender, kind)] == p[at_sender], (t_syn, sender, kind)
            assert seen[receiver][(sender, kind)] == p[at_receiver], (t_syn, sender, kind)
            checked += 2
    assert checked == 30 * 2 * len(POINTS)
