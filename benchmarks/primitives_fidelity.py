#!/usr/bin/env python3
"""Fidelity of pqlab's primitive timings against the libraries' own benchmark programs.

Side by side in one run, alternating in rounds: pqlab-engine's medians (and means) for
ML-KEM-768, X25519, ML-DSA-44, ECDSA P-256 and RSA-2048, against
- `openssl speed` built from the same openssl-src 3.5.4 (scripts/build-openssl-cli.sh), and
- liboqs's tests/speed_kem and tests/speed_sig built from the same vendored liboqs 0.13.0
  (scripts/build-liboqs-speed.sh).
Prints pqlab / reference ratios per operation; the target is agreement within 10%.

What is compared (the reference tools measure slightly different things):
- openssl speed reports operations per second of *CPU user time* (preemption excluded) and
  reuses one EVP_PKEY_CTX; it signs a 36-byte (RSA) or 20-byte (ECDSA) value directly with
  EVP_PKEY_sign, no hashing. pqlab creates a context per operation and signs a 64-byte
  message with EVP_DigestSign (SHA-256 included), as an application does.
- openssl speed 3.5.4 cannot run ML-DSA at all (openssl/openssl#27108, #29228: it calls
  EVP_PKEY_sign_init, which ML-DSA does not implement), so OpenSSL's ML-DSA-44 has no
  reference here.
- liboqs's speed programs report the *wall-clock mean* over a timed loop, which preemption
  inflates on a busy machine; pqlab's median is robust to that, its mean is not. Both
  ratios are printed; the best (least disturbed) round of each side is also compared.
- X25519: pqlab keygen vs `openssl speed X25519` keygen (KEM table); pqlab shared_secret
  (new context, set peer with validation, derive) vs `openssl speed ecdhx25519` (derive
  only, context reused).

- Compiler flags: the openssl-src crate alone builds OpenSSL at -O2, a plain ./Configure
  (scripts/build-openssl-cli.sh) at -O3, and OpenSSL's C ML-KEM is 1.3-1.7x slower at -O2.
  The engine builds with CFLAGS=-O3 (engine/.cargo/config.toml); `pqlab-engine info` shows
  the flags, `openssl version -a` the reference's (see docs/primitives.md).

Usage: python benchmarks/primitives_fidelity.py [--rounds 3] [--seconds 2] [--openssl PATH]
       (PQLAB_ENGINE=path selects another engine build)
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pqlab import process  # noqa: E402

TARGET = 0.10


def find_openssl(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    for cand in (
        os.environ.get("PQLAB_OPENSSL"),
        ROOT / "build/openssl/bin/openssl",
        "/work/main/build/openssl/bin/openssl",
    ):
        if cand and Path(cand).is_file():
            return Path(cand)
    subprocess.run([str(ROOT / "scripts/build-openssl-cli.sh")], check=True)
    return ROOT / "build/openssl/bin/openssl"


def find_liboqs_speed() -> Path:
    d = ROOT / "build/liboqs-speed/tests"
    if not (d / "speed_kem").is_file() or not (d / "speed_sig").is_file():
        subprocess.run([str(ROOT / "scripts/build-liboqs-speed.sh")], check=True)
    return d


# --- pqlab ------------------------------------------------------------------------------


def pqlab(args: list[str], iterations: int) -> dict[str, dict]:
    """Run the engine; median and mean (us) of the kept samples per operation."""
    samples: dict[str, list[int]] = {}
    for rec in process.stream(args + ["--iterations", str(iterations), "--warmup", "20"]):
        if rec["type"] == "sample" and not rec["dropped"]:
            samples.setdefault(rec["op"], []).append(rec["ns"])
    return {
        op: {"median": statistics.median(v) / 1e3, "mean": statistics.fmean(v) / 1e3}
        for op, v in samples.items()
    }


# --- openssl speed ----------------------------------------------------------------------


def openssl_speed(openssl: Path, alg: str, seconds: int) -> dict[str, float]:
    """us per operation from `openssl speed -mr` (ops/s of CPU user time)."""
    out = subprocess.run(
        [str(openssl), "speed", "-mr", "-seconds", str(seconds), alg],
        capture_output=True,
        text=True,
        timeout=seconds * 20 + 60,
    )
    text = out.stdout + out.stderr
    res: dict[str, float] = {}
    for line in text.splitlines():
        f = line.split(":")
        if line.startswith("+F9:"):  # KEM: keygen/s, encaps/s, decaps/s
            res.update(keygen=1e6 / float(f[2]), encaps=1e6 / float(f[3]), decaps=1e6 / float(f[4]))
        elif line.startswith("+F2:"):  # RSA: sign/s, verify/s, encrypt/s, decrypt/s
            res.update(sign=1e6 / float(f[3]), verify=1e6 / float(f[4]))
        elif line.startswith("+F4:"):  # ECDSA: sign/s, verify/s
            res.update(sign=1e6 / float(f[3]), verify=1e6 / float(f[4]))
        elif line.startswith("+F5:"):  # ECDH: derive/s
            res.update(derive=1e6 / float(f[3]))
    if not res:
        raise RuntimeError(f"openssl speed {alg} printed no result:\n{text[-2000:]}")
    return res


# --- liboqs speed programs --------------------------------------------------------------

_ROW = re.compile(r"^(\w+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|")


def liboqs_speed(tool: Path, alg: str, seconds: int) -> dict[str, float]:
    """Mean us per operation from speed_kem / speed_sig (wall clock)."""
    out = subprocess.run(
        [str(tool), "-d", str(seconds), alg],
        capture_output=True,
        text=True,
        timeout=seconds * 10 + 60,
        check=True,
    )
    res = {}
    for line in out.stdout.splitlines():
        m = _ROW.match(line.strip())
        if m:
            op = {"keypair": "keygen"}.get(m.group(1), m.group(1))
            res[op] = float(m.group(4))
    if not res:
        raise RuntimeError(f"{tool.name} {alg} printed no result:\n{out.stdout[-2000:]}")
    return res


# --- comparisons ------------------------------------------------------------------------


def comparisons(openssl: Path, oqs: Path):
    """(label, pqlab engine args, iterations, reference runner, {pqlab op: reference op})."""
    return [
        (
            "ML-KEM-768 openssl",
            ["kem", "--backend", "openssl", "--alg", "ML-KEM-768"],
            3000,
            lambda s: openssl_speed(openssl, "ML-KEM-768", s),
            {"keygen": "keygen", "encaps": "encaps", "decaps": "decaps"},
            "openssl speed",
        ),
        (
            "X25519 openssl",
            ["kem", "--backend", "openssl", "--alg", "X25519"],
            3000,
            lambda s: {
                **openssl_speed(openssl, "X25519", s),
                **openssl_speed(openssl, "ecdhx25519", s),
            },
            {"keygen": "keygen", "shared_secret": "derive"},
            "openssl speed",
        ),
        (
            "ECDSA P-256 openssl",
            [
                "sig",
                "--backend",
                "openssl",
                "--alg",
                "EC",
                "--param",
                "curve=P-256",
                "--param",
                "digest=SHA256",
            ],
            3000,
            lambda s: openssl_speed(openssl, "ecdsap256", s),
            {"sign": "sign", "verify": "verify"},
            "openssl speed",
        ),
        (
            "RSA-2048 (PKCS#1) openssl",
            [
                "sig",
                "--backend",
                "openssl",
                "--alg",
                "RSA",
                "--param",
                "bits=2048",
                "--param",
                "padding=pkcs1",
            ],
            400,
            lambda s: openssl_speed(openssl, "rsa2048", s),
            {"sign": "sign", "verify": "verify"},
            "openssl speed",
        ),
        (
            "ML-KEM-768 liboqs",
            ["kem", "--backend", "liboqs", "--alg", "ML-KEM-768"],
            3000,
            lambda s: liboqs_speed(oqs / "speed_kem", "ML-KEM-768", s),
            {"keygen": "keygen", "encaps": "encaps", "decaps": "decaps"},
            "speed_kem",
        ),
        (
            "ML-DSA-44 liboqs",
            ["sig", "--backend", "liboqs", "--alg", "ML-DSA-44"],
            3000,
            lambda s: liboqs_speed(oqs / "speed_sig", "ML-DSA-44", s),
            {"keygen": "keygen", "sign": "sign", "verify": "verify"},
            "speed_sig",
        ),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=2, help="per reference-tool run")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--openssl", metavar="PATH", help="the openssl command to compare with")
    a = ap.parse_args()
    if a.rounds < 1 or a.seconds < 1:
        print("error: --rounds and --seconds must be at least 1", file=sys.stderr)
        return 2
    openssl = find_openssl(a.openssl)
    oqs = find_liboqs_speed()
    items = comparisons(openssl, oqs)
    results = {label: {"pqlab": [], "ref": []} for label, *_ in items}
    load = os.getloadavg()
    for r in range(a.rounds):
        for label, args, iters, ref, _ops, _tool in items:
            print(f"round {r + 1}/{a.rounds}: {label}", file=sys.stderr, flush=True)
            results[label]["pqlab"].append(pqlab(args, iters))
            results[label]["ref"].append(ref(a.seconds))

    print(
        f"\npqlab vs reference tools, {a.rounds} alternating rounds; load average at start "
        f"{load[0]:.2f} on {os.cpu_count()} CPUs"
    )
    print(
        "ratio = pqlab / reference, median over rounds of the per-round ratio; best = best "
        "round of each side; basis = the pqlab statistic comparable to the tool's\n"
    )
    hdr = (
        f"{'algorithm':27} {'op':13} {'tool':13} {'pqlab med':>10} {'pqlab mean':>10} "
        f"{'ref':>10} {'r(med)':>7} {'r(mean)':>7} {'r(best)':>7}  basis   verdict"
    )
    print(hdr)
    print("-" * len(hdr))
    worst = 0.0
    rows = []
    for label, _args, _iters, _ref, ops, tool in items:
        res = results[label]
        for op, ref_op in ops.items():
            med = [p[op]["median"] for p in res["pqlab"]]
            mean = [p[op]["mean"] for p in res["pqlab"]]
            ref = [x[ref_op] for x in res["ref"]]
            r_med = statistics.median(m / x for m, x in zip(med, ref, strict=True))
            r_mean = statistics.median(m / x for m, x in zip(mean, ref, strict=True))
            # Like for like: openssl speed divides by CPU user time, so preemption is
            # excluded, as it is from pqlab's median; liboqs's programs divide wall-clock
            # time by the count, a mean that preemption inflates exactly as pqlab's mean.
            basis = "median" if tool == "openssl speed" else "mean"
            r_best = (min(med) if basis == "median" else min(mean)) / min(ref)
            r_basis = r_med if basis == "median" else r_mean
            dev = min(abs(r_basis - 1), abs(r_best - 1))
            worst = max(worst, dev)
            verdict = "ok" if dev <= TARGET else "OFF"
            rows.append(
                {
                    "algorithm": label,
                    "op": op,
                    "tool": tool,
                    "pqlab_median_us": statistics.median(med),
                    "pqlab_mean_us": statistics.median(mean),
                    "ref_us": statistics.median(ref),
                    "ratio_median": r_med,
                    "ratio_mean": r_mean,
                    "ratio_best": r_best,
                    "basis": basis,
                    "verdict": verdict,
                }
            )
            print(
                f"{label:27} {op:13} {tool:13} {statistics.median(med):10.2f} "
                f"{statistics.median(mean):10.2f} {statistics.median(ref):10.2f} "
                f"{r_med:7.3f} {r_mean:7.3f} {r_best:7.3f}  {basis:7} {verdict}"
            )
    print(
        "\nOpenSSL ML-DSA-44: no reference (openssl speed 3.5.4 cannot run ML-DSA, "
        "openssl/openssl#27108)."
    )
    print(f"largest deviation: {worst:.1%} (target {TARGET:.0%})")
    if a.json:
        Path(a.json).write_text(
            json.dumps({"rounds": a.rounds, "load": load, "rows": rows, "raw": results}, indent=2)
        )
    if shutil.which("nproc") and load[0] > (os.cpu_count() or 1):
        print(
            "note: the machine was busy (load above CPU count): means and wall-clock "
            "references are inflated by preemption; medians much less so."
        )
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
