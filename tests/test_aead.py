"""pqlab aead: the issue's matrix end to end, the record checks, the AES-NI masks, bad input.

Durations are tiny (no speed assertions: the machine is shared)."""

from __future__ import annotations

import csv
import json
import platform
import shutil

import pytest

from pqlab import cli, engine
from pqlab.errors import EngineError
from pqlab.experiments.aead import document as aead_document
from pqlab.experiments.aead import plan as aead_plan
from pqlab.experiments.aead import report as aead_report
from pqlab.experiments.aead import run as aead_run


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_issue_matrix_produces_every_cell(tmp_path):
    out = tmp_path / "run"
    rc = cli.main(
        [
            "aead",
            "--ciphers",
            "aes-128-gcm,chacha20-poly1305,aes-128-ccm",
            "--sizes",
            "16,1024,16384",
            "--aesni",
            "on,off",
            "--seconds",
            "0.02",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = _rows(out / "tables" / "aead.csv")
    for col in (
        "cipher",
        "aesni",
        "mode",
        "record_bytes",
        "direction",
        "mb_per_s",
        "openssl_kbytes_per_s",
        "cpu_mask",
        "openssl_ia32cap",
    ):
        assert col in rows[0]
    cells = {(r["cipher"], r["aesni"], r["record_bytes"], r["direction"]) for r in rows}
    want = {
        (c, a, s, d)
        for c in ("aes-128-gcm", "chacha20-poly1305", "aes-128-ccm")
        for a in ("on", "off")
        for s in ("16", "1024", "16384")
        for d in ("encrypt", "decrypt")
    }
    assert cells == want
    assert len(rows) == len(want)
    for r in rows:
        assert r["mode"] == "fair"
        assert float(r["mb_per_s"]) > 0
        # OpenSSL's unit is 1000 bytes per second; MB/s is 10^6 bytes per second.
        assert float(r["openssl_kbytes_per_s"]) == pytest.approx(
            float(r["mb_per_s"]) * 1000, rel=1e-3
        )
        assert r["records"] == r["verified_records"]
        assert r["cpu_mask"] == ("none" if r["aesni"] == "on" else "documents")
        assert int(r["aad_bytes"]) == 13
    assert (out / "tables" / "aead_aes_128_gcm_vs_chacha.csv").exists()
    assert (out / "figures" / "aead_fair_encrypt.png").exists()
    # Document 001's section 5.4.2: what AES-NI is worth, per cipher and record size.
    ratios = _rows(out / "tables" / "aead_aesni_ratio.csv")
    assert {(r["cipher"], r["record_bytes"], r["direction"]) for r in ratios} == {
        (c, s, d) for c, _, s, d in want
    }
    by = {(r["cipher"], r["record_bytes"], r["direction"]): r for r in ratios}
    for r in ratios:
        on, off = float(r["aesni_on_cpu_mb_per_s"]), float(r["aesni_off_cpu_mb_per_s"])
        assert float(r["on_over_off"]) == pytest.approx(on / off, rel=0.01)
    # Software AES-GCM (the documents' mask also removes the vector units) is several
    # times slower on any x86 CPU with AES-NI.
    assert float(by[("aes-128-gcm", "16384", "encrypt")]["on_over_off"]) > 2
    assert (out / "figures" / "aead_aesni_ratio.png").exists()
    # The document's own ratio of the same cell beside pqlab's (its mask is the default's);
    # none for CCM, whose document numbers are not throughputs.
    doc = by[("aes-128-gcm", "16384", "encrypt")]
    assert float(doc["document_linux"]) == pytest.approx(4795012.44 / 239697.92, rel=1e-3)
    assert all(by[("aes-128-ccm", s, "encrypt")]["document_linux"] == "" for s in ("16", "16384"))
    html = (out / "report.html").read_text()
    assert "CCM" in html and "~0x200000200000000" in html
    # The report is rebuilt from the database alone.
    (out / "tables" / "aead.csv").unlink()
    assert cli.main(["report", str(out)]) == 0
    assert len(_rows(out / "tables" / "aead.csv")) == len(want)


def test_speed_compatible_mode_and_baselines(tmp_path):
    out = tmp_path / "run"
    rc = cli.main(
        [
            "aead",
            "--ciphers",
            "chacha20,chacha20-poly1305,aes-128-gcm,aes-128-ecb",
            "--sizes",
            "64",
            "--aesni",
            "on",
            "--mode",
            "both",
            "--seconds",
            "0.01",
            "--directions",
            "encrypt",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = _rows(out / "tables" / "aead.csv")
    assert {(r["cipher"], r["mode"]) for r in rows} == {
        (c, m)
        for c in ("chacha20", "chacha20-poly1305", "aes-128-gcm", "aes-128-ecb")
        for m in ("fair", "speed-compatible")
    }
    by = {(r["cipher"], r["mode"]): r for r in rows}
    # speed re-keys GCM per call without AAD; it streams ChaCha20-Poly1305.
    assert by[("aes-128-gcm", "speed-compatible")]["key_set_per_record"] == "true"
    assert by[("aes-128-gcm", "speed-compatible")]["aad_bytes"] == "0"
    assert "stream" in by[("chacha20-poly1305", "speed-compatible")]["nonce"]
    assert by[("aes-128-ecb", "fair")]["aad_bytes"] == "0"
    poly = _rows(out / "tables" / "aead_poly1305_overhead.csv")
    assert poly
    for r in poly:  # the document's ratio and the extra time read the same measurement
        ratio, pct = float(r["chacha20_poly1305_over_chacha20"]), float(r["poly1305_overhead_pct"])
        assert ratio == pytest.approx(1 / (1 + pct / 100), rel=0.01)
        # Beside it, the document's ratio at the same AES-NI setting and record size (64
        # bytes, Linux Core i7, table 5.7 / 5.11).
        assert float(r["document_linux"]) == pytest.approx(471620.46 / 596987.80, rel=1e-3)
    assert _rows(out / "tables" / "aead_modes.csv")


@pytest.mark.parametrize("mode", ["fair", "speed-compatible"])
@pytest.mark.parametrize("direction", ["encrypt", "decrypt"])
@pytest.mark.parametrize("cipher", ["aes-128-gcm", "aes-256-ccm", "chacha20-poly1305"])
def test_corrupted_tag_is_detected(cipher, direction, mode):
    args = [
        "aead",
        "--cipher",
        cipher,
        "--sizes",
        "64",
        "--directions",
        direction,
        "--mode",
        mode,
        "--seconds",
        "0.002",
        "--inject-fault",
        "tag",
    ]
    with pytest.raises(EngineError) as e:
        engine.run(args, timeout=60)
    assert "record" in str(e.value) or "tag" in str(e.value)
    # The same run without the fault passes its checks.
    records = engine.run(args[:-2], timeout=60)
    cell = [r for r in records if r["type"] == "cell"][0]
    assert cell["verified_records"] == cell["records"] > 0


def test_corrupted_data_of_unauthenticated_cipher_is_detected():
    with pytest.raises(EngineError, match="plaintext"):
        engine.run(
            [
                "aead",
                "--cipher",
                "aes-128-ctr",
                "--sizes",
                "64",
                "--directions",
                "decrypt",
                "--seconds",
                "0.002",
                "--inject-fault",
                "data",
            ],
            timeout=60,
        )


@pytest.mark.parametrize("cipher", ["aes-128-gcm", "chacha20-poly1305", "aes-128-ctr"])
def test_fair_encryption_is_checked_against_the_verified_reference_records(cipher):
    """Fair encryption: every timed record must reproduce, byte for byte, the reference record
    of its nonce (made and verified by decryption before timing); a corrupted ciphertext is
    caught by that comparison."""
    args = ["aead", "--cipher", cipher, "--sizes", "64", "--directions", "encrypt"]
    args += ["--seconds", "0.002", "--batch-bytes", "1024"]
    with pytest.raises(EngineError, match="differs from the verified reference record"):
        engine.run([*args, "--inject-fault", "data"], timeout=60)
    cell = [r for r in engine.run(args, timeout=60) if r["type"] == "cell"][0]
    # Several batches, every record of each checked.
    assert cell["records"] > cell["batch_records"] == 1024 // 64
    assert cell["verified_records"] == cell["records"]
    assert cell["nonce"] == "fresh per record of a batch, reused by every batch"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86_64 masks")
def test_masks_change_the_features_openssl_uses():
    full = aead_run.probe_cpu(None)
    if not full["features"]["aesni"]:
        pytest.skip("this CPU has no AES-NI")
    docs = aead_run.probe_cpu(aead_plan.MASKS["documents"])
    precise = aead_run.probe_cpu(aead_plan.MASKS["precise"])
    assert docs["openssl_ia32cap"] != full["openssl_ia32cap"]
    for rec in (docs, precise):
        assert rec["features"]["aesni"] is False
        assert rec["features"]["pclmulqdq"] is False
        assert rec["features"]["vaes"] is False
        assert rec["features"]["vpclmulqdq"] is False
        assert not rec["aes_gcm_path"].startswith(("vaes", "aesni"))
    # The documents' mask also takes the CPUID(7) features; the precise one keeps them.
    if full["features"]["avx2"]:
        assert docs["features"]["avx2"] is False
        assert precise["features"]["avx2"] is True
    assert precise["features"]["ssse3"] == full["features"]["ssse3"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--ciphers", "aes-128-gcm,rot13"], "unknown cipher 'rot13'"),
        (["--sizes", "16,abc"], "'abc'"),
        (["--sizes", "0"], "outside"),
        (["--ciphers", "aes-128-ecb", "--sizes", "17"], "multiple of 16"),
        (["--aesni", "maybe"], "--aesni"),
        (["--mask", "loose"], "--mask"),
        (["--mode", "fast"], "--mode"),
        (["--seconds", "0"], "--seconds"),
        (["--seconds", "x"], "--seconds"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, needle):
    rc = cli.main(["aead", *argv, "--out", str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()  # validated before anything was created


def _benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "aead_vs_openssl_speed.py"
    spec = importlib.util.spec_from_file_location("aead_vs_openssl_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_holds_fair_mode_to_openssl_speed_for_every_cipher():
    bench = _benchmark()
    # Each comparison is the median over the rounds of the ratio within a round (CPU, wall),
    # as measure_cipher stores it.
    gcm = {"streamed": False, "paired": {"fair / speed": (0.95, 0.96)}}
    assert [w for w, *_ in bench.checks(gcm)] == ["fair / speed"]
    assert bench.within(0.951) and not bench.within(0.94) and not bench.within(1.06)
    # ChaCha20-Poly1305, which speed streams, is held to speed too; the C record loop adds
    # a second check (what pqlab adds to the library's own per-record work).
    chacha = {
        "streamed": True,
        "paired": {"fair / speed": (0.93, 0.92), "fair / C record loop": (0.99, 0.98)},
    }
    got = {w: cpu for w, cpu, _ in bench.checks(chacha)}
    assert got == {"fair / speed": 0.93, "fair / C record loop": 0.99}
    assert [w for w, cpu in got.items() if not bench.within(cpu)] == ["fair / speed"]
    assert bench.SPEED_PER_RECORD == {c for c in aead_report.AEADS if "chacha" not in c}


def test_benchmark_reads_speed_and_compares_code_paths():
    bench = _benchmark()
    err = (
        "Doing ChaCha20-Poly1305 ops for 3s on 16384 size blocks: "
        "375000 ChaCha20-Poly1305 ops in 2.99s\n"
    )
    out = "version: 3.5.4\ntype          16384 bytes\nChaCha20-Poly1305  2054848.21k\n"
    assert bench.parse_speed(out, err, 16384) == {"ops": 375000, "own": 2054848210.0}
    speed = {"ChaCha20_8x": 0.62, "poly1305_blocks_avx2": 0.35, "chacha20_cipher": 0.01}
    # pqlab's samples also hold its untimed copies and checks: not a different path.
    ours = {"ChaCha20_8x": 0.5, "poly1305_blocks_avx2": 0.28, "__memcmp_avx2_movbe": 0.12}
    assert bench.same_path(ours, speed) == []
    # The same cipher through another routine (say the AVX-512 one) is.
    other = {"ChaCha20_16x": 0.6, "poly1305_blocks_avx2": 0.3}
    assert [d.split()[0] for d in bench.same_path(other, speed)] == ["ChaCha20_16x", "ChaCha20_8x"]
    # A label inside an assembly routine counts as the routine (perf names samples after
    # either, one way in one binary and the other way in another).
    engine_binary = engine.engine_path()
    owner = bench.routines(engine_binary)
    assert owner["_bsaes_encrypt8_bitslice"] == "_bsaes_encrypt8"
    assert "ChaCha20_4x" not in owner  # a routine of its own, sized


def test_fair_records_cost_the_instructions_a_record_layer_costs(tmp_path):
    """pqlab's timed work per fair record, counted by callgrind (exact, whatever the load):
    within 3 % of a C loop making libssl's TLS 1.3 record-layer calls against the same
    libcrypto, at 1 KiB, where the library's per-record work is a third of a record. Setting
    padding off on the context, which libssl never does, made every record 5 % dearer here:
    OpenSSL sends the setting to the provider again at every init."""
    bench = _benchmark()
    openssl = bench.ROOT / "build" / "openssl" / "bin" / "openssl"
    if shutil.which("valgrind") is None or shutil.which("cc") is None or not openssl.is_file():
        pytest.skip("needs valgrind, a C compiler and build/openssl")
    reference = bench.build_reference(openssl, tmp_path)
    env = bench.env_with(None)
    argv = [str(engine.engine_path()), *bench.pqlab_argv("chacha20-poly1305", 1024, 0.05)]
    ir, out, _ = bench.callgrind_ir(argv, "*timed_batch*", env, tmp_path)
    cell = [r for r in map(json.loads, out.splitlines()) if r["type"] == "cell"][0]
    assert ir > 1000 * cell["records"] > 0  # the toggle found the timed batches
    ours = ir / cell["records"]
    c_loop = [str(reference), "chacha20-poly1305", "1024", "0.2", "records"]
    ir, out, _ = bench.callgrind_ir(c_loop, "run_calls*", env, tmp_path)
    theirs = ir / json.loads(out)["calls"]
    assert theirs > 1000
    assert ours <= 1.03 * theirs, f"{ours:.0f} instructions a record against {theirs:.0f}"


def test_document_tables_hold_what_the_document_says_of_them():
    """The transcribed tables 5.5-5.20 checked against the document's own sentences about
    them, an independent source for the transcription."""
    on_off = {
        (p["name"], c, size): aead_document.aesni_columns(
            {"cipher": c, "record_bytes": size, "off_mask": "documents"}
        )[aead_document.column(p["name"])]
        for p in aead_document.platforms()
        for c in ("aes-128-gcm", "chacha20-poly1305", "aes-128-ccm")
        for size in (16, 256, 1024, 16384)
    }
    # 5.4.2: on the Xeon (Amazon Linux) AES-GCM gains about 5x with AES-NI at large records,
    # ChaCha20-Poly1305 about nothing at any size.
    assert 4.5 < on_off[("amazon-linux", "aes-128-gcm", 16384)] < 5.5
    assert all(
        0.95 < on_off[("amazon-linux", "chacha20-poly1305", n)] < 1.05 for n in (16, 256, 16384)
    )
    # 5.4.2: on the Core i7s ChaCha20-Poly1305 gains 1.6-2.0x above 256 bytes.
    for p in ("windows", "macos", "linux"):
        assert 1.55 < on_off[(p, "chacha20-poly1305", 16384)] < 2.1
        assert on_off[(p, "aes-128-gcm", 16384)] > 12
    # No ratio from CCM: its numbers were no throughputs.
    assert on_off[("linux", "aes-128-ccm", 16384)] is None
    # 5.3.3 as pqlab's report puts it: speed's AES-CCM "ran" about 21 million calls per
    # second at every record size on Windows (337,223 k at 16 bytes).
    calls = [
        aead_document.throughput("windows", "on", "aes-128-ccm", n) * 1000 / n
        for n in (16, 64, 256, 1024, 8192, 16384)
    ]
    assert all(2.0e7 < c < 2.3e7 for c in calls), calls
    # 5.4.1: ChaCha20-Poly1305 runs at about 0.7 times ChaCha20 alone.
    poly = aead_document.poly1305_columns(
        {"aesni": "on", "cpu_mask": "none", "record_bytes": 16384}
    )
    assert all(0.58 < v < 0.75 for v in poly.values()), poly
    # A mask the document did not use has no document value.
    precise = aead_document.poly1305_columns(
        {"aesni": "off", "cpu_mask": "precise", "record_bytes": 16384}
    )
    assert set(precise.values()) == {None}
