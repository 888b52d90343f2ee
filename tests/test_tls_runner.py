"""pqlab.tls.runner: the one way the lab starts and supervises engine processes, on the host
and across a topology; typed specs become the engine's arguments."""

from __future__ import annotations

import os

import pytest

from pqlab import catalog, process, specs
from pqlab.errors import CheckError, EngineError
from pqlab.net import shaping
from pqlab.tls import runner, stacks
from pqlab.tls.chains import make_chain
from pqlab.tls.negotiation import Expected


def alg(name: str, kind: str = "sig"):
    return catalog.resolve(name, kind)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return make_chain(tmp_path_factory.mktemp("certs"), "ECDSA-P256", "ECDSA-P256")


def server_spec(chain, listen="127.0.0.1:0", **kw):
    tls = runner.Tls(groups=(alg("X25519", "kem"),), sigalgs=(alg("ECDSA-P256"),))
    return runner.ServerSpec(tls=tls, chain=chain, listen=listen, **kw)


def client_spec(chain, port, host="127.0.0.1", groups=("X25519",), expect="X25519", **kw):
    tls = runner.Tls(groups=tuple(alg(g, "kem") for g in groups), sigalgs=(alg("ECDSA-P256"),))
    expected = Expected(group=alg(expect, "kem"), sigalg=alg("ECDSA-P256"))
    return runner.ClientSpec(
        tls=tls, connect=f"{host}:{port}", ca=chain.root, expected=expected, **kw
    )


def test_specs_become_engine_arguments(chain):
    args = server_spec(chain, max_connections=3, response_mode="none").args()
    assert args[:4] == ["tls", "server", "--listen", "127.0.0.1:0"]
    assert args[args.index("--groups") + 1] == "x25519"
    assert args[args.index("--sigalgs") + 1] == "ecdsa_secp256r1_sha256"
    assert args[args.index("--max-connections") + 1] == "3"
    assert args[args.index("--stack") + 1] == "openssl"  # the stack is always named
    cargs = client_spec(chain, 4433, n=7, warmup=2, request_bytes=100).args()
    assert cargs[cargs.index("-n") + 1] == "7" and cargs[cargs.index("--warmup") + 1] == "2"
    assert cargs[cargs.index("--expect-group") + 1] == "x25519"
    assert cargs[cargs.index("--request-bytes") + 1] == "100"


def test_many_connections_do_not_stall_the_server(chain):
    # 150 connections with events: ~1 MB of server records, far more than a pipe holds.
    with runner.start_server(server_spec(chain, max_connections=150)) as srv:
        recs = runner.run_client(client_spec(chain, srv.listening["port"], n=150), timeout=300)
        server_recs = srv.finish(60)
    assert len(recs) == 150
    assert len([r for r in server_recs if r["type"] == "connection"]) == 150
    assert srv.cpu_seconds() is not None and srv.cpu_seconds() > 0


# Every field of every spec, set to a value other than its default (in one instance of its
# class at least: a memory measurement's role decides which of its files it is given);
# (spec class, fields that only name things for other fields: the stack a nested spec's
# algorithms are named by).
NAMING_ONLY = {runner.ClientAuth: {"stack"}, runner.Identity: {"stack"}}
# Fields whose rows are properties derived from them.
DERIVED = {
    runner.ServerSpec: {"chain": ("cert_chain", "key")},
    runner.ClientSpec: {"expected": ("expect_group", "expect_sigalg")},
    runner.Identity: {"sigalg": ("expect_sigalg",)},
    runner.MemorySpec: {
        "chain": ("cert_chain", "key", "ca"),
        "client_chain": ("client_cert_chain", "client_key", "client_ca"),
        "client_sig": ("client_sigalg",),
    },
    runner.HoldSpec: {"identity": ("cert_chain", "key")},
}


def spec_classes() -> set[type]:
    """Every spec class there is (subclasses of `pqlab.specs.Spec`, wherever defined)."""
    out, todo = set(), [specs.Spec]
    while todo:
        for sub in todo.pop().__subclasses__():
            out.add(sub)
            todo.append(sub)
    return out


def every_field_set(chain, tmp_path):
    """One instance of each spec with every field set (nested specs included)."""
    import dataclasses

    stack = stacks.get("openssl")
    tls = runner.Tls(
        stack=stack,
        groups=(alg("X25519", "kem"), alg("X25519MLKEM768", "kem")),
        sigalgs=(alg("ECDSA-P256"),),
        version="1.2",
        ciphers="ECDHE-ECDSA-AES128-GCM-SHA256",
        ciphersuites="TLS_AES_256_GCM_SHA384",
        security_level=1,
        events=False,
        keylog=tmp_path / "keys.log",
        io_timeout=7,
        key_shares=(alg("X25519MLKEM768", "kem"),),
        verify="report",
    )
    auth = runner.ClientAuth(stack, ca=chain.root, sigalgs=(alg("ML-DSA-44"),))
    ident = runner.Identity(stack, chain.chain, chain.key, sigalg=alg("ML-DSA-44"))
    server = runner.ServerSpec(
        # The client-only fields stay with the clients (a server refuses them).
        tls=dataclasses.replace(tls, key_shares=(), verify=None),
        chain=chain,
        listen="127.0.0.1:0",
        max_connections=5,
        response_mode="none",
        dh_bits=2048,
        dh_params=tmp_path / "dh.pem",
        concurrent=True,
        max_concurrent=9,
        threads=3,
        max_response_bytes=12345,
        response_timeout=321,
        min_response_rate=4567,
        client_auth=auth,
        hold_records=True,
        connection_records=tmp_path / "server.jsonl",
        count_heap=True,
    )
    client = runner.ClientSpec(
        tls=tls,
        connect="127.0.0.1:4433",
        ca=chain.root,
        servername="localhost",
        n=11,
        warmup=2,
        request_bytes=99,
        warmup_request_bytes=7,
        gap_ms=4,
        time_limit=77,
        connection_timeout=55,
        expected=Expected(group=alg("X25519", "kem"), sigalg=alg("ECDSA-P256")),
        identity=ident,
        request_path="/x?y=1",
        await_close_ms=250,
        peer_chain=True,
        rounds=((1, 5), (1, 6)),
        connection_records=tmp_path / "client.jsonl",
    )
    load = runner.LoadSpec(client, mode="open", clients=6, duration_ms=1500, rate=321.5)
    bulk = runner.BulkSpec(client, push_bytes=1 << 20, pull_bytes=1 << 21, echo_bytes=1 << 17)
    # `tls memory`: the server role with its files and the client chain's root, the client
    # role with the root and its own certificate (TLS 1.3: what the command runs).
    tls13 = dataclasses.replace(tls, version="1.3", ciphers=None, security_level=None)
    memory = {
        # one group and one scheme: what `tls memory` measures at a time
        "tls": dataclasses.replace(
            tls13, groups=tls.groups[:1], key_shares=(), verify=None, keylog=None
        ),
        "chain": chain,
        "n": 3,
        "warmup": 1,
        "fixed_random": True,
        "client_chain": chain,
        "client_sig": alg("ECDSA-P256"),
    }
    memory_server = runner.MemorySpec(role="server", listen="127.0.0.1:0", **memory)
    memory_client = runner.MemorySpec(role="client", connect="127.0.0.1:4433", **memory)
    hold = runner.HoldSpec(
        tls=memory["tls"],
        connect="127.0.0.1:4433",
        ca=chain.root,
        n=4,
        servername="localhost",
        identity=ident,
        hold_ms=300,
        gap_ms=6,
    )
    linkem = shaping.LinkemSpec(
        tun_a="pqtest-a",
        tun_b="pqtest-b",
        config='{"seed": 7}',
        lateness_samples=123,
        rt_priority=1,
        spin_us=40,
    )
    return [
        tls,
        auth,
        ident,
        server,
        client,
        load,
        bulk,
        memory_server,
        memory_client,
        hold,
        linkem,
    ]


def test_every_field_of_every_spec_reaches_the_engines_argv(chain, tmp_path):
    import dataclasses

    every = every_field_set(chain, tmp_path)
    assert {type(s) for s in every} >= spec_classes(), "a spec class is missing from this test"
    reached: dict[type, set[str]] = {}
    for spec in every:
        cls = type(spec)
        rows = {a.field: a for a in cls.ARGS}
        for f in dataclasses.fields(spec):
            if f.name in NAMING_ONLY.get(cls, ()):
                continue
            names = DERIVED.get(cls, {}).get(f.name, (f.name,))
            for name in names:
                assert name in rows, f"{cls.__name__}.{f.name} has no row in ARGS"
                row = rows[name]
                if specs._render(spec, row) == [] and row.kind != "spec":
                    continue  # not given in this instance (another of its class gives it)
                reached.setdefault(cls, set()).add(name)
                argv = spec.args()
                if row.kind == "spec":
                    nested = getattr(spec, name)
                    assert nested.options() and all(str(a) in argv for a in nested.options()), (
                        f"{cls.__name__}.{name}"
                    )
                    continue
                assert row.flag in argv, f"{cls.__name__}.{name}: {row.flag} not in {argv}"
                # the flag's value is the field's, not a default
                if row.kind == "rounds":
                    assert argv[argv.index(row.flag) + 1] == "1:5,1:6"
                if row.kind == "value" and not isinstance(getattr(spec, name), bool):
                    got = argv[argv.index(row.flag) + 1]
                    want = getattr(spec, name)
                    want = f"{want:.6g}" if isinstance(want, float) else str(want)
                    assert got == want, f"{cls.__name__}.{name}: {got} != {want}"
    for cls in {type(s) for s in every}:
        rows = {a.field for a in cls.ARGS}
        assert rows <= reached[cls], f"{cls.__name__}: {rows - reached[cls]} never given"


def _flags(args: list[str]) -> dict[str, str | bool]:
    """The engine's argv as flag -> value (True for a flag without one), command words
    dropped; `-n` is the engine's `count`."""
    out: dict[str, str | bool] = {}
    i = next(i for i, a in enumerate(args) if a.startswith("-"))
    while i < len(args):
        flag = args[i]
        assert flag.startswith("-"), f"{flag!r} in {args}"
        if i + 1 < len(args) and not args[i + 1].startswith("--") and args[i + 1] != "-n":
            out[flag], i = args[i + 1], i + 2
        else:
            out[flag], i = True, i + 1
    return out


def _first_record(spec, timeout: float = 30) -> dict:
    """The first record of the engine run with the spec's argv, as this machine runs it."""
    import json
    import select
    import subprocess

    with subprocess.Popen(
        process.local([process.Program(spec.program), *spec.argv()]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            assert ready, f"no record from {spec.args()[:2]} within {timeout} s"
            line = proc.stdout.readline()
        finally:
            proc.kill()
    assert line, f"{spec.args()[:2]} printed nothing"
    return json.loads(line)


def _same(echoed, given: str | bool) -> bool:
    if isinstance(given, bool):
        return echoed is True or echoed == "on"
    if isinstance(echoed, bool):
        return given == ("on" if echoed else "off") or given == str(echoed).lower()
    if isinstance(echoed, float) or (isinstance(echoed, int) and "." in given):
        return float(echoed) == pytest.approx(float(given), rel=1e-6)
    return str(echoed) == given


def test_every_flag_of_every_spec_is_what_the_engine_ran_with(chain, tmp_path):
    """Every field set (as above), each spec run by the real engine: its first record's
    `options` hold each flag of the argv with the value the lab gave, so nothing is dropped
    between the lab and the engine's loops (a dropped flag would come back as the engine's
    default)."""
    every = every_field_set(chain, tmp_path)
    tls13 = runner.Tls(
        stack=stacks.get("openssl"),
        groups=(alg("X25519", "kem"), alg("X25519MLKEM768", "kem")),
        sigalgs=(alg("ECDSA-P256"),),
        ciphersuites="TLS_AES_256_GCM_SHA384",
        events=False,
        keylog=tmp_path / "keys13.log",
        io_timeout=7,
    )
    import subprocess
    from dataclasses import replace

    from tls_helpers import openssl_bin

    by_type = {type(s): s for s in every}
    memory_server, memory_client = (s for s in every if isinstance(s, runner.MemorySpec))
    server = by_type[runner.ServerSpec]
    # A real PEM for --dh-params: RFC 7919's ffdhe2048.
    subprocess.run(
        [openssl_bin(), "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt",
         "group:ffdhe2048", "-out", str(server.dh_params)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    # The TLS 1.2 server with every field, and a TLS 1.3 one the clients can finish with.
    server13 = replace(
        server,
        tls=tls13,
        dh_bits=None,
        dh_params=None,
        max_connections=None,
        concurrent=False,
        max_concurrent=None,
    )
    with runner.start_server(server13) as live:
        port = live.listening["port"]
        client = replace(by_type[runner.ClientSpec], tls=tls13, connect=f"127.0.0.1:{port}")
        # --threads and --concurrent exclude each other, as --dh-bits and --dh-params do:
        # each in one of two runs.
        runs = [
            (replace(server, concurrent=False, max_concurrent=None, dh_bits=None), "listening"),
            (replace(server, threads=None, dh_params=None), "listening"),
            # --request-bytes and --request-path exclude each other: each in one run.
            (replace(client, request_path=None), "config"),
            (replace(client, request_bytes=None, warmup_request_bytes=None), "config"),
            # The load generator paces with --rate, not the client's --gap-ms, and reports a
            # summary: no rounds, no file of connection records.
            (
                replace(
                    by_type[runner.LoadSpec],
                    client=replace(
                        client,
                        gap_ms=0,
                        request_path=None,
                        warmup_request_bytes=None,
                        rounds=(),
                        connection_records=None,
                    ),
                ),
                None,
            ),
            # Bulk transfers use --push-bytes and --pull-bytes instead.
            (
                replace(
                    by_type[runner.BulkSpec],
                    client=replace(
                        client,
                        gap_ms=0,
                        request_bytes=None,
                        warmup_request_bytes=None,
                        request_path=None,
                        rounds=(),
                        connection_records=None,
                    ),
                ),
                None,
            ),
        ]
        runs += [
            (memory_server, "memory_setup"),
            (replace(memory_client, connect=f"127.0.0.1:{port}"), "memory_setup"),
            (replace(by_type[runner.HoldSpec], connect=f"127.0.0.1:{port}"), "config"),
        ]
        if os.geteuid() == 0:  # the link emulator makes TUN devices: root only
            tag = os.getpid() % 100000  # devices of this test's own
            linkem = replace(by_type[shaping.LinkemSpec], tun_a=f"pqr{tag}a", tun_b=f"pqr{tag}b")
            runs.append((linkem, "linkem_ready"))
        for spec, kind in runs:
            rec = _first_record(spec)
            assert rec.get("type") != "error", f"{type(spec).__name__}: {rec}"
            if kind:
                assert rec["type"] == kind, rec
            echoed = rec["options"]
            for flag, given in _flags(spec.args()).items():
                key = "count" if flag == "-n" else flag.lstrip("-")
                assert key in echoed, f"{type(spec).__name__}: {flag} not echoed: {echoed}"
                assert _same(echoed[key], given), (
                    f"{type(spec).__name__}: {flag} {given!r} given, the engine ran with "
                    f"{echoed[key]!r}"
                )


def test_the_table_walk_would_have_caught_dropped_flags(chain):
    args = server_spec(chain, threads=4, max_response_bytes=1 << 33).args()
    assert args[args.index("--threads") + 1] == "4"
    assert args[args.index("--max-response-bytes") + 1] == str(1 << 33)


def test_client_check_failures_raise_the_engines_error(chain):
    with runner.start_server(server_spec(chain)) as srv, pytest.raises(EngineError, match="group"):
        runner.run_client(
            client_spec(chain, srv.listening["port"], groups=("X25519", "P-256"), expect="P-256"),
            timeout=60,
        )


def test_server_start_error_raises(chain, tmp_path):
    from dataclasses import replace

    missing = replace(chain, chain=tmp_path / "missing.pem")
    with pytest.raises(EngineError, match="cert-chain"):
        runner.start_server(server_spec(missing))


def test_wait_for_is_bounded(chain):
    proc = process.EngineProcess(["info"], "engine info")
    with pytest.raises(EngineError, match="did not report"):
        proc.wait_for("no-such-record", 20)
    assert proc.p.returncode is not None  # stopped and reaped


def test_negotiation_check_uses_code_points():
    from pqlab.tls import negotiation, stacks

    rec = {
        "role": "client",
        "verified": True,
        "negotiated": {"version": "TLSv1.3", "group": "P-256", "sigalg": "mldsa44"},
    }
    exp = Expected(group=alg("secp256r1", "kem"), sigalg=alg("ML-DSA-44"))
    negotiation.check(rec, exp, stacks.get())  # "P-256" and "secp256r1" are one group
    with pytest.raises(CheckError, match="asked for X25519"):
        negotiation.check(rec, Expected(group=alg("X25519", "kem")), stacks.get())
    with pytest.raises(CheckError, match="did not verify"):
        negotiation.check({**rec, "verified": False}, Expected(), stacks.get())
    rec13 = {**rec, "negotiated": {**rec["negotiated"], "version": "TLSv1.2"}}
    with pytest.raises(CheckError, match="TLSv1.2"):
        negotiation.check(rec13, Expected(), stacks.get())


@pytest.mark.net
def test_across_topology(chain):
    from pqlab.net.shaping import build_hosts

    with build_hosts(None) as topo:
        spec = server_spec(chain, listen=f"{topo.server_ip}:0", max_connections=3)
        with runner.start_server(spec, topo) as srv:
            assert srv.listening["address"].startswith(topo.server_ip)
            recs = runner.run_client(
                client_spec(
                    chain, srv.listening["port"], host=topo.server_ip, n=3, request_bytes=30000
                ),
                topo,
                timeout=120,
            )
            server_recs = srv.finish(30)
    assert [r["app_bytes_received"] for r in recs] == [30000] * 3
    assert all(r["tcp_info"]["snd_mss"] == 1448 for r in recs)
    assert sum(r["type"] == "connection" for r in server_recs) == 3
