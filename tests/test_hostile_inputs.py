"""What pqlab reads, tried as an attacker and as an unlucky user would, through the real CLI
as root: a suite, an inventory, a profile, a key log, a capture or a results database that
is endless, a FIFO, a device, nested without end, self-referring, not UTF-8, of another
shape than pqlab writes, or that tries to reach another file. Each is one `error:` line and
a non-zero exit, in bounded time (a subprocess timeout) and bounded memory (the child's
peak resident set, under an address-space limit so that a failure cannot take the machine
with it), before anything is created."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pytest

from conftest import is_root, pqlab_env, run_pqlab

pytestmark = pytest.mark.skipif(not is_root(), reason="root: as pqlab runs")

TIMEOUT_S = 60  # every case; a refused input takes a second or two
ADDRESS_SPACE = 6 << 30  # what a case may map at most (pqlab's libraries take about 2 GiB)
PEAK_RSS_MIB = 600  # what a case may use at most (pqlab's start alone uses about 200 MiB)
SIZES = ("sizes", "--kem", "X25519", "--sig", "Ed25519", "--samples", "2")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def bounded(*args, code: int | None = 2, python: str | None = None) -> str:
    """Run `pqlab ARGS` (or `python -c PYTHON`), bounded in time and memory; its stderr.
    With `code`, the one `error:` line of a refused command, which exited `code`."""
    argv = [sys.executable, "-c", python] if python else [sys.executable, "-m", "pqlab"]
    argv += [str(a) for a in args]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=err, env=pqlab_env(), preexec_fn=_limit
        )
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert not timed_out, f"{argv[3:]} ran over {TIMEOUT_S} s: {stderr[-2000:]}"
    assert usage.ru_maxrss < PEAK_RSS_MIB * 1024, f"{argv[3:]} used {usage.ru_maxrss} KiB"
    if code is None:
        return stderr
    lines = [x for x in stderr.strip().splitlines() if not x.startswith("[")]
    assert proc.returncode == code, (proc.returncode, stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """A finished run to copy and damage."""
    out = tmp_path_factory.mktemp("base") / "run"
    run_pqlab(*SIZES, "--out", out, check=True, timeout=300)
    return out


def copy_run(base: Path, to: Path) -> Path:
    shutil.copytree(base, to, symlinks=True)
    return to


def execute(run: Path, *sql: str) -> None:
    con = duckdb.connect(str(run / "results.duckdb"))
    try:
        for s in sql:
            con.execute(s)
    finally:
        con.close()


def rows(run: Path, table: str) -> int:
    con = duckdb.connect(str(run / "results.duckdb"), read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    finally:
        con.close()


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return path


# --- 7: every file input is a regular file, read with a bound ------------------------------


def test_suite_from_dev_zero_is_one_line():
    line = bounded("suite", "/dev/zero")
    assert "'/dev/zero' is a character device; give a regular file" in line


def test_suite_fifo_is_refused_not_waited_on(fifo):
    assert "is a FIFO" in bounded("suite", fifo)


def test_suite_directory_is_one_line(tmp_path):
    assert "is a directory" in bounded("suite", tmp_path)


def test_a_suite_larger_than_its_bound_is_one_line(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    assert "larger than 1 MiB, the bound of a suite file" in bounded("suite", big)


@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_inventory_from_dev_zero_or_a_fifo_is_one_line(tmp_path, source, fifo):
    path = fifo if source == "fifo" else source
    line = bounded("handshake", "--inventory", path, "--pairs", "a:b")
    assert f"--inventory {str(path)!r} is a" in line


def test_a_profile_file_that_is_a_fifo_is_one_line(fifo):
    assert "is a FIFO" in bounded("handshake", "--profile", fifo)


READERS = {
    "key log": "from pqlab.tls.keylog import read_keylog as read",
    "capture": "from pqlab.pcap import read_pcap as read",
    "capture packets": "from pqlab.pcap import tcp_packets as read",
    "connection records": "from pqlab.experiments.handshake.worker import read_records as read",
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_key_log_capture_and_record_readers_refuse_dev_zero(reader, source, fifo):
    path = fifo if source == "fifo" else source
    program = f"""
import sys
from pqlab.errors import UserError
{READERS[reader]}
try:
    read(sys.argv[1])
except UserError as e:
    sys.exit(f"error: {{e}}")
"""
    line = bounded(str(path), python=program, code=1)
    assert "give a regular file" in line


def test_a_sigterm_before_any_run_exists_ends_at_once_and_claims_no_run():
    """A SIGTERM to a command that has no run (here `connect`, waiting on a server that
    never answers): the usual exit code, one line, and no word of finished cells."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "pqlab", "connect", f"127.0.0.1:{port}", "--timeout", "50"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=pqlab_env(),
            preexec_fn=_limit,
        )
        server.settimeout(TIMEOUT_S)
        conn, _ = server.accept()  # connected: the client now waits for a ServerHello
        with conn:
            time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            _, err = proc.communicate(timeout=TIMEOUT_S)
    assert time.monotonic() - started < 10
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM)", err
    assert "finished cells" not in err and "Traceback" not in err


# --- 8: inventory ranges ------------------------------------------------------------------


def test_an_inventory_range_is_bounded(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[far]\nh[1:100000000]\n[near]\nlocal\n")
    line = bounded("handshake", "--inventory", inv, "--pairs", "near:far")
    assert "'h[1:100000000]' makes more than 10000 hosts" in line
    assert "finished cells" not in line


# --- 10 and 12: steps of a suite ----------------------------------------------------------


def test_ten_thousand_duplicate_steps_are_one_line(tmp_path):
    suite = tmp_path / "dup.toml"
    suite.write_text('[[step]]\nexperiment = "sizes"\n' * 10_000)
    assert "a suite has at most 1000" in bounded("suite", suite, "--out", tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_duplicate_steps_are_named_before_anything_runs(tmp_path):
    suite = tmp_path / "dup.toml"
    step = '[[step]]\nexperiment = "sizes"\nkem = "X25519"\nsig = "Ed25519"\nsamples = 2\n'
    suite.write_text(step + '[[step]]\nexperiment = "certs"\n' + step)
    line = bounded("suite", suite, "--out", tmp_path / "r")
    assert "steps 1 and 3 are the same (sizes" in line
    assert not (tmp_path / "r").exists()


def test_one_experiment_twice_with_other_options_is_refused_before_anything_runs(tmp_path):
    suite = tmp_path / "twice.toml"
    step = '[[step]]\nexperiment = "primitives"\nkem = "ML-KEM-512"\nsig = "Ed25519"\n'
    suite.write_text(f"{step}iterations = 20\n{step}iterations = 40\n")
    line = bounded("suite", suite, "--out", tmp_path / "r")
    assert "step 1 and step 2 both measure primitives cells" in line
    assert "different iterations (20, then 40)" in line
    assert not (tmp_path / "r").exists()


def test_one_experiment_twice_on_other_cells_measures_both(tmp_path):
    """Two steps of one experiment on different cells: both measure, each its own."""
    suite = tmp_path / "two.toml"
    step = '[[step]]\nexperiment = "sizes"\nsig = "Ed25519"\nsamples = 2\n'
    suite.write_text(f'{step}kem = "X25519"\n{step}kem = "ML-KEM-512"\n')
    run_pqlab("suite", suite, "--out", tmp_path / "r", "--no-report", check=True, timeout=300)
    con = duckdb.connect(str(tmp_path / "r" / "results.duckdb"), read_only=True)
    try:
        cells = {r[0] for r in con.execute("SELECT cell_id FROM cells").fetchall()}
        steps = con.execute("SELECT status FROM invocations ORDER BY id").fetchall()
    finally:
        con.close()
    assert {c.split("|")[0] for c in cells} == {"X25519", "ML-KEM-512", "Ed25519"}
    assert steps == [("complete",), ("complete",)]


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_whose_cells_table_is_lost_never_doubles_a_sample(tmp_path, base_run, resume):
    run = copy_run(base_run, tmp_path / "run")
    before = rows(run, "primitive_sizes")
    execute(run, "DROP TABLE cells")
    line = bounded(*SIZES, "--out", run, *(["--resume"] if resume else []))
    assert "has no cells table" in line
    assert rows(run, "primitive_sizes") == before


# --- 5 and 15: a results database is untrusted input --------------------------------------

DAMAGE = {
    "no cells": ("DROP TABLE cells",),
    "no invocations": ("DROP TABLE invocations",),
    "no schema_info": ("DROP TABLE schema_info",),
    "cells.params an integer": (
        "ALTER TABLE cells DROP COLUMN params",
        "ALTER TABLE cells ADD COLUMN params INTEGER",
    ),
    "invocations.id text": ("ALTER TABLE invocations ALTER COLUMN id TYPE TEXT",),
    "metadata a JSON list": ("UPDATE invocations SET metadata = '[1, 2]'",),
    "params a JSON list": ("UPDATE cells SET params = '[]'",),
    "schema version text": (
        "DROP TABLE schema_info",
        "CREATE TABLE schema_info (version TEXT)",
        "INSERT INTO schema_info VALUES ('two')",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["report", "export", "compare", "resume"])
def test_a_foreign_database_is_one_line(tmp_path, base_run, damage, command):
    run = copy_run(base_run, tmp_path / "run")
    execute(run, *DAMAGE[damage])
    args = {
        "report": ("report", run),
        "export": ("export", run, "--format", "json", "--to", tmp_path / "x"),
        "compare": ("compare", base_run, run),
        "resume": (*SIZES, "--out", run, "--resume"),
    }[command]
    line = bounded(*args)
    assert str(run / "results.duckdb") in line or "schema versions" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE primitive_sizes DROP COLUMN max_bytes",
        "ALTER TABLE primitive_sizes ALTER COLUMN max_bytes TYPE TEXT",
        "UPDATE primitive_sizes SET max_bytes = NULL",
    ],
)
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_dropped_or_retyped_column_is_one_line(tmp_path, base_run, change, command):
    run = copy_run(base_run, tmp_path / "run")
    execute(run, change)
    args = ("report", run) if command == "report" else ("compare", base_run, run)
    stderr = bounded(*args, code=None)
    assert "Traceback" not in stderr
    lines = [x for x in stderr.strip().splitlines() if x.startswith("error:")]
    assert len(lines) <= 1, stderr


def test_nothing_in_a_database_reads_another_file(tmp_path, base_run):
    """A table replaced by a view over another file: pqlab's queries reach no file."""
    secret = tmp_path / "secret.csv"
    secret.write_text("max_bytes\n31337424242\n")
    for command in ("report", "export", "compare"):
        run = copy_run(base_run, tmp_path / f"run-{command}")
        execute(
            run,
            "ALTER TABLE primitive_sizes RENAME TO primitive_sizes_gone",
            "CREATE VIEW primitive_sizes AS SELECT s.* REPLACE (b.max_bytes AS max_bytes) "
            f"FROM primitive_sizes_gone s, read_csv('{secret}') b",
        )
        args = {
            "report": ("report", run),
            "export": ("export", run, "--format", "csv", "--to", tmp_path / "x"),
            "compare": ("compare", base_run, run, "--csv", tmp_path / "c.csv"),
        }[command]
        line = bounded(*args)
        if command != "compare":  # compare counts rows of base tables only: it reads none
            assert "file system operations are disabled" in line, line
        for d in (run, tmp_path / "x"):
            for p in d.rglob("*") if d.exists() else ():
                if p.is_file() and p.suffix != ".duckdb":
                    assert b"31337424242" not in p.read_bytes(), p


# --- 17: nesting, cycles, encodings -------------------------------------------------------


def test_a_deeply_nested_suite_is_one_line(tmp_path):
    suite = tmp_path / "deep.toml"
    suite.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert "nest too deeply" in bounded("suite", suite)
    suite.write_text('[[step]]\nexperiment = "sizes"\nx = ' + "{a=" * 5000 + "1" + "}" * 5000)
    assert "nest too deeply" in bounded("suite", suite)


INVENTORIES = {
    "deep.yml": ("all: " + "[" * 100_000 + "]" * 100_000 + "\n", "nests too deeply"),
    "deep-maps.yml": ("all:\n" + "".join(f"{' ' * i}k{i}:\n" for i in range(1, 200)), "nests"),
    "cycle.yml": ("all:\n  hosts:\n    a: &x\n      k: [*x]\n", "refers to a value that contains"),
    "laughs.yml": (
        "all:\n  vars:\n    a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"    {n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "  hosts:\n    h1:\n",
        "aliases expanded",
    ),
    "latin1.ini": (b"[far]\nh\xe9\n", "not UTF-8 text (byte 0xe9 on line 2)"),
    "broken.yml": ("all:\n  hosts:\n   a: [\n", "not valid YAML"),
}


@pytest.mark.parametrize("name", sorted(INVENTORIES))
def test_hostile_inventories_are_one_line(tmp_path, name):
    content, fragment = INVENTORIES[name]
    inv = tmp_path / name
    if isinstance(content, bytes):
        inv.write_bytes(content)
    else:
        inv.write_text(content)
    line = bounded("handshake", "--inventory", inv, "--pairs", "a:b")
    assert fragment in line


# --- 18: empty values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, flag",
    [
        (("handshake", "--server-host", ""), "--server-host"),
        (("suite", ""), "SUITE"),
        (("probe", "127.0.0.1:1", "--servername", ""), "--servername"),
        (("probe", "127.0.0.1:1", "--name", ""), "--name"),
        (("sizes", "--out", ""), "--out"),
        (("handshake", "--groups", " "), "--groups"),
    ],
)
def test_empty_values_are_refused(args, flag):
    assert f"error: {flag} " in bounded(*args) and "is empty" in bounded(*args)


def test_an_empty_value_in_a_suite_is_refused(tmp_path):
    suite = tmp_path / "empty.toml"
    suite.write_text('[[step]]\nexperiment = "probe"\ntarget = "127.0.0.1:1"\nservername = ""\n')
    assert "servername = '' is empty" in bounded("suite", suite)


# --- docs/security.md says the bounds the code uses ----------------------------------------


def test_the_security_table_names_the_bounds_the_code_uses():
    from pqlab import files, suite
    from pqlab.net import inventory, profiles

    text = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    section = text.split("## What pqlab reads", 1)[1].split("\n## ", 1)[0]
    table = {
        line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| ")
    }

    def row(start: str) -> str:
        return next(v for k, v in table.items() if k.startswith(start))

    def size(kind: str) -> str:
        return files._size(files.READ_LIMITS[kind])

    expected = {
        "Suite file": [size("suite file"), f"at most {suite.MAX_STEPS} steps"],
        "Inventory": [
            size("inventory"),
            f"{inventory.MAX_HOSTS} hosts",
            f"{inventory.MAX_YAML_DEPTH} levels",
            f"{inventory.MAX_YAML_VALUES} values",
        ],
        "Link profile file": [size("profile file"), f"{profiles.MAX_GRID_PROFILES} profiles"],
        "Run directory's tables": [f"table {size('table')}", f"figure {size('figure')}"],
        "Certificates": [f"file {size('certificate')}", f"record (`certs.json`) {size('record')}"],
        "Key logs": [size("key log")],
        "Packet captures": [size("capture")],
        "Connection records": [size("connection records")],
        "The engine's kept info": [size("record")],
        "Machine facts": [size("machine fact")],
    }
    for start, bounds in expected.items():
        for bound in bounds:
            assert bound in row(start).split("|")[-2], (start, bound)
