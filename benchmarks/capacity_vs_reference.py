"""pqlab's closed-loop capacity against two references for the same cell, same server:
`pqlab-engine tls load --mode closed --clients 1` (what `pqlab capacity` runs) vs the engine's
own handshake loop (`tls client -n N`, connections / wall time) vs stock `openssl s_time -new`
from the same OpenSSL, all against one engine `tls server --threads 1` on 127.0.0.1 (server on
one CPU, the client on another), alternating rounds. Target: within 10 % of both.

    python benchmarks/capacity_vs_reference.py [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from handshake_rate import openssl_bin  # noqa: E402
from server_overhead import cpus, pin, s_time, stop  # noqa: E402

from pqlab import engine  # noqa: E402

GROUP = "X25519MLKEM768"
SIGALG = "mldsa44"
TOLERANCE = 0.10


def start_server(eng: str, d: Path, cpu) -> tuple[subprocess.Popen, int]:
    log = open(d / "server.jsonl", "w+")
    argv = [eng, "tls", "server", "--listen", "127.0.0.1:0", "--cert-chain", str(d / "chain.pem")]
    argv += ["--key", str(d / "server.key.pem"), "--groups", GROUP, "--events", "off"]
    argv += ["--response-mode", "none", "--threads", "1"]
    srv = subprocess.Popen(pin(cpu) + argv, stdout=log, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log.seek(0)
        first = log.readline()
        if first.endswith("\n"):
            return srv, json.loads(first)["port"]
        time.sleep(0.01)
    stop(srv)
    raise RuntimeError("engine server did not start")


def client_args(d: Path, port: int) -> list[str]:
    return [
        "--connect",
        f"127.0.0.1:{port}",
        "--ca",
        str(d / "root.crt.pem"),
        "--servername",
        "localhost",
        "--groups",
        GROUP,
        "--sigalgs",
        SIGALG,
        "--events",
        "off",
    ]


def load_rate(eng: str, d: Path, port: int, seconds: int, cpu) -> float:
    argv = [eng, "tls", "load", *client_args(d, port), "--mode", "closed", "--clients", "1"]
    argv += ["--duration-ms", str(seconds * 1000), "-n", "10000000", "--warmup", "5"]
    out = subprocess.run(pin(cpu) + argv, capture_output=True, text=True, timeout=seconds + 120)
    r = json.loads(out.stdout.splitlines()[-1])
    if r.get("type") != "load_result" or r["errors"]:
        raise RuntimeError(f"tls load: {out.stdout[-300:]} {out.stderr[-300:]}")
    return r["completed"] / (r["window_ns"] / 1e9)


def client_rate(eng: str, d: Path, port: int, n: int, cpu) -> float:
    argv = [eng, "tls", "client", *client_args(d, port), "-n", str(n), "--warmup", "5"]
    t0 = time.perf_counter()
    out = subprocess.run(pin(cpu) + argv, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    recs = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or len(recs) != n + 5:
        raise RuntimeError(f"tls client failed: {out.stderr[-300:]}")
    return (n + 5) / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not 1 <= args.seconds <= 600 or not 1 <= args.rounds <= 100:
        sys.exit("error: --seconds 1-600, --rounds 1-100")
    eng, ossl = str(engine.engine_path()), openssl_bin()
    server_cpu, client_cpu = cpus()
    with tempfile.TemporaryDirectory(prefix="pqlab-bench-cap-") as tmp:
        d = Path(tmp)
        subprocess.run(
            [
                eng,
                "tls",
                "certs",
                "--ca-alg",
                "ML-DSA-44",
                "--server-alg",
                "ML-DSA-44",
                "--out-dir",
                str(d),
            ],
            check=True,
            capture_output=True,
        )
        conf = d / "openssl.cnf"
        conf.write_text(
            "openssl_conf = init\n[init]\nssl_conf = ssl\n[ssl]\nsystem_default = sys\n"
            f"[sys]\nGroups = {GROUP}\n"
        )
        srv, port = start_server(eng, d, server_cpu)
        try:
            print(
                f"{GROUP}, ML-DSA-44 chain; engine server --threads 1 on CPU {server_cpu}, "
                f"clients on CPU {client_cpu}; closed loop, one client"
            )
            rates: dict[str, list[float]] = {"load": [], "client": [], "s_time": []}
            for r in range(args.rounds):
                rates["load"].append(load_rate(eng, d, port, args.seconds, client_cpu))
                n = max(50, int(rates["load"][-1] * args.seconds))
                rates["client"].append(client_rate(eng, d, port, n, client_cpu))
                rate, _ = s_time(ossl, d / "root.crt.pem", port, args.seconds, client_cpu, conf)
                rates["s_time"].append(rate)
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rates.items())
                    + f"; load/client {rates['load'][-1] / rates['client'][-1]:.3f}, "
                    f"load/s_time {rates['load'][-1] / rates['s_time'][-1]:.3f}",
                    flush=True,
                )
        finally:
            stop(srv)
    ok = True
    for ref in ("client", "s_time"):
        ratios = [a / b for a, b in zip(rates["load"], rates[ref], strict=True)]
        med = statistics.median(ratios)
        within = abs(med - 1) <= TOLERANCE
        ok &= within
        print(
            f"pqlab capacity loop / {ref}: median of per-round ratios {med:.3f} "
            f"({', '.join(f'{x:.3f}' for x in ratios)}); target 0.90-1.10: "
            + ("OK" if within else f"OFF by {abs(med - 1) - TOLERANCE:.3f} beyond the 10 %")
        )
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
