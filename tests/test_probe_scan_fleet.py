"""A scan of 1,000 targets on 127.0.0.0/8 (`slow`): the real servers of `scan_helpers`
(Go's crypto/tls, nginx, `openssl s_server` with ML-DSA and with TLS 1.2 only, `pqlab
serve` on every stack) three times each, hostile servers ten times each, a name that does
not resolve, and closed ports on many loopback addresses. At `--parallel 64` it finishes
within its time budget with one correct verdict per target; its peak memory at 1,000
targets stays near its peak at 100; killed with SIGKILL and resumed, it holds each target
once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import pqlab_env
from probe_helpers import rows
from scan_helpers import Server, closed_port, fleet

pytestmark = pytest.mark.slow

TARGETS = 1000
SMALL = 100
BUDGET_S = 300  # the whole scan of 1,000 at --parallel 64 (2 shared cores)
GROUPS = "X25519MLKEM768+X25519,X25519MLKEM768,SecP256r1MLKEM768,X25519"
# The scan run in this process, its peak resident memory printed at the end.
PEAK = (
    "import resource, sys; from pqlab.cli import main; rc = main(sys.argv[1:]); "
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "file=sys.stderr); sys.exit(rc)"
)


def _targets(servers: list[Server], count: int) -> dict[str, Server]:
    named: dict[str, Server] = {}
    for s in servers:
        copies = 1 if s.name == "no-dns" else 3 if s.real else 10
        for i in range(copies):
            named[f"{s.name}-{i}"] = s
    i = 0
    while len(named) < count:  # closed ports on 127.0.1.1, 127.0.1.2, ...
        address = f"127.0.{1 + i // 250}.{1 + i % 250}"
        named[f"closed-{address}"] = Server("closed", f"{address}:{closed_port(address)}",
                                            "unreachable", False)  # fmt: skip
        i += 1
    return named


def _argv(targets_file, out, ca, *args):
    return [sys.executable, "-c", PEAK, "probe", "--targets", str(targets_file), "--out",
            str(out), "--ca", str(ca), "--groups", GROUPS, "--timeout", "3", "--parallel", "64",
            "--rate", "500", *args]  # fmt: skip


def _run(argv) -> tuple[subprocess.CompletedProcess, float, int]:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=pqlab_env(), timeout=1800)
    took = time.monotonic() - started
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    peak = int(proc.stderr.split("peak_rss_kib")[1].split()[0])
    return proc, took, peak


def test_a_scan_of_1000_targets(tmp_path):
    with fleet(tmp_path, hostile_connections=400) as (servers, ca):
        named = _targets(servers, TARGETS)
        lines = [f"{s.target} {name}\n" for name, s in named.items()]
        small = tmp_path / "small.txt"
        small.write_text("".join(lines[: SMALL - 30] + lines[-30:]))
        (tmp_path / "all.txt").write_text("".join(lines))

        _, took_small, peak_small = _run(_argv(small, tmp_path / "small", ca))
        proc, took, peak = _run(_argv(tmp_path / "all.txt", tmp_path / "all", ca))
        print(f"\n{SMALL} targets: {took_small:.1f} s, peak RSS {peak_small / 1024:.1f} MiB; "
              f"{TARGETS} targets: {took:.1f} s, peak RSS {peak / 1024:.1f} MiB; "
              f"{proc.stdout.strip().splitlines()[-1]}; load {os.getloadavg()}")  # fmt: skip
        assert took < BUDGET_S
        got = {
            r["target"]: r["verdict"] for r in rows(tmp_path / "all", "SELECT * FROM probe_targets")
        }
        assert len(got) == TARGETS
        assert got == {name: s.verdict for name, s in named.items()}
        # Memory grows with the targets only as the results do: far less than tenfold.
        assert peak < 1.5 * peak_small

        # Killed with SIGKILL a third of the way, then resumed: each target once.
        out = tmp_path / "killed"
        argv = _argv(tmp_path / "all.txt", out, ca)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=pqlab_env())  # fmt: skip
        live = out / "tables" / "probe_targets.jsonl"
        deadline = time.monotonic() + BUDGET_S
        try:
            while time.monotonic() < deadline and p.poll() is None:
                if live.exists() and len(live.read_text().splitlines()) >= TARGETS // 3:
                    break
                time.sleep(0.1)
            os.kill(p.pid, signal.SIGKILL)
        finally:
            p.communicate(timeout=60)
        _run(_argv(tmp_path / "all.txt", out, ca, "--resume"))
        names = [r["target"] for r in rows(out, "SELECT target FROM probe_targets")]
        assert sorted(names) == sorted(named)
        cells = [r["cell_id"] for r in rows(out, "SELECT cell_id FROM cells")]
        assert len(cells) == len(set(cells))
        lines = live.read_text().splitlines()
        assert sorted(json.loads(line)["target"] for line in lines) == sorted(named)
