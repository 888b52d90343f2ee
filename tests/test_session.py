"""The run lifecycle every command shares: one export per run, one writer per run directory,
read-only readers, damaged or foreign databases refused in one line, --resume refused across
machines, engine builds and per-cell parameters, killed runs marked as such, SIGTERM unwound
like Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import pqlab_env, run_pqlab
from pqlab import session
from pqlab import suite as suites
from pqlab.errors import UserError
from pqlab.store import RunStore


def one_line_error(proc, code=2) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


# --- one export per run --------------------------------------------------------------------


def test_default_suite_exports_once(tmp_path, monkeypatch):
    """Every step of the built-in default suite runs (measure stubbed: this test is about the
    lifecycle, not the experiments) and the tables, figures and report are exported once."""
    exports = []
    measured = []
    monkeypatch.setattr(session, "export_all", lambda store, html=True: exports.append(html))

    steps = suites.plan_steps(suites.load("default"))
    for step in steps:
        monkeypatch.setattr(
            step.experiment,
            "measure",
            lambda plan, store, name=step.experiment.name: measured.append(name),
        )
        monkeypatch.setattr(step.experiment, "needs_net", False)
    outcome = session.run_steps(steps, out=tmp_path / "run", skip_unprivileged=True)
    # every step of the file, in order (memory, capacity and throughput included)
    assert measured == [s.experiment.name for s in steps] and len(measured) == len(steps) >= 10
    assert exports == [True] and outcome.exported
    store = RunStore.open(tmp_path / "run")
    try:
        assert [i["status"] for i in store.invocations()] == ["complete"] * len(steps)
    finally:
        store.close()


def test_suite_on_the_command_line_exports_once(tmp_path):
    out = tmp_path / "suite"
    proc = run_pqlab(
        "suite", "--quick", "--only", "sizes,certs", "--out", out, timeout=900, check=True
    )
    assert proc.stderr.count("suite: report") == 1
    meta = json.loads((out / "metadata.json").read_text())
    assert [i["experiment"] for i in meta["invocations"]] == ["sizes", "certs"]
    # The report was written once, after both steps: newer than both invocations' ends.
    assert (out / "report.html").stat().st_mtime >= (out / "tables" / "sizes.csv").stat().st_mtime


# --- suite files ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, needle",
    [
        ("x = 1\n", "unknown key 'x'"),
        ("[[step]]\nn = 3\n", "no experiment"),
        ('[[step]]\nexperiment = "bogus"\n', "unknown experiment 'bogus'"),
        ('[[step]]\nexperiment = "handshake"\nbogus = 1\n', "unknown key 'bogus' for handshake"),
        ('[[step]]\nexperiment = "handshake"\nserver-sig = "MAYO-1"\n', "MAYO-1"),
        ('[[step]]\nexperiment = "ttlb"\nsizes = "10kilobytes"\n', "10kilobytes"),
        ('[[step]]\nexperiment = "handshake"\nsend-root = "yes"\n', "true or false"),
        ("[[step]\n", "not valid TOML"),
    ],
)
def test_invalid_suite_files_are_refused_before_anything_runs(tmp_path, text, needle):
    path = tmp_path / "s.toml"
    path.write_text(text)
    proc = run_pqlab("suite", path, "--out", tmp_path / "run")
    assert needle in one_line_error(proc)
    assert not (tmp_path / "run").exists()


def test_suite_file_not_utf8_or_missing(tmp_path):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'description = "caf\xe9"\n')
    assert "UTF-8" in one_line_error(run_pqlab("suite", bad))
    assert "does not exist" in one_line_error(run_pqlab("suite", tmp_path / "nope.toml"))


def test_built_in_suites_and_the_documented_example_validate():
    from pathlib import Path

    for name in suites.BUILT_IN:
        assert suites.plan_steps(suites.load(name))
    example = Path(__file__).resolve().parents[1] / "docs" / "suite-example.toml"
    assert [s.experiment.name for s in suites.plan_steps(suites.load(str(example)))] == [
        "primitives",
        "certs",
        "handshake",
        "ttlb",
    ]


def test_suite_values_equal_the_command_lines():
    """A suite step and the command line with the same options give the same plan."""
    from pqlab import cli

    s = suites.parse(
        '[[step]]\nexperiment = "handshake"\ngroups = ["X25519", "X25519MLKEM768"]\n'
        'server-sig = "ML-DSA-44"\nca-sig = "RSA-2048"\nn = 50\nsend-root = true\n',
        "inline",
    )
    (step,) = suites.plan_steps(s)
    args = cli.build_parser().parse_args(
        [
            "handshake",
            "--groups",
            "X25519,X25519MLKEM768",
            "--server-sig",
            "ML-DSA-44",
            "--ca-sig",
            "RSA-2048",
            "-n",
            "50",
            "--send-root",
        ]
    )
    plan = step.experiment.plan(args)
    for field in ("groups", "server_sigs", "ca_sigs", "n", "warmup", "send_root", "stack"):
        assert getattr(plan, field) == getattr(step.plan, field), field


# --- the store: one writer, read-only readers, damaged and foreign databases ---------------


def test_a_second_writer_is_refused_with_the_first_ones_pid(tmp_path):
    first = RunStore.create(tmp_path / "run", "demo")
    try:
        with pytest.raises(UserError, match=f"in use by PID {os.getpid()}"):
            RunStore.create(tmp_path / "run", "demo", resume=True)
        # A reader is refused too while a writer holds the run (a half-written run).
        with pytest.raises(UserError, match="in use by PID"):
            RunStore.open(tmp_path / "run")
    finally:
        first.close()
    RunStore.open(tmp_path / "run").close()  # free again once the writer is gone


def test_two_cli_writers_on_one_out(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pqlab.store import RunStore; "
            f"s = RunStore.create({str(out)!r}, 'x'); print('ok', flush=True); time.sleep(30)",
        ],
        env=pqlab_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        proc = run_pqlab("certs", "--ca-sig", "RSA-2048", "--server-sig", "RSA-2048", "--out", out)
        assert f"in use by PID {holder.pid}" in one_line_error(proc)
        proc = run_pqlab("report", out)
        assert f"in use by PID {holder.pid}" in one_line_error(proc)
    finally:
        holder.kill()
        holder.wait()


def test_readers_open_read_only(tmp_path):
    store = RunStore.create(tmp_path / "run", "demo")
    store.begin("demo", {"command_line": "x"})
    store.finish()
    store.close()
    before = (tmp_path / "run" / "results.duckdb").read_bytes()
    reader = RunStore.open(tmp_path / "run")
    assert reader.read_only
    with pytest.raises(Exception, match="read-only"):
        reader.con.execute("CREATE TABLE t (a INTEGER)")
    reader.close()
    assert (tmp_path / "run" / "results.duckdb").read_bytes() == before


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_damaged_database_is_one_line(tmp_path, damage):
    out = tmp_path / "run"
    run_pqlab("certs", "--ca-sig", "RSA-2048", "--server-sig", "RSA-2048", "--out", out, check=True)
    db = out / "results.duckdb"
    data = db.read_bytes()
    db.write_bytes(
        {"empty": b"", "truncated": data[: len(data) // 3], "garbage": b"x" * 9000}[damage]
    )
    for argv in (["report", out], ["compare", out, out]):
        line = one_line_error(run_pqlab(*argv))
        assert "results.duckdb is damaged" in line
    line = one_line_error(
        run_pqlab(
            "certs", "--ca-sig", "RSA-2048", "--server-sig", "RSA-2048", "--out", out, "--resume"
        )
    )
    assert "damaged" in line


def test_other_schema_version_is_refused(tmp_path):
    store = RunStore.create(tmp_path / "run", "demo")
    store.con.execute("UPDATE schema_info SET version = 99")
    store.close()
    with pytest.raises(UserError, match="newer pqlab.*schema 99"):
        RunStore.create(tmp_path / "run", "demo", resume=True)
    with pytest.raises(UserError, match="schema 99"):
        RunStore.open(tmp_path / "run")


def test_compare_reads_a_version_1_run(tmp_path):
    store = RunStore.create(tmp_path / "old", "demo")
    store.con.execute("UPDATE schema_info SET version = 1")
    store.close()
    RunStore.open(tmp_path / "old", any_version=True).close()
    with pytest.raises(UserError, match="older pqlab"):
        RunStore.open(tmp_path / "old")


# --- --resume: same machine, same engine build, same per-cell parameters -------------------


def _meta(**over) -> dict:
    meta = {
        "cpu": {"model": "CPU A", "count": 2},
        "engine": {
            "build_id": "aaaa",
            "openssl": {"version_text": "O"},
            "liboqs": {"version": "L"},
        },
        "pqlab_version": "0.1.0",
    }
    for path, value in over.items():
        d = meta
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return meta


@pytest.mark.parametrize(
    "change, label",
    [
        ({"engine.build_id": "bbbb"}, "engine build"),
        ({"cpu.model": "CPU B"}, "CPU model"),
        ({"engine.openssl.version_text": "O2"}, "OpenSSL"),
    ],
)
def test_resume_refuses_another_machine_or_build(tmp_path, change, label):
    store = RunStore.create(tmp_path / "run", "demo")
    store.begin("demo", _meta())
    store.finish("interrupted")
    store.check_resume(_meta())  # the same: fine
    with pytest.raises(UserError, match=f"--resume: {label} differs"):
        store.check_resume(_meta(**change))
    store.close()


def test_resume_with_another_engine_build_on_the_cli(tmp_path):
    out = tmp_path / "run"
    run_pqlab("certs", "--ca-sig", "RSA-2048", "--server-sig", "RSA-2048", "--out", out, check=True)
    store = RunStore.create(out, "", resume=True)
    meta = store.invocations()[0]["metadata"]
    meta["engine"]["build_id"] = "0" * 64
    store.con.execute("UPDATE invocations SET metadata = ? WHERE id = 1", [json.dumps(meta)])
    store.close()
    proc = run_pqlab(
        "certs", "--ca-sig", "RSA-2048", "--server-sig", "RSA-2048", "--out", out, "--resume"
    )
    assert "engine build differs" in one_line_error(proc)


def test_resume_refuses_other_per_cell_parameters(tmp_path):
    store = RunStore.create(tmp_path / "run", "demo")
    store.begin("demo", {"plan": {"n": 200}})
    with store.cell("demo", "a", {}):
        pass
    store.finish("interrupted")
    store.check_plan("demo", {"n": 200})
    with pytest.raises(UserError, match="n was 200 .* now 20"):
        store.check_plan("demo", {"n": 20})
    store.close()


# --- killed and terminated runs ------------------------------------------------------------


def test_a_killed_invocation_is_marked_by_the_next_writer(tmp_path):
    out = tmp_path / "run"
    victim = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pqlab.store import RunStore; "
            f"s = RunStore.create({str(out)!r}, 'demo'); s.begin('demo', {{}}); "
            "print('running', flush=True); time.sleep(60)",
        ],
        env=pqlab_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout.readline().strip() == "running"
    victim.kill()
    victim.wait()
    store = RunStore.create(out, "demo", resume=True)
    try:
        assert [i["status"] for i in store.invocations()] == ["killed"]
    finally:
        store.close()
    assert json.loads((out / "metadata.json").read_text())["invocations"][0]["status"] == "killed"


def test_sigterm_outside_a_network_step_says_so_and_keeps_cells(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pqlab",
            "primitives",
            "--kem",
            "all",
            "--backend",
            "liboqs",
            "-n",
            "200",
            "--out",
            str(out),
        ],
        env=pqlab_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The progress line of the second cell means the first one is committed.
    seen, err_lines = 0, []
    deadline = time.monotonic() + 120
    while seen < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        err_lines.append(line)
        seen += line.startswith("[primitives]")
    assert seen == 2, "".join(err_lines)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM): finished cells are saved" in err
    assert "Traceback" not in err
    assert not (out / "results.duckdb.wal").exists()  # checkpointed on the way out
    store = RunStore.open(out)
    try:
        assert store.invocations()[-1]["status"] == "interrupted"
        assert store.cells_done("primitives")
    finally:
        store.close()
