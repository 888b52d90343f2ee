"""`pqlab capacity`: the pure statistics (open-loop latency from the scheduled start),
refusals before anything exists, and (root only) a real run with the issue's one-client
check against `pqlab handshake` at a shorter duration."""

from __future__ import annotations

import argparse
import csv
import json
import signal
import subprocess
import sys
import time

import duckdb
import numpy as np
import pytest

from conftest import netns_list, pqlab_env, run_pqlab
from pqlab import cpuquota
from pqlab.errors import UserError
from pqlab.experiments.capacity import analyse, report
from pqlab.experiments.capacity import plan as cap_plan


def values(**kw) -> argparse.Namespace:
    from pqlab.experiments.capacity import EXPERIMENT

    v = EXPERIMENT.defaults()
    for k, x in kw.items():
        setattr(v, k, x)
    return v


# --- pure logic -----------------------------------------------------------------------------


def test_open_loop_latency_runs_from_the_scheduled_start():
    # Arrivals due every 10 ms; the server fell behind, so workers started them late
    # (start) and finished later still (done). Latency is done - scheduled: the wait
    # for the busy server counts.
    scheduled = [0, 10_000_000, 20_000_000, 30_000_000]
    start = [0, 12_000_000, 24_000_000, 36_000_000]
    done = [12_000_000, 24_000_000, 36_000_000, 48_000_000]
    lat = analyse.latencies_ns(scheduled, done)
    assert lat.tolist() == [12_000_000, 14_000_000, 16_000_000, 18_000_000]
    # Measured from when a worker got to it, the queueing would disappear:
    assert (np.asarray(done) - np.asarray(start)).tolist() == [12_000_000] * 4
    st = analyse.point_stats(scheduled, done, done)
    assert st["completed"] == 4
    assert st["latency_p50_ms"] == pytest.approx(15.0)
    assert st["handshakes_per_s"] == pytest.approx(4 / 0.048)


def test_point_stats_of_nothing_and_mismatched_columns():
    assert analyse.point_stats([], [], [])["completed"] == 0
    with pytest.raises(ValueError):
        analyse.latencies_ns([1, 2], [3])


def test_cpus_are_split_between_server_and_clients():
    server, clients = cpuquota.pick_cpus(1)
    assert server and clients
    if len(set(server) | set(clients)) > 1:
        assert not set(server) & set(clients)


def test_a_server_and_its_client_get_a_cpu_each_the_same_way_capacity_splits(monkeypatch):
    monkeypatch.setattr(cpuquota.os, "sched_getaffinity", lambda pid: {2, 0, 3, 1})
    monkeypatch.setattr(cpuquota.shutil, "which", lambda name: "/usr/bin/taskset")
    assert cpuquota.pick_cpus(1) == ([3], [0, 1, 2])
    assert cpuquota.pick_cpus(8) == ([2, 3], [0, 1])
    assert cpuquota.pick_cpu_pair() == (3, 0)
    monkeypatch.setattr(cpuquota.os, "sched_getaffinity", lambda pid: {5})
    assert cpuquota.pick_cpus(1) == ([5], [5]) and cpuquota.pick_cpu_pair() is None
    monkeypatch.setattr(cpuquota.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(cpuquota.shutil, "which", lambda name: None)
    assert cpuquota.pick_cpu_pair() is None


def test_limits_are_named_by_who_was_busy():
    common = {"server_cpus_busy": 0.3, "loadgen_cpus_busy": 0.3, "offered": None}
    closed = {"mode": "closed", "rate": 1000.0, **common}
    assert analyse.limited_by(server_util=0.95, loadgen_util=0.5, **closed) == analyse.SERVER_CPU
    assert analyse.limited_by(server_util=0.5, loadgen_util=0.9, **closed) == analyse.LOADGEN_CPU
    # Both below saturation, CPUs otherwise idle: clients waited on something without CPU.
    assert analyse.limited_by(server_util=0.3, loadgen_util=0.4, **closed) == analyse.STALL
    # ... unless their time was the two sides' work one after the other (one client).
    share = analyse.work_share(0.45, 1, 0.6, 1, clients=1)
    assert share == pytest.approx(1.05)
    got = analyse.limited_by(server_util=0.45, loadgen_util=0.6, cpu_work_share=share, **closed)
    assert got == analyse.CLIENTS
    # The pipe stall this experiment once had: each client waited 1.5 ms per handshake for
    # 0.45 + 0.5 ms of work.
    share = analyse.work_share(0.28, 1, 0.33, 1, clients=1)
    got = analyse.limited_by(server_util=0.28, loadgen_util=0.33, cpu_work_share=share, **closed)
    assert got == analyse.STALL
    busy = {**closed, "server_cpus_busy": 0.97}
    assert analyse.limited_by(server_util=0.3, loadgen_util=0.4, **busy) == analyse.OTHER_LOAD
    blocked = analyse.limited_by(
        server_util=0.3, loadgen_util=0.4, output_blocked_share=0.2, **closed
    )
    assert blocked == analyse.OUTPUT
    kept_up = {**closed, "mode": "open", "rate": 497.0, "offered": 500.0}
    assert analyse.limited_by(server_util=0.5, loadgen_util=0.5, **kept_up) == analyse.OFFERED
    # Kept up, but with arrivals waiting for a worker longer than a handshake: a queue.
    got = analyse.limited_by(server_util=0.5, loadgen_util=0.5, queued=True, **kept_up)
    assert got == analyse.STALL
    # Kept up with a side saturated: at its limit, more would not be served.
    got = analyse.limited_by(server_util=0.5, loadgen_util=0.97, **kept_up)
    assert got == analyse.LOADGEN_CPU
    behind = {**kept_up, "rate": 400.0}
    assert analyse.limited_by(server_util=0.99, loadgen_util=0.5, **behind) == analyse.SERVER_CPU


def test_server_cpu_over_the_window_starts_after_the_warmups():
    """CPU time and span both from the server's own records (its host, its clock): from the
    last warm-up's record to the last record."""
    t0 = 1_000_000_000
    recs = [
        {"process_cpu_ns": 5_000_000, "t_closed": t0 - 900},  # warm-ups
        {"process_cpu_ns": 6_000_000, "t_closed": t0 - 500},
        {"process_cpu_ns": 7_000_000, "t_closed": t0 + 400_000_000},
        {"process_cpu_ns": 8_500_000, "t_closed": t0 + 1_000_000_000},
    ]
    w = analyse.server_window(recs, warmups=2)
    assert w["cpu_s"] == pytest.approx(0.0025)
    assert w["span_ns"] == 1_000_000_500 and w["connections"] == 2
    assert analyse.utilisation(w["cpu_s"], w["span_ns"], 1) == pytest.approx(0.0025, rel=1e-6)
    assert analyse.utilisation(1.5, 1_000_000_000, 2) == pytest.approx(0.75)
    assert analyse.server_window(recs[:2], warmups=2)["cpu_s"] is None
    # Another host's clock never enters: shifting every server timestamp by an hour (a
    # server host whose clock is an hour off) changes nothing.
    shifted = [{**r, "t_closed": r["t_closed"] + 3600 * 10**9} for r in recs]
    assert analyse.server_window(shifted, warmups=2) == w


def test_a_hosts_proc_stat_read_twice_gives_its_busy_cpus():
    """The server's host read over SSH before and after a point: per-CPU seconds as the
    load generator reports its own machine, so the same busy/other logic applies."""
    before = analyse.proc_stat(
        "100\ncpu  1 1 1 1 1 1 1 1 0 0\n"
        "cpu0 100 0 50 1000 0 0 10 0 0 0\ncpu1 200 10 40 900 5 3 7 2 0 0\nintr 5 6\n"
    )
    after = analyse.proc_stat(
        "100\ncpu  1 1 1 1 1 1 1 1 0 0\n"
        "cpu0 180 0 60 1010 0 0 10 0 0 0\ncpu1 220 10 50 1060 5 5 9 2 0 0\n"
    )
    assert before["hz"] == 100 and sorted(before["cpus"]) == [0, 1]
    d = analyse.stat_delta(before, after)
    assert d == {
        "cpu": [0, 1],
        "tasks_s": [0.9, 0.3],
        "interrupts_s": [0.0, 0.04],
        "steal_s": [0.0, 0.0],
        "total_s": [1.0, 1.94],
    }
    assert analyse.machine_busy(d, [0]) == pytest.approx(0.9)
    # The server (0.85 s of CPU) on CPU 0 of its host; the load generator on another host.
    loadgen_host = {"cpu": [0], "tasks_s": [0.5], "interrupts_s": [0.0], "steal_s": [0.0],
                    "total_s": [1.0]}  # fmt: skip
    other = analyse.other_utilisation([(d, (0.85,)), (loadgen_host, (0.5,))])
    assert other == pytest.approx((0.9 + 0.34 - 0.85) / 3.94)
    assert analyse.other_utilisation([(d, (None,))]) is None


def test_each_host_pair_has_its_own_maximum():
    def row(pair, rate):
        return {"stack_impl": "OpenSSL", "group": "X25519", "server_sig": "ECDSA-P256",
                "ca_sig": "ECDSA-P256", "server_threads": 1, "mode": "closed",
                "handshakes_per_s": rate, "host_pair": pair, "clients_or_rate": "2",
                "server_cpu_utilisation": 0.9, "loadgen_cpu_utilisation": 0.5,
                "limited_by": analyse.SERVER_CPU}  # fmt: skip

    table = [row("a->b", 900.0), row("a->b", 1000.0), row("c->b", 400.0), row(None, 1200.0)]
    best = {r["host_pair"]: r["handshakes_per_s"] for r in report.maxima(table)}
    assert best == {"a->b": 1000.0, "c->b": 400.0, None: 1200.0}
    assert "(c->b)" in report.describe_maximum(row("c->b", 400.0))


def test_open_loop_wait_for_a_worker_and_handshake_time():
    scheduled = [0, 10, 20, 30]
    start = [0, 20, 40, 60]  # each arrival waited longer for a worker: a queue
    done = [8, 28, 48, 68]
    st = analyse.point_stats(scheduled, done, done, start_ns=start)
    assert st["wait_p50_ms"] == pytest.approx(15 / 1e6)
    assert st["service_p50_ms"] == pytest.approx(8 / 1e6)
    assert st["latency_mean_ms"] == pytest.approx(23 / 1e6)


def test_tls_handshake_alone_from_the_tcp_connect():
    start, connected, done = [0, 100, 200], [10, 130, 205], [50, 170, 265]
    st = analyse.point_stats(start, done, done, start_ns=start, connected_ns=connected)
    assert st["tls_handshake_p50_ms"] == pytest.approx(40 / 1e6)
    assert st["tls_handshake_mean_ms"] == pytest.approx(140 / 3 / 1e6)
    # Runs recorded before the stamp: a NULL column, no figure.
    old = np.ma.masked_array(connected, mask=[True] * 3)
    assert analyse.point_stats(start, done, done, connected_ns=old)["tls_handshake_mean_ms"] is None


def test_little_ratio_of_a_closed_loop():
    # 4 clients, 1000 handshakes/s, 3.6 ms each: 90 % of their time in handshakes.
    assert analyse.little_ratio(1000.0, 3.6, 4) == pytest.approx(0.9)
    assert analyse.little_ratio(None, 3.6, 4) is None


def test_the_machine_split_into_who_was_busy():
    machine = {
        "cpu": [0, 1],
        "tasks_s": [0.9, 0.5],
        "interrupts_s": [0.05, 0.05],
        "steal_s": [0.0, 0.0],
        "total_s": [1.0, 1.0],
    }
    assert analyse.machine_busy(machine, [0]) == pytest.approx(0.95)
    assert analyse.machine_busy(machine) == pytest.approx(0.75)
    assert analyse.other_utilisation([(machine, (0.5, 0.9))]) == pytest.approx(0.05)
    assert analyse.machine_busy(None) is None


# --- the server never waits for the reader of its records ------------------------------------


def test_server_keeps_serving_while_nobody_reads_its_records(tmp_path):
    """A pipe holds 64 KiB, about 30 connection records. A server that wrote them itself
    stopped at the 31st connection until its reader came back (the lab reads a busy
    server's output every 50 ms), and every such wait landed inside a client's handshake:
    capacity read 640 handshakes/s with the server 25 % busy. Here nobody reads the
    server's output until 400 connections are done; each must still be served at once."""
    from tls_helpers import Server, client, make_chain

    make_chain(tmp_path, "EC:P-256", "EC:P-256")
    n = 400
    with Server(tmp_path, "--groups", "X25519", "--max-connections", str(n)) as server:
        started = time.monotonic()
        proc = client(
            server.port,
            tmp_path / "root.crt.pem",
            "--groups",
            "X25519",
            "-n",
            str(n),
            "--io-timeout",
            "5",
            "--events",
            "off",
            check=False,
        )
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout[-300:] + proc.stderr[-300:]
        recs = server.finish(timeout=30)
    conns = [r for r in recs if r["type"] == "connection"]
    assert len(conns) == n
    size = sum(len(json.dumps(r)) for r in conns)
    assert size > 4 * 65536, f"the records ({size} bytes) would have fit in one pipe"
    assert all(r["output_blocked_ns"] == 0 for r in conns)
    cpu = [r["process_cpu_ns"] for r in conns]
    assert cpu == sorted(cpu) and cpu[-1] > cpu[0]
    print(f"{n} connections in {elapsed:.2f} s with the server's output unread")


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"mode": "closed,half"}, ["--mode", "closed,half"]),
        ({"rates": "0"}, ["--rates", "'0'"]),
        ({"rates": "fast"}, ["--rates", "fast"]),
        ({"mode": "open"}, ["percentages", "closed"]),
        ({"clients": "0"}, ["--clients", "0"]),
        ({"clients": "1,2000"}, ["--clients", "2000"]),
        ({"server_threads": "300"}, ["--server-threads", "300"]),
        ({"duration": "0"}, ["--duration", "0"]),
        ({"duration": "5 parsecs"}, ["--duration"]),
        ({"groups": "X25519,Nope"}, ["Nope"]),
        ({"server_sig": "ML-KEM-768"}, ["ML-KEM-768"]),
        ({"open_workers": "0"}, ["--open-workers"]),
        ({"max_handshakes": "-1"}, ["--max-handshakes"]),
        ({"port": "70000"}, ["--port", "70000"]),
        ({"client_sig": "Falcon-512"}, ["--client-sig", "Falcon-512", "openssl"]),
        ({"client_sig": "ML-KEM-768"}, ["ML-KEM-768"]),
        ({"client_ca_sig": "ECDSA-P256"}, ["--client-ca-sig", "--client-sig"]),
    ],
)
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(UserError) as e:
        cap_plan.from_values(values(**kw))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_absolute_rates_need_no_closed_loop():
    p = cap_plan.from_values(values(mode="open", rates="100,250"))
    assert [r.value for r in p.rates] == [100.0, 250.0]
    assert p.clients == []


def test_cli_refusal_is_one_line_and_creates_nothing(tmp_path):
    out = tmp_path / "R"
    proc = run_pqlab("capacity", "--rates", "-5", "--out", out)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--rates" in lines[0]
    assert not out.exists()


# --- real runs (root) ---------------------------------------------------------------------


def read_csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.net
def test_one_client_rate_matches_the_handshake_time(tmp_path, no_leaks):
    """With one client the closed-loop rate is within 20 % of 1 / the median handshake time
    `pqlab handshake` measures for the cell (at a shorter duration). The two steps run a
    minute apart and the handshake times here are bimodal (1.0 and 2.1 ms at the 10th and
    90th percentiles), so a burst of other load on the machine between them moves the ratio
    (0.80 seen once in a full test run, 0.94 alone): the suite runs again, at most three
    times in all, until one run agrees. A systematic disagreement fails every run."""
    seen = []
    for attempt in range(3):
        one, rows, out = _one_client_run(tmp_path / f"attempt{attempt}")
        seen.append(float(one["rate_x_handshake_total_median"]))
        if 0.8 <= seen[-1] <= 1.2:
            break
    assert 0.8 <= seen[-1] <= 1.2, f"rate x handshake time in every run: {seen}"
    assert float(one["rate_x_handshake_median"]) < float(one["rate_x_handshake_total_median"])
    # The TLS handshake alone is the latency less the TCP connect: one round trip over the
    # lab's veth, well under half a millisecond.
    tls, latency = float(one["tls_handshake_p50_ms"]), float(one["latency_p50_ms"])
    assert 0 < tls < latency < tls + 0.5
    for r in rows:
        assert float(r["handshakes_per_s"]) > 0
        assert float(r["server_cpu_us_per_handshake"]) > 0
        assert float(r["latency_p99_ms"]) >= float(r["latency_p50_ms"]) > 0
        assert int(r["errors"]) == 0
    # Past saturation the open loop's latency includes the queue.
    assert float(rows[3]["latency_p99_ms"]) > float(rows[2]["latency_p99_ms"])
    assert (out / "figures" / "capacity_latency_vs_load.png").exists()
    assert "Capacity" in (out / "report.html").read_text()


def _one_client_run(tmp_path):
    """A suite of the handshake step and the capacity step of one cell: (the one-client
    row, every row, the run directory)."""
    tmp_path.mkdir()
    suite = tmp_path / "s.toml"
    suite.write_text(
        'description = "capacity check"\n'
        '[[step]]\nexperiment = "handshake"\ngroups = "X25519MLKEM768"\n'
        'server-sig = "ML-DSA-44"\nca-sig = "ML-DSA-44"\nn = 200\n'
        '[[step]]\nexperiment = "capacity"\ngroups = "X25519MLKEM768"\n'
        'server-sig = "ML-DSA-44"\nclients = [1, 2]\nrates = ["50%", "150%"]\n'
        'duration = "2s"\n'
    )
    out = tmp_path / "run"
    run_pqlab("suite", suite, "--out", out, check=True, timeout=900)
    rows = read_csv(out / "tables" / "capacity.csv")
    required = {
        "stack_impl",
        "group",
        "server_sig",
        "ca_sig",
        "mode",
        "clients_or_rate",
        "handshakes_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "server_cpu_us_per_handshake",
    }
    assert required <= set(rows[0])
    assert [r["mode"] for r in rows] == ["closed", "closed", "open", "open"]
    one = rows[0]
    assert one["clients_or_rate"] == "1"
    # A closed-loop client waits for the whole handshake, its own processing of the server's
    # flight included: pqlab handshake's 1 - 9 time (SYN to the client's Finished), not the
    # 1 - 8 headline (docs/capacity.md, "The one-client check").
    return one, rows, out


@pytest.mark.net
def test_capacity_says_what_limited_every_point(tmp_path, no_leaks):
    """The X25519 cell with an ECDSA-P256 and an ML-DSA-44 server: every point names what
    limited it with both sides' CPU utilisation; at each closed-loop maximum the server's
    CPUs are at least 80 % busy or the table names another limit (and the run warns); one
    client's rate is 1 / the mean time it waits per handshake within 10 %; no rate exceeds
    what the server's CPU time per handshake allows; the server that costs more CPU per
    handshake reads the lower capacity when both maxima are the server's."""
    out = tmp_path / "run"
    proc = run_pqlab(
        "capacity",
        "--groups",
        "X25519",
        "--server-sig",
        "ECDSA-P256,ML-DSA-44",
        "--ca-sig",
        "ECDSA-P256",
        "--clients",
        "1,2,4",
        "--rates",
        "50%,150%",
        "--duration",
        "2s",
        "--out",
        out,
        check=True,
        timeout=600,
    )
    rows = read_csv(out / "tables" / "capacity.csv")
    for r in rows:
        print(
            r["server_sig"],
            r["mode"],
            r["clients_or_rate"],
            r["handshakes_per_s"],
            r["limited_by"],
            "server",
            r["server_cpu_utilisation"],
            "loadgen",
            r["loadgen_cpu_utilisation"],
            "other",
            r["other_cpu_utilisation"],
            "x mean",
            r["rate_x_latency_mean"],
        )
    names = {
        analyse.SERVER_CPU,
        analyse.LOADGEN_CPU,
        analyse.OTHER_LOAD,
        analyse.STALL,
        analyse.CLIENTS,
        analyse.OFFERED,
        analyse.OUTPUT,
    }
    for r in rows:
        assert r["limited_by"] in names, r
        assert 0 < float(r["server_cpu_utilisation"]) <= 1.05, r
        assert 0 < float(r["loadgen_cpu_utilisation"]) <= 1.05, r
        # Physics: a server cannot complete handshakes faster than its CPUs pay for them.
        cpus = len(r["server_cpus"].split(","))
        ceiling = cpus / (float(r["server_cpu_us_per_handshake"]) / 1e6)
        assert float(r["handshakes_per_s"]) <= 1.1 * ceiling, r
    maxima = {}
    for r in rows:
        if r["mode"] == "closed":
            best = maxima.get(r["server_sig"])
            if best is None or float(r["handshakes_per_s"]) > float(best["handshakes_per_s"]):
                maxima[r["server_sig"]] = r
    for sig, m in maxima.items():
        saturated = float(m["server_cpu_utilisation"]) >= 0.8
        assert saturated or m["limited_by"] != analyse.SERVER_CPU, m
        # A closed loop of several clients is never waiting on nothing.
        assert m["limited_by"] != analyse.STALL, m
        if not saturated:
            assert f"warning: capacity X25519 / {sig}" in proc.stderr, proc.stderr
    for r in rows:
        if r["mode"] == "closed" and r["clients_or_rate"] == "1":
            assert 0.9 <= float(r["rate_x_latency_mean"]) <= 1.1, r
            assert r["limited_by"] != analyse.STALL, r
    ec, ml = maxima["ECDSA-P256"], maxima["ML-DSA-44"]
    if float(ml["server_cpu_us_per_handshake"]) > float(ec["server_cpu_us_per_handshake"]):
        if ml["limited_by"] == analyse.SERVER_CPU:
            assert float(ml["handshakes_per_s"]) < float(ec["handshakes_per_s"]), (ml, ec)


@pytest.mark.net
def test_ctrl_c_leaves_nothing(tmp_path):
    before = set(netns_list())
    out = tmp_path / "C"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pqlab",
            "capacity",
            "--groups",
            "X25519",
            "--server-sig",
            "ECDSA-P256",
            "--mode",
            "closed",
            "--clients",
            "1",
            "--duration",
            "60s",
            "--port",
            "4457",
            "--out",
            str(out),
        ],
        env=pqlab_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if subprocess.run(["pgrep", "-f", "tls load"], capture_output=True).stdout:
                break
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    time.sleep(0.5)
    assert not {n for n in netns_list() - before if n.startswith("pqlab")}
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert not left.strip()


@pytest.mark.net
def test_mutual_tls_cells_carry_the_client_certificate(tmp_path, no_leaks):
    """`--client-sig none,ML-DSA-44`: each cell with and without a client certificate; every
    handshake of the client cells checked on both ends for the client's scheme (the run
    fails otherwise), the table and the cell ids saying which is which."""
    out = tmp_path / "run"
    run_pqlab(
        "capacity", "--groups", "X25519MLKEM768", "--server-sig", "ECDSA-P256",
        "--ca-sig", "ECDSA-P256", "--client-sig", "none,ML-DSA-44", "--mode", "closed",
        "--clients", "1", "--duration", "1s", "--out", out, check=True, timeout=600,
    )  # fmt: skip
    rows = read_csv(out / "tables" / "capacity.csv")
    assert sorted(r["client_sig"] for r in rows) == ["ML-DSA-44", "none"]
    assert all(float(r["handshakes_per_s"]) > 0 and r["errors"] == "0" for r in rows)
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        ids = {
            c
            for (c,) in con.execute(
                "SELECT cell_id FROM cells WHERE experiment = 'capacity'"
            ).fetchall()
        }
        raw = dict(
            con.execute("SELECT client_sig, count(*) FROM capacity_raw GROUP BY 1").fetchall()
        )
    finally:
        con.close()
    assert any(i.endswith("|+client-ML-DSA-44") for i in ids) and len(ids) == 2, ids
    assert set(raw) == {"none", "ML-DSA-44"} and min(raw.values()) > 0
