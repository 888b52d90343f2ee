"""A lossy link: `pqlab handshake --profile 'rtt=20ms,loss=5%'` completes, every message is
placed on the segment or retransmission that delivered it, and the retransmissions are
counted per direction and per phase (root only: real namespaces, the userspace link
emulator, real captures), checked against Wireshark on the kept captures (`loss_helpers`).
The same run through netem is in test_netem_uml.py.
"""

from __future__ import annotations

import pytest

from conftest import run_pqlab
from loss_helpers import check_completed, check_message_positions, check_retransmissions

pytestmark = pytest.mark.net

# The command (with its captures kept for the checks).
COMMAND = [
    "handshake", "--profile", "rtt=20ms,loss=5%", "--groups", "X25519MLKEM768",
    "--server-sig", "ML-DSA-44", "--ca-sig", "ML-DSA-44", "-n", "30",
]  # fmt: skip


@pytest.fixture(scope="module")
def lossy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lossy") / "run"
    proc = run_pqlab(*COMMAND, "--shaper", "userspace", "--keep-pcap", "--out", out, timeout=900)
    return proc, out


def test_the_command_completes_and_says_where_retransmissions_fell(lossy_run):
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    assert "precedes" not in proc.stderr
    check_completed(out, 30)


def test_retransmission_counts_equal_tsharks_flags_each_way(lossy_run):
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    assert check_retransmissions(out) > 0


def test_every_message_is_where_tsharks_decryption_shows_it(lossy_run):
    proc, out = lossy_run
    assert proc.returncode == 0, proc.stderr
    assert check_message_positions(out) == 30 * 2 * 6
