"""`pqlab plan`'s predictions against what `pqlab ttlb` measures on the same emulated links.

For each chain (X25519 with an ECDSA-P256 chain, X25519MLKEM768 with an ML-DSA-44 chain; both
roots sent, as ttlb's chains are), `pqlab ttlb` measures TTFB and TTLB over every link of the
grid (RTT x bandwidth, the kernel's initcwnd, cubic) and response size, then `pqlab plan`
predicts the same cells with this machine's calibration (`--calibrate`: the stack's own
handshake CPU on this machine and the link emulator's time per packet, both measured by
plan) and without it (the network alone). Each point prints plan / ttlb for the median TTLB
(target: within 5 %) and plan - ttlb for the median TTFB (target: within 2 ms). Exit 1 when
a calibrated point misses either.

The full grid is RTT 1, 10, 50, 200 ms x 1, 10, 100, 1000 Mbit/s x 0, 10, 100, 200 KiB x
two chains (128 cells); `--quick` runs RTT 10, 50 ms x unlimited and 100 Mbit/s x 0 and
100 KiB (16 cells, a few minutes), which holds the issue's check (RTT 10 ms, 100 KiB).
Needs root (namespaces); uses the shaper `--shaper` names (auto: netem where the kernel has
it, else pqlab's userspace emulator; the one used is printed).

    PYTHONPATH=src python benchmarks/plan_vs_ttlb.py [--quick] [-n 10] [--shaper auto]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pqlab.net.profiles import parse_profile  # noqa: E402

TTLB_SHARE = 0.05
TTFB_MS = 2.0
CHAINS = (("X25519", "ECDSA-P256"), ("X25519MLKEM768", "ML-DSA-44"))
FULL = {
    "rtt": ("1ms", "10ms", "50ms", "200ms"),
    "rate": ("1mbit", "10mbit", "100mbit", "1gbit"),
    "sizes": ("0", "10KiB", "100KiB", "200KiB"),
}
QUICK = {"rtt": ("10ms", "50ms"), "rate": ("none", "100mbit"), "sizes": ("0", "100KiB")}


def pqlab(*argv: str, timeout: float) -> None:
    subprocess.run(
        [sys.executable, "-m", "pqlab", *argv],
        check=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def profile_text(rtt: str, rate: str) -> str:
    return f"rtt={rtt}" + ("" if rate == "none" else f",rate={rate}")


def key_of(rtt_s: float, rate_bps: float | None) -> tuple[float, float]:
    """A link's key: its RTT in microseconds and its rate (0: unlimited)."""
    return round(rtt_s * 1e6), float(rate_bps or 0)


def measure(a, grid: dict, work: Path) -> dict:
    """ttlb's medians: (chain, link key, size) -> (ttfb ms, ttlb ms, shaper)."""
    profiles = [profile_text(r, b) for r in grid["rtt"] for b in grid["rate"]]
    out = {}
    for group, chain in CHAINS:
        run = work / f"ttlb-{group}"
        argv = ["ttlb", "--groups", group, "--chain", chain, "--sizes", ",".join(grid["sizes"])]
        for p in profiles:
            argv += ["--profile", p]
        argv += ["-n", str(a.n), "--shaper", a.shaper, "--no-report", "--out", str(run)]
        pqlab(*argv, timeout=24 * 3600)
        for r in read_csv(run / "tables" / "ttlb.csv"):
            p = parse_profile(r["profile"])
            k = (group, key_of(p.rtt_s, p.s2c.rate_bps), int(r["data_bytes"]))
            out[k] = (float(r["ttfb_p50_ms"]), float(r["ttlb_p50_ms"]), r["shaper"])
    return out


def predict(a, grid: dict, work: Path, calibrated: bool) -> dict:
    """plan's predictions: (chain, link key, size) -> (ttfb ms, ttlb ms), the largest
    signature's where it varies."""
    out = {}
    for group, chain in CHAINS:
        run = work / f"plan-{group}-{'calibrated' if calibrated else 'network'}"
        argv = ["plan", "--groups", group, "--server-sig", chain, "--ca-sig", chain]
        argv += ["--send-root", "--rtt", ",".join(grid["rtt"])]
        argv += ["--bandwidth", ",".join(grid["rate"]), "--sizes", ",".join(grid["sizes"])]
        if calibrated:
            argv += ["--calibrate", "--shaper", a.shaper]
        argv += ["--no-report", "--out", str(run)]
        pqlab(*argv, timeout=3600)
        cells = {r["cell_id"]: r for r in read_csv(run / "tables" / "plan.csv")}
        for r in read_csv(run / "tables" / "plan_ttlb.csv"):
            c = cells[r["cell_id"]]
            rate = float(c["bandwidth_bps"]) if c["bandwidth_bps"] else None
            k = (group, key_of(float(c["rtt_ms"]) / 1e3, rate), int(r["data_bytes"]))
            out[k] = (float(c["ttfb_ms_max"]), float(r["ttlb_ms_max"]))
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small grid (CI-sized)")
    ap.add_argument("-n", type=int, default=10, help="connections per ttlb cell")
    ap.add_argument("--shaper", default="auto", choices=("auto", "netem", "userspace"))
    ap.add_argument("--out", help="keep the runs in this directory (default: a temporary one)")
    a = ap.parse_args()
    if a.n < 3:
        sys.exit("error: -n must be at least 3 (a median of fewer says little)")
    if os.geteuid() != 0:
        sys.exit("error: ttlb needs root (network namespaces); run as root")
    return a


def main() -> int:
    a = parse_args()
    grid = QUICK if a.quick else FULL
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="pqlab-plan-ttlb-") as tmp:
        work = Path(a.out) if a.out else Path(tmp)
        measured = measure(a, grid, work)
        network = predict(a, grid, work, calibrated=False)
        model = predict(a, grid, work, calibrated=True)
    shapers = sorted({v[2] for v in measured.values()})
    print(
        f"\nshaper: {', '.join(shapers)}; targets: TTLB within {TTLB_SHARE:.0%}, TTFB "
        f"within {TTFB_MS:g} ms (plan calibrated; the network alone in brackets)"
    )
    print(
        f"{'chain':16s} {'rtt ms':>7s} {'Mbit/s':>7s} {'bytes':>7s} {'ttfb':>7s} "
        f"{'plan':>7s} {'diff':>6s}  {'ttlb':>8s} {'plan':>8s} {'ratio':>6s}"
    )
    failed = []
    for k in sorted(measured, key=lambda k: (k[0], k[1], k[2])):
        group, (rtt_us, rate), size = k
        fb, lb, _ = measured[k]
        pf, pl = model[k]
        nf, nl = network[k]
        ttfb_ok = abs(pf - fb) <= TTFB_MS
        ttlb_ok = abs(pl / lb - 1) <= TTLB_SHARE
        mark = "" if ttfb_ok and ttlb_ok else "  MISS"
        print(
            f"{group:16s} {rtt_us / 1e3:7.1f} {rate / 1e6:7.0f} {size:7d} {fb:7.2f} "
            f"{pf:7.2f} {pf - fb:+6.2f}  {lb:8.2f} {pl:8.2f} {pl / lb:6.3f}"
            f"  ({nf - fb:+.2f} ms, {nl / lb:.3f}){mark}"
        )
        if not (ttfb_ok and ttlb_ok):
            failed.append(
                f"{group} rtt {rtt_us / 1e3:g} ms rate {rate / 1e6:g} Mbit/s {size} B: "
                f"TTFB {pf - fb:+.2f} ms, TTLB {pl / lb:.3f}"
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if failed:
        print(f"FAIL: {len(failed)} of {len(measured)} points outside: " + "; ".join(failed))
        return 1
    print(f"all {len(measured)} points within both targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
