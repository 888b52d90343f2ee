"""Run every benchmark in this folder, one after another, and print each one's ratios.

Each script measures pqlab next to a reference tool built from the same library sources
(openssl speed / s_time / s_server, liboqs's speed programs) in the same run. Network
benchmarks need root (CAP_NET_ADMIN) and are skipped without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NEEDS_ROOT = {
    "handshake_rate.py",
    "handshake_matrix_time.py",
    "linkem_precision.py",
    "tls_bench_vs_pqlab.py",
}


def main() -> int:
    failed = []
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    for script in sorted(HERE.glob("*.py")):
        if script.name == Path(__file__).name:
            continue
        if script.name in NEEDS_ROOT and os.geteuid() != 0:
            print(f"== {script.name}: skipped (needs root for network namespaces)")
            continue
        print(f"== {script.name}", flush=True)
        code = subprocess.call([sys.executable, str(script)], env=env)
        if code != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
