"""pqlab's AEAD throughput against `openssl speed -evp`, in alternating rounds of one run.

Both use the same OpenSSL 3.5.4 source (the engine's vendored copy and the `openssl` command
built from it by scripts/build-openssl-cli.sh) and the same OPENSSL_ia32cap mask; both
capability vectors are printed and must be the same. For each mask and cipher, every round
runs `pqlab-engine aead --mode fair` (16384-byte records, encryption) and `openssl speed
-evp` back to back, in the opposite order in the next round, and prints the round's ratio
with the load average. The verdict is the median over the rounds of the ratio within a
round (runs seconds apart, so the machine's slower and faster stretches cancel instead of
landing on one side), per CPU-second, by the scheduler's clock on both sides: pqlab's
thread CPU time over its timed batches, speed's process user and system time (speed's own
figure divides by user time alone, which reads high on a busy machine; it is printed
beside). Another process taking the CPU then enters neither. The wall-clock ratio (speed's
count over its alarm's seconds, as `-elapsed` would print it) is shown beside it. Exit 1
when a fair / speed ratio is off by more than 5 %.

`openssl speed` runs GCM and CCM a record at a time (its "AE" loop), but streams every
other cipher, ChaCha20-Poly1305 included: one init, one update per "record", one final at
the end, so it never pays what every TLS record costs the library (the nonce, a ChaCha20
block for the Poly1305 key and its powers, the additional data, the final and the tag).
For those ciphers each round also runs `evp_records.c` (speed's loop, and the same loop with
a TLS record layer's calls, compiled here against the same libcrypto) and prints what the
library's per-record work costs (records / stream, ns per record) and what pqlab adds to it
(fair / records, which must also be within 5 %). Every AEAD also runs `openssl speed -aead
-evp`: for GCM and CCM speed's record loop with 13 bytes of additional data (fair / speed
-aead is checked too); ChaCha20-Poly1305 it streams with -aead as well (OpenSSL 3.5 picks
the loop by the EVP mode), so there it is printed, not compared.

When `perf` can sample here, each cipher's code path is checked too: both sides are
sampled (cpu-clock) and the libcrypto functions that take at least 5 % of one side's
user-space samples must be among the other's (pqlab's untimed copies and comparisons
apart). `--instructions` adds a load-independent second opinion: instructions per byte of
speed's timed loop, pqlab's timed batches and the C loops, counted by callgrind (which
presents its own CPU to both, so both run the path that CPU selects).

    PYTHONPATH=src python benchmarks/aead_vs_openssl_speed.py [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pqlab import engine
from pqlab.experiments.aead.plan import MASKS

TOLERANCE = 0.05
# The ciphers `openssl speed -evp` drives per record (its AE loop); it streams the others.
SPEED_PER_RECORD = {"aes-128-gcm", "aes-256-gcm", "aes-128-ccm", "aes-256-ccm"}
# The ciphers `openssl speed -aead` accepts (AEADs). With it, speed adds 13 bytes of
# additional data to its AE loop, but OpenSSL 3.5's speed picks the loop by the cipher's EVP
# mode (apps/speed.c): GCM and CCM run record by record, ChaCha20-Poly1305 (mode 0) is
# streamed with -aead as without it, so for it `speed -aead` is printed beside `speed` and
# not compared as a second reference.
AEADS = SPEED_PER_RECORD | {"chacha20-poly1305"}
# A function is on a side's hot path when it takes this share of its user-space samples...
HOT = 0.05
# ... and present on the other's when it takes at least this share there.
PRESENT = 0.01
# pqlab's untimed work between batches (filling the slots, checking the records): libc's.
UNTIMED = re.compile(r"mem(cmp|cpy|move|set)|bcmp")

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


def speed_argv(openssl: Path, alg: str, size: int, seconds: int, aead: bool = False) -> list[str]:
    """`openssl speed -evp ALG`; with `aead`, `-aead` too: speed's TLS-like loop (per
    record: IV length, tag length, init with key and IV, 13 bytes of additional data,
    update, final), which its streamed loop leaves out for ChaCha20-Poly1305."""
    return [
        str(openssl),
        "speed",
        *(["-aead"] if aead else []),
        "-evp",
        alg,
        "-bytes",
        str(size),
        "-seconds",
        str(seconds),
    ]


def parse_speed(out: str, err: str, size: int) -> dict:
    """`openssl speed` output: its count of operations and its own rate (the last line, in
    1000s of bytes per second of its user CPU time)."""
    rate = re.search(r"^\S+\s+([\d.]+)k\s*$", out.strip().splitlines()[-1])
    count = re.search(r"on \d+ size blocks: (\d+) ", err + out)
    if not rate or not count:
        sys.exit(f"error: cannot read openssl speed output: {out[-300:]!r} {err[-300:]!r}")
    return {"ops": int(count.group(1)), "own": float(rate.group(1)) * 1e3}


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def speed_run(
    openssl: Path, alg: str, size: int, seconds: int, mask: str | None, aead: bool = False
) -> dict:
    """One `openssl speed -evp ALG -bytes SIZE`: bytes per CPU-second and per second.

    The CPU time is the process's user and system time, the clock pqlab's thread CPU time
    and the C loop's process CPU time read (the scheduler's run time). Speed's own figure
    divides by its user time alone, which the kernel splits from the system time by
    sampling at its ticks: on a busy virtual machine the preemptions' kernel time then goes
    to system time and speed's figure reads high (here 2,930 MB/s for a cipher that runs at
    2,050 on the idle machine), so it is printed but not compared. Speed's start-up (a few
    ms of a run of `seconds`) is counted with its loop. The wall-clock rate is speed's count
    over its alarm's `seconds`, what `-elapsed` would print."""
    before = children_cpu()
    p = subprocess.run(
        speed_argv(openssl, alg, size, seconds, aead),
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=seconds * 10 + 60,
        check=True,
    )
    cpu = children_cpu() - before
    got = parse_speed(p.stdout, p.stderr, size)
    nbytes = got["ops"] * size
    return {"cpu": nbytes / cpu, "wall": nbytes / seconds, "own": got["own"]}


def pqlab_argv(alg: str, size: int, seconds: float) -> list[str]:
    return [
        "aead",
        "--cipher",
        alg,
        "--sizes",
        str(size),
        "--directions",
        "encrypt",
        "--mode",
        "fair",
        "--seconds",
        f"{seconds:g}",
    ]


def engine_env(mask: str | None) -> dict:
    """The engine's environment for this mask (engine.run merges it into os.environ, so a
    mask in the caller's environment is taken out for the call)."""
    return {"OPENSSL_ia32cap": mask} if mask else {}


def with_engine_mask(mask: str | None, call):
    old = os.environ.pop("OPENSSL_ia32cap", None)
    try:
        return call(engine_env(mask) or None)
    finally:
        if old is not None:
            os.environ["OPENSSL_ia32cap"] = old


def pqlab_run(alg: str, size: int, seconds: float, mask: str | None) -> dict:
    """One fair cell: bytes per CPU-second and per wall-clock second of its timed batches,
    every record verified."""
    recs = with_engine_mask(
        mask, lambda env: engine.run(pqlab_argv(alg, size, seconds), env=env, timeout=600)
    )
    cell = next(r for r in recs if r["type"] == "cell")
    if not cell["verified_records"] == cell["records"] > 0:
        sys.exit(f"error: pqlab verified {cell['verified_records']} of {cell['records']}")
    return {
        "cpu": cell["bytes"] * 1e9 / cell["cpu_ns"],
        "wall": cell["bytes"] * 1e9 / cell["ns"],
        "share": cell["cpu_ns"] / cell["ns"],
    }


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


def reference_run(
    binary: Path, alg: str, size: int, seconds: int, mask: str | None, form: str
) -> dict:
    """evp_records in `form` (stream or records): bytes per CPU-second and per second, and
    CPU ns per call."""
    out = subprocess.run(
        [str(binary), alg, str(size), str(seconds), form],
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=seconds * 10 + 60,
        check=True,
    ).stdout
    r = json.loads(out)
    nbytes = r["calls"] * size
    return {
        "cpu": nbytes * 1e9 / r["cpu_ns"],
        "wall": nbytes * 1e9 / r["ns"],
        "ns_per_call": r["cpu_ns"] / r["calls"],
    }


def cpusettings(openssl: Path, mask: str | None, wrapper: list[str] | None = None) -> str:
    out = subprocess.run(
        [*(wrapper or []), str(openssl), "info", "-cpusettings"],
        capture_output=True,
        text=True,
        env=env_with(mask),
        timeout=300,
    ).stdout.strip()
    m = re.search(r"OPENSSL_ia32cap=(\S+)", out)
    return m.group(1) if m else out


def engine_vector(mask: str | None) -> str:
    recs = with_engine_mask(
        mask, lambda env: engine.run(["aead", "--cpu-only"], env=env, timeout=60)
    )
    return recs[0]["openssl_ia32cap"]


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def median(xs) -> float:
    return statistics.median(list(xs))


def within(ratio: float) -> bool:
    return abs(ratio - 1) <= TOLERANCE


def measure_cipher(a, openssl: Path, reference: Path, alg: str, mask_name: str) -> dict:
    """The alternating rounds of one cipher under one mask, each printed as it ends."""
    mask = None if mask_name == "none" else MASKS[mask_name]
    streamed = alg not in SPEED_PER_RECORD
    runs = {
        "fair": lambda: pqlab_run(alg, a.size, a.seconds, mask),
        "speed": lambda: speed_run(openssl, alg, a.size, a.seconds, mask),
    }
    if alg in AEADS:
        runs["speed_aead"] = lambda: speed_run(openssl, alg, a.size, a.seconds, mask, aead=True)
    if streamed:
        runs["records"] = lambda: reference_run(reference, alg, a.size, a.seconds, mask, "records")
        runs["stream"] = lambda: reference_run(reference, alg, a.size, a.seconds, mask, "stream")
    order = list(runs)
    rounds = []
    print(f"\n  {alg} ({mask_name}): MB/s per CPU-second (per wall-clock second)")
    for i in range(a.rounds):
        got = {"load": load()}
        for name in order if i % 2 == 0 else order[::-1]:
            got[name] = runs[name]()
        rounds.append(got)
        f, s = got["fair"], got["speed"]
        line = (
            f"    round {i + 1} (load {got['load']:.2f}): fair {f['cpu'] / 1e6:8.1f} "
            f"({f['wall'] / 1e6:.1f}), speed {s['cpu'] / 1e6:8.1f} ({s['wall'] / 1e6:.1f}; "
            f"its own figure {s['own'] / 1e6:.1f}); "
            f"fair / speed {f['cpu'] / s['cpu']:.3f} ({f['wall'] / s['wall']:.3f})"
        )
        if "speed_aead" in got:
            sa = got["speed_aead"]
            line += (
                f"; speed -aead {sa['cpu'] / 1e6:.1f} ({sa['wall'] / 1e6:.1f}), "
                f"fair / speed -aead {f['cpu'] / sa['cpu']:.3f} ({f['wall'] / sa['wall']:.3f})"
            )
        if streamed:
            rr, rs = got["records"], got["stream"]
            line += (
                f"; C loop records / stream {rr['cpu'] / rs['cpu']:.3f} "
                f"({rr['ns_per_call'] - rs['ns_per_call']:.0f} ns a record), "
                f"fair / records {f['cpu'] / rr['cpu']:.3f}"
            )
        print(line, flush=True)
    r = {"alg": alg, "mask": mask_name, "streamed": streamed, "rounds": rounds}
    pairs = [("fair / speed", "fair", "speed")]
    if alg in AEADS and not streamed:
        pairs += [("fair / speed -aead", "fair", "speed_aead")]
    if streamed:
        pairs += [("fair / C record loop", "fair", "records")]
    r["paired"] = {
        what: (
            median(x[num]["cpu"] / x[den]["cpu"] for x in rounds),
            median(x[num]["wall"] / x[den]["wall"] for x in rounds),
        )
        for what, num, den in pairs
    }
    if streamed and alg in AEADS:
        # speed -aead over speed: 1 within noise where -aead streams the cipher as well.
        r["speed_aead_over_speed"] = median(
            x["speed_aead"]["cpu"] / x["speed"]["cpu"] for x in rounds
        )
    if streamed:
        r["library_per_record"] = (
            median(x["records"]["cpu"] / x["stream"]["cpu"] for x in rounds),
            median(x["records"]["ns_per_call"] - x["stream"]["ns_per_call"] for x in rounds),
        )
    r["cpu_share"] = median(x["fair"]["share"] for x in rounds)
    return r


def checks(r: dict) -> list[tuple[str, float, float]]:
    """One cipher's comparisons: (what, CPU-time ratio, wall-clock ratio). fair / speed for
    every cipher (the target); for GCM and CCM also fair / speed -aead (speed's record loop
    with the additional data a TLS record has); for the ciphers speed streams, with -aead
    too, fair / the C record loop, what pqlab adds to the library's own per-record work."""
    return [(what, *ratios) for what, ratios in r["paired"].items()]


def perf_works() -> bool:
    if shutil.which("perf") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(
            ["perf", "record", "-q", "-e", "cpu-clock", "-o", f"{d}/p", "true"],
            capture_output=True,
            timeout=60,
        )
        return p.returncode == 0


def routines(binary: Path) -> dict[str, str]:
    """Labels inside assembly routines (symbols without a size, such as
    `_bsaes_encrypt8_bitslice` inside `_bsaes_encrypt8`) mapped to the routine holding them:
    perf names a sample after either, differently from one binary to another."""
    out = subprocess.run(
        ["nm", "-S", "--defined-only", str(binary)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    sized, labels = [], []
    for parts in map(str.split, out.splitlines()):
        if len(parts) == 4:
            sized.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
        elif len(parts) == 3:
            labels.append((int(parts[0], 16), parts[2]))
    sized.sort()
    starts = [start for start, _, _ in sized]
    owner: dict[str, str] = {}
    for at, name in labels:
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and at < sized[i][0] + sized[i][1] and sized[i][2] != name:
            owner.setdefault(name, sized[i][2])
    return owner


def hot_functions(argv: list[str], env: dict, work: Path) -> dict[str, float]:
    """Share of user-space cpu-clock samples per routine of one run of `argv`."""
    data = work / "perf.data"
    subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", str(data), *argv],
        capture_output=True,
        env=env,
        timeout=600,
        check=True,
    )
    rep = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--sort", "symbol"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    owner = routines(Path(argv[0]))
    shares: dict[str, float] = {}
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        if m:
            name = owner.get(m.group(2), m.group(2))
            shares[name] = shares.get(name, 0) + float(m.group(1))
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}


def same_path(ours: dict[str, float], theirs: dict[str, float]) -> list[str]:
    """What differs between two sides' hot paths: a function hot on one side and (nearly)
    absent on the other, pqlab's untimed libc copies and comparisons apart."""
    diff = []
    for a, b, side in ((ours, theirs, "pqlab"), (theirs, ours, "speed")):
        for fn, share in a.items():
            if share >= HOT and b.get(fn, 0) < PRESENT and not UNTIMED.search(fn):
                diff.append(f"{fn} ({share:.0%} of {side}'s samples)")
    return diff


def check_path(openssl: Path, alg: str, size: int, mask: str | None, work: Path) -> list[str]:
    env = env_with(mask)
    theirs = hot_functions(speed_argv(openssl, alg, size, 1), env, work)
    ours = hot_functions([str(engine.engine_path()), *pqlab_argv(alg, size, 1)], env, work)
    top = sorted(theirs, key=theirs.get, reverse=True)[:3]
    print(
        f"    code path ({alg}): speed "
        + ", ".join(f"{fn} {theirs[fn]:.0%}" for fn in top)
        + "; pqlab "
        + ", ".join(f"{fn} {ours.get(fn, 0):.0%}" for fn in top)
    )
    return same_path(ours, theirs)


def callgrind_ir(argv: list[str], toggle: str, env: dict, work: Path) -> tuple[int, str, str]:
    """Instructions executed inside `toggle` (callgrind), and the run's stdout and stderr."""
    out = work / "callgrind.out"
    p = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        + [f"--toggle-collect={toggle}", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=True,
    )
    m = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
    if not m:
        sys.exit(f"error: no totals in {out}")
    return int(m.group(1)), p.stdout, p.stderr


def instructions(openssl: Path, reference: Path, alg: str, size: int, work: Path) -> None:
    """Instructions per byte of speed's loop, pqlab's timed batches and the C loops."""
    env = env_with(None)
    ir, out, err = callgrind_ir(speed_argv(openssl, alg, size, 1), "EVP_Update_loop*", env, work)
    speed = ir / (parse_speed(out, err, size)["ops"] * size)
    ir, out, _ = callgrind_ir(
        [str(engine.engine_path()), *pqlab_argv(alg, size, 0.3)], "*timed_batch*", env, work
    )
    cell = next(r for r in map(json.loads, out.splitlines()) if r["type"] == "cell")
    fair = ir / cell["bytes"]
    line = f"    {alg}: speed {speed:.4f}, pqlab fair {fair:.4f}"
    if alg not in SPEED_PER_RECORD:
        for form in ("stream", "records"):
            ir, out, _ = callgrind_ir(
                [str(reference), alg, str(size), "1", form], "run_calls*", env, work
            )
            line += f", C {form} {ir / (json.loads(out)['calls'] * size):.4f}"
    per_record = (fair - speed) * size
    print(
        f"{line} instructions per byte; speed / fair {speed / fair:.3f} "
        f"({per_record:.0f} instructions a record more)"
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3, help="per run (speed's default 3)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--ciphers", default="aes-128-gcm,aes-256-gcm,chacha20-poly1305")
    ap.add_argument(
        "--masks",
        default="none,documents",
        help="none (AES-NI on), documents, precise; comma separated",
    )
    ap.add_argument("--openssl", help="openssl command built from the same source")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per byte with callgrind (valgrind)",
    )
    a = ap.parse_args()
    if a.seconds < 1 or a.rounds < 1 or a.size < 1:
        sys.exit("error: --seconds, --rounds and --size must be positive")
    unknown = [m for m in a.masks.split(",") if m != "none" and m not in MASKS]
    if unknown:
        sys.exit(f"error: unknown mask {unknown[0]!r}; use none, " + ", ".join(MASKS))
    if a.instructions and shutil.which("valgrind") is None:
        sys.exit("error: --instructions needs valgrind")
    return a


def measure_mask(a, openssl: Path, reference: Path, mask_name: str, work: Path, paths: bool):
    """Every cipher under one mask: (rows, what failed)."""
    mask = None if mask_name == "none" else MASKS[mask_name]
    rows, failed = [], []
    ours, theirs = engine_vector(mask), cpusettings(openssl, mask)
    print(
        f"\nmask {mask_name} ({mask or 'unset'}): capability vector "
        f"{'same' if ours == theirs else 'DIFFERENT'}\n  engine  {ours}\n  openssl {theirs}"
    )
    if ours != theirs:
        failed.append(f"mask {mask_name}: the engine and openssl see different CPUs")
    for alg in a.ciphers.split(","):
        rows.append(measure_cipher(a, openssl, reference, alg, mask_name))
        differs = check_path(openssl, alg, a.size, mask, work) if paths else []
        if differs:
            print(f"    DIFFERENT code paths: {'; '.join(differs)}")
            failed.append(f"{alg} ({mask_name}) code path: {'; '.join(differs)}")
    return rows, failed


def summary(rows: list[dict], size: int) -> list[str]:
    """The verdicts, printed; what failed."""
    print(
        f"\nsummary at {size} bytes, medians of the rounds' ratios per CPU-second "
        f"(wall-clock in brackets); target: every comparison within {TOLERANCE:.0%}"
    )
    failed = []
    for r in rows:
        print(f"{r['alg']:18s} {r['mask']:10s} pqlab's CPU share {r['cpu_share']:.2f}")
        for what, cpu, wall in checks(r):
            verdict = "ok" if within(cpu) else f"OUTSIDE {TOLERANCE:.0%}"
            print(f"    {what:24s} {cpu:6.3f} ({wall:.3f})  {verdict}")
            if not within(cpu):
                failed.append(f"{r['alg']} ({r['mask']}) {what} {cpu:.3f} (wall {wall:.3f})")
        if r["streamed"]:
            ratio, ns = r["library_per_record"]
            print(
                f"    the library's own per-record work (C loop records / stream): {ratio:.3f}, "
                f"{ns:.0f} ns a record, which speed's loop never pays"
            )
        if "speed_aead_over_speed" in r:
            print(
                f"    openssl speed -aead / speed: {r['speed_aead_over_speed']:.3f} (OpenSSL "
                "3.5's speed streams this cipher with -aead too: not a record-by-record "
                "reference; the C record loop is)"
            )
    return failed


def main() -> int:
    a = parse_args()
    openssl = find_openssl(a.openssl)
    version = subprocess.run([str(openssl), "version"], capture_output=True, text=True).stdout
    print(f"openssl command: {openssl} ({version.strip()})")
    print(f"engine: {engine.info()['openssl']['version_text']}")
    cpus = os.cpu_count() or 1
    print(f"load average at start: {load():.2f} on {cpus} CPUs")
    if load() > cpus:
        print(
            "the machine is busy: here one round's ratio moved by 5-15 % at load 5-10 on 2 "
            "CPUs, so a verdict near 5 % says little; rerun when it is idle"
        )
    paths = perf_works()
    if not paths:
        print("perf cannot sample here: code paths not compared")
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        reference = build_reference(openssl, work)
        for mask_name in a.masks.split(","):
            got, bad = measure_mask(a, openssl, reference, mask_name, work, paths)
            rows += got
            failed += bad
        if a.instructions:
            print(
                "\ninstructions per byte under callgrind (both see valgrind's CPU: "
                f"{cpusettings(openssl, None, ['valgrind', '-q'])})"
            )
            for alg in a.ciphers.split(","):
                instructions(openssl, reference, alg, a.size, work)
    failed = summary(rows, a.size) + failed
    print(f"load average at end: {load():.2f}")
    if failed:
        print(f"FAIL: {len(failed)} beyond {TOLERANCE:.0%} or different: " + "; ".join(failed))
        return 1
    print(f"every comparison within {TOLERANCE:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
