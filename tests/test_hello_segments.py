"""How many TCP segments carried the ClientHello and the ServerHello (document 000: at most
two each, even with ML-KEM-1024), on synthetic captures whose every segment is known."""

from __future__ import annotations

from pqlab.pcap import PSH, SYN
from pqlab.tls import phases as hp
from test_phases import Wire, client_records, roundtrip, server_records

MSS = 1448


def _handshake(w: Wire, ch: int, sh: int, resend_first: bool = False):
    """A handshake with a ClientHello of `ch` bytes and a ServerHello of `sh` bytes (message
    lengths), every stream cut into MSS-sized segments."""
    recs = client_records(ch) + server_records(
        {
            "ServerHello": sh,
            "EncryptedExtensions": 10,
            "Certificate": 900,
            "CertificateVerify": 80,
            "Finished": 36,
        }
    )
    ch_end = hp.message_end(recs, "client", "ClientHello")
    fin_end = hp.message_end(recs, "server", "Finished")
    w.send(0, True, SYN, 0)
    w.send(80_000, False, SYN, 0, ack=0)
    w.send(140_000, True, 0, 0, ack=0)
    t = 200_000
    for start in range(0, ch_end, MSS):
        w.send(t, True, PSH, start, min(MSS, ch_end - start), ack=0)
        t += 1_000
    if resend_first:  # a retransmission of the first ClientHello segment
        w.send(t, True, PSH, 0, min(MSS, ch_end), ack=0)
    t = 400_000
    for start in range(0, fin_end, MSS):
        w.send(t, False, 0, start, min(MSS, fin_end - start), ack=ch_end)
        t += 1_000
    cfin = hp.message_end(recs, "client", "Finished")
    w.send(600_000, True, PSH, ch_end, cfin - ch_end, ack=fin_end)
    return recs


def test_small_hellos_take_one_segment_each(tmp_path):
    w = Wire(10**18, 40100)
    recs = _handshake(w, ch=295, sh=90)
    c, s = roundtrip(tmp_path, w)
    assert hp.message_span(recs, "client", "ClientHello") == (0, 300)
    assert hp.message_span(recs, "server", "ServerHello") == (0, 95)
    assert hp.hello_segments(c, s, recs) == (1, 1)
    f = hp.analyse(c, s, recs).flight
    assert (f["client_hello_segments"], f["server_hello_segments"]) == (1, 1)


def test_ml_kem_1024_sized_hellos_take_two_segments(tmp_path):
    # ML-KEM-1024 key share 1568 bytes + ~250: ClientHello ~1820; ServerHello with the
    # 1568-byte ciphertext ~1660 (document 000 measured at most 1663).
    w = Wire(10**18, 40101)
    recs = _handshake(w, ch=1820, sh=1658)
    c, s = roundtrip(tmp_path, w)
    assert hp.message_span(recs, "server", "ServerHello") == (0, 1663)
    assert hp.hello_segments(c, s, recs) == (2, 2)


def test_a_hello_over_two_segments_counts_three(tmp_path):
    w = Wire(10**18, 40102)
    recs = _handshake(w, ch=3000, sh=2900)
    c, s = roundtrip(tmp_path, w)
    assert hp.hello_segments(c, s, recs) == (3, 3)


def test_retransmissions_do_not_add_segments(tmp_path):
    w = Wire(10**18, 40103)
    recs = _handshake(w, ch=1820, sh=90, resend_first=True)
    c, s = roundtrip(tmp_path, w)
    assert hp.hello_segments(c, s, recs) == (2, 1)


def test_a_message_that_shares_a_segment_is_counted_where_its_bytes_are(tmp_path):
    # The ServerHello's record ends at 1500: segment 1 (0-1448) and segment 2 (1448-2896,
    # shared with the encrypted records) both carry its bytes; the Certificate record that
    # starts in segment 2 does not make the ServerHello count a third.
    w = Wire(10**18, 40104)
    recs = _handshake(w, ch=295, sh=1495)
    c, s = roundtrip(tmp_path, w)
    assert hp.message_span(recs, "server", "ServerHello") == (0, 1500)
    assert hp.hello_segments(c, s, recs) == (1, 2)
