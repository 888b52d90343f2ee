"""The flight model (pqlab.tls.flight): document 000's thresholds follow from OpenSSL's write
buffer, the MSS and the initial window, and the simulation flips exactly at them."""

from __future__ import annotations

import pytest

from pqlab.tls import flight
from pqlab.tls.flight import Flight, WriteModel


def test_the_documents_thresholds_follow_from_the_model():
    assert flight.thresholds() == {
        "buffer": 4096,
        "two_buffers": 8192,
        "nine_segments": 12784,
        "cwnd_after_two_buffers": 13984,
        "cwnd_after_one_buffer": 14232,
    }
    # The 4096-byte buffer leaves as 1448 + 1448 + 1200 (document 000, 4-3-2-1-1).
    assert flight.segments([4096]) == [1448, 2896, 4096]


def _flight(sh: int, cert: int, cv: int, fin: int = 53) -> Flight:
    return Flight(sh, sh + cert, sh + cert + cv, sh + cert + cv + fin)


@pytest.mark.parametrize(
    "sh,cert,case,limit",
    [
        (1210, 2000, 1, 14232),  # case 1: condition 1 (SH..CV above 14232)
        (1210, 4000, 2, 13984),  # case 2: condition 2 (SH..CV above 13984)
    ],
)
def test_conditions_one_and_two_flip_exactly_at_their_thresholds(sh, cert, case, limit):
    assert flight.document_case(_flight(sh, cert, 100)) == case
    cv_at = limit - sh - cert  # SH..CV exactly at the threshold: still inside the window
    assert not flight.cv_stalls(_flight(sh, cert, cv_at))
    assert flight.cv_stalls(_flight(sh, cert, cv_at + 1))


def test_condition_three_is_cv_beyond_the_segments_left():
    sh, cert = 1210, 9000  # SH + Cert = 10210: case 3, 3 + 5 segments through Certificate
    f = _flight(sh, cert, 100)
    assert flight.document_case(f) == 3
    writes = flight.OPENSSL.writes(f.record_sizes())
    left = 10 - flight.segments_through(f.through_certificate, writes)
    assert left == 2
    # Condition 3: CV beyond the segments left times the MSS stalls, whether it waits in
    # the buffer for Finished (below 4096 bytes) or goes straight through (4096 or more).
    assert not flight.cv_stalls(_flight(sh, cert, left * 1448))
    assert flight.cv_stalls(_flight(sh, cert, left * 1448 + 1))
    assert flight.cv_stalls(_flight(sh, cert, 4096))


def test_other_write_models():
    sizes = [1210, 6000, 2420, 53]
    assert WriteModel("flight").writes(sizes) == [9683]
    assert WriteModel("record").writes(sizes) == [1210, 7210, 9630, 9683]
    whole = _flight(1210, 12000, 2420)  # 15630 bytes through CV in one write
    assert flight.cv_stalls(whole, WriteModel("flight"))  # 11 segments
    assert not flight.cv_stalls(_flight(1210, 10000, 2420), WriteModel("flight"))  # 10
    assert flight.document_case(whole, WriteModel("flight")) is None
    assert flight.thresholds(WriteModel("flight")) == {}
    with pytest.raises(ValueError):
        WriteModel("buffer")
    with pytest.raises(ValueError):
        WriteModel("nagle")
