"""Cell ids: one type that renders and reads itself back, for every experiment's shape, and
reads the forms older runs stored."""

from __future__ import annotations

import pytest

from pqlab import catalog
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, registry

HS = Cells("handshake", ("group", "server_sig", "ca_sig"), tls=True)
TTLB = Cells("ttlb", ("profile", "group", "chain", "data_bytes"), tls=True)


@pytest.mark.parametrize(
    "cell",
    [
        HS.id("X25519", "ML-DSA-44", "RSA-2048", stack="openssl"),
        HS.id("X25519", "ML-DSA-44", "RSA-2048", stack="rustls", options=("root",)),
        HS.id("X25519", "ML-DSA-44", "RSA-2048", stack="openssl", pair="local->root@10.0.0.2"),
        TTLB.id("local->root@198.18.0.2", "X25519", "RSA-2048", 0, stack="openssl"),
        TTLB.id("1mbps-200ms", "X25519MLKEM768", "SPHINCS+-SHA2-128f-simple", 1024, stack="x"),
    ],
)
def test_a_cell_id_reads_back_as_itself(cell):
    shape = HS if len(cell.axes) == 3 else TTLB
    assert shape.parse(str(cell)) == cell


def test_older_forms_read_as_the_default_stack():
    assert HS.parse("X25519|ML-DSA-44|RSA-2048|+root@local->root@h") == HS.id(
        "X25519", "ML-DSA-44", "RSA-2048", stack="openssl", options=("root",), pair="local->root@h"
    )
    assert str(TTLB.parse("lan|X25519|RSA-2048|0")) == "lan|X25519|RSA-2048|0|openssl"


def test_algorithms_name_their_axes_and_bad_ids_are_refused():
    alg = catalog.resolve("ML-KEM-768", "kem")
    assert HS.id(alg, alg, alg, stack="s").axes == ("ML-KEM-768",) * 3
    with pytest.raises(ValueError):
        HS.id("a", "b", stack="s")  # an axis short
    with pytest.raises(ValueError):
        HS.id("a", "b", "c")  # a TLS cell names its stack
    with pytest.raises(UserError, match=r"\|"):
        CellId(("a|b",))
    with pytest.raises(UserError, match="@"):
        CellId(("a", "b@c"))  # the last part cannot hold the pair's separator
    with pytest.raises(UserError, match="not a cell id"):
        HS.parse("only|two")


def test_every_experiment_declares_a_cell_shape():
    for exp in registry():
        assert exp.cells is not None and exp.cells.experiment == exp.name, exp.name
