"""How long the full default `pqlab handshake` matrix (80 cells x 1000 handshakes, captures
on both hosts) takes on this machine, extrapolated from a measured subset; target: under
15 minutes on 2 cores. Needs root (network namespaces).

    python benchmarks/handshake_matrix_time.py [--cells 8] [-n 1000]

The subset spans the matrix's extremes (smallest and largest key exchange, fastest and
slowest signer, small and large CA). Prints seconds per cell, the export time, the
extrapolated total and its ratio to the 15-minute target.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 15 * 60
FULL_CELLS = 80
FULL_FIGURES = 58  # 20 by server signer, 16 by group, 20 by CA, 2 size-time
SUBSETS = {
    8: ("X25519,ML-KEM-1024", "RSA-3072,ML-DSA-44", "RSA-2048,ML-DSA-44"),
    4: ("X25519,ML-KEM-1024", "RSA-3072,ML-DSA-44", "ML-DSA-44"),
    2: ("X25519MLKEM768", "RSA-3072,ML-DSA-44", "ML-DSA-44"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, choices=sorted(SUBSETS), default=8)
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces); run with sudo", file=sys.stderr)
        return 4
    groups, servers, cas = SUBSETS[args.cells]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with tempfile.TemporaryDirectory(prefix="pqlab-hs-bench-") as tmp:
        out = Path(tmp) / "run"
        t0 = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pqlab",
                "handshake",
                "--groups",
                groups,
                "--server-sig",
                servers,
                "--ca-sig",
                cas,
                "-n",
                str(args.n),
                "--no-report",
                "--out",
                str(out),
            ],
            env=env,
            check=True,
        )
        wall = time.monotonic() - t0
        con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
        cells = con.execute("SELECT count(*) FROM cells").fetchone()[0]
        started, first, last = con.execute(
            "SELECT (SELECT min(started) FROM invocations), min(finished), max(finished) FROM cells"
        ).fetchone()
        handshake_s = con.execute(
            "SELECT avg(seconds) FROM handshake_capture WHERE side = 'server'"
        ).fetchone()[0]
        con.close()
        figures = len(list((out / "figures").glob("*.png")))
    from datetime import datetime

    cell_span = (datetime.fromisoformat(last) - datetime.fromisoformat(started)).total_seconds()
    per_cell = cell_span / cells
    rest = wall - cell_span  # start-up, export of tables and figures
    # The export grows with the number of figures (58 for the full matrix); scaling the
    # whole rest by it overestimates a little, on purpose.
    estimate = FULL_CELLS * per_cell + rest * FULL_FIGURES / max(figures, 1)
    print(f"cells measured: {cells} x {args.n} handshakes (+20 warm-up)")
    print(f"per cell: {per_cell:.2f} s ({handshake_s:.2f} s of handshakes with captures)")
    print(f"start-up + export of this subset ({figures} figures): {rest:.1f} s")
    print(
        f"full matrix estimate: {estimate / 60:.1f} min "
        f"(ratio to the 15-minute target: {estimate / TARGET_S:.2f})"
    )
    return 0 if estimate < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
