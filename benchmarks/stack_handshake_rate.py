"""Handshakes per second and CPU per handshake on each side, per TLS stack, for one standard
cell (X25519MLKEM768, an ML-DSA-44 chain), measured in the same run; and for the rustls
stacks the same handshakes driven as rustls's own tools drive them (`pqlab-engine tls
reference`): as its example client and server (blocking sockets on 127.0.0.1, nothing else)
and as its benchmark (rustls-bench: both connections in one thread, bytes handed over in
memory, no sockets: what rustls itself costs). Target: the engine's loops are not the
bottleneck, their rate within 10 % of the example client and server's; the in-memory line
says what the sockets themselves cost.

The socket loops run as every experiment runs them: the lab's TLS runner, server and client
on 127.0.0.1 pinned to different CPUs, one connection after another, every handshake
checked (group, signature scheme, chain, host name). Rounds alternate between the stacks.

    python benchmarks/stack_handshake_rate.py [-n 1000] [--rounds 3] [--stacks LIST]
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

from pqlab import catalog, cpuquota, engine, procstat, stats  # noqa: E402
from pqlab.tls import runner, stacks  # noqa: E402
from pqlab.tls.chains import make_chain  # noqa: E402
from pqlab.tls.negotiation import Expected  # noqa: E402

GROUP, SIG = "X25519MLKEM768", "ML-DSA-44"
TARGET = 0.90  # engine loops' rate / the example client and server's
# The lab reads the engine's records in batches, as the handshake experiment does, so that
# it does not wake up beside the timed handshakes once per connection.
BATCH_S = 0.5


def socket_loop(stack: str, chain, n: int, warmup: int) -> dict:
    """The engine's server and client loops over TCP on 127.0.0.1: handshakes/s of one
    client (wall time of the client process) and each side's CPU per handshake."""
    group, sig = catalog.resolve(GROUP, "kem"), catalog.resolve(SIG, "sig")
    tls = runner.Tls(stack=stacks.get(stack), groups=(group,), sigalgs=(sig,))
    server_cpu, client_cpu = cpuquota.pick_cpu_pair() or (None, None)
    server = runner.start_server(
        runner.ServerSpec(
            tls=tls,
            chain=chain,
            listen="127.0.0.1:0",
            max_connections=n + warmup,
            response_mode="none",
        ),
        cpu=server_cpu,
        batch_s=BATCH_S,
    )
    try:
        spec = runner.ClientSpec(
            tls=tls,
            connect=f"127.0.0.1:{server.listening['port']}",
            ca=chain.root,
            servername="localhost",
            n=n,
            warmup=warmup,
            time_limit=600,
            expected=Expected(group=group, sigalg=sig),
        )
        started = time.perf_counter()
        client = runner.start_client(spec, cpu=client_cpu, batch_s=BATCH_S)
        try:
            recs = [r for r in client.finish(900) if r["type"] == "connection"]
        finally:
            client.stop()
        wall = time.perf_counter() - started
        server.finish(60)
    finally:
        server.stop()
    if len(recs) != n + warmup or not all(r.get("verified") for r in recs):
        raise SystemExit(f"error: {stack}: {len(recs)} verified handshakes of {n + warmup}")
    (su, ss), (cu, cs) = procstat.cpu_seconds(server), procstat.cpu_seconds(client)
    return {"wall": wall, "su": su, "ss": ss, "cu": cu, "cs": cs}


def marginal(stack: str, chain, n: int, warmup: int) -> dict:
    """Per handshake, without the processes' start-up (key and chain loading, the crypto
    library's one-time entropy set-up, which rustls's benchmark leaves out too): the
    difference between a run of n handshakes and one of n/10, divided by the difference."""
    small = max(1, n // 10)
    a, b = socket_loop(stack, chain, small, warmup), socket_loop(stack, chain, n, warmup)
    per = {k: (b[k] - a[k]) / (n - small) for k in a}
    return {
        "rate": 1 / per["wall"],
        "server_us": (per["su"] + per["ss"]) * 1e6,
        "server_sys_us": per["ss"] * 1e6,
        "client_us": (per["cu"] + per["cs"]) * 1e6,
        "client_sys_us": per["cs"] * 1e6,
    }


def reference(stack: str, chain, n: int, warmup: int, transport: str) -> dict | None:
    """The stack driven as its own tools drive it (`pqlab-engine tls reference`): `memory`
    as rustls-bench (one thread, buffers), `tcp` as rustls's example client and server
    (blocking sockets on 127.0.0.1). None when the stack has no reference mode."""
    sig = catalog.resolve(SIG, "sig")
    st = stacks.get(stack)
    args = [
        "tls", "reference", "--stack", stack, "--transport", transport,
        "--cert-chain", str(chain.chain), "--key", str(chain.key), "--ca", str(chain.root),
        "--servername", "localhost",
        "--groups", st.group_name(catalog.resolve(GROUP, "kem")),
        "--sigalgs", st.sigalg_name(sig), "-n", str(n), "--warmup", str(warmup),
    ]  # fmt: skip
    argv = [str(engine.binary(st.program)), *args]
    server_cpu, _ = cpuquota.pick_cpu_pair() or (None, None)
    if transport == "memory" and server_cpu is not None:
        argv = ["taskset", "-c", str(server_cpu), *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if proc.returncode == 2 and "no reference mode" in proc.stdout + proc.stderr:
        return None
    if proc.returncode != 0:
        raise SystemExit(f"error: {stack} reference: {proc.stderr.strip() or proc.stdout[-300:]}")
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    hs = [r for r in recs if r.get("type") == "reference" and not r["warmup"]]
    client = [r["client_cpu_ns"] / 1e3 for r in hs]
    server = [r["server_cpu_ns"] / 1e3 for r in hs]
    # Each handshake's wall time as the driving thread saw it (start-up excluded, as the
    # engine loops' marginal rate excludes theirs).
    return {
        "rate": 1e9 / statistics.fmean(r["wall_ns"] for r in hs),
        "server_us": statistics.fmean(server),
        "client_us": statistics.fmean(client),
    }


def med(rows: list[dict], key: str) -> float:
    return statistics.median(x[key] for x in rows)


def report(names: list[str], sock: dict, refs: dict, args) -> list[str]:
    """Print the table; the stacks below target, with what they reached."""
    meta = engine.info()
    print(f"cell: {GROUP}, {SIG} server and CA; {args.rounds} rounds of {args.n} handshakes")
    print(f"engine build {meta.get('build_id', '?')}, CPUs {os.cpu_count()}")
    print("per handshake, medians over rounds; CPU in us (sys: of it in the kernel)")
    print(
        f"{'stack':<17} {'driver':<22} {'hs/s':>6} {'server':>7} {'(sys)':>6} "
        f"{'client':>7} {'(sys)':>6} {'rate vs':>8}"
    )
    failed = []
    for s in names:
        a = sock[s]
        print(
            f"{s:<17} {'pqlab engine loops':<22} {med(a, 'rate'):>6.0f} "
            f"{med(a, 'server_us'):>7.0f} {med(a, 'server_sys_us'):>6.0f} "
            f"{med(a, 'client_us'):>7.0f} {med(a, 'client_sys_us'):>6.0f}"
        )
        for transport, label in (("tcp", "example client/server"), ("memory", "in memory (bench)")):
            ref = refs.get((s, transport))
            if not ref:
                continue
            ratio = med(a, "rate") / med(ref, "rate")
            print(
                f"{'':<17} {label:<22} {med(ref, 'rate'):>6.0f} {med(ref, 'server_us'):>7.0f} "
                f"{'':>6} {med(ref, 'client_us'):>7.0f} {'':>6} {ratio:>8.2f}"
            )
            if transport == "tcp" and ratio < TARGET:
                failed.append(
                    f"{s}: the engine's loops reach {ratio:.2f} of the rate of rustls's own "
                    f"example client and server over the same sockets (target {TARGET:.2f})"
                )
        if (s, "memory") in refs:
            m = refs[(s, "memory")]
            print(
                f"{'':<17} sockets cost the server "
                f"{med(a, 'server_us') - med(m, 'server_us'):.0f} us and the client "
                f"{med(a, 'client_us') - med(m, 'client_us'):.0f} us per handshake beyond "
                "rustls's own work, the kernel's TCP on loopback most of it"
            )
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="measured handshakes per round")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stacks", default="openssl,rustls,rustls-aws-lc-rs,wolfssl")
    args = ap.parse_args()
    if not 20 <= args.n <= 100_000 or not 1 <= args.rounds <= 20:
        ap.error("-n 20-100000 and --rounds 1-20")
    names = [s for s in args.stacks.split(",") if s]
    known = set(stacks.all_stacks())
    for s in names:
        if s not in known:
            ap.error(f"--stacks: {s!r} is not a stack of this build ({', '.join(sorted(known))})")
    work = Path(tempfile.mkdtemp(prefix="pqlab-stack-rate-"))
    chains = {s: make_chain(work / s, SIG, SIG, s) for s in names}
    sock: dict[str, list[dict]] = {s: [] for s in names}
    refs: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for s in names if r % 2 == 0 else reversed(names):
            sock[s].append(marginal(s, chains[s], args.n, args.warmup))
            for transport in ("tcp", "memory"):
                m = reference(s, chains[s], args.n, args.warmup, transport)
                if m is not None:
                    refs.setdefault((s, transport), []).append(m)
    failed = report(names, sock, refs, args)
    ci = stats.summarize([x["rate"] for x in sock[names[0]]])
    print(
        f"{names[0]} rate over rounds: median {ci['median']:.0f}, robust CV {ci['robust_cv']:.3f}"
    )
    for f in failed:
        print(f"BELOW TARGET: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
