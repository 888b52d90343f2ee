"""TLS stacks as the lab sees them: everything comes from the engine's `info` report, so a
new stack needs no change in the lab. A fake second stack (OpenSSL's capabilities under
another name) goes through validation, argument building and the checks unchanged."""

from __future__ import annotations

import argparse
import copy

import pytest

from conftest import run_pqlab
from pqlab import catalog, engine
from pqlab.errors import UserError
from pqlab.tls import runner, stacks


@pytest.fixture
def fake_stack(monkeypatch):
    """The engine's report with one more stack, 'fake-openssl', that can do what OpenSSL can
    but MAYO-1 too (as a liboqs-backed stack would), and nothing else changed."""
    info = copy.deepcopy(engine.info())
    fake = copy.deepcopy(next(s for s in info["tls_stacks"] if s["name"] == "openssl"))
    fake["name"] = "fake-openssl"
    fake["implementation"] = "OpenSSL under another name"
    mayo = catalog.resolve("MAYO-1", "sig")
    fake["sigalgs"].append({"name": "mayo1", "code": mayo.tls_sigscheme})
    fake["cert_key_types"].append("MAYO-1")
    fake["message_events"] = False
    info["tls_stacks"].append(fake)
    monkeypatch.setattr(engine, "info", lambda: info)
    stacks.all_stacks.cache_clear()
    yield stacks.get("fake-openssl")
    stacks.all_stacks.cache_clear()


def test_usable_is_one_answer_per_stack_and_role():
    ossl = stacks.get("openssl")
    mlkem, mayo = catalog.resolve("ML-KEM-768", "kem"), catalog.resolve("MAYO-1", "sig")
    assert ossl.usable(mlkem, "group")
    assert not ossl.usable(catalog.resolve("BIKE-L1", "kem"), "group")
    assert not stacks.get("openssl").usable(mayo, "server")
    assert not ossl.usable(catalog.resolve("Falcon-512", "sig"), "ca")
    assert ossl.usable(catalog.resolve("ML-DSA-44", "sig"), "ca")
    # SLH-DSA can sign certificates in OpenSSL 3.5 but has no TLS signature scheme there.
    slh = catalog.resolve("SLH-DSA-SHA2-128s", "sig")
    assert ossl.usable(slh, "ca") and not ossl.usable(slh, "server")
    why = stacks.get().why_not(mayo, "server")
    assert "MAYO-1" in why and "openssl" in why


def test_every_group_the_engine_reports_is_named_by_code():
    st = stacks.get()
    for alg in catalog.all_algorithms("kem"):
        if alg.tls_group in st.groups:
            assert st.group_name(alg)
            assert st.code_of_group(st.group_name(alg)) == alg.tls_group


def test_a_fake_second_stack_needs_no_change_in_the_lab(fake_stack):
    from pqlab.experiments.handshake import plan as hs_plan

    mayo = catalog.resolve("MAYO-1", "sig")
    assert fake_stack.usable(mayo, "server")
    assert not stacks.get("openssl").usable(mayo, "server")
    assert fake_stack.key_spec(mayo) == "MAYO-1"
    values = argparse.Namespace(
        groups="X25519MLKEM768",
        server_sig="MAYO-1",
        ca_sig="ML-DSA-44",
        n="5",
        warmup="0",
        rounds="auto",
        seed=None,
        stack="fake-openssl",
        keep_pcap=False,
        send_root=False,
        chain_bytes=None,
        messages="auto",
        port="4433",
        profile=None,
        shaper="auto",
    )
    plan = hs_plan.from_values(values)
    assert plan.stack.name == "fake-openssl"
    assert plan.messages == "keylog"  # no message callback on this stack: the key log
    cell = plan.cell_id(plan.groups[0], plan.server_sigs[0], plan.ca_sigs[0])
    assert cell.stack == "fake-openssl" and str(cell).endswith("|fake-openssl")
    tls = runner.Tls(stack=fake_stack, groups=plan.groups, sigalgs=plan.server_sigs)
    args = tls.args()
    assert args[:2] == ["--stack", "fake-openssl"]
    assert args[args.index("--sigalgs") + 1] == "mayo1"
    # The same plan on the real OpenSSL stack is refused before anything exists.
    values.stack = "openssl"
    with pytest.raises(UserError, match="MAYO-1"):
        hs_plan.from_values(values)


def test_unknown_stack_is_one_line():
    with pytest.raises(UserError, match="--stack 'nope' is not a TLS stack.*openssl"):
        stacks.get("nope")


def test_algorithms_tls_lists_each_stacks_roles_with_code_points(fake_stack):
    from pqlab.commands import algorithms

    rows = algorithms.tls_rows([stacks.get("openssl"), fake_stack], catalog.all_algorithms())
    got = {(r["stack"], r["role"], r["algorithm"]): r for r in rows}
    assert got["openssl", "server", "ML-DSA-44"]["code"] == 0x0904
    assert got["openssl", "group", "X25519MLKEM768"]["stack_name"] == "X25519MLKEM768"
    assert ("openssl", "ca", "SLH-DSA-SHA2-128s") in got  # signs certificates only
    assert ("openssl", "server", "SLH-DSA-SHA2-128s") not in got
    assert ("openssl", "server", "MAYO-1") not in got
    assert got["fake-openssl", "server", "MAYO-1"]["stack_name"] == "mayo1"
    # The same answer every command validates with.
    for (st, role, name), _ in got.items():
        if name != "(not catalogued)":
            alg = catalog.resolve(name, "kem" if role == "group" else "sig")
            assert stacks.get(st).usable(alg, role)


def test_algorithms_tls_command_line():
    out = run_pqlab("algorithms", "--tls", "--stack", "openssl")
    assert out.returncode == 0, out.stderr
    assert "ML-DSA-44" in out.stdout and "0x0904" in out.stdout
    bad = run_pqlab("algorithms", "--tls", "--stack", "gnutls")
    assert bad.returncode == 2 and "gnutls" in bad.stderr and "openssl" in bad.stderr


def test_each_stack_runs_on_the_program_that_carries_it():
    """pqlab-engine carries OpenSSL and rustls; wolfSSL (GPL) is in pqlab-engine-wolfssl.
    The lab finds that from the programs' own info, and every program's build id is in the
    engine metadata (a resume must find the same programs)."""
    assert stacks.get("openssl").program == "pqlab-engine"
    assert stacks.get("rustls").program == "pqlab-engine"
    wolfssl = stacks.get("wolfssl")
    assert wolfssl.program == "pqlab-engine-wolfssl"
    # A spec runs on its stack's program; a command without a stack on the main one.
    spec = runner.Tls(stack=wolfssl)
    assert spec.program == "pqlab-engine-wolfssl"
    assert engine.command(spec.args(), program=spec.program)[0].endswith("/pqlab-engine-wolfssl")
    assert engine.command(["tls", "certs"])[0].endswith("/pqlab-engine")
    # The programs are the engine workspace's (found in its manifests, listed nowhere).
    assert engine.programs() == ("pqlab-engine", "pqlab-engine-wolfssl")
    info = engine.info()
    assert set(info["programs"]) == set(engine.programs())
    assert all(info["programs"].values())
    wolf = next(s for s in info["tls_stacks"] if s["name"] == "wolfssl")
    assert wolf["program"] == "pqlab-engine-wolfssl" and wolf["build_options"]


@pytest.mark.parametrize("stack", sorted(stacks.all_stacks()))
def test_a_client_hello_is_the_same_whatever_root_the_client_trusts(tmp_path, stack):
    """The measured ClientHello is kept per stack, group, schemes and server name, not per
    root: a root of another algorithm (and size) leaves the hello as it was."""
    from pqlab.tls.chains import make_chain

    st = stacks.get(stack)
    group = st.group_name(catalog.resolve("X25519MLKEM768", "kem"))
    sigalg = st.sigalg_name(catalog.resolve("ECDSA-P256", "sig"))
    sizes = set()
    for ca in ("RSA-3072", "ECDSA-P256"):
        root = make_chain(tmp_path / ca, ca, "ECDSA-P256", stack).root
        stacks._HELLOS.clear()
        sizes.add(stacks.client_hello(st, group, sigalg, "198.18.0.2", str(root)))
    assert len(sizes) == 1
