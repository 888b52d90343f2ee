"""wolfSSL's own tls_bench against pqlab's throughput and capacity on the wolfssl stack, for
the same groups and suite (TLS_AES_256_GCM_SHA384) and the same server key (RSA-2048 under
an RSA-2048 CA, what tls_bench's built-in certificates are), side by side in one run, rounds
alternating. Target: within 15 % where the two measure the same quantity.

- tls_bench's client "Connect Avg" (wolfSSL_connect on a connected socket) against pqlab's
  client handshake time in `throughput` (`handshake_ms`: the same span) and against the
  median latency of `capacity`'s one closed-loop client (which adds the TCP connect and the
  close over the lab's link);
- tls_bench's client "Tx" (bytes over the time spent inside write calls, the echo keeping
  the socket buffer empty: encrypting and sending) against pqlab's client CPU rate while
  pushing (`tx_cpu_MBps`: encrypting and sending, per CPU second), with the lab's link at
  loopback's MTU (`--mtu 65535`), so the kernel's per-segment work is tls_bench's too.

tls_bench's "Rx" (time waiting in read calls for the echo) has no pqlab counterpart; it is
printed with the wait per connection, which shows when it measured TCP stalls instead.

tls_bench's sockets keep Nagle's algorithm on (pqlab's set TCP_NODELAY, as TLS servers and
clients commonly do). Each round therefore also runs tls_bench with TCP_NODELAY set on its
sockets by a preloaded shim (compiled here with the C compiler; the same tls_bench binary),
so the effect of Nagle on its figures is measured, not assumed.

    sudo .venv/bin/python benchmarks/tls_bench_vs_pqlab.py [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from pqlab import engine  # noqa: E402
from pqlab.tls import stacks, wolfssl_tools  # noqa: E402

TOLERANCE = 0.15
SUITE = "TLS_AES_256_GCM_SHA384"
MiB = 1 << 20


def pqlab(*args) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pqlab", *map(str, args)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"pqlab {' '.join(map(str, args[:1]))} failed:\n{proc.stderr}")


NODELAY_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
static void nodelay(int fd) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
int connect(int fd, const struct sockaddr *a, socklen_t l) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    int r = real(fd, a, l);
    nodelay(fd);
    return r;
}
int accept(int fd, struct sockaddr *a, socklen_t *l) {
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = dlsym(RTLD_NEXT, "accept");
    int r = real(fd, a, l);
    if (r >= 0) nodelay(r);
    return r;
}
"""


def nodelay_shim(tmp: Path) -> Path | None:
    """A shared object that sets TCP_NODELAY on every socket a program connects or accepts."""
    src, lib = tmp / "nodelay.c", tmp / "nodelay.so"
    src.write_text(NODELAY_C)
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"])
    return lib if cc.returncode == 0 else None


def tls_bench_nodelay(shim: Path, groups: list[str], seconds: int) -> dict:
    names = wolfssl_tools_names()
    out = {}
    for r in wolfssl_tools.tls_bench(
        stacks.get("wolfssl"), seconds, wolfssl_tools.DOCUMENT_SUITE, env={"LD_PRELOAD": str(shim)}
    ):
        group = names.get(r["group"])
        if r["side"] == "client" and group in groups:
            out[group] = {
                "nodelay_connect_ms": r["connect_avg_ms"],
                "nodelay_tx": r["tx_MiBps"],
                "nodelay_rx": r["rx_MiBps"],
            }
    return out


def wolfssl_tools_names() -> dict[str, str]:
    from pqlab import catalog

    return {
        wolfssl_tools.TLS_BENCH_GROUPS[a.tls_group]: a.name
        for a in catalog.all_algorithms("kem")
        if a.tls_group in wolfssl_tools.TLS_BENCH_GROUPS
    }


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def one_round(tmp: Path, i: int, groups: str, seconds: int) -> dict:
    """One throughput run (tls_bench included) and one capacity run; per group the figures."""
    tp, cap = tmp / f"throughput-{i}", tmp / f"capacity-{i}"
    pqlab(
        "throughput", "--stack", "wolfssl", "--groups", groups, "--ciphersuites", SUITE,
        "--server-sig", "RSA-2048", "--bytes", "16MiB", "-n", "20", "--mtu", "65535",
        "--tls-bench-seconds", seconds, "--out", tp, "--no-report",
    )  # fmt: skip
    pqlab(
        "capacity", "--stack", "wolfssl", "--groups", groups, "--server-sig", "RSA-2048",
        "--ca-sig", "RSA-2048", "--mode", "closed", "--clients", "1",
        "--duration", f"{seconds}s", "--out", cap, "--no-report",
    )  # fmt: skip
    out: dict[str, dict] = {}
    for r in rows(tp / "tables" / "throughput_tls_bench.csv"):
        out[r["group"]] = {
            "connect_ms": float(r["tls_bench_connect_avg_ms"]),
            "tls_bench_tx": float(r["tls_bench_tx_MiBps"]),
            "tls_bench_rx": float(r["tls_bench_rx_MiBps"]),
            "rx_wait_ms": float(r["tls_bench_rx_wait_ms_per_connection"]),
            "handshake_ms": float(r["pqlab_handshake_ms"]),
            "tx_cpu": float(r["pqlab_tx_cpu_MiBps"]),
        }
    for r in rows(cap / "tables" / "capacity.csv"):
        if r["group"] in out:
            out[r["group"]]["capacity_p50_ms"] = float(r["latency_p50_ms"])
            out[r["group"]]["capacity_per_s"] = float(r["handshakes_per_s"])
    shim = nodelay_shim(tmp)
    if shim is not None:
        for group, figures in tls_bench_nodelay(shim, list(out), seconds).items():
            out[group].update(figures)
    return out


def verdict(ratio: float) -> str:
    return "ok" if abs(ratio - 1) <= TOLERANCE else "OUTSIDE"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--groups", default="X25519,X25519MLKEM768,ML-KEM-768,SecP256r1MLKEM768")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("skipped: needs root (pqlab throughput and capacity build network namespaces)")
        return 0
    if "wolfssl" not in stacks.all_stacks():
        print("skipped: pqlab-engine-wolfssl is not built (make engine)")
        return 0
    info = engine.info()
    print(f"engine build {info.get('build_id', '?')[:16]}, CPUs {os.cpu_count()}, load "
          f"{os.getloadavg()[0]:.2f}; {args.rounds} rounds, tls_bench {args.seconds} s per group")  # fmt: skip
    rounds = []
    with tempfile.TemporaryDirectory(prefix="pqlab-tls-bench-") as tmp:
        for i in range(args.rounds):
            rounds.append(one_round(Path(tmp), i, args.groups, args.seconds))
    failed = []
    print(
        f"{'group':20} {'tls_bench connect':>17} {'pqlab handshake':>15} {'ratio':>6} "
        f"{'capacity p50':>12} {'ratio':>6} {'tls_bench Tx':>12} {'pqlab Tx/CPU':>12} "
        f"{'ratio':>6} {'tls_bench Rx':>12} {'Rx wait/conn':>12}"
    )
    for group in rounds[0]:
        m = {k: statistics.median(r[group][k] for r in rounds) for k in rounds[0][group]}
        hs, cap = m["handshake_ms"] / m["connect_ms"], m["capacity_p50_ms"] / m["connect_ms"]
        tx = m["tx_cpu"] / m["tls_bench_tx"]
        print(
            f"{group:20} {m['connect_ms']:14.3f} ms {m['handshake_ms']:12.3f} ms {hs:6.3f} "
            f"{m['capacity_p50_ms']:9.3f} ms {cap:6.3f} {m['tls_bench_tx']:7.0f} MiB/s "
            f"{m['tx_cpu']:7.0f} MiB/s {tx:6.3f} {m['tls_bench_rx']:6.1f} MiB/s "
            f"{m['rx_wait_ms']:9.1f} ms"
        )
        for what, ratio in (("handshake", hs), ("capacity latency", cap), ("Tx", tx)):
            if verdict(ratio) != "ok":
                failed.append(f"{group} {what}: {ratio:.3f}")
    if all("nodelay_connect_ms" in r[g] for r in rounds for g in r):
        print("tls_bench with TCP_NODELAY on its sockets (preloaded shim), same binary:")
        for group in rounds[0]:
            m = {k: statistics.median(r[group][k] for r in rounds) for k in rounds[0][group]}
            print(
                f"{group:20} connect {m['nodelay_connect_ms']:.3f} ms (pqlab / it "
                f"{m['handshake_ms'] / m['nodelay_connect_ms']:.3f}), Tx "
                f"{m['nodelay_tx']:.0f} MiB/s (pqlab CPU rate / it "
                f"{m['tx_cpu'] / m['nodelay_tx']:.3f}), Rx {m['nodelay_rx']:.1f} MiB/s"
            )
    print("ratios: pqlab / tls_bench (medians over rounds); target within 15 %")
    for f in failed:
        print(f"OUTSIDE TARGET: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
