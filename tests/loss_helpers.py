"""Checks of a handshake run over a lossy link against Wireshark, for either shaper (the
userspace emulator on the host, netem in a User-Mode Linux guest): the run directory must
have been made with `--keep-pcap`.

- `check_completed`: every handshake measured, retransmissions counted, each one sent between
  the SYN and the client's Finished in exactly one phase of each view, the phases adding up;
- `check_retransmissions`: per connection and direction, the segments pqlab counts as sent
  again are the frames tshark flags in the sender's capture, and handshake_raw holds their
  number and bytes; the server's are at least its kernel's count (TCP_INFO, read before the
  server closes: a retransmission of its closing alert may come after);
- `check_message_positions`: every handshake message's time in either capture is the frame
  at which tshark's decryption (with the run's key log, reassembling out-of-order segments
  as the receiving TCP does) first shows it.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from conftest import query
from pqlab import pcap
from pqlab.tls import phases as hp
from tls_helpers import tshark_fields

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
# Handshake message types (RFC 8446 4) and where pqlab puts each: the sender's point in the
# sender's capture, the receiver's point in the receiver's.
POINTS = {
    ("client", 1): ("4", "D"),  # ClientHello
    ("server", 2): ("E", "5"),  # ServerHello
    ("server", 11): ("F", "6"),  # Certificate
    ("server", 15): ("G", "7"),  # CertificateVerify
    ("server", 20): ("H", "8"),  # Finished
    ("client", 20): ("9", "I"),  # Finished
}


def _ns(epoch: str) -> int:
    return int(Decimal(epoch) * 1_000_000_000)


def tshark_retransmissions(pcap_path: Path, port: int, from_client: bool) -> dict[int, list]:
    """Per connection (keyed by the time of its first SYN in this capture), the frames of
    one direction Wireshark flags as sent again: [(time ns, tcp.len)]."""
    rows = tshark_fields(
        pcap_path, ["tcp.stream", "frame.time_epoch", "tcp.srcport", "tcp.len", *SENT_AGAIN]
    )
    start: dict[str, int] = {}
    out: dict[int, list] = {}
    for stream, epoch, sport, length, *flags in rows:
        first = start.setdefault(stream, _ns(epoch))
        mine = (int(sport) == port) != from_client
        out.setdefault(first, [])
        if mine and any(flags):
            out[first].append((_ns(epoch), int(length)))
    return out


def ours(pcap_path: Path, port: int, from_client: bool) -> dict[int, list]:
    """The same from pqlab's reader: per connection (keyed by its first SYN's time), the
    segments `phases.retransmissions` finds one direction sending again."""
    return {
        conn.syn_ns: [(s.ts_ns, s.end - s.start) for s in hp.retransmissions(conn, from_client)]
        for conn in pcap.connections(pcap_path, port)
    }


def tshark_messages(pcap_path: Path, keylog: Path, port: int) -> dict[int, dict]:
    """Per connection (keyed by the time of its first SYN), the time of the frame at which
    tshark's decryption first shows each handshake message: {(sender, type): ns}."""
    rows = tshark_fields(
        pcap_path,
        ["tcp.stream", "frame.time_epoch", "tcp.srcport", "tls.handshake.type"],
        keylog=keylog,
        port=port,
        options=("tcp.reassemble_out_of_order:TRUE",),
    )
    start: dict[str, int] = {}
    out: dict[int, dict] = defaultdict(dict)
    for stream, epoch, sport, types in rows:
        t = _ns(epoch)
        first = start.setdefault(stream, t)
        sender = "server" if int(sport) == port else "client"
        for kind in filter(None, types.split(",")):
            out[first].setdefault((sender, int(kind)), t)
    return out


def _port(out: Path) -> int:
    ((port,),) = query(out, "SELECT DISTINCT port FROM handshake_order")
    return port


def _capture(out: Path, side: str) -> Path:
    return next((out / "pcap").glob(f"*.{side}.pcap"))


def check_completed(out: Path, n: int) -> dict[str, int]:
    """The run measured `n` handshakes, some retransmitted, and its phase table says how
    many retransmissions fell in each phase. Returns each view's total."""
    ((count, resent),) = query(
        out,
        "SELECT count(*), sum(client_retransmissions + server_retransmissions) FROM handshake_raw",
    )
    assert count == n and resent > 0
    with open(out / "tables" / "handshake_phases.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:9] == [
        "group", "server_sig", "ca_sig", "view", "phase", "mean_ms", "median_ms",
        "retransmissions", "handshakes_with_retransmissions",
    ]  # fmt: skip
    per_view: dict[str, int] = defaultdict(int)
    for r in rows:
        per_view[r["view"]] += int(r["retransmissions"])
    # Each retransmission sent between the SYN and the client's Finished falls in exactly
    # one phase of each view.
    stored = query(out, "SELECT view, sum(retransmissions) FROM handshake_phase GROUP BY view")
    assert dict(stored) == dict(per_view) and per_view["client"] == per_view["server"] > 0
    # The phases still add up to the handshake, in both views.
    bad = query(
        out,
        "SELECT r.idx FROM handshake_raw r JOIN handshake_phase p USING (cell_id, idx) "
        "GROUP BY r.idx, p.view, r.total_ns HAVING sum(p.ns) <> r.total_ns",
    )
    assert bad == []
    return dict(per_view)


def check_retransmissions(out: Path) -> int:
    """See the module docstring; returns how many segments were sent again, as tshark
    flags them (warm-ups included)."""
    port = _port(out)
    client_pcap, server_pcap = _capture(out, "client"), _capture(out, "server")
    theirs_c = tshark_retransmissions(client_pcap, port, from_client=True)
    theirs_s = tshark_retransmissions(server_pcap, port, from_client=False)
    ours_c = ours(client_pcap, port, from_client=True)
    ours_s = ours(server_pcap, port, from_client=False)
    assert ours_c == theirs_c and ours_s == theirs_s
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
    return sum(map(len, theirs_c.values())) + sum(map(len, theirs_s.values()))


def check_message_positions(out: Path) -> int:
    """See the module docstring; returns how many message times were compared."""
    port = _port(out)
    keylog = next((out / "pcap").glob("*.keys.log"))
    seen = {
        side: tshark_messages(_capture(out, side), keylog, port) for side in ("client", "server")
    }
    checked = 0
    for t_syn, points in query(out, "SELECT t_syn_ns, points FROM handshake_raw"):
        p = {k: t_syn + v for k, v in json.loads(points).items()}
        at = {"client": seen["client"][t_syn], "server": seen["server"][p["A"]]}
        for (sender, kind), (at_sender, at_receiver) in POINTS.items():
            receiver = "server" if sender == "client" else "client"
            assert at[sender][(sender, kind)] == p[at_sender], (t_syn, sender, kind)
            assert at[receiver][(sender, kind)] == p[at_receiver], (t_syn, sender, kind)
            checked += 2
    return checked
