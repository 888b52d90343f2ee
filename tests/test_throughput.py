"""`pqlab throughput`: refusals before anything exists, the MB/s arithmetic, and (root only) a
real run: both directions measured for each cell, every connection checked."""

from __future__ import annotations

import csv

import pytest

from conftest import run_pqlab
from pqlab import cpuquota
from pqlab.errors import UserError
from pqlab.experiments import throughput
from pqlab.experiments.throughput import plan as throughput_plan
from pqlab.experiments.throughput import report as throughput_report


def values(**kw):
    v = throughput.EXPERIMENT.defaults()
    for k, x in kw.items():
        setattr(v, k, x)
    return v


def test_megabytes_per_second():
    assert throughput_report.mbps(10**6, 10**9) == pytest.approx(1.0)
    assert throughput_report.mbps(64 * 2**20, 50_000_000) == pytest.approx(1342.17728)


def test_ccm_is_a_suite_of_openssl_only():
    plan = throughput_plan.from_values(values(ciphersuites="TLS_AES_128_CCM_SHA256"))
    assert plan.suites == ["TLS_AES_128_CCM_SHA256"]


@pytest.mark.parametrize(
    "kw, words",
    [
        (
            {"ciphersuites": "TLS_AES_128_CCM_SHA256", "stack": "rustls"},
            ["--ciphersuites", "CCM", "rustls"],
        ),
        ({"ciphersuites": "AES128-GCM-SHA256"}, ["AES128-GCM-SHA256"]),
        ({"bytes": "0"}, ["--bytes"]),
        ({"bytes": "17GiB"}, ["--bytes"]),
        ({"bytes": "lots"}, ["--bytes", "lots"]),
        ({"n": "0"}, ["-n"]),
        ({"n": "1001"}, ["-n", "1001"]),
        ({"groups": "X25519,Nope"}, ["Nope"]),
        ({"server_sig": "ML-KEM-512"}, ["ML-KEM-512"]),
        ({"warmup": "101"}, ["--warmup"]),
        ({"echo_bytes": "16383"}, ["--echo-bytes", "16383", "16KiB"]),
        ({"echo_bytes": "2GiB"}, ["--echo-bytes", "2GiB"]),
        ({"echo_bytes": "much"}, ["--echo-bytes", "much"]),
    ],
)
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(UserError) as e:
        throughput_plan.from_values(values(**kw))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_echo_size_reaches_the_plan_and_the_resume_key():
    plan = throughput_plan.from_values(values(echo_bytes="1MiB"))
    assert plan.echo_bytes == 1 << 20
    assert throughput.EXPERIMENT.resume_key(plan)["echo_bytes"] == 1 << 20
    assert throughput_plan.from_values(values()).echo_bytes == throughput_plan.ECHO_BYTES == 131072


def test_suite_key_echo_bytes_is_the_flag(tmp_path):
    from pqlab import suite

    path = tmp_path / "s.toml"
    path.write_text('[[step]]\nexperiment = "throughput"\necho_bytes = "512KiB"\n')
    (step,) = suite.plan_steps(suite.load(str(path)))
    assert step.plan.echo_bytes == 512 << 10


def test_cli_refusal_creates_nothing(tmp_path):
    out = tmp_path / "T"
    proc = run_pqlab("throughput", "--bytes", "-1", "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and "--bytes" in proc.stderr
    assert not out.exists()


@pytest.mark.net
def test_both_directions_for_each_group_and_suite(tmp_path, no_leaks):
    out = tmp_path / "run"
    run_pqlab(
        "throughput",
        "--groups",
        "X25519,X25519MLKEM768",
        "--ciphersuites",
        "TLS_AES_128_GCM_SHA256,TLS_CHACHA20_POLY1305_SHA256",
        "--bytes",
        "4MiB",
        "-n",
        "2",
        "--echo-bytes",
        "320KiB",
        "--out",
        out,
        check=True,
        timeout=600,
    )
    with open(out / "tables" / "throughput.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    # Every connection echoed --echo-bytes (the engine checks each echoed record).
    assert {int(r["echo_bytes"]) for r in rows} == {320 << 10}
    cells = {(r["group"], r["cipher_suite"]) for r in rows}
    assert ("X25519MLKEM768", "TLS_CHACHA20_POLY1305_SHA256") in cells
    for r in rows:
        assert int(r["n"]) == 2 and int(r["bytes"]) == 4 * 2**20
        assert float(r["tx_MBps"]) > 0 and float(r["rx_MBps"]) > 0
        assert float(r["tx_MBps_min"]) <= float(r["tx_MBps"]) <= float(r["tx_MBps_max"])
    assert (out / "figures" / "throughput.png").exists()


# Two rows as tls_bench 5.9.4 printed them on the development machine (tab-separated).
TLS_BENCH_OUTPUT = """Running TLS Benchmarks...
Side    Cipher                             Group                      Total Bytes  Num Conns      Rx ms      Tx ms   Rx MiB/s   Tx MiB/s   Connect Total ms   Connect Avg ms
Server  TLS13-AES256-GCM-SHA384            X25519MLKEM768                 6029312         24    987.836      9.859      2.910    291.624             30.118            1.255
Client  TLS13-AES256-GCM-SHA384            X25519MLKEM768                 6029312         24    993.307      1.712      2.894   1679.089             28.495            1.187
"""


def test_tls_bench_rows_are_read_as_printed():
    from pqlab.tls import wolfssl_tools

    rows = wolfssl_tools.parse_tls_bench(TLS_BENCH_OUTPUT)
    assert [r["side"] for r in rows] == ["server", "client"]
    client = rows[1]
    assert client["group"] == "X25519MLKEM768" and client["connections"] == 24
    assert client["connect_avg_ms"] == pytest.approx(1.187)
    assert client["tx_MiBps"] == pytest.approx(1679.089)
    assert client["total_bytes"] == 6029312


def test_tls_bench_first_group_printed_unnamed_is_named():
    """tls_bench prints its first group's name as N/A (it reads it before setting it): that
    row is the first group of its list no other row names, here ECC_SECP256R1."""
    from pqlab.tls import wolfssl_tools

    line = TLS_BENCH_OUTPUT.splitlines()[2]
    text = "\n".join(
        [
            line.replace("X25519MLKEM768", "N/A           "),
            line.replace("X25519MLKEM768", "ECC_SECP384R1 "),
            line.replace("X25519MLKEM768", "ECC_X25519    "),
        ]
    )
    groups = [r["group"] for r in wolfssl_tools.parse_tls_bench(text)]
    assert groups == ["ECC_SECP256R1", "ECC_SECP384R1", "ECC_X25519"]
    # Rows that name every group keep their names.
    assert [r["group"] for r in wolfssl_tools.parse_tls_bench(TLS_BENCH_OUTPUT)] == [
        "X25519MLKEM768"
    ] * 2


def test_tls_bench_sides_out_of_step_are_refused():
    """Run apart, tls_bench's two sides must count the same connections in every group."""
    from pqlab.errors import EngineError
    from pqlab.tls import wolfssl_tools

    rows = wolfssl_tools.parse_tls_bench(TLS_BENCH_OUTPUT)
    wolfssl_tools.check_tls_bench_sides(rows)  # 24 and 24: in step
    rows[1]["connections"] = 23
    with pytest.raises(EngineError, match="X25519MLKEM768"):
        wolfssl_tools.check_tls_bench_sides(rows)
    with pytest.raises(EngineError, match="out of step"):
        wolfssl_tools.check_tls_bench_sides(rows[:1])


def _link_bytes(hosts) -> int:
    """Bytes the server's end of the lab link received (the kernel's interface counter)."""
    import json

    out = hosts.sh("server", ["ip", "-j", "-s", "link", "show", "dev", hosts.server_if]).stdout
    return json.loads(out)[0]["stats64"]["rx"]["bytes"]


def _wolfssl():
    from pqlab.tls import stacks

    return stacks.all_stacks().get("wolfssl")


@pytest.mark.net
@pytest.mark.skipif(_wolfssl() is None, reason="pqlab-engine-wolfssl is not built")
def test_tls_bench_runs_beside_every_stack_and_its_binary_shrinks_without_pq(tmp_path, no_leaks):
    """`--stack wolfssl,openssl`: one table with both stacks, each connection's client
    handshake time and CPU rates; wolfSSL's own tls_bench beside them for the same groups,
    and tls_bench's stripped size with and without the post-quantum algorithms."""
    out = tmp_path / "run"
    run_pqlab(
        "throughput", "--stack", "wolfssl,openssl", "--groups", "X25519,ML-KEM-768",
        "--ciphersuites", "TLS_AES_256_GCM_SHA384", "--server-sig", "RSA-2048",
        "--bytes", "2MiB", "-n", "2", "--tls-bench-seconds", "1", "--out", out,
        check=True, timeout=600,
    )  # fmt: skip
    rows = list(csv.DictReader(open(out / "tables" / "throughput.csv")))
    assert {(r["stack"], r["group"]) for r in rows} == {
        (s, g) for s in ("wolfssl", "openssl") for g in ("X25519", "ML-KEM-768")
    }
    for r in rows:
        assert 0.05 < float(r["handshake_ms"]) < 100, r
        # The client's own CPU cannot take longer than the transfer's wall time.
        assert float(r["tx_cpu_MBps"]) >= float(r["tx_MBps"]) * 0.95, r
        # tls_bench's echo loop, run by pqlab on every stack.
        assert float(r["echo_tx_MBps"]) > 0 and float(r["echo_rx_MBps"]) > 0, r
    bench = list(csv.DictReader(open(out / "tables" / "throughput_tls_bench.csv")))
    assert {(b["group"], b["pqlab_stack_impl"].split()[0]) for b in bench} == {
        (g, s) for g in ("X25519", "ML-KEM-768") for s in ("wolfSSL", "OpenSSL")
    }
    for b in bench:
        assert int(b["tls_bench_connections"]) > 0 and float(b["tls_bench_connect_avg_ms"]) > 0
        assert b["handshake_ratio"] and b["tx_cpu_ratio"]
        assert b["echo_tx_ratio"] and b["echo_rx_ratio"]
    kem = next(b for b in bench if b["group"] == "ML-KEM-768")
    assert kem["document_004_group"] == "KYBER_LEVEL3 (Kyber768, pre-standard)"
    raw = list(csv.DictReader(open(out / "tables" / "throughput_tls_bench_raw_rows.csv")))
    assert {r["side"] for r in raw} == {"client", "server"}
    assert "ML_KEM_768" in {r["tls_bench_group"] for r in raw}
    (size,) = csv.DictReader(open(out / "tables" / "wolfssl_binary_size.csv"))
    assert int(size["without_pq_bytes"]) < int(size["with_pq_bytes"])
    assert int(size["pq_bytes"]) == int(size["with_pq_bytes"]) - int(size["without_pq_bytes"])


@pytest.mark.net
def test_mutual_tls_cells_transfer_with_the_client_certificate(tmp_path, no_leaks):
    """`--client-sig none,ECDSA-P256`: a row per client certificate; the client cell's every
    connection is checked on both ends for the client's scheme (the run fails otherwise)."""
    out = tmp_path / "run"
    run_pqlab(
        "throughput", "--groups", "X25519", "--ciphersuites", "TLS_AES_128_GCM_SHA256",
        "--client-sig", "none,ECDSA-P256", "--bytes", "1MiB", "-n", "2", "--out", out,
        check=True, timeout=600,
    )  # fmt: skip
    rows = list(csv.DictReader(open(out / "tables" / "throughput.csv")))
    assert sorted(r["client_sig"] for r in rows) == ["ECDSA-P256", "none"]
    assert all(float(r["tx_MBps"]) > 0 for r in rows)


@pytest.mark.net
@pytest.mark.skipif(_wolfssl() is None, reason="pqlab-engine-wolfssl is not built")
def test_tls_bench_sides_run_across_the_lab_link(no_leaks):
    """tls_bench's server side (-s) in the lab's server namespace, its client side (-c) in the
    client's: every group's two rows count the same connections, and the bytes the client
    side says it sent crossed the lab's link (the server interface's own counter)."""
    from pqlab.net.shaping import build_hosts
    from pqlab.tls import wolfssl_tools

    with build_hosts(None, mtu=65535) as hosts:
        before = _link_bytes(hosts)
        rows = wolfssl_tools.tls_bench(
            _wolfssl(), 1, hosts=hosts, cpus=cpuquota.pick_cpu_pair() or (None, None)
        )
        received = _link_bytes(hosts) - before
    client = [r for r in rows if r["side"] == "client"]
    server = [r for r in rows if r["side"] == "server"]
    assert [r["group"] for r in client] == [r["group"] for r in server]
    assert {"ML_KEM_768", "X25519MLKEM768", "ECC_X25519"} <= {r["group"] for r in client}
    for c, s in zip(client, server, strict=True):
        assert c["connections"] == s["connections"] > 0, (c, s)
        assert c["connect_avg_ms"] > 0 and c["tx_MiBps"] > 0 and c["rx_MiBps"] > 0, c
    # The client's Tx half of its total: what it wrote, plus TLS framing and handshakes.
    sent = sum(r["total_bytes"] for r in client) // 2
    assert received > sent > 0, (received, sent)


@pytest.mark.skipif(_wolfssl() is None, reason="pqlab-engine-wolfssl is not built")
def test_two_tls_bench_runs_at_once_each_reach_their_own_server():
    """tls_bench over loopback listens on a port of its own: two runs on one machine at once
    (two users, two pqlab runs) each complete every group against their own server."""
    import concurrent.futures

    from pqlab.tls import wolfssl_tools

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(wolfssl_tools.tls_bench, _wolfssl(), 1) for _ in range(2)]
        results = [r.result(timeout=300) for r in runs]
    for rows in results:
        wolfssl_tools.check_tls_bench_sides(rows)
        assert all(r["connections"] > 0 for r in rows), rows
