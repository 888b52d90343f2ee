"""pqlab's AEAD throughput against `openssl speed -elapsed -evp`, side by side in one run.

Both use the same OpenSSL 3.5.4 source (the engine's vendored copy and the `openssl` command
built from it by scripts/build-openssl-cli.sh) and the same OPENSSL_ia32cap mask. The two are
interleaved (pqlab, speed, pqlab, speed, ...) so that load from other processes hits both
alike, and the medians of the repeats are compared. Target: pqlab's fair numbers within 10 %
of speed at 16384-byte records.

Two comparisons are printed: wall-clock (pqlab's mb_per_s against `speed -elapsed`, the
documents' method) and CPU time (pqlab's cpu_mb_per_s against `speed` without -elapsed,
which divides by user CPU time). On a busy machine only the CPU-time one is meaningful:
wall-clock numbers then depend on how much of the CPU each run happened to get.

    PYTHONPATH=src python benchmarks/aead_vs_openssl_speed.py [--seconds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from pqlab import engine
from pqlab.experiments.aead import MASKS

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [
    ROOT / "build" / "openssl" / "bin" / "openssl",
    Path("/work/main/build/openssl/bin/openssl"),
]


def find_openssl(given: str | None) -> Path:
    for p in [Path(given)] if given else CANDIDATES:
        if p.is_file():
            return p
    sys.exit(
        "error: no openssl command built from the same source; run "
        "scripts/build-openssl-cli.sh or pass --openssl PATH"
    )


def env_with(mask: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENSSL_ia32cap"}
    if mask is not None:
        env["OPENSSL_ia32cap"] = mask
    return env


def speed_kbytes(
    openssl: Path, alg: str, size: int, seconds: int, mask: str | None, elapsed: bool
) -> float:
    """`openssl speed [-elapsed] -evp ALG -bytes SIZE` in 1000s of bytes per second."""
    argv = [str(openssl), "speed", *(["-elapsed"] if elapsed else []), "-evp", alg]
    argv += ["-bytes", str(size), "-seconds", str(seconds)]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=seconds * 10 + 60,
        check=True,
    ).stdout
    # Last line: "AES-128-GCM    6545620.99k" (1000s of bytes per second)
    m = re.search(r"^\S+\s+([\d.]+)k\s*$", out.strip().splitlines()[-1])
    if not m:
        sys.exit(f"error: cannot read openssl speed output: {out[-300:]!r}")
    return float(m.group(1))


def pqlab_kbytes(
    alg: str, size: int, seconds: float, mask: str | None, mode: str
) -> tuple[float, float]:
    """(wall-clock, CPU-time) throughput in 1000s of bytes per second."""
    old = os.environ.pop("OPENSSL_ia32cap", None)
    try:
        recs = engine.run(
            [
                "aead",
                "--cipher",
                alg,
                "--sizes",
                str(size),
                "--directions",
                "encrypt",
                "--mode",
                mode,
                "--seconds",
                f"{seconds:g}",
            ],
            env={"OPENSSL_ia32cap": mask} if mask else None,
            timeout=seconds * 20 + 60,
        )
    finally:
        if old is not None:
            os.environ["OPENSSL_ia32cap"] = old
    cell = next(r for r in recs if r["type"] == "cell")
    assert cell["verified_records"] == cell["records"] > 0
    return cell["bytes"] * 1e6 / cell["ns"], cell["bytes"] * 1e6 / cell["cpu_ns"]


def cpusettings(openssl: Path, mask: str | None) -> str:
    out = subprocess.run(
        [str(openssl), "info", "-cpusettings"],
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=30,
    ).stdout.strip()
    m = re.search(r"OPENSSL_ia32cap=(\S+)", out)
    return m.group(1) if m else out


def engine_vector(mask: str | None) -> str:
    old = os.environ.pop("OPENSSL_ia32cap", None)
    try:
        recs = engine.run(
            ["aead", "--cpu-only"], env={"OPENSSL_ia32cap": mask} if mask else None, timeout=60
        )
    finally:
        if old is not None:
            os.environ["OPENSSL_ia32cap"] = old
    return recs[0]["openssl_ia32cap"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3, help="per measurement (speed's default 3)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--ciphers", default="aes-128-gcm,aes-256-gcm,chacha20-poly1305")
    ap.add_argument(
        "--masks",
        default="none,documents",
        help="none (AES-NI on), documents, precise; comma separated",
    )
    ap.add_argument("--openssl", help="openssl command built from the same source")
    a = ap.parse_args()
    openssl = find_openssl(a.openssl)
    version = subprocess.run([str(openssl), "version"], capture_output=True, text=True).stdout
    print(f"openssl command: {openssl} ({version.strip()})")
    print(f"engine: {engine.info()['openssl']['version_text']}")
    try:
        load = os.getloadavg()
        print(
            f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            f"on {os.cpu_count()} CPUs (other processes make both sides noisy alike)"
        )
    except OSError:
        pass
    rows = []
    for mask_name in a.masks.split(","):
        mask = None if mask_name == "none" else MASKS[mask_name]
        ours, theirs = engine_vector(mask), cpusettings(openssl, mask)
        same = "same" if ours == theirs else "DIFFERENT"
        print(
            f"\nmask {mask_name} ({mask or 'unset'}): capability vector {same}\n"
            f"  engine  {ours}\n  openssl {theirs}"
        )
        for alg in a.ciphers.split(","):
            fair, compat, speed_wall, speed_cpu = [], [], [], []
            for _ in range(a.repeats):
                fair.append(pqlab_kbytes(alg, a.size, a.seconds, mask, "fair"))
                speed_wall.append(speed_kbytes(openssl, alg, a.size, a.seconds, mask, True))
                compat.append(pqlab_kbytes(alg, a.size, a.seconds, mask, "speed-compatible"))
                speed_cpu.append(speed_kbytes(openssl, alg, a.size, a.seconds, mask, False))
            med = statistics.median
            r = {
                "alg": alg,
                "mask": mask_name,
                "fair_wall": med(x[0] for x in fair),
                "fair_cpu": med(x[1] for x in fair),
                "compat_wall": med(x[0] for x in compat),
                "compat_cpu": med(x[1] for x in compat),
                "speed_wall": med(speed_wall),
                "speed_cpu": med(speed_cpu),
                "cpu_share": med(x[0] / x[1] for x in fair),
            }
            rows.append(r)
            print(
                f"  {alg:18s} wall: fair {r['fair_wall']:12.0f}k compat "
                f"{r['compat_wall']:12.0f}k speed -elapsed {r['speed_wall']:12.0f}k | "
                f"cpu: fair {r['fair_cpu']:12.0f}k compat {r['compat_cpu']:12.0f}k "
                f"speed {r['speed_cpu']:12.0f}k | pqlab's CPU share {r['cpu_share']:.2f}"
            )
            print(
                "    runs (k): fair wall "
                + " ".join(f"{x[0]:.0f}" for x in fair)
                + "; speed -elapsed "
                + " ".join(f"{x:.0f}" for x in speed_wall)
                + "; fair cpu "
                + " ".join(f"{x[1]:.0f}" for x in fair)
                + "; speed cpu "
                + " ".join(f"{x:.0f}" for x in speed_cpu)
            )
    print(f"\nsummary at {a.size} bytes (target: fair within 10 % of openssl speed)")
    print(
        f"{'cipher':18s} {'mask':10s} {'wall fair/speed':>15s} {'cpu fair/speed':>14s} "
        f"{'cpu compat/speed':>16s}  within 10% (cpu)"
    )
    for r in rows:
        wall = r["fair_wall"] / r["speed_wall"]
        cpu = r["fair_cpu"] / r["speed_cpu"]
        compat = r["compat_cpu"] / r["speed_cpu"]
        ok = "yes" if abs(cpu - 1) <= 0.10 else "no"
        print(f"{r['alg']:18s} {r['mask']:10s} {wall:15.3f} {cpu:14.3f} {compat:16.3f}  {ok}")
    try:
        load = os.getloadavg()
        print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
