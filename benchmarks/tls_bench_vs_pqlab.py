"""wolfSSL's own tls_bench against pqlab's throughput and capacity on the wolfssl stack, for
the same groups and suite (TLS_AES_256_GCM_SHA384) and the same server key (RSA-2048 under
an RSA-2048 CA, what tls_bench's built-in certificates are), side by side in one run, rounds
alternating. Target: within 15 % where the two measure the same quantity.

- tls_bench's client "Connect Avg" (wolfSSL_connect on a connected socket, averaged)
  against the mean of pqlab's client handshake time in `throughput` (`handshake_mean_ms`: the
  same span) and of `capacity`'s one closed-loop client (`tls_handshake_mean_ms`: TCP
  connected to handshake done, handshake after handshake as tls_bench connects);
- tls_bench's client "Tx" and "Rx" (16 KiB writes, each echoed back before the next: bytes
  over the time inside the write calls, and over the time waiting in the reads) against
  pqlab's echo of the same loop in `throughput` (`echo_tx_MBps`, `echo_rx_MBps`), with the
  lab's link at loopback's MTU (`--mtu 65535`).

pqlab's throughput connections carry what tls_bench's carry: a handshake, then the echo
right after it; the bulk transfers that follow are 1 KiB each way (BULK).

The first round runs the same tls_bench binary four ways:

- "Nagle": as built and as `pqlab throughput` runs it (one process, a client and a server
  thread over 127.0.0.1, Nagle's algorithm on);
- "NODELAY": the same with TCP_NODELAY set on its sockets by a preloaded shim (compiled
  here with the C compiler), as pqlab's sockets are;
- "pinned": TCP_NODELAY, and its client thread pinned to the CPU pqlab's client gets, its
  server thread to the server's;
- "veth": TCP_NODELAY, its server side alone (`tls_bench -s`) in the server namespace of a
  lab made as `throughput` makes its own (`pqlab.net.shaping.build_hosts`: two namespaces
  joined by a veth pair, offloads off, the MTU `--mtu 65535` gives) and its client side
  alone (`-c -h <server address>`) in the client namespace, each process pinned to pqlab's
  server and client CPU: pqlab's path, pqlab's socket options and placement.

The target is checked against "veth", the only way that shares pqlab's path (a veth link
between two namespaces, two processes); the loopback ways are printed beside it, so what
the path, Nagle's algorithm and the threads' placement each do to tls_bench's figures is
measured, not assumed. Every round runs pqlab (throughput, capacity) and tls_bench's veth
way back to back, in alternating order (pqlab first in even rounds): the machine's speed
drifts between runs minutes apart (up to 20 % on the development machine), so each round's
ratio compares two runs a minute apart and the verdict is the median of the rounds'
ratios, printed with their range and with tls_bench's own range over the rounds (how far
tls_bench moves against itself). `-n` and `--echo-bytes` set pqlab's echo sample
(connections per cell, bytes echoed by each); tls_bench echoes 128 KiB per connection for
`--seconds`.

    sudo .venv/bin/python benchmarks/tls_bench_vs_pqlab.py [--rounds 5] [--seconds 3] \
        [-n 50] [--echo-bytes 128KiB]
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

from pqlab import engine, units  # noqa: E402
from pqlab.cpuquota import pick_cpu_pair  # noqa: E402
from pqlab.errors import UserError  # noqa: E402
from pqlab.experiments.throughput import plan as throughput  # noqa: E402
from pqlab.net.shaping import build_hosts  # noqa: E402
from pqlab.tls import stacks, wolfssl_tools  # noqa: E402

TOLERANCE = 0.15
# pqlab's connections push and pull this much after the echo: as little as throughput takes,
# as tls_bench's connections carry nothing but their echo (a connection's handshake right
# after another's 16 MiB transfers measured 3-17 % slower, docs/throughput.md).
BULK = "1KiB"
SUITE = "TLS_AES_256_GCM_SHA384"
MiB = 1 << 20
# The lab link's MTU in pqlab's throughput runs and in tls_bench's "veth" runs: loopback's.
MTU = 65535
# How tls_bench runs besides as built (the rows' labels, and the keys' prefixes); the target
# is checked against TARGET_WAY.
WAYS = {"NODELAY": "nodelay", "pinned": "pinned", "veth": "veth"}
TARGET_WAY = "veth"


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
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
static void nodelay(int fd) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
/* PIN_CLIENT_CPU / PIN_SERVER_CPU: the thread that connects (accepts) runs on that CPU from
   then on, as pqlab's client and server processes are pinned to one CPU each. */
static void pin(const char *var) {
    const char *v = getenv(var);
    if (!v) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(v), &set);
    sched_setaffinity(0, sizeof set, &set);
}
int connect(int fd, const struct sockaddr *a, socklen_t l) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    pin("PIN_CLIENT_CPU");
    int r = real(fd, a, l);
    nodelay(fd);
    return r;
}
int accept(int fd, struct sockaddr *a, socklen_t *l) {
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = dlsym(RTLD_NEXT, "accept");
    int r = real(fd, a, l);
    if (r >= 0) { nodelay(r); pin("PIN_SERVER_CPU"); }
    return r;
}
"""


def nodelay_shim(tmp: Path) -> Path | None:
    """A shared object that sets TCP_NODELAY on every socket a program connects or accepts."""
    src, lib = tmp / "nodelay.c", tmp / "nodelay.so"
    src.write_text(NODELAY_C)
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"])
    return lib if cc.returncode == 0 else None


def tls_bench_shimmed(shim: Path, groups: list[str], seconds: int, way: str) -> dict:
    """tls_bench with TCP_NODELAY on its sockets ("NODELAY"); and its client thread on the
    CPU pqlab's client gets, its server thread on the server's ("pinned"); or its two sides
    as two processes on those CPUs across a lab link made as throughput makes its own
    ("veth")."""
    names = wolfssl_tools_names()
    env = {"LD_PRELOAD": str(shim)}
    prefix = WAYS[way]
    server_cpu, client_cpu = pick_cpu_pair() or (None, None)
    if way == "pinned" and server_cpu is not None:  # one CPU: nothing to pin apart
        env |= {"PIN_SERVER_CPU": str(server_cpu), "PIN_CLIENT_CPU": str(client_cpu)}
    wolfssl, suite = stacks.get("wolfssl"), wolfssl_tools.DOCUMENT_SUITE
    if way == "veth":
        with build_hosts(None, mtu=MTU) as hosts:  # torn down on every exit, Ctrl-C included
            rows = wolfssl_tools.tls_bench(
                wolfssl, seconds, suite, env=env, hosts=hosts, cpus=(server_cpu, client_cpu)
            )
    else:
        rows = wolfssl_tools.tls_bench(wolfssl, seconds, suite, env=env)
    out = {}
    for r in rows:
        group = names.get(r["group"])
        if r["side"] == "client" and group in groups:
            out[group] = {
                f"{prefix}_connect_ms": r["connect_avg_ms"],
                f"{prefix}_tx": r["tx_MiBps"],
                f"{prefix}_rx": r["rx_MiBps"],
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


def run_pqlab(tmp: Path, i: int, args, tls_bench_seconds: int) -> dict:
    """One throughput run (tls_bench as built included when `tls_bench_seconds`) and one
    capacity run; per group pqlab's figures (and tls_bench's as built)."""
    tp, cap = tmp / f"throughput-{i}", tmp / f"capacity-{i}"
    groups, seconds = args.groups, args.seconds
    pqlab(
        "throughput", "--stack", "wolfssl", "--groups", groups, "--ciphersuites", SUITE,
        "--server-sig", "RSA-2048", "--bytes", BULK, "-n", args.n, "--mtu", MTU,
        "--echo-bytes", args.echo_bytes, "--tls-bench-seconds", tls_bench_seconds,
        "--out", tp, "--no-report",
    )  # fmt: skip
    pqlab(
        "capacity", "--stack", "wolfssl", "--groups", groups, "--server-sig", "RSA-2048",
        "--ca-sig", "RSA-2048", "--mode", "closed", "--clients", "1",
        "--duration", f"{seconds}s", "--out", cap, "--no-report",
    )  # fmt: skip
    out: dict[str, dict] = {}
    for r in rows(tp / "tables" / "throughput.csv"):
        out[r["group"]] = {
            "handshake_ms": float(r["handshake_mean_ms"]),
            "echo_tx": float(r["echo_tx_MBps"]) * 1e6 / MiB,
            "echo_rx": float(r["echo_rx_MBps"]) * 1e6 / MiB,
        }
    for r in rows(tp / "tables" / "throughput_tls_bench.csv") if tls_bench_seconds else ():
        if r["group"] in out:
            out[r["group"]] |= {
                "connect_ms": float(r["tls_bench_connect_avg_ms"]),
                "tls_bench_tx": float(r["tls_bench_tx_MiBps"]),
                "tls_bench_rx": float(r["tls_bench_rx_MiBps"]),
            }
    for r in rows(cap / "tables" / "capacity.csv"):
        if r["group"] in out:
            out[r["group"]]["capacity_ms"] = float(r["tls_handshake_mean_ms"])
    return out


def one_round(tmp: Path, i: int, args, shim: Path) -> dict:
    """pqlab and tls_bench's veth way back to back (pqlab first in even rounds); in the first
    round also tls_bench over loopback, the three other ways. Per group the figures."""
    first = i == 0
    steps = [
        lambda: run_pqlab(tmp, i, args, args.seconds if first else 0),
        lambda: tls_bench_shimmed(shim, args.groups.split(","), args.seconds, TARGET_WAY),
    ]
    out: dict[str, dict] = {}
    for step in steps if i % 2 == 0 else steps[::-1]:
        for group, figures in step().items():
            out.setdefault(group, {}).update(figures)
    if first:
        for way in WAYS:
            if way != TARGET_WAY:
                for group, figures in tls_bench_shimmed(shim, list(out), args.seconds, way).items():
                    out[group].update(figures)
    return out


def verdict(ratio: float) -> str:
    return "ok" if abs(ratio - 1) <= TOLERANCE else "OUTSIDE"


# pqlab's figure and tls_bench's (given the way's key prefix) each target compares.
COMPARED = {
    "handshake": ("handshake_ms", "{}_connect_ms"),
    "capacity handshake": ("capacity_ms", "{}_connect_ms"),
    "echo Tx": ("echo_tx", "{}_tx"),
    "echo Rx": ("echo_rx", "{}_rx"),
}
# The loopback ways ran in the first round only; tls_bench as built inside pqlab throughput.
AS_BUILT = {"connect_ms": "connect_ms", "tx": "tls_bench_tx", "rx": "tls_bench_rx"}


def ratios(rounds: list[dict], group: str, name: str) -> list[float]:
    """One ratio per round (pqlab / tls_bench veth, the two runs of that round)."""
    mine, theirs = COMPARED[name]
    key = theirs.format(WAYS[TARGET_WAY])
    return [r[group][mine] / r[group][key] for r in rounds]


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def report(rounds: list[dict]) -> list[str]:
    """Print the first round's four ways, then per group and target the rounds' ratios
    against the veth way; the targets outside 15 % (their median ratio)."""
    first = rounds[0]
    print("first round, every way (MiB/s; ratios pqlab / that way):")
    print(
        f"{'group':20} {'':9} {'connect':>9} {'Tx':>6} {'Rx':>6}   {'handshake':>9} "
        f"{'ratio':>6} {'cap hs':>8} {'ratio':>6} {'echo Tx':>8} {'ratio':>6} "
        f"{'echo Rx':>8} {'ratio':>6}"
    )
    for group, m in first.items():
        ways = [("Nagle", m[AS_BUILT["connect_ms"]], m[AS_BUILT["tx"]], m[AS_BUILT["rx"]])]
        ways += [(w, m[f"{p}_connect_ms"], m[f"{p}_tx"], m[f"{p}_rx"]) for w, p in WAYS.items()]
        for label, c, tx, rx in ways:
            print(
                f"{group:20} {label:9} {c:6.3f} ms {tx:6.0f} {rx:6.0f}   "
                f"{m['handshake_ms']:6.3f} ms {m['handshake_ms'] / c:6.3f} "
                f"{m['capacity_ms']:5.3f} ms {m['capacity_ms'] / c:6.3f} "
                f"{m['echo_tx']:8.0f} {m['echo_tx'] / tx:6.3f} "
                f"{m['echo_rx']:8.0f} {m['echo_rx'] / rx:6.3f}"
            )
    veth = WAYS[TARGET_WAY]
    print(
        f"\nevery round against the veth way ({len(rounds)} rounds): the median of the rounds' "
        "ratios (the verdict), their range, and how far each tool moved over the rounds "
        "(max / min of its own figure)"
    )
    print(
        f"{'group':20} {'target':19} {'ratio':>6} {'range':>12} {'pqlab moved':>11} "
        f"{'tls_bench moved':>15}  verdict"
    )
    failed = []
    for group in first:
        for name, (mine, theirs) in COMPARED.items():
            rs = ratios(rounds, group, name)
            med = statistics.median(rs)
            own = [r[group][mine] for r in rounds]
            other = [r[group][theirs.format(veth)] for r in rounds]
            print(
                f"{group:20} {name:19} {med:6.3f} {spread(rs):>12} "
                f"{max(own) / min(own):11.3f} {max(other) / min(other):15.3f}  {verdict(med)}"
            )
            if verdict(med) != "ok":
                failed.append(f"{group} {name}: {med:.3f} (rounds {spread(rs)})")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--groups", default="X25519,X25519MLKEM768,ML-KEM-768,SecP256r1MLKEM768")
    ap.add_argument("-n", default="50", help="pqlab throughput's connections per cell")
    ap.add_argument(
        "--echo-bytes", default="128KiB", help="bytes each of pqlab's connections echoes"
    )
    args = ap.parse_args()
    try:  # refused here, by throughput's own rules, before anything runs
        units.parse_positive_int(str(args.rounds), "--rounds", maximum=100)
        units.parse_positive_int(args.n, "-n", maximum=1000)
        throughput.parse_echo_bytes(args.echo_bytes)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("skipped: needs root (pqlab throughput and capacity build network namespaces)")
        return 0
    if "wolfssl" not in stacks.all_stacks():
        print("skipped: pqlab-engine-wolfssl is not built (make engine)")
        return 0
    info = engine.info()
    print(f"engine build {info.get('build_id', '?')[:16]}, CPUs {os.cpu_count()}, load "
          f"{os.getloadavg()[0]:.2f}; {args.rounds} rounds, tls_bench {args.seconds} s per group; "
          f"pqlab's echo: -n {args.n} x {args.echo_bytes}")  # fmt: skip
    rounds = []
    with tempfile.TemporaryDirectory(prefix="pqlab-tls-bench-") as tmp:
        shim = nodelay_shim(Path(tmp))
        if shim is None:
            print("failed: no C compiler to build the TCP_NODELAY shim (apt install gcc)")
            return 1
        for i in range(args.rounds):
            rounds.append(one_round(Path(tmp), i, args, shim))
    print("tls_bench as built (Nagle, threads unpinned), with TCP_NODELAY (preloaded shim), "
          "with TCP_NODELAY and its client and server threads pinned to the CPUs pqlab's client "
          "and server get (these three over loopback in one process), and (veth) its server "
          "and client sides as two pinned TCP_NODELAY processes across a veth link between two "
          f"namespaces, MTU {MTU}, as pqlab's throughput runs; target: pqlab within 15 % of "
          "the veth way (pqlab's path, socket options and placement)")  # fmt: skip
    failed = report(rounds)
    for f in failed:
        print(f"OUTSIDE TARGET: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
