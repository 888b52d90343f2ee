"""Document 000's tables 10-12 as transcribed, and the mark it shades recomputed from its own
certificate sizes (tables 14 and 15)."""

from __future__ import annotations

from pqlab.experiments.handshake import document000


def test_transcription_has_every_cell_of_the_three_tables():
    cells = document000.document_cells()
    assert len(cells) == 3 * 4 * 4
    assert {c["document_table"] for c in cells.values()} == {10, 11, 12}
    # corners of each table, as printed
    assert cells[("X25519", "RSA-2048", "RSA-2048")]["document_client_processing_ms"] == 0.572286
    assert cells[("X25519", "ML-DSA-44", "ML-DSA-44")]["document_client_processing_ms"] == 0.984149
    assert (
        cells[("ML-KEM-512", "RSA-3072", "ML-DSA-44")]["document_client_processing_ms"] == 1.534633
    )
    got = cells[("X25519MLKEM768", "ML-DSA-44", "RSA-2048")]["document_client_processing_ms"]
    assert got == 1.850925


def test_the_cells_the_document_explains_by_the_wait_for_certificate_are_shaded():
    """The document singles out slow cells by the wait for the rest of Certificate: with
    its own certificates and group, each of them has ServerHello + Certificate between 4096
    and 8192 bytes, and the same signers with the same roots outside it are not slow."""
    cells = document000.document_cells()
    shaded = {k for k, v in cells.items() if v["document_shaded_4096_8192"]}
    # Its slowest cells, each well above the others of its row.
    for key in [
        ("X25519", "RSA-3072", "ML-DSA-44"),  # 2.37 ms
        ("ML-KEM-512", "ML-DSA-44", "RSA-3072"),  # 1.88 ms against 1.49 with RSA-2048
        ("X25519MLKEM768", "ML-DSA-44", "RSA-2048"),  # 1.85 ms
        ("X25519MLKEM768", "ML-DSA-44", "RSA-3072"),  # 1.83 ms
    ]:
        assert key in shaded
    # An ML-DSA-44 chain with its ML-DSA-44 root is larger than two buffers on every group.
    assert not {k for k in shaded if k[1] == k[2] == "ML-DSA-44"}
    assert ("ML-KEM-512", "ML-DSA-44", "RSA-2048") not in shaded  # 3866 bytes
    assert len(shaded) == 8


def test_the_mark_is_two_write_buffers_wide():
    assert document000.shaded(4095) is False
    assert document000.shaded(4096) is True
    assert document000.shaded(8191) is True
    assert document000.shaded(8192) is False
    assert document000.shaded(None) is None
