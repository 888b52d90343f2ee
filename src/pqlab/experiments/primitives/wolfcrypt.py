"""wolfCrypt's own benchmark beside pqlab's primitives (document 004, "wolfCrypt's
benchmark"): `pqlab primitives --wolfcrypt-benchmark` runs the benchmark program the wolfSSL
build made (the wolfssl stack's `wolfcrypt_benchmark` tool in the engine's report) for the
algorithms document 004 lists, keeps its
output verbatim and its rows parsed, and the report sets each row beside pqlab's OpenSSL and
liboqs measurement of the same algorithm and operation, and beside the document's own row,
saying where today's names differ from the document's (data/document004_benchmarks.toml)."""

from __future__ import annotations

import functools
import html
import json
import re
import subprocess
import tempfile
import time
import tomllib
from importlib import resources
from pathlib import Path

from pqlab import catalog
from pqlab.algorithms.selection import Cell, parse_backends
from pqlab.errors import CheckError, EngineError, UserError
from pqlab.report.section import Section
from pqlab.tls import stacks, wolfssl_tools

TOOL = "wolfcrypt_benchmark"  # the stack tool (pqlab.tls.wolfssl_tools) that runs it
# Options of the mapping that choose a curve rather than name an algorithm.
CURVE_OPTIONS = ("-p256",)
# The program's whole run: about one second per operation and some twenty operations.
TIMEOUT_S = 600

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS wolfcrypt_benchmark_runs (
    program TEXT, args JSON, version TEXT, cpu TEXT, math TEXT, build_options JSON,
    wall_s DOUBLE, stdout TEXT)
"""
ROWS_DDL = """
CREATE TABLE IF NOT EXISTS wolfcrypt_benchmark (
    name TEXT, ops BIGINT, seconds DOUBLE, avg_ms DOUBLE, ops_per_s DOUBLE, cycles BIGINT,
    cycles_per_op DOUBLE)
"""

# One asymmetric row of the benchmark's text output, e.g.
# "ML-KEM 512    128  key gen    197300 ops took 1.000 sec, avg 0.005 ms, 197261.717 ops/sec,
#  2596644284 cycles    13160.9 Cycles/op"; the cycle counts are printed on x86 only.
ROW = re.compile(
    r"^(?P<alg>\S.*?)\s+(?P<size>\d+)\s+(?P<op>key gen|encap|decap|agree|sign|verify)\s+"
    r"(?P<ops>\d+) ops took\s+(?P<sec>[\d.]+) sec, avg\s+(?P<ms>[\d.]+) ms,\s+"
    r"(?P<rate>[\d.]+) ops/sec(?:,\s+(?P<cycles>\d+) cycles\s+(?P<cpo>[\d.]+) Cycles/op)?"
)


@functools.cache
def _data() -> dict:
    text = resources.files("pqlab.data").joinpath("document004_benchmarks.toml").read_text()
    return tomllib.loads(text)


def mapping() -> list[dict]:
    """Document 004's wolfCrypt rows and today's rows of the same algorithms, in order."""
    return _data()["wolfcrypt"]


def liboqs_table() -> dict[tuple[str, str], dict]:
    """Document 004's liboqs speed_kem rows by (catalogue algorithm, operation)."""
    return {
        (entry["algorithm"], row["operation"]): row
        for entry in _data()["liboqs_kem"]
        for row in entry["rows"]
    }


def normalise(name: str) -> str:
    """A row name with its spaces collapsed ("ECC   [      SECP256R1]" -> "ECC [SECP256R1]")."""
    return re.sub(r"\s+", " ", re.sub(r"\[\s+", "[", name)).strip()


def parse(stdout: str) -> list[dict]:
    """The asymmetric rows of the benchmark's output (name = algorithm, size and operation as
    printed, spaces collapsed)."""
    rows = []
    for line in stdout.splitlines():
        m = ROW.match(line.strip())
        if not m:
            continue
        rows.append(
            {
                "name": normalise(f"{m['alg']} {m['size']} {m['op']}"),
                "ops": int(m["ops"]),
                "seconds": float(m["sec"]),
                "avg_ms": float(m["ms"]),
                "ops_per_s": float(m["rate"]),
                "cycles": int(m["cycles"]) if m["cycles"] else None,
                "cycles_per_op": float(m["cpo"]) if m["cpo"] else None,
            }
        )
    return rows


# --- the program --------------------------------------------------------------------------


def _stack():
    """The TLS stack whose build has wolfCrypt's benchmark, or UserError saying how to get it."""
    for stack in stacks.all_stacks().values():
        if wolfssl_tools.has_tools(stack, TOOL):
            return stack
    raise UserError(
        "--wolfcrypt-benchmark: no TLS stack of this engine build has wolfCrypt's benchmark; "
        "build pqlab-engine-wolfssl and wolfSSL's tools with 'make engine' "
        "(scripts/build-wolfssl.sh)"
    )


def program() -> Path:
    """The benchmark program, or UserError saying how to build it."""
    return wolfssl_tools.tool(_stack(), TOOL)


def _run(args: list[str], timeout: float) -> str:
    """Run the program in a scratch directory (it writes nothing we keep) and return its
    output; EngineError if it fails."""
    with tempfile.TemporaryDirectory(prefix="pqlab-wolfcrypt-") as cwd:
        try:
            proc = subprocess.run(
                [str(program()), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=cwd,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"wolfCrypt's benchmark did not finish within {timeout:.0f} s"
            ) from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
        raise EngineError(f"wolfCrypt's benchmark exited with {proc.returncode}: {tail}")
    return proc.stdout


@functools.cache
def describe() -> dict:
    """The program's version, the algorithms it was built with (its help lists them) and the
    build's configure options (the stack's `build_options`: the library and the benchmark
    come from one configuration)."""
    text = _run(["-?"], 30)
    version = re.search(r"wolfSSL version (\S+)", text)
    listed = text.split("Available algorithms include:", 1)[-1].split("\n-lng", 1)[0]
    # scripts/build-wolfssl.sh writes where the source came from, then one option a line.
    lines = list(_stack().build_options)
    source = lines.pop(0) if lines and not lines[0].startswith("-") else None
    return {
        "program": str(program()),
        "version": version[1] if version else None,
        "source": source,
        "algorithms": sorted(set(re.findall(r"(?<!\S)-[\w-]+", listed))),
        "build_options": lines or None,
    }


def flags() -> list[str]:
    """The benchmark options for every algorithm of the mapping this build has."""
    have = set(describe()["algorithms"]) | set(CURVE_OPTIONS)
    out = []
    for entry in mapping():
        for flag in entry.get("flags", []):
            if flag in have and flag not in out:
                out.append(flag)
    return out


def _ran(entry: dict, passed: set[str]) -> bool:
    """Whether the benchmark ran an entry's algorithm, given the options it was passed."""
    wanted = entry.get("flags") or []
    return bool(wanted) and all(f in passed for f in wanted)


def check(stdout: str, rows: list[dict], passed: list[str]) -> None:
    """What pqlab can check of another program's benchmark: it finished, reported no failed
    operation, printed every row the mapping expects of the algorithms it ran, and each row's
    count, seconds and rate agree."""
    if "Benchmark complete" not in stdout:
        raise CheckError("wolfCrypt's benchmark did not print 'Benchmark complete'")
    unread = [
        line for line in stdout.splitlines() if " ops took " in line and not ROW.match(line.strip())
    ]
    if unread:
        raise CheckError(f"wolfCrypt's benchmark printed a row pqlab cannot read: {unread[0]!r}")
    failed = [line for line in stdout.splitlines() if "failed" in line.lower()]
    if failed:
        raise CheckError(f"wolfCrypt's benchmark reported a failure: {failed[0].strip()}")
    printed = {r["name"] for r in rows}
    for entry in mapping():
        for part in (entry.get("wolfcrypt") or "").split(" + "):
            if _ran(entry, set(passed)) and part and part not in printed:
                raise CheckError(f"wolfCrypt's benchmark printed no row {part!r}")
    for r in rows:
        # The seconds are printed to the millisecond (0.05 % of a one-second row), the rate
        # with more digits: they agree far within 0.5 % unless a number is wrong.
        if r["seconds"] <= 0 or abs(r["ops"] / r["seconds"] / r["ops_per_s"] - 1) > 0.005:
            raise CheckError(f"wolfCrypt's benchmark row {r['name']!r} does not add up: {r}")


def measure(store) -> None:
    """Run the benchmark once and store its output and rows (one cell: the caller's)."""
    store.ensure_table(RUNS_DDL)
    store.ensure_table(ROWS_DDL)
    args = flags()
    started = time.monotonic()
    stdout = _run(args, TIMEOUT_S)
    wall = time.monotonic() - started
    rows = parse(stdout)
    check(stdout, rows, args)
    info = describe()
    cpu = re.search(r"^CPU: (.*)$", stdout, re.M)
    math = ""
    if "Math:" in stdout:
        math = stdout.split("Math:", 1)[1].split("wolfCrypt Benchmark", 1)[0]
    store.insert_rows(
        "wolfcrypt_benchmark_runs",
        [
            {
                "program": info["program"],
                "args": json.dumps(args),
                "version": info["version"],
                "cpu": cpu[1].strip() if cpu else None,
                "math": " ".join(math.split()) or None,
                "build_options": json.dumps(info["build_options"]),
                "wall_s": wall,
                "stdout": stdout,
            }
        ],
    )
    store.insert_rows("wolfcrypt_benchmark", rows)


def with_compared(cells: list[Cell], backend: str) -> list[Cell]:
    """`cells` and, after them, a cell per chosen engine backend for every algorithm the
    wolfCrypt table compares that they lack (the default selection's addition)."""
    out = list(cells)
    have = {c.cell_id for c in cells}
    chosen = parse_backends(backend)
    for entry in mapping():
        if not entry.get("algorithm"):
            continue
        alg = catalog.resolve(entry["algorithm"])
        for b in chosen:
            cell = Cell(alg, b)
            if b in alg.backends and cell.cell_id not in have:
                out.append(cell)
                have.add(cell.cell_id)
    return out


# --- the table ------------------------------------------------------------------------------

COLUMNS = [
    "document_row",
    "document_ops_per_s",
    "wolfcrypt_row",
    "algorithm",
    "operation",
    "wolfcrypt_ops",
    "wolfcrypt_seconds",
    "wolfcrypt_ops_per_s",
    "wolfcrypt_us",
    "wolfcrypt_cycles_per_op",
    "openssl_mean_us",
    "openssl_over_wolfcrypt",
    "liboqs_mean_us",
    "liboqs_over_wolfcrypt",
    "document_us",
    "note",
]


def _wolfcrypt_part(entry: dict, printed: dict[str, dict]) -> dict:
    """Today's wolfCrypt numbers for an entry (a sum of two rows' times for "A + B")."""
    parts = [p for p in (entry.get("wolfcrypt") or "").split(" + ") if p]
    found = [printed[p] for p in parts if p in printed]
    if not parts or len(found) != len(parts):
        return {}
    us = sum(1e6 / r["ops_per_s"] for r in found)
    one = found[0] if len(found) == 1 else {}
    return {
        "wolfcrypt_ops": one.get("ops"),
        "wolfcrypt_seconds": one.get("seconds"),
        "wolfcrypt_ops_per_s": round(1e6 / us, 3),
        "wolfcrypt_us": round(us, 3),
        "wolfcrypt_cycles_per_op": (
            round(sum(r["cycles_per_op"] for r in found), 1)
            if all(r["cycles_per_op"] is not None for r in found)
            else None
        ),
    }


def _pqlab_mean(entry: dict, means: dict, backend: str) -> float | None:
    ops = (entry.get("operation") or "").split("+")
    values = [means.get((entry.get("algorithm"), op, backend)) for op in ops]
    return round(sum(values), 3) if values and all(v is not None for v in values) else None


def _why_missing(entry: dict, passed: set[str]) -> str | None:
    if not entry.get("wolfcrypt") or _ran(entry, passed):
        return None
    absent = [f for f in entry.get("flags", []) if f not in passed]
    return f"not in this wolfSSL build (its benchmark has no {' '.join(absent)})"


def table(rows: list[dict], printed: list[dict], passed: set[str]) -> list[dict]:
    """One row per entry of the mapping: the document's row, today's wolfCrypt row, pqlab's
    means for the same algorithm and operation on each engine backend, and the ratios.
    `rows` are pqlab's primitive summaries, `printed` the benchmark's parsed rows, `passed`
    the options the benchmark ran with (every algorithm of the mapping its build has)."""
    means = {(r["algorithm"], r["operation"], r["backend"]): r["mean_us"] for r in rows}
    by_name = {r["name"]: r for r in printed}
    out = []
    for entry in mapping():
        wolf = _wolfcrypt_part(entry, by_name)
        doc = entry.get("document_ops_per_s")
        row = dict.fromkeys(COLUMNS) | {
            "document_row": entry.get("document"),
            "document_ops_per_s": doc,
            "wolfcrypt_row": entry.get("wolfcrypt"),
            "algorithm": entry.get("algorithm"),
            "operation": entry.get("operation"),
            **wolf,
            "document_us": round(1e6 / doc, 3) if doc else None,
        }
        for backend in catalog.BACKENDS:
            mean = _pqlab_mean(entry, means, backend)
            row[f"{backend}_mean_us"] = mean
            if mean is not None and wolf.get("wolfcrypt_us"):
                row[f"{backend}_over_wolfcrypt"] = round(mean / wolf["wolfcrypt_us"], 3)
        notes = [n for n in (entry.get("note"), _why_missing(entry, passed)) if n]
        if entry.get("algorithm") and not any(row.get(f"{b}_mean_us") for b in catalog.BACKENDS):
            notes.append(
                "not measured by pqlab in this run (pqlab primitives "
                f"--{_kind_flag(entry)} {entry['algorithm']})"
            )
        row["note"] = "; ".join(notes)
        out.append(row)
    return out


def _kind_flag(entry: dict) -> str:
    return "sig" if catalog.resolve(entry["algorithm"]).kind == "sig" else "kem"


CAPTION = (
    "wolfCrypt's own benchmark (build/wolfssl/bin/benchmark, one second per operation) beside "
    "pqlab's mean time for the same algorithm and operation in OpenSSL and liboqs, and beside "
    "document 004's row (document_row, document_ops_per_s, document_us; Intel Core "
    "i7-1165G7). *_over_wolfcrypt is pqlab's mean time over wolfCrypt's (above 1: that "
    "library is slower than wolfCrypt here). Where today's names or algorithms differ from "
    "the document's (it predates ML-KEM and ML-DSA), the note says so"
)


def add_to(section: Section, store, rows: list[dict]) -> None:
    """The wolfCrypt table and its explanation, when the run has the benchmark's output."""
    if not store.has_table("wolfcrypt_benchmark_runs"):
        return
    runs = store.query("SELECT * FROM wolfcrypt_benchmark_runs ORDER BY rowid")
    if not runs:
        return
    printed = store.query("SELECT * FROM wolfcrypt_benchmark ORDER BY rowid")
    run = runs[-1]
    out = table(rows, printed, set(json.loads(run["args"])))
    path = store.export_rows("primitives_wolfcrypt", out, COLUMNS)
    options = json.loads(run["build_options"] or "null") or []
    section.text(
        "<h3>wolfCrypt's benchmark beside pqlab (document 004)</h3>"
        f"<p>wolfSSL {html.escape(str(run['version']))}'s own benchmark program, run by "
        f"pqlab (<code>benchmark {html.escape(' '.join(json.loads(run['args'])))}</code>, "
        f"{run['wall_s']:.0f} s; CPU as it reports it: {html.escape(str(run['cpu']))}; "
        f"maths: {html.escape(str(run['math']))}), "
        "built with <code>" + html.escape(" ".join(options)) + "</code>. "
        "Its output is kept verbatim in <code>wolfcrypt_benchmark_runs</code>, its rows in "
        "<code>wolfcrypt_benchmark</code>. These are wolfCrypt's numbers as its program "
        "reports them, not pqlab measurements: the program times a loop of operations per "
        "row and prints the count, the seconds and the rate; it checks return codes and "
        "ML-DSA's verification result, but not that a decapsulated secret matches or that an "
        "ECDSA signature verified, as pqlab's every sample is checked. pqlab checks that it "
        "finished, reported no failure, printed every row expected of the algorithms it has, "
        "and that each row's count, seconds and rate agree. Document 004's wolfSSL was built "
        "with liboqs, so its Falcon, Dilithium and Kyber rows ran liboqs's round-3 code under "
        "wolfCrypt's benchmark; wolfSSL 5.9 has dropped liboqs and has its own ML-KEM, ML-DSA "
        "and (experimental) Falcon.</p>"
    )
    section.table(path, CAPTION)
