"""Cross-check `pqlab memory`'s counts (OpenSSL's allocator hooks, per role) against an
independent instrument: valgrind, which sees every malloc of the whole process.

Two comparisons per cell, on the same engine command (`pqlab-engine tls memory`):

1. Allocations and bytes per handshake, by difference: valgrind memcheck's "total heap
   usage" for a run of 1 + K handshakes minus a run of 1 handshake, divided by K, against
   the hooks' client + server counts per handshake. The difference cancels everything done
   once (OpenSSL's initialisation, contexts, certificates). What remains on valgrind's side
   and not on ours is the engine's own (Rust) per-connection allocations, and, in bytes,
   the hooks' 16-byte header on every block (valgrind sees malloc(n + 16)) and realloc
   counted as a whole new block.
2. Whole-process peak heap: massif's peak (useful heap + allocator overhead) for a short
   run, against the hooks' per-handshake peaks of client + server. Massif's peak includes
   everything the process holds at that moment: OpenSSL's provider tables and caches, both
   contexts, keys and certificates, the engine's buffers; so the ratio is well above 1 and
   says how much of a small TLS process a handshake is.

    python benchmarks/memory_vs_valgrind.py [--extra 5]

valgrind comes from the Debian package (scripts/bootstrap.sh installs it). Without it the
script says so and exits 3.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from pqlab import engine  # noqa: E402

CELLS = (
    # (label, group, server key, server scheme)
    ("X25519 / ECDSA-P256", "X25519", "EC:P-256", "ecdsa_secp256r1_sha256"),
    ("X25519MLKEM768 / ML-DSA-44", "X25519MLKEM768", "ML-DSA-44", "mldsa44"),
)
HEAP_USAGE = re.compile(
    r"total heap usage: ([\d,]+) allocs, ([\d,]+) frees, ([\d,]+) bytes allocated"
)


def certs(base: Path, server_alg: str) -> Path:
    d = base / re.sub(r"[^A-Za-z0-9]+", "-", server_alg)
    if not d.exists():
        root = base / "root"
        argv = ["tls", "certs", "--ca-alg", "EC:P-256", "--server-alg", server_alg]
        if (root / "root.crt.pem").exists():
            argv += ["--ca-cert", root / "root.crt.pem", "--ca-key", root / "root.key.pem"]
        engine.run([*map(str, argv), "--out-dir", str(d)], timeout=120)
        if not root.exists():
            root.mkdir(mode=0o700)
            for f in ("root.crt.pem", "root.key.pem"):
                shutil.copyfile(d / f, root / f)
    return d


def memory_argv(d: Path, group: str, scheme: str, count: int) -> list[str]:
    return [
        str(engine.engine_path()),
        "tls",
        "memory",
        "--cert-chain",
        str(d / "chain.pem"),
        "--key",
        str(d / "server.key.pem"),
        "--ca",
        str(d / "root.crt.pem"),
        "--groups",
        group,
        "--sigalgs",
        scheme,
        "--events",
        "off",
        "--fixed-random",
        "--warmup",
        "1",
        "-n",
        str(count),
        "--io-timeout",
        "300",
    ]


def hooks(argv: list[str]) -> dict:
    """The hooks' counts per measured handshake, client + server (medians are equal here)."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    mem = [r for r in recs if r["type"] == "memory" and not r["warmup"] and r["index"] == 0]
    return {
        "allocations": sum(r["allocations"] for r in mem),
        "total_bytes": sum(r["heap_total_bytes"] for r in mem),
        "peak_bytes": sum(r["heap_peak_bytes"] for r in mem),
    }


def memcheck(argv: list[str]) -> tuple[int, int]:
    """valgrind's (allocs, bytes allocated) for the whole process."""
    proc = subprocess.run(
        ["valgrind", "--tool=memcheck", "--leak-check=no", *argv],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"valgrind memcheck failed: {proc.stderr.strip()[-400:]}")
    m = HEAP_USAGE.search(proc.stderr)
    if m is None:
        raise SystemExit("valgrind printed no heap summary")
    return int(m.group(1).replace(",", "")), int(m.group(3).replace(",", ""))


def massif_peak(argv: list[str], tmp: Path) -> int:
    """Massif's peak of useful heap + allocator overhead for the whole process."""
    out = tmp / "massif.out"
    subprocess.run(
        ["valgrind", "--tool=massif", f"--massif-out-file={out}", *argv],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    peak = 0
    heap = extra = 0
    for line in out.read_text().splitlines():
        if line.startswith("mem_heap_B="):
            heap = int(line.split("=")[1])
        elif line.startswith("mem_heap_extra_B="):
            extra = int(line.split("=")[1])
            peak = max(peak, heap + extra)
    return peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra", type=int, default=5, help="K: handshakes added (default 5)")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print(
            "valgrind is not installed: this cross-check needs it (apt-get install valgrind; "
            "scripts/bootstrap.sh installs it). Nothing was measured."
        )
        return 3
    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout
    print(f"engine {engine.engine_path()}; {version.strip()}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for label, group, key, scheme in CELLS:
            d = certs(tmp, key)
            ours = hooks(memory_argv(d, group, scheme, 1))
            a1, b1 = memcheck(memory_argv(d, group, scheme, 1))
            a2, b2 = memcheck(memory_argv(d, group, scheme, 1 + a.extra))
            per_allocs = (a2 - a1) / a.extra
            per_bytes = (b2 - b1) / a.extra
            peak = massif_peak(memory_argv(d, group, scheme, 1), tmp)
            print(f"\n{label} (client + server per handshake)")
            print(
                f"  allocations: hooks {ours['allocations']}, valgrind {per_allocs:.0f} "
                f"-> ratio {ours['allocations'] / per_allocs:.3f}"
            )
            print(
                f"  bytes:       hooks {ours['total_bytes']}, valgrind {per_bytes:.0f} "
                f"-> ratio {ours['total_bytes'] / per_bytes:.3f}"
            )
            # valgrind sees each hooked block 16 bytes larger (the size header).
            plain = per_bytes - 16 * ours["allocations"]
            print(
                f"  bytes without the hooks' headers: valgrind {plain:.0f} "
                f"-> ratio {ours['total_bytes'] / plain:.3f}"
            )
            print(
                f"  peak:        hooks {ours['peak_bytes']} (client + server), massif whole "
                f"process {peak} -> ratio {peak / ours['peak_bytes']:.2f}"
            )
    print(
        "\nReading: allocation ratios below 1 are the engine's own (Rust) per-connection "
        "allocations, which valgrind sees and the hooks do not (records, the socket wrapper, "
        "the channel between threads); bytes also differ by the hooks' 16-byte header per "
        "block and by realloc, which valgrind counts as a whole new block. The massif ratio "
        "is the whole process (OpenSSL's initialisation, both contexts, keys, certificates, "
        "the engine) against one handshake's peaks."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
