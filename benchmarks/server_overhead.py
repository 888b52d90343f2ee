"""The server side must not be the bottleneck: connections per second that stock
`openssl s_time -new` (from the same OpenSSL source) completes against `pqlab serve` and
against `openssl s_server`, same chain (ML-DSA-44 under an ML-DSA-44 root), X25519MLKEM768,
TLS 1.3, no tickets, alternating rounds. Target: pqlab / s_server >= 0.95, with pqlab's
per-connection records on (they are: `pqlab serve` reads and prints one per connection).

Each server is pinned to one CPU and s_time to another (when there are two), so the two
servers see the same client. The ratio is taken within each round, the median reported.

    python benchmarks/server_overhead.py [--seconds 5] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from handshake_rate import free_port, openssl_bin, wait_port  # noqa: E402

GROUP = "X25519MLKEM768"
TARGET = 0.95


def pin(cpu: int | None) -> list[str]:
    return ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []


def cpus() -> tuple[int | None, int | None]:
    c = sorted(os.sched_getaffinity(0))
    return (c[-1], c[0]) if len(c) >= 2 else (None, None)


def start_pqlab(cert_dir: Path, port: int, cpu, json_out: bool) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pqlab", "serve", "--group", GROUP, "--sig", "ML-DSA-44"]
    argv += ["--port", str(port), "--cert-dir", str(cert_dir), "--max-concurrent", "64"]
    if json_out:
        argv.append("--json")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        pin(cpu) + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def start_s_server(ossl: str, chain_dir: Path, port: int, cpu) -> subprocess.Popen:
    argv = [ossl, "s_server", "-accept", f"127.0.0.1:{port}"]
    argv += ["-cert", str(chain_dir / "chain.pem"), "-key", str(chain_dir / "server.key.pem")]
    argv += ["-groups", GROUP, "-num_tickets", "0", "-quiet", "-tls1_3", "-naccept", "10000000"]
    return subprocess.Popen(
        pin(cpu) + argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def s_time(ossl: str, root: Path, port: int, seconds: int, cpu, conf: Path):
    """(connections per second s_time -new completed over its own wall time, connections)."""
    argv = [ossl, "s_time", "-connect", f"127.0.0.1:{port}", "-new", "-time", str(seconds)]
    argv += ["-CAfile", str(root), "-verify", "2", "-tls1_3"]
    t0 = time.perf_counter()
    out = subprocess.run(
        pin(cpu) + argv,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        env={**os.environ, "OPENSSL_CONF": str(conf)},
    )
    wall = time.perf_counter() - t0
    m = re.search(r"(\d+) connections in ([\d.]+)s", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"s_time failed: {(out.stdout + out.stderr)[-400:]}")
    if "verify error" in out.stdout + out.stderr:
        raise RuntimeError("s_time reported a verification error")
    return int(m.group(1)) / wall, int(m.group(1))


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of a process and its descendants, by program name."""
    out: dict[str, float] = {}
    todo = [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / tick
        todo += [int(k) for k in kids]
    return out


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="pqlab serve --json (records as JSON)")
    ap.add_argument("--no-pin", action="store_true", help="let the scheduler place everything")
    args = ap.parse_args()
    if not 1 <= args.seconds <= 600 or not 1 <= args.rounds <= 100:
        sys.exit("error: --seconds 1-600, --rounds 1-100")
    ossl = openssl_bin()
    server_cpu, client_cpu = (None, None) if args.no_pin else cpus()
    work = Path(tempfile.mkdtemp(prefix="pqlab-bench-srv-"))
    conf = work / "openssl.cnf"
    conf.write_text(
        "openssl_conf = init\n[init]\nssl_conf = ssl\n[ssl]\nsystem_default = sys\n"
        f"[sys]\nGroups = {GROUP}\n"
    )
    pq_port, os_port = free_port(), free_port()
    pq = start_pqlab(work / "certs", pq_port, server_cpu, args.json)
    ref = None
    try:
        wait_port(pq_port, 60)
        chain_dir = work / "certs" / "ML-DSA-44__ML-DSA-44"
        ref = start_s_server(ossl, chain_dir, os_port, server_cpu)
        wait_port(os_port, 30)
        root = chain_dir / "root.crt.pem"
        print(
            f"s_time -new against pqlab serve and openssl s_server ({ossl}), {GROUP}, "
            f"ML-DSA-44 chain; servers on CPU {server_cpu}, s_time on CPU {client_cpu}"
        )
        ratios, pq_rates, os_rates = [], [], []
        for r in range(args.rounds):
            order = [("pqlab", pq_port), ("s_server", os_port)]
            if r % 2:
                order.reverse()
            got, cpu = {}, {}
            for name, port in order:
                proc = pq if name == "pqlab" else ref
                c0 = tree_cpu(proc.pid)
                got[name], n = s_time(ossl, root, port, args.seconds, client_cpu, conf)
                c1 = tree_cpu(proc.pid)
                cpu[name] = {k: (c1[k] - c0.get(k, 0.0)) / n * 1e6 for k in c1}
            pq_rates.append(got["pqlab"])
            os_rates.append(got["s_server"])
            ratios.append(got["pqlab"] / got["s_server"])
            show = {
                k: ", ".join(f"{p} {us:.0f}" for p, us in v.items() if us > 0)
                for k, v in cpu.items()
            }
            print(
                f"round {r + 1}: pqlab serve {got['pqlab']:.0f}/s, s_server "
                f"{got['s_server']:.0f}/s, ratio {ratios[-1]:.3f}; server CPU us/connection: "
                f"pqlab [{show['pqlab']}], s_server [{show['s_server']}]",
                flush=True,
            )
        med = statistics.median(ratios)
        print(
            f"pqlab serve / s_server connections per second: median {med:.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}); medians {statistics.median(pq_rates):.0f}/s "
            f"vs {statistics.median(os_rates):.0f}/s; target >= {TARGET}"
        )
        print("OK" if med >= TARGET else f"BELOW TARGET by {TARGET - med:.3f}")
        return 0 if med >= TARGET else 1
    finally:
        stop(pq)
        if ref is not None:
            stop(ref)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
