"""--shaper netem where the kernel lacks netem: one error line, nothing created."""

import pytest

from conftest import run_pqlab
from pqlab.net.shaping import netem_available


@pytest.mark.net
@pytest.mark.skipif(netem_available()[0], reason="this kernel has netem: no error to check")
@pytest.mark.parametrize(
    "args",
    [
        ["ttlb", "--profile", "rtt=10ms", "--shaper", "netem"],
        ["linktest", "--profile", "rtt=10ms", "--shaper", "netem"],
        ["tls12", "--shaper", "netem"],
    ],
)
def test_netem_refused_before_anything_is_created(tmp_path, args):
    out = tmp_path / "run"
    proc = run_pqlab(*args, "--out", out)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --shaper netem")
    assert "userspace" in lines[0]
    assert not out.exists()
