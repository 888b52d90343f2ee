"""wolfSSL's own programs, run by pqlab beside its own measurement of the same cells, as
document 004 ran them:

- the example server and client built with wolfSSL's memory tracker (`mem_track.h`: total
  allocations, bytes, peak bytes of the whole process) and stack-size check (the program runs
  in a thread with a painted stack): heap and stack per role (`tracked_pair`);
- `tls_bench`, wolfSSL's TLS benchmark: connections made, average connect time and Rx/Tx
  rates per group (`tls_bench`);
- `tls_bench`'s binary size with and without the post-quantum algorithms (`binary_sizes`).

Where the programs are comes from the stack's `tools` in the engine's report (the engine
build knows where scripts/build-wolfssl.sh put them); a function needing a tool the build
lacks says so. Every run is checked: the programs exit 0, and the example pair negotiated
TLS 1.3 with the group asked for (both print it; the client verifies the server's chain
against the root, and the server the client's in mutual TLS). The programs are supervised by
the process layer: bounded waits, stopped on error and Ctrl-C.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pqlab import engine
from pqlab.errors import EngineError, EngineIOError, UserError
from pqlab.process import Process

# How wolfSSL's example client offers exactly one key share of a group (its options: -t
# X25519, -8 X448, -Y "ECC groups only" (P-256 unless -t/-8), --pqc NAME), and the name both
# examples print for the group they negotiated, by IANA NamedGroup code.
EXAMPLE_GROUPS: dict[int, tuple[tuple[str, ...], str]] = {
    0x001D: (("-t", "-Y"), "X25519"),
    0x0017: (("-Y",), "SECP256R1"),
    0x001E: (("-8", "-Y"), "X448"),
    0x0200: (("--pqc", "ML_KEM_512"), "ML_KEM_512"),
    0x0201: (("--pqc", "ML_KEM_768"), "ML_KEM_768"),
    0x0202: (("--pqc", "ML_KEM_1024"), "ML_KEM_1024"),
    0x11EB: (("--pqc", "SecP256r1MLKEM768"), "SecP256r1MLKEM768"),
    0x11EC: (("--pqc", "X25519MLKEM768"), "X25519MLKEM768"),
    0x11ED: (("--pqc", "SecP384r1MLKEM1024"), "SecP384r1MLKEM1024"),
}
# tls_bench's names of the groups it runs through (`-g`), by IANA code, in the order it runs
# them (its `groups[]` table).
TLS_BENCH_GROUPS: dict[int, str] = {
    0x0017: "ECC_SECP256R1",
    0x0018: "ECC_SECP384R1",
    0x0019: "ECC_SECP521R1",
    0x001D: "ECC_X25519",
    0x001E: "ECC_X448",
    0x0100: "FFDHE_2048",
    0x0101: "FFDHE_3072",
    0x0200: "ML_KEM_512",
    0x0201: "ML_KEM_768",
    0x0202: "ML_KEM_1024",
    0x11EB: "SecP256r1MLKEM768",
    0x11ED: "SecP384r1MLKEM1024",
    0x11EC: "X25519MLKEM768",
}
# What tls_bench 5.9.4 prints for the first group of a `-g` run: it reads the group's name
# before it has set that group (examples/benchmark/tls_bench.c, `gname`), so the first group
# it runs, the first of TLS_BENCH_GROUPS the build has, is printed as this.
TLS_BENCH_UNNAMED = "N/A"
# The suite document 004 ran every tls_bench and example connection with.
DOCUMENT_SUITE = "TLS13-AES256-GCM-SHA384"
TIMEOUT_S = 60.0
TRACKER_FIELDS = {
    "allocations": r"total\s+Allocs\s*=\s*(-?\d+)",
    "deallocations": r"total\s+Deallocs\s*=\s*(-?\d+)",
    "heap_total_bytes": r"total\s+Bytes\s*=\s*(-?\d+)",
    "heap_peak_bytes": r"peak\s+Bytes\s*=\s*(-?\d+)",
    "heap_current_bytes": r"current\s+Bytes\s*=\s*(-?\d+)",
    "stack_used_bytes": r"stack used\s*=\s*(-?\d+)",
}


def tool(stack, name: str) -> Path:
    """The path of one of the stack's own programs, or a UserError saying how to get it."""
    path = (stack.tools or {}).get(name)
    if not path:
        raise UserError(
            f"the {stack.name} stack's build has no {name} program; rebuild it with "
            "'make engine' (scripts/build-wolfssl.sh builds wolfSSL's own tools)"
        )
    if not Path(path).is_file():
        raise UserError(
            f"{name} of the {stack.name} stack is missing at {path}; rebuild with 'make engine'"
        )
    return Path(path)


def has_tools(stack, *names: str) -> bool:
    return all((stack.tools or {}).get(n) for n in names)


def example_group_flags(code: int) -> tuple[str, ...] | None:
    """The example client's options for one key share of group `code`, or None when it has
    none for that group."""
    entry = EXAMPLE_GROUPS.get(code)
    return entry[0] if entry else None


def parse_tracker(text: str) -> dict[str, int]:
    """The memory tracker's and stack-size check's figures in a program's output (the
    tracker prints on stderr when the program ends, the stack check on stdout)."""
    out = {}
    for key, pattern in TRACKER_FIELDS.items():
        found = re.findall(pattern, text)
        if found:
            out[key] = int(found[-1])
    return out


@dataclass
class Tracked:
    """What one of wolfSSL's example programs reported about itself."""

    role: str
    connections: int
    figures: dict[str, int]  # TRACKER_FIELDS present in its output
    output: str


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workdir(root: Path) -> None:
    """The examples look for ./certs/dh2048.pem to find "wolfSSL's home" (and the server
    loads it as its DH parameters, as in document 004's runs): the RFC 3526 2048-bit group,
    written by the engine."""
    (root / "certs").mkdir()
    engine.run(
        ["dhparams", "--source", "rfc", "--bits", "2048", "--out", str(root / "certs/dh2048.pem")]
    )


@dataclass(frozen=True)
class PairSpec:
    """One cell for the example pair: the group (IANA code), the server's chain, key and the
    root the client trusts; in mutual TLS the client's chain, key and the root the server
    trusts."""

    group: int
    chain: Path
    key: Path
    root: Path
    client_chain: Path | None = None
    client_key: Path | None = None
    client_root: Path | None = None


def _server_argv(stack, spec: PairSpec, port: int, ready: Path, connections: int) -> list:
    argv = [tool(stack, "memory_server"), "-v", "4", "-l", DOCUMENT_SUITE, "-p", port]
    argv += ["-c", spec.chain, "-k", spec.key, "-R", ready, "-C", connections]
    argv += ["-A", spec.client_root] if spec.client_root else ["-d"]
    return [str(a) for a in argv]


def _client_argv(stack, spec: PairSpec, port: int, bench: int | None) -> list:
    flags = example_group_flags(spec.group)
    if flags is None:
        raise UserError(f"wolfSSL's example client cannot offer group {spec.group:#06x} alone")
    argv = [tool(stack, "memory_client"), "-v", "4", "-l", DOCUMENT_SUITE, "-h", "127.0.0.1"]
    argv += ["-p", port, "-A", spec.root, *flags]
    if spec.client_chain:
        argv += ["-c", spec.client_chain, "-k", spec.client_key]
    else:
        argv.append("-x")
    if bench is not None:
        argv += ["-b", bench]
    return [str(a) for a in argv]


def _wait_ready(server: Process, ready: Path) -> None:
    deadline = time.monotonic() + 10
    while not ready.exists():
        if server.returncode is not None or server.p.poll() is not None:
            raise EngineError(
                f"wolfSSL's example server ended before listening: {server.stderr_text()[-300:]}"
            )
        if time.monotonic() > deadline:
            raise EngineIOError("wolfSSL's example server did not start listening within 10 s")
        time.sleep(0.01)


def _finish(proc: Process, timeout: float) -> str:
    """Wait for a text program to exit 0 (stopped whatever happens); what it printed on
    stdout and stderr."""
    try:
        proc.finish(timeout)
        return proc.output() + proc.stderr_text()
    finally:
        proc.stop()


def _check_negotiated(text: str, role: str, spec: PairSpec) -> None:
    """The example printed TLS 1.3 and the group asked for (once per connection it made)."""
    want = EXAMPLE_GROUPS[spec.group][1]
    versions = re.findall(r"SSL version is (\S+)", text)
    curves = re.findall(r"SSL curve name is (\S+)", text)
    if any(v != "TLSv1.3" for v in versions) or any(c != want for c in curves):
        raise EngineError(
            f"wolfSSL's example {role} negotiated {sorted(set(versions))} "
            f"{sorted(set(curves))}, not TLSv1.3 with {want}"
        )


def tracked_pair(stack, spec: PairSpec, connections: int = 1, bench: bool = False):
    """Run wolfSSL's example server for `connections` connections and its client against it
    on 127.0.0.1: without `bench` one connection that sends "hello wolfssl!" and reads the
    answer (document 004's runs), with `bench` the client's `-b N` loop (connect, close,
    N times). Returns {"server": Tracked, "client": Tracked}."""
    with tempfile.TemporaryDirectory(prefix="pqlab-wolfssl-") as tmp:
        root = Path(tmp)
        _workdir(root)
        for attempt in range(3):  # a port taken between choosing and binding: another
            port = _free_port()
            ready = root / f"ready-{attempt}"
            server = Process(
                _server_argv(stack, spec, port, ready, connections),
                "wolfSSL's example server",
                json_lines=False,
                cwd=root,
            )
            try:
                try:
                    _wait_ready(server, ready)
                except EngineError:
                    if attempt < 2:
                        continue
                    raise
                client = Process(
                    _client_argv(stack, spec, port, connections if bench else None),
                    "wolfSSL's example client",
                    json_lines=False,
                    cwd=root,
                )
                client_text = _finish(client, TIMEOUT_S)
                server_text = _finish(server, TIMEOUT_S)
            finally:
                server.stop()
            _check_negotiated(server_text, "server", spec)
            _check_negotiated(client_text, "client", spec)
            return {
                "server": Tracked("server", connections, parse_tracker(server_text), server_text),
                "client": Tracked("client", connections, parse_tracker(client_text), client_text),
            }
    raise EngineIOError("wolfSSL's example server could not listen on a free port")


# --- tls_bench ---------------------------------------------------------------------------

TLS_BENCH_COLUMNS = (
    "side",
    "cipher",
    "group",
    "total_bytes",
    "connections",
    "rx_ms",
    "tx_ms",
    "rx_MiBps",
    "tx_MiBps",
    "connect_total_ms",
    "connect_avg_ms",
)


def parse_tls_bench(text: str) -> list[dict]:
    """tls_bench's tab-separated rows (`Side Cipher Group Total Bytes Num Conns Rx ms Tx ms
    Rx MiB/s Tx MiB/s Connect Total ms Connect Avg ms`), one per side and group; the group
    printed as `N/A` named (TLS_BENCH_UNNAMED: the first of its list that no row names)."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != len(TLS_BENCH_COLUMNS) or parts[0] not in ("Server", "Client"):
            continue
        row = dict(zip(TLS_BENCH_COLUMNS, parts, strict=True))
        row["side"] = row["side"].lower()
        for k in TLS_BENCH_COLUMNS[3:5]:
            row[k] = int(row[k])
        for k in TLS_BENCH_COLUMNS[5:]:
            row[k] = float(row[k])
        rows.append(row)
    named = {r["group"] for r in rows}
    first = next((g for g in TLS_BENCH_GROUPS.values() if g not in named), None)
    for r in rows:
        if r["group"] == TLS_BENCH_UNNAMED and first is not None:
            r["group"] = first
    return rows


# The port tls_bench's server side listens on in the lab's server namespace (its own default;
# nothing else listens in a namespace the lab just made).
TLS_BENCH_PORT = 11112
# What tls_bench prints (stderr) once its listening socket is up, before its first group.
TLS_BENCH_STARTED = "Running TLS Benchmarks"


def tls_bench(
    stack,
    seconds: float = 1.0,
    suite: str = DOCUMENT_SUITE,
    extra=(),
    env=None,
    hosts=None,
    cpus: tuple = (None, None),
) -> list[dict]:
    """Run `tls_bench -g` (every TLS 1.3 group it has, one after another, for `seconds`
    each) with one suite; its rows (both sides, every group).

    Without `hosts`: one process, a client and a server thread over 127.0.0.1 (as document
    004 ran it), on a port free when it starts (tls_bench's own default, 11112, would let
    two runs at once on one machine connect to each other's server and wait for good). With `hosts` (a lab from `pqlab.net.shaping.build_hosts`): its server side
    alone (`-s`) in the server's namespace and its client side alone (`-c -h <server
    address>`) in the client's, over the lab's link, each on its CPU of `cpus` (server,
    client) like pqlab's own server and client. Both sides run the same binary with the same
    options, so both walk the same list of groups in the same order: the client ends a group
    by sending "shutdown" on its last connection, the server then leaves that group and
    accepts the next group's first connection on the listening socket it keeps. Each group's
    two rows are checked to count the same connections (sides out of step fail the run)."""
    argv = [str(tool(stack, "tls_bench")), "-g", "-l", suite, "-t", str(max(1, round(seconds)))]
    argv += [str(a) for a in extra]
    budget = 60 + 20 * seconds * len(TLS_BENCH_GROUPS)
    if hosts is not None:
        return _tls_bench_across(argv, hosts, budget, env, cpus)
    argv += ["-P", str(_free_port())]
    text = _finish(Process(argv, "tls_bench", json_lines=False, env=env), budget)
    return _tls_bench_rows(text)


def _tls_bench_rows(text: str) -> list[dict]:
    rows = parse_tls_bench(text)
    if not rows:
        raise EngineError(f"tls_bench printed no result rows: {text.strip()[-300:]}")
    return rows


def _tls_bench_across(argv: list[str], hosts, budget: float, env, cpus) -> list[dict]:
    """tls_bench's server and client sides as two processes across the lab's link."""
    server_cpu, client_cpu = cpus
    port = str(TLS_BENCH_PORT)
    server = Process(
        [*argv, "-s", "-P", port],
        "tls_bench's server side",
        topo=hosts,
        side="server",
        cpu=server_cpu,
        env=env,
        json_lines=False,
    )
    try:
        _wait_started(server)
        client = Process(
            [*argv, "-c", "-h", hosts.server_ip, "-P", port],
            "tls_bench's client side",
            topo=hosts,
            side="client",
            cpu=client_cpu,
            env=env,
            json_lines=False,
        )
        client_text = _finish(client, budget)
        # The client's last "shutdown" ends the server's last group: it exits at once.
        server_text = _finish(server, 30)
    finally:
        server.stop()
    rows = _tls_bench_rows(server_text + client_text)
    check_tls_bench_sides(rows)
    return rows


def _wait_started(server: Process) -> None:
    deadline = time.monotonic() + 10
    while TLS_BENCH_STARTED not in server.stderr_text():
        if server.p.poll() is not None:
            raise EngineError(
                f"tls_bench's server side ended before listening: {server.stderr_text()[-300:]}"
            )
        if time.monotonic() > deadline:
            raise EngineIOError("tls_bench's server side did not start listening within 10 s")
        time.sleep(0.01)


def check_tls_bench_sides(rows: list[dict]) -> None:
    """Every group has a server and a client row with the same number of connections (each
    side counts a connection once its handshake succeeded: the same connections)."""
    sides: dict[str, dict[str, int]] = {}
    for r in rows:
        sides.setdefault(r["group"], {})[r["side"]] = r["connections"]
    for group, counts in sides.items():
        if len(counts) != 2 or counts["server"] != counts["client"]:
            raise EngineError(
                f"tls_bench's sides disagree on group {group}: connections {counts} "
                "(server and client out of step)"
            )


# --- binary size ---------------------------------------------------------------------------


def stripped_size(path: Path) -> int:
    """Bytes of the program once stripped of symbols (as document 004 measured it)."""
    strip = shutil.which("strip")
    if strip is None:
        raise UserError("strip (binutils) is needed to measure stripped binary sizes")
    with tempfile.TemporaryDirectory(prefix="pqlab-strip-") as tmp:
        out = Path(tmp) / path.name
        subprocess.run([strip, "-o", str(out), str(path)], check=True, timeout=60)
        return out.stat().st_size


def binary_sizes(stack) -> dict[str, int]:
    """tls_bench's size with and without the post-quantum algorithms, stripped and not."""
    with_pq, without = tool(stack, "tls_bench"), tool(stack, "tls_bench_no_pq")
    return {
        "with_pq_bytes": stripped_size(with_pq),
        "without_pq_bytes": stripped_size(without),
        "with_pq_unstripped_bytes": with_pq.stat().st_size,
        "without_pq_unstripped_bytes": without.stat().st_size,
    }
