"""Handshakes per second: pqlab's engine client+server loop vs `openssl s_time` against
`openssl s_server`, both built from the same OpenSSL 3.5.4 source, same group, same chain,
same machine, on 127.0.0.1, alternating rounds. Target: pqlab at least as fast.

Fairness: both servers send no session tickets; s_time's client is restricted to the same
single group through an OpenSSL config file (otherwise it would offer two key shares), and
verifies the chain like the engine (-verify). The engine's handshakes are the measured kind:
full handshakes, every one checked (group, signature, chain, host name), a JSON record per
connection; reported with per-message events on (what experiments use) and off.

    python benchmarks/handshake_rate.py [--group X25519MLKEM768] [--ca-alg RSA:2048]
        [--server-alg ML-DSA-44] [--sigalg mldsa44] [--seconds 5] [--rounds 3]
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from pqlab import engine  # noqa: E402


def openssl_bin() -> str:
    for cand in (
        os.environ.get("PQLAB_OPENSSL"),
        REPO / "build/openssl/bin/openssl",
        Path("/work/main/build/openssl/bin/openssl"),
    ):
        if cand and Path(cand).is_file():
            return str(cand)
    sys.exit("error: build/openssl/bin/openssl missing; run scripts/build-openssl-cli.sh")


def opt_level(flags: str) -> str:
    """The optimisation level in force: the last -O flag on the compiler line."""
    levels = re.findall(r"(?<!\S)-O\w*", flags)
    return levels[-1] if levels else "-O?"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


def reap(proc: subprocess.Popen) -> float:
    """Wait for a child and return its CPU seconds (user + system)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def run_timed(
    argv: list[str], out_path: Path, env: dict | None = None, timeout: float = 600
) -> tuple[int, float, float]:
    """Run argv to completion with stdout in out_path: (exit code, wall s, CPU s)."""
    with open(out_path, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode, time.perf_counter() - t0, usage.ru_utime + usage.ru_stime
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                reap(proc)
                raise RuntimeError(f"{argv[0]} did not finish in {timeout} s")
            time.sleep(0.005)


def start_engine_server(eng: str, d: Path, group: str, events: str):
    # The server's records go to a file: a pipe nobody reads would fill and stall it.
    log = open(d / "server.jsonl", "w+")
    srv = subprocess.Popen(
        [
            eng,
            "tls",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--cert-chain",
            str(d / "chain.pem"),
            "--key",
            str(d / "server.key.pem"),
            "--groups",
            group,
            "--events",
            events,
        ],
        stdout=log,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log.seek(0)
        first = log.readline()
        if first.endswith("\n"):
            return srv, log, json.loads(first)["port"]
        time.sleep(0.01)
    srv.kill()
    reap(srv)
    raise RuntimeError("engine server did not start")


def pqlab_rate(
    eng: str, d: Path, group: str, sigalg: str, n: int, events: str
) -> tuple[float, float]:
    """(handshakes/s, CPU ms per handshake of client+server) for n engine connections."""
    srv, log, port = start_engine_server(eng, d, group, events)
    try:
        rc, wall, cpu_client = run_timed(
            [
                eng,
                "tls",
                "client",
                "--connect",
                f"127.0.0.1:{port}",
                "--ca",
                str(d / "root.crt.pem"),
                "--servername",
                "localhost",
                "--groups",
                group,
                "--sigalgs",
                sigalg,
                "-n",
                str(n),
                "--events",
                events,
            ],
            d / "client.jsonl",
        )
    finally:
        srv.terminate()
        cpu_server = reap(srv)
        log.close()
    text = (d / "client.jsonl").read_text()
    if rc != 0:
        raise RuntimeError(f"engine client failed: {text[-400:]}")
    recs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert len(recs) == n and all(r["verified"] for r in recs)
    # Wall time of the client process, start-up included, exactly as for s_time below.
    span = wall
    return n / span, (cpu_client + cpu_server) / n * 1e3


def openssl_rate(
    ossl: str, d: Path, group: str, seconds: int, conf: Path
) -> tuple[float, float, int]:
    """(handshakes/s, CPU ms per handshake of s_time+s_server, connections)."""
    port = free_port()
    srv = subprocess.Popen(
        [
            ossl,
            "s_server",
            "-accept",
            f"127.0.0.1:{port}",
            "-cert",
            str(d / "chain.pem"),
            "-key",
            str(d / "server.key.pem"),
            "-groups",
            group,
            "-num_tickets",
            "0",
            "-quiet",
            "-tls1_3",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        env = {**os.environ, "OPENSSL_CONF": str(conf)}
        rc, wall, cpu_client = run_timed(
            [
                ossl,
                "s_time",
                "-connect",
                f"127.0.0.1:{port}",
                "-new",
                "-time",
                str(seconds),
                "-CAfile",
                str(d / "root.crt.pem"),
                "-verify",
                "2",
                "-tls1_3",
            ],
            d / "s_time.out",
            env=env,
            timeout=seconds + 60,
        )
    finally:
        srv.terminate()
        cpu_server = reap(srv)
    text = (d / "s_time.out").read_text()
    m = re.search(r"(\d+) connections in ([\d.]+)s", text)
    if not m or rc != 0:
        raise RuntimeError(f"s_time failed: {text[-500:]}")
    if "verify error" in text:
        raise RuntimeError("s_time reported a verification error")
    n = int(m.group(1))
    # s_time's loop runs until time(NULL) passes start + seconds, so with whole-second
    # clocks it lasts anywhere from seconds-1 to seconds: divide by the process's measured
    # wall time instead (start-up included, as for the engine client).
    return n / wall, (cpu_client + cpu_server) / n * 1e3, n


def check_openssl_group(ossl: str, d: Path, group: str, conf: Path) -> str:
    """Confirm that the s_time configuration negotiates the group (via s_client)."""
    port = free_port()
    srv = subprocess.Popen(
        [
            ossl,
            "s_server",
            "-accept",
            f"127.0.0.1:{port}",
            "-cert",
            str(d / "chain.pem"),
            "-key",
            str(d / "server.key.pem"),
            "-groups",
            group,
            "-num_tickets",
            "0",
            "-quiet",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        env = {**os.environ, "OPENSSL_CONF": str(conf)}
        out = subprocess.run(
            [
                ossl,
                "s_client",
                "-connect",
                f"127.0.0.1:{port}",
                "-CAfile",
                str(d / "root.crt.pem"),
                "-brief",
                "-verify_return_error",
            ],
            input="",
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
    finally:
        srv.kill()
        srv.wait()
    text = out.stdout + out.stderr
    # KEM groups print "Negotiated TLS1.3 group", (EC)DH ones "Peer Temp Key: X25519, ...".
    m = re.search(r"Negotiated TLS1.3 group: (\S+)", text) or re.search(
        r"Peer Temp Key: ([\w-]+)", text
    )
    if not m or "Verification: OK" not in text:
        raise RuntimeError(f"reference handshake failed: {text[-400:]}")
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", default="X25519MLKEM768", help="OpenSSL group name")
    ap.add_argument("--ca-alg", default="RSA:2048", help="engine key spec of the root")
    ap.add_argument("--server-alg", default="ML-DSA-44", help="engine key spec of the server")
    ap.add_argument("--sigalg", default="mldsa44", help="TLS signature scheme to require")
    ap.add_argument("--seconds", type=int, default=5, help="s_time seconds per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    eng, ossl = str(engine.engine_path()), openssl_bin()
    work = Path(tempfile.mkdtemp(prefix="pqlab-bench-"))
    try:
        subprocess.run(
            [
                eng,
                "tls",
                "certs",
                "--ca-alg",
                args.ca_alg,
                "--server-alg",
                args.server_alg,
                "--out-dir",
                str(work),
            ],
            check=True,
            capture_output=True,
        )
        conf = work / "openssl.cnf"
        conf.write_text(
            "openssl_conf = init\n[init]\nssl_conf = ssl\n[ssl]\n"
            "system_default = sys\n[sys]\nGroups = " + args.group + "\n"
        )
        # The two libraries come from the same source, but their compiler flags can differ
        # (the openssl-src crate appends -O2 to OpenSSL's -O3): show both, since that alone
        # moves the comparison by ~10%.
        eng_flags = engine.info()["openssl"]["cflags"]
        ref_flags = subprocess.run(
            [ossl, "version", "-f"], capture_output=True, text=True
        ).stdout.strip()
        print(f"engine's OpenSSL:   {eng_flags}\nreference openssl:  {ref_flags} ({ossl})")
        if opt_level(eng_flags) != opt_level(ref_flags):
            print(
                f"warning: the engine's OpenSSL is built with {opt_level(eng_flags)}, the "
                f"reference with {opt_level(ref_flags)}: library speed differs (~10% on "
                "ML-KEM/ML-DSA), not just the loops; for a like-for-like comparison build "
                "the reference with the crate's flags (Configure ... -O2 -ffunction-sections "
                "-fdata-sections -march=x86-64) and point PQLAB_OPENSSL at it"
            )
        got = check_openssl_group(ossl, work, args.group, conf)
        print(
            f"group {args.group}, server {args.server_alg} under a {args.ca_alg} root; "
            f"s_time negotiates {got}"
        )
        # Pilot to size the engine runs to about --seconds each.
        pilot, _ = pqlab_rate(eng, work, args.group, args.sigalg, 30, "on")
        n = max(50, int(pilot * args.seconds))
        names = ("pqlab events on", "pqlab events off", "openssl s_time")
        rates: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        for r in range(args.rounds):
            for events, name in (("on", names[0]), ("off", names[1])):
                rate, c = pqlab_rate(eng, work, args.group, args.sigalg, n, events)
                rates[name].append(rate)
                cpu[name].append(c)
            rate, c, count = openssl_rate(ossl, work, args.group, args.seconds, conf)
            rates[names[2]].append(rate)
            cpu[names[2]].append(c)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{k} {rates[k][-1]:.0f}/s ({cpu[k][-1]:.2f} ms CPU)" for k in names)
                + f"; s_time made {count} connections",
                flush=True,
            )
        med = {k: statistics.median(v) for k, v in rates.items()}
        med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
        print("\nmedian of rounds: handshakes per second, CPU ms per handshake (client+server)")
        for k in names:
            print(f"  {k:18s} {med[k]:8.0f}/s {med_cpu[k]:8.3f} ms")
        # Load on a shared machine drifts: the ratio within each round (measured minutes
        # apart at most) is steadier than the ratio of the medians.
        per_round = [a / b for a, b in zip(rates[names[0]], rates[names[2]], strict=True)]
        per_round_cpu = [b / a for a, b in zip(cpu[names[0]], cpu[names[2]], strict=True)]
        ratio = statistics.median(per_round)
        cpu_ratio = statistics.median(per_round_cpu)
        print(
            f"ratio pqlab (events on) / openssl s_time, median of per-round ratios: rate "
            f"{ratio:.2f} (rounds: {', '.join(f'{x:.2f}' for x in per_round)}), CPU "
            f"efficiency {cpu_ratio:.2f}; ratio of medians: rate "
            f"{med[names[0]] / med[names[2]]:.2f}; events off: rate "
            f"{med[names[1]] / med[names[2]]:.2f}"
        )
        print(
            "OK: pqlab is at least as fast"
            if ratio >= 1
            else "pqlab is SLOWER than the reference in this run"
        )
        return 0 if ratio >= 1 else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
