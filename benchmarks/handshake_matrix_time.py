"""How long `pqlab handshake` takes beside the handshakes it measures: the full default
matrix (80 cells x 1000 handshakes, captures on both hosts, `--send-root` as document 000's
servers did) run as a user runs it, its wall time divided by the sum of its handshakes'
times (SYN to the client's Finished, `total_ns`), and where the rest went, stage by stage
(the run's metadata, `pqlab.stages`). Target: a ratio of at most 1.5 on a quiet machine.
Needs root (network namespaces).

    python benchmarks/handshake_matrix_time.py [-n 1000] [--cells 80|8|4|2] [--keep DIR]

Prints the machine's load average before and after (the ratio means little on a busy
machine), the wall time of the command (the export of tables, figures and report.html
included), the sum of the handshakes' times, the ratio, and seconds per stage. Exits 1 when
the ratio is above the target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5
# Smaller matrices for a quick look (the ratio of a small matrix is not the full one's: the
# start-up and the export weigh more).
SUBSETS = {
    80: None,  # the default matrix: 5 groups x 4 server signers x 4 CAs
    8: ("X25519,ML-KEM-1024", "RSA-3072,ML-DSA-44", "RSA-2048,ML-DSA-44"),
    4: ("X25519,ML-KEM-1024", "RSA-3072,ML-DSA-44", "ML-DSA-44"),
    2: ("X25519MLKEM768", "RSA-3072,ML-DSA-44", "ML-DSA-44"),
}


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def command(out: Path, n: int, cells: int) -> list[str]:
    argv = [sys.executable, "-m", "pqlab", "handshake", "-n", str(n), "--send-root"]
    subset = SUBSETS[cells]
    if subset is not None:
        groups, servers, cas = subset
        argv += ["--groups", groups, "--server-sig", servers, "--ca-sig", cas]
    return [*argv, "--out", str(out)]


def report(out: Path, wall: float) -> float:
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    cells, handshakes, total_s = con.execute(
        "SELECT count(DISTINCT cell_id), count(*), sum(total_ns) / 1e9 FROM handshake_raw"
    ).fetchone()
    meta = json.loads(con.execute("SELECT metadata FROM invocations ORDER BY id").fetchall()[-1][0])
    con.close()
    stages = meta.get("stages", {})
    ratio = wall / total_s
    print(f"cells: {cells}, handshakes measured: {handshakes} (+ warm-ups)")
    print(f"wall time of the command: {wall:.1f} s (export included)")
    print(f"sum of SYN-to-client-Finished times: {total_s:.1f} s")
    print(f"ratio: {ratio:.2f} (target: at most {TARGET_RATIO})")
    print(f"stages (the run's metadata; wall {stages.get('wall_s', 0):.1f} s in-process):")
    for name, seconds in (stages.get("seconds") or {}).items():
        print(f"  {name:32s} {seconds:8.1f} s  {100 * seconds / wall:5.1f} %")
    return ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000, help="measured handshakes per cell")
    ap.add_argument("--cells", type=int, choices=sorted(SUBSETS), default=80)
    ap.add_argument("--keep", metavar="DIR", help="keep the run directory here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces); run with sudo", file=sys.stderr)
        return 4
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    tmp = Path(tempfile.mkdtemp(prefix="pqlab-hs-bench-"))
    out = Path(args.keep) if args.keep else tmp / "run"
    try:
        print(f"load average before: {load()}")
        t0 = time.monotonic()
        subprocess.run(command(out, args.n, args.cells), env=env, check=True)
        wall = time.monotonic() - t0
        print(f"load average after: {load()}")
        ratio = report(out, wall)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
