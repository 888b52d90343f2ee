"""Shared test fixtures: running the real `pqlab` CLI, privilege checks, leak checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


def pqlab_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_pqlab(
    *args, check: bool = False, timeout: float = 600, **kw
) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would (`env`: the whole environment, by
    default `pqlab_env()`)."""
    env = kw.pop("env", None) or pqlab_env()
    proc = subprocess.run(
        [sys.executable, "-m", "pqlab", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"pqlab {' '.join(map(str, args))} exited {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc


def is_root() -> bool:
    return os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    """The one gate on root: a test marked `net` (it makes network namespaces; a test that
    checks for leaked namespaces, `no_leaks`, is marked so here) or `root` (it needs root
    otherwise: raw captures, chown) is skipped, saying which, when the tests run without
    root. `make quick` leaves both out (`-m "not net and not root and not slow"`)."""
    for item in items:
        if "no_leaks" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.net)
    if is_root():
        return
    for item in items:
        for mark in ("net", "root"):
            if item.get_closest_marker(mark) is not None:
                why = "network namespaces" if mark == "net" else "root"
                item.add_marker(pytest.mark.skip(reason=f"needs {why}: run as root"))
                break


def netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.fixture
def no_leaks():
    """Assert that the test leaves no pqlab namespace or engine process behind."""
    before = {n for n in netns_list() if n.startswith("pqlab")}
    yield
    after = {n for n in netns_list() if n.startswith("pqlab")}
    assert after <= before, f"namespaces left behind: {sorted(after - before)}"
    procs = subprocess.run(["pgrep", "-x", "pqlab-engine"], capture_output=True, text=True)
    assert not procs.stdout.strip(), f"engine processes left behind: {procs.stdout.split()}"


def query(run, sql: str) -> list[tuple]:
    """The rows of `sql` on a run directory's results database, opened read-only."""
    import duckdb

    con = duckdb.connect(str(Path(run) / "results.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def handshake_cells(out) -> dict[tuple[str, str, str], tuple[int, int]]:
    """A handshake run's cells, (group, server_sig, ca_sig) -> (the server port the cell ran
    on, the connections its captures hold, warm-ups included), from handshake_order."""
    import duckdb

    con = duckdb.connect(str(Path(out) / "results.duckdb"), read_only=True)
    try:
        rows = con.execute("""
            SELECT r."group", r.server_sig, r.ca_sig, any_value(o.port),
                   sum(o.warmup + o.handshakes)
            FROM handshake_order o
            JOIN (SELECT DISTINCT cell_id, "group", server_sig, ca_sig FROM handshake_raw) r
              USING (cell_id)
            GROUP BY 1, 2, 3""").fetchall()
    finally:
        con.close()
    return {(g, s, c): (int(port), int(n)) for g, s, c, port, n in rows}
