"""pqlab's AEAD throughput against `openssl speed -elapsed -evp`, side by side in one run.

Both use the same OpenSSL 3.5.4 source (the engine's vendored copy and the `openssl` command
built from it by scripts/build-openssl-cli.sh) and the same OPENSSL_ia32cap mask. The runs
are interleaved (pqlab, speed, pqlab, speed, ...) so that load from other processes hits
both alike; each comparison is the median over the repeats of the ratio within a repeat
(runs seconds apart), so that the machine's slower and faster stretches (a VM's neighbours,
turbo) cancel instead of landing on one side's median.

pqlab's fair numbers are compared like with like. `openssl speed` runs GCM and CCM a record
at a time (its "AE" loop), but streams every other cipher, ChaCha20-Poly1305 included
(OpenSSL 3 reports its EVP mode as 0): one init, one update per "record", one final at the
end. A TLS record layer, and pqlab's fair mode, pays per record for a fresh nonce (for
ChaCha20-Poly1305 a ChaCha20 block for the Poly1305 key), the additional data, the final
and the tag. So:

- GCM and CCM: fair against speed (both per record);
- streamed ciphers: fair against `evp_records.c records` (speed's loop with a record
  layer's per-record calls, compiled here against the same libcrypto), whose `stream` form
  must first match speed. fair / speed and the per-record cost (ns) are printed too.

Each comparison must be within 5 % at 16384-byte records in wall-clock terms (speed
-elapsed, the documents' method); exit 1 when one is not. Per-CPU-second ratios are printed
beside them: on a busy machine the wall-clock ones depend on how much CPU each run got, and
a wall-clock failure with a CPU ratio inside 5 % says to rerun on a quieter machine. pqlab's speed-compatible mode is printed for reference: it
makes speed's EVP calls but writes every record to its own output slot, which costs GCM a
few per cent at 10 GB/s.

    PYTHONPATH=src python benchmarks/aead_vs_openssl_speed.py [--seconds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pqlab import engine
from pqlab.experiments.aead import MASKS

TOLERANCE = 0.05
# The ciphers `openssl speed -evp` drives per record (its AE loop); it streams the others.
SPEED_PER_RECORD = {"aes-128-gcm", "aes-256-gcm", "aes-128-ccm", "aes-256-ccm"}

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


def build_reference(openssl: Path, work: Path) -> Path:
    """evp_records.c compiled against the libcrypto the openssl command was built with."""
    prefix = openssl.parent.parent
    lib, include = prefix / "lib" / "libcrypto.a", prefix / "include"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not lib.is_file() or not include.is_dir():
        sys.exit(
            f"error: building the per-record reference needs a C compiler and {lib} with "
            f"{include} (scripts/build-openssl-cli.sh installs them)"
        )
    out = work / "evp_records"
    subprocess.run(
        [cc, "-O2", f"-I{include}", str(ROOT / "benchmarks" / "evp_records.c"), str(lib)]
        + ["-lpthread", "-ldl", "-o", str(out)],
        check=True,
        timeout=300,
    )
    return out


def reference_kbytes(
    binary: Path, alg: str, size: int, seconds: int, mask: str | None, mode: str
) -> tuple[float, float, float]:
    """(wall-clock, CPU-time) throughput in 1000s of bytes per second and ns per call of
    evp_records in `mode` (stream or records)."""
    out = subprocess.run(
        [str(binary), alg, str(size), str(seconds), mode],
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=seconds * 10 + 60,
        check=True,
    ).stdout
    r = json.loads(out)
    nbytes = r["calls"] * size
    return nbytes * 1e6 / r["ns"], nbytes * 1e6 / r["cpu_ns"], r["cpu_ns"] / r["calls"]


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


def within(ratio: float) -> bool:
    return abs(ratio - 1) <= TOLERANCE


def measure_cipher(a, openssl: Path, reference: Path, alg: str, mask_name: str) -> dict:
    """The interleaved repeats of one cipher under one mask; medians."""
    mask = None if mask_name == "none" else MASKS[mask_name]
    streamed = alg not in SPEED_PER_RECORD
    runs: dict[str, list] = {k: [] for k in ("fair", "compat", "swall", "scpu", "rs", "rr")}
    for _ in range(a.repeats):
        runs["fair"].append(pqlab_kbytes(alg, a.size, a.seconds, mask, "fair"))
        runs["swall"].append(speed_kbytes(openssl, alg, a.size, a.seconds, mask, True))
        runs["compat"].append(pqlab_kbytes(alg, a.size, a.seconds, mask, "speed-compatible"))
        runs["scpu"].append(speed_kbytes(openssl, alg, a.size, a.seconds, mask, False))
        if streamed:
            runs["rs"].append(reference_kbytes(reference, alg, a.size, a.seconds, mask, "stream"))
            runs["rr"].append(reference_kbytes(reference, alg, a.size, a.seconds, mask, "records"))
    med = statistics.median
    r = {
        "alg": alg,
        "mask": mask_name,
        "streamed": streamed,
        "fair_wall": med(x[0] for x in runs["fair"]),
        "fair_cpu": med(x[1] for x in runs["fair"]),
        "compat_wall": med(x[0] for x in runs["compat"]),
        "compat_cpu": med(x[1] for x in runs["compat"]),
        "speed_wall": med(runs["swall"]),
        "speed_cpu": med(runs["scpu"]),
        "cpu_share": med(x[0] / x[1] for x in runs["fair"]),
    }
    # Each repeat's runs sit seconds apart, so a ratio taken within a repeat cancels what the
    # machine did over longer stretches; the comparisons use the median of those ratios.
    r["paired"] = {
        ("fair", "speed"): (
            med(f[0] / w for f, w in zip(runs["fair"], runs["swall"], strict=True)),
            med(f[1] / c for f, c in zip(runs["fair"], runs["scpu"], strict=True)),
        )
    }
    if streamed:
        r["paired"][("ref_stream", "speed")] = (
            med(x[0] / w for x, w in zip(runs["rs"], runs["swall"], strict=True)),
            med(x[1] / c for x, c in zip(runs["rs"], runs["scpu"], strict=True)),
        )
        r["paired"][("fair", "ref_records")] = (
            med(f[0] / x[0] for f, x in zip(runs["fair"], runs["rr"], strict=True)),
            med(f[1] / x[1] for f, x in zip(runs["fair"], runs["rr"], strict=True)),
        )
        r["ref_stream_wall"] = med(x[0] for x in runs["rs"])
        r["ref_stream_cpu"] = med(x[1] for x in runs["rs"])
        r["ref_records_cpu"] = med(x[1] for x in runs["rr"])
        r["ref_records_wall"] = med(x[0] for x in runs["rr"])
        r["per_record_ns"] = med(x[2] for x in runs["rr"]) - med(x[2] for x in runs["rs"])
    print(
        f"  {alg:18s} wall: fair {r['fair_wall']:12.0f}k compat {r['compat_wall']:12.0f}k "
        f"speed -elapsed {r['speed_wall']:12.0f}k | cpu: fair {r['fair_cpu']:12.0f}k "
        f"compat {r['compat_cpu']:12.0f}k speed {r['speed_cpu']:12.0f}k | pqlab's CPU share "
        f"{r['cpu_share']:.2f}"
    )
    if streamed:
        print(
            f"    reference (cpu): stream {r['ref_stream_cpu']:.0f}k, records "
            f"{r['ref_records_cpu']:.0f}k; per-record work speed does not do: "
            f"{r['per_record_ns']:.0f} ns per record"
        )
    print(
        "    runs (k): fair wall "
        + " ".join(f"{x[0]:.0f}" for x in runs["fair"])
        + "; speed -elapsed "
        + " ".join(f"{x:.0f}" for x in runs["swall"])
        + "; fair cpu "
        + " ".join(f"{x[1]:.0f}" for x in runs["fair"])
        + "; speed cpu "
        + " ".join(f"{x:.0f}" for x in runs["scpu"])
    )
    return r


def checks(r: dict) -> list[tuple[str, float, float]]:
    """The like-for-like comparisons of one cipher's fair number: (what, wall-clock ratio,
    CPU-time ratio)."""
    if not r["streamed"]:
        pairs = [("fair / speed", "fair", "speed")]
    else:
        pairs = [
            ("reference stream / speed", "ref_stream", "speed"),
            ("fair / reference records", "fair", "ref_records"),
        ]
    return [(w, *r["paired"][(a, b)]) for w, a, b in pairs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3, help="per measurement (speed's default 3)")
    ap.add_argument("--repeats", type=int, default=5)
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
    with tempfile.TemporaryDirectory() as work:
        reference = build_reference(openssl, Path(work))
        for mask_name in a.masks.split(","):
            mask = None if mask_name == "none" else MASKS[mask_name]
            ours, theirs = engine_vector(mask), cpusettings(openssl, mask)
            same = "same" if ours == theirs else "DIFFERENT"
            print(
                f"\nmask {mask_name} ({mask or 'unset'}): capability vector {same}\n"
                f"  engine  {ours}\n  openssl {theirs}"
            )
            for alg in a.ciphers.split(","):
                rows.append(measure_cipher(a, openssl, reference, alg, mask_name))
    print(
        f"\nsummary at {a.size} bytes (target: every comparison within {TOLERANCE:.0%}, "
        "wall-clock; per CPU-second in brackets)"
    )
    failed = []
    for r in rows:
        note = f"fair / speed {r['fair_wall'] / r['speed_wall']:.3f}" + (
            f": speed streams {r['alg']}; a record costs {r['per_record_ns']:.0f} ns more"
            if r["streamed"]
            else ""
        )
        print(f"{r['alg']:18s} {r['mask']:10s} {note}")
        compat = r["compat_wall"] / r["speed_wall"]
        print(f"    {'speed-compatible / speed':28s} {compat:6.3f}  (not a target)")
        for what, wall, cpu in checks(r):
            ok = within(wall)
            verdict = "ok" if ok else f"OUTSIDE {TOLERANCE:.0%}"
            print(f"    {what:28s} {wall:6.3f} ({cpu:.3f})  {verdict}")
            if not ok:
                failed.append(f"{r['alg']} ({r['mask']}) {what} {wall:.3f} (cpu {cpu:.3f})")
    try:
        load = os.getloadavg()
        print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    if failed:
        print(f"FAIL: {len(failed)} comparison(s) beyond {TOLERANCE:.0%}: " + "; ".join(failed))
        return 1
    print(f"every comparison within {TOLERANCE:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
