"""Precision and speed of pqlab's userspace link emulator (`pqlab-engine linkem`).

Run as root from the repository: `PYTHONPATH=src python benchmarks/linkem_precision.py`.

1. Added one-way latency with 0 ms configured: UDP probes (send time in the packet, kernel
   receive timestamp) over the emulator vs over a plain veth pair between the same kind of
   namespaces; the difference of the quantiles is what the emulator adds.
   Targets: <= 50 us at p50, <= 200 us at p99.
2. TCP throughput through the emulator at rate=1gbit with 0 % loss configured: goodput of a
   bulk transfer vs the 1 Gbit/s line rate (payload share 1448/1514), and the emulator's
   own drop counters (must be 0).
3. Error of the delivered delay under load: with 10 ms one-way delay and 1 Gbit/s, the
   emulator's release lateness (actual - scheduled send time) per packet during the bulk
   transfer, and UDP probes' one-way delay against the configured 10 ms.

The machine may be shared: the numbers are a lower bound on what a quiet machine gives.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from pqlab.experiments.linktest import run as linktest  # noqa: E402
from pqlab.net import probes  # noqa: E402
from pqlab.net.profiles import parse_profile  # noqa: E402
from pqlab.net.shaping import UserspaceLink  # noqa: E402
from pqlab.net.topology import TwoHosts, VethLink  # noqa: E402


def one_way_us(topo, count: int, interval_us: int) -> np.ndarray:
    sink, _ = linktest._pair(
        topo,
        "server",
        probes.argv(
            "udp-sink",
            "--bind",
            f"{topo.server_ip}:47100",
            "--count",
            count,
            "--idle",
            "2",
            "--timeout",
            120,
        ),
        "client",
        probes.argv(
            "udp-send",
            "--to",
            f"{topo.server_ip}:47100",
            "--count",
            count,
            "--interval-us",
            interval_us,
            "--size",
            100,
        ),
        timeout=300,
    )
    got = np.array(sink["received"], dtype=np.int64).reshape(-1, 3)
    return (got[:, 2] - got[:, 1]) / 1e3


def bulk(topo, nbytes: int) -> tuple[float, dict]:
    srv, cli = linktest._pair(
        topo,
        "server",
        probes.argv(
            "tcp-source", "--bind", f"{topo.server_ip}:47101", "--bytes", nbytes, "--timeout", 300
        ),
        "client",
        probes.argv("tcp-sink", "--to", f"{topo.server_ip}:47101", "--timeout", 300),
        timeout=400,
    )
    s = np.array(cli["samples"], dtype=np.int64)
    start = int(np.searchsorted(s[:, 1], nbytes // 10))
    secs = (s[-1, 0] - s[start, 0]) / 1e9
    return (s[-1, 1] - s[start, 1]) * 8 / secs, srv["tcp_info"]


def q(a, ps=(50, 90, 99)):
    return {p: float(np.percentile(a, p)) for p in ps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=5000)
    ap.add_argument("--bytes", type=int, default=200_000_000)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)

    # 1. added latency at 0 ms
    with TwoHosts(link=VethLink()) as topo:
        veth = one_way_us(topo, a.probes, 200)
    zero = parse_profile("delay=0ms")
    with TwoHosts(link=UserspaceLink(zero), tcp=zero.tcp_settings()) as topo:
        emu = one_way_us(topo, a.probes, 200)
    qv, qe = q(veth), q(emu)
    print("\n1. one-way latency, 0 ms configured (us)   p50      p90      p99")
    print(f"   veth (reference)                       {qv[50]:8.1f} {qv[90]:8.1f} {qv[99]:8.1f}")
    print(f"   userspace emulator                     {qe[50]:8.1f} {qe[90]:8.1f} {qe[99]:8.1f}")
    added = {p: qe[p] - qv[p] for p in qv}
    print(
        f"   added by the emulator                  {added[50]:8.1f} {added[90]:8.1f} "
        f"{added[99]:8.1f}"
    )
    print(
        f"   target p50 <= 50 us: ratio {added[50] / 50:.2f}; target p99 <= 200 us: "
        f"ratio {added[99] / 200:.2f}"
    )

    # 2. 1 Gbit/s TCP, 0 % loss; references: the same tools over veth, and the emulator
    # with no rate (its own ceiling on this machine now).
    with TwoHosts(link=VethLink()) as topo:
        veth_bps, _ = bulk(topo, a.bytes)
    free = parse_profile("delay=0ms")
    with TwoHosts(link=UserspaceLink(free), tcp=free.tcp_settings()) as topo:
        free_bps, _ = bulk(topo, a.bytes)
    gig = parse_profile("rate=1gbit")
    link = UserspaceLink(gig)
    with TwoHosts(link=link, tcp=gig.tcp_settings()) as topo:
        bps, info = bulk(topo, a.bytes)
    st = link.direction_stats()
    line = 1e9 * 1448 / 1514
    print("\n2. TCP through rate=1gbit, loss 0%")
    print(
        f"   references: veth {veth_bps / 1e6:.0f} Mbit/s; emulator without a rate "
        f"{free_bps / 1e6:.0f} Mbit/s"
    )
    print(
        f"   goodput {bps / 1e6:.1f} Mbit/s = {bps / line:.3f} of the 1 Gbit/s payload rate "
        f"({line / 1e6:.0f} Mbit/s)"
    )
    print(
        f"   emulator drops: random {st['s2c']['lost']}, queue {st['s2c']['queue_drops']}; "
        f"max queue {st['s2c']['max_queue']} packets; sender retransmits "
        f"{info['total_retrans']}"
    )
    late = np.array(st["s2c"]["lateness_ns"]) / 1e3
    print(
        f"   release lateness at 1 Gbit/s (us): p50 {np.percentile(late, 50):.1f} "
        f"p99 {np.percentile(late, 99):.1f} max {late.max():.1f}"
    )

    # 3. delay error under load
    loaded = parse_profile("delay=10ms,rate=1gbit")
    link = UserspaceLink(loaded)
    with TwoHosts(link=link, tcp=loaded.tcp_settings()) as topo:
        bps2, _ = bulk(topo, a.bytes // 2)
        idle = one_way_us(topo, 2000, 500)
    st = link.direction_stats()
    late = np.array(st["s2c"]["lateness_ns"]) / 1e3
    print("\n3. delivered delay error, 10 ms one way at 1 Gbit/s")
    print(
        f"   bulk goodput {bps2 / 1e6:.1f} Mbit/s; release lateness of {st['s2c']['lateness_seen']}"
        f" packets (us): p50 {np.percentile(late, 50):.1f} p90 {np.percentile(late, 90):.1f} "
        f"p99 {np.percentile(late, 99):.1f} max {late.max():.1f}; "
        f"late by > 1 ms: {st['s2c']['late_over_1ms']}"
    )
    err = idle - 10_000 - q(veth)[50]
    print(
        f"   UDP probes, one-way minus 10 ms minus veth p50 (us): p50 {np.percentile(err, 50):.1f}"
        f" p99 {np.percentile(err, 99):.1f}"
    )
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
