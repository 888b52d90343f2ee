"""Document 003's comparisons across profiles and the chain-size sweep's steps, as pure
arithmetic: figure 1's pooled percentiles recomputed from the raw samples with the
standard library, the degradation against the clean link per profile, which profiles pool
and which is whose reference, the document's own numbers against what its text says of
them, and where a sweep steps. Deterministic; no network."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from pqlab.experiments.ttlb import across, analyse, document, report, schema, sweep
from pqlab.net.profiles import load_profiles
from pqlab.store import RunStore

# Document 003's figure 1: 1 Mbit/s, loss 0, 1, 3, 10 %, RTT 35 and 200 ms, initcwnd 20.
FIGURE1 = [
    "1mbps-35ms",
    "1mbps-200ms",
    "rtt=35ms,rate=1mbit,loss=1%,initcwnd=20",
    "rtt=35ms,rate=1mbit,loss=3%,initcwnd=20",
    "rtt=35ms,rate=1mbit,loss=10%,initcwnd=20",
    "rtt=200ms,rate=1mbit,loss=1%,initcwnd=20",
    "rtt=200ms,rate=1mbit,loss=3%,initcwnd=20",
    "lossy-10pct",
]
OTHERS = ["1gbps-35ms", "lossy-5pct-1gbps", "pareto-35ms"]
BASE = ("X25519", "RSA-2048", 8000)
PQ = ("X25519MLKEM768", "RSA-2048", 16000)
CHAIN16 = ("X25519", "RSA-2048", 16000)


def _descs(specs) -> dict[str, dict]:
    return {p.name: p.describe() for p in load_profiles(specs)}


def _inclusive(values, p: int) -> float:
    """The p-th percentile by linear interpolation between closest ranks, from the
    standard library (numpy's default method, computed independently)."""
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def test_figure1_profiles_pool_together_and_nothing_else_does():
    pools = across.pools(_descs(FIGURE1 + OTHERS))
    names = {p.name for p in load_profiles(FIGURE1)}
    assert sorted(names) in pools
    # 1 Gbit/s with and without loss pool too (same rate, queue and window); the jittery
    # link pools with nothing.
    gig = {p.name for p in load_profiles(["1gbps-35ms", "lossy-5pct-1gbps"])}
    assert sorted(gig) in pools
    assert len(pools) == 2


def test_each_degraded_profile_has_the_clean_one_of_its_rtt_and_rate():
    refs = across.references(_descs(FIGURE1 + OTHERS))
    assert refs["lossy-10pct"] == "1mbps-200ms"
    assert refs["rtt=35ms,rate=1mbit,loss=3%,initcwnd=20"] == "1mbps-35ms"
    assert refs["rtt=200ms,rate=1mbit,loss=1%,initcwnd=20"] == "1mbps-200ms"
    assert refs["lossy-5pct-1gbps"] == "1gbps-35ms"
    assert refs["pareto-35ms"] == "1gbps-35ms"  # jitter degrades a link too
    assert "1mbps-35ms" not in refs and "1gbps-35ms" not in refs  # clean links


def test_the_documents_numbers_say_what_its_text_says():
    """'97-331 %' from its classical TTLBs at 10 % and 0 % loss (its own rounded
    milliseconds give 96.4 and 330.5), and the post-quantum TTLB '20-30 %' above."""
    got = [document.degradation_pct(p) for p in analyse.PERCENTILES]
    low, high = document.STATED_DEGRADATION_PCT
    assert abs(min(got) - low) < 1 and abs(max(got) - high) < 1
    assert got == sorted(got)
    for p in analyse.PERCENTILES:
        pq = (document.PQ_LOSSY_MS[p] / document.CLASSICAL_LOSSY_MS[p] - 1) * 100
        assert document.STATED_PQ_INCREASE_PCT[0] <= pq <= document.STATED_PQ_INCREASE_PCT[1]
    lossy = _descs(["lossy-10pct"])["lossy-10pct"]
    assert document.is_loss_condition(lossy)
    assert not document.is_loss_condition(_descs(["1mbps-200ms"])["1mbps-200ms"])


def test_pooled_percentiles_are_the_pooled_datasets_not_an_average():
    a = [100.0, 101.0, 102.0, 103.0]
    b = [300.0, 310.0, 900.0]
    pooled = across.pooled_percentiles([a, b])
    for p in analyse.PERCENTILES:
        assert pooled[p] == pytest.approx(_inclusive(a + b, p))
    mean_of_profiles = (np.percentile(a, 50) + np.percentile(b, 50)) / 2
    assert pooled[50] != pytest.approx(mean_of_profiles)


@pytest.fixture
def store(tmp_path):
    s = RunStore.create(tmp_path / "run", "")
    schema.ensure(s)
    yield s
    s.close()


def _samples(rng, profile: str, combo: tuple, size: int, n: int) -> list[float]:
    """TTFB samples in ms: slower links, losses and larger flights cost more."""
    desc = _descs([profile])[load_profiles([profile])[0].name]
    base = (
        2 * desc["rtt_ms"]
        + (combo[2] or 2000) * 8 / 1e3
        + (1200 * 8 / 1e3 if "MLKEM" in combo[0] else 0)
    )
    spread = 1 + desc["s2c"]["loss_pct"] * rng.exponential(0.3, n)
    return list(base * spread + size * 8 / 1e3)


def _fill(store, cells: dict[tuple, int]) -> dict[tuple, list[float]]:
    """ttlb_raw rows for (profile spec, combination, size) -> n, and the profiles; returns
    the TTFB samples (ms) per (profile name, combination, size)."""
    rng = np.random.default_rng(3)
    rows, out = [], {}
    specs = sorted({k[0] for k in cells})
    for p in load_profiles(specs):
        store.insert_rows(
            "ttlb_profiles",
            [{"profile": p.name, "shaper": "userspace", "profile_json": json.dumps(p.describe())}],
        )
    names = {spec: p.name for spec, p in zip(specs, load_profiles(specs), strict=True)}
    for (spec, combo, size), n in cells.items():
        ttfb = _samples(rng, spec, combo, size, n)
        out[(names[spec], combo, size)] = ttfb
        for i, t in enumerate(ttfb):
            rows.append(
                {
                    "profile": names[spec],
                    "shaper": "userspace",
                    "grp": combo[0],
                    "chain": combo[1],
                    "chain_bytes_requested": combo[2],
                    "data_bytes": size,
                    "idx": i,
                    "ttfb_ns": int(t * 1e6),
                    "ttlb_ns": int((t + size / 100) * 1e6),
                    "retransmits": 0,
                    "client_hello_bytes": 179,
                    "server_flight_bytes": 9000,
                    "chain_der_bytes": combo[2],
                    "record_bytes_received": size,
                    "stack": "openssl",
                }  # fmt: skip
            )
    store.insert_rows("ttlb_raw", rows)
    return {k: [int(t * 1e6) / 1e6 for t in v] for k, v in out.items()}


def test_figure1_pooled_from_the_raw_samples(store):
    cells = {(spec, combo, 0): 7 for spec in FIGURE1 for combo in (BASE, PQ, CHAIN16)}
    cells[("lossy-10pct", BASE, 0)] = 11  # more connections weigh more in the pooled set
    cells[("1gbps-35ms", BASE, 0)] = 5  # not in the pool: another rate
    cells[("1gbps-35ms", PQ, 0)] = 5
    missing = "rtt=35ms,rate=1mbit,loss=3%,initcwnd=20"
    del cells[(missing, CHAIN16, 0)]  # pooled over the other seven, the baseline too
    samples = _fill(store, cells)
    summary = analyse.cell_summaries(store)
    rows = across.pooled_rows(store, summary, BASE)
    names = [p.name for p in load_profiles(FIGURE1)]
    assert {(r["group"], r["chain"], r["chain_bytes_requested"]) for r in rows} == {PQ, CHAIN16}
    assert len(rows) == 6
    for r in rows:
        p, combo = r["percentile"], (r["group"], r["chain"], r["chain_bytes_requested"])
        pooled = [n for n in names if combo == PQ or n != missing]
        mine = [t for n in pooled for t in samples[(n, combo, 0)]]
        base = [t for n in pooled for t in samples[(n, BASE, 0)]]
        assert r["n_profiles"] == len(pooled) and r["profiles"] == "; ".join(sorted(pooled))
        assert r["n"] == 7 * len(pooled) and r["baseline_n"] == 7 * len(pooled) + 4
        assert r["ttfb_ms"] == pytest.approx(_inclusive(mine, p))
        assert r["baseline_ttfb_ms"] == pytest.approx(_inclusive(base, p))
        assert r["increase_pct"] == pytest.approx((r["ratio"] - 1) * 100)
        assert r["document_ratio"] == (document.FIGURE1_RATIO if combo == PQ else None)
    pq = next(r for r in rows if r["group"] == PQ[0])
    assert pq["pool"] == "1 Mbit/s, initcwnd 20: RTT 35, 200 ms x loss 0, 1, 3, 10 %"


def test_degradation_against_the_clean_link(store):
    size = document.LOSS_RESPONSE_BYTES
    cells = {
        (spec, combo, s): 9
        for spec in ("1mbps-200ms", "lossy-10pct", "1gbps-35ms")
        for combo in (BASE, PQ)
        for s in (0, size)
    }
    samples = _fill(store, cells)
    summary = analyse.cell_summaries(store)
    rows = across.degradation_rows(store, summary, BASE)
    assert {r["profile"] for r in rows} == {"lossy-10pct"}
    assert len(rows) == 2 * 2 * 3  # combinations x sizes x percentiles
    for r in rows:
        combo = (r["group"], r["chain"], r["chain_bytes_requested"])
        lossy = samples[("lossy-10pct", combo, r["data_bytes"])]
        clean = samples[("1mbps-200ms", combo, r["data_bytes"])]
        want = (_inclusive(lossy, r["percentile"]) / _inclusive(clean, r["percentile"]) - 1) * 100
        assert r["reference_profile"] == "1mbps-200ms"
        assert r["ttfb_degradation_pct"] == pytest.approx(want)
        documented = r["data_bytes"] == size
        if documented and combo == BASE:
            assert r["document_ttlb_ms"] == document.CLASSICAL_LOSSY_MS[r["percentile"]]
            assert r["document_degradation_pct"] == pytest.approx(
                document.degradation_pct(r["percentile"])
            )
        elif documented:
            assert r["document_ttlb_ms"] == document.PQ_LOSSY_MS[r["percentile"]]
            assert r["document_degradation_pct"] is None
        else:
            assert r["document_ttlb_ms"] is None


def test_the_documents_pair_is_another_group_with_the_larger_chain():
    combos = {BASE: 8000, PQ: 16000, CHAIN16: 16000, ("X25519MLKEM768", "RSA-2048", 8000): 8000}
    assert across.document_combination(combos, BASE) == PQ
    own = {("X25519", "RSA-2048", None): 1842, ("X25519MLKEM768", "ML-DSA-44", None): 8245}
    own[("X25519MLKEM768", "RSA-2048", None)] = 1842
    got = across.document_combination(own, ("X25519", "RSA-2048", None))
    assert got == ("X25519MLKEM768", "ML-DSA-44", None)
    assert across.document_combination({BASE: 8000, CHAIN16: 16000}, BASE) is None


def test_serialisation_of_added_bytes():
    # One full segment at 1 Mbit/s: 1448 bytes of payload in a 1514-byte frame.
    assert sweep.serialisation_ms(1448, 1e6, 1448) == pytest.approx(1514 * 8 / 1e3)
    assert sweep.serialisation_ms(5000, None, 1448) == 0.0


LINK = {"rate_bps": 1e9, "mss": 1448, "rtt_ms": 35.0}


def _points(values, model=None):
    sizes = range(20000, 20000 + 1000 * len(values), 1000)
    return list(zip(sizes, values, model or [None] * len(values), strict=True))


def test_a_step_of_a_round_trip_at_the_cliff():
    points = _points([70.2, 70.4, 70.3, 105.6, 105.4], [70.0, 70.0, 70.0, 105.0, 105.0])
    (row,) = sweep.step_rows(points, [(3, 22481)], LINK)
    assert (row["after_chain_bytes"], row["at_chain_bytes"]) == (22000, 23000)
    assert row["measured_step"] == row["model_step"] == "up"
    assert row["measured_jump_ms"] == pytest.approx(35.3)
    assert row["predicted_cliff_bytes"] == 22481 and row["cliff_round_trips"] == 3
    assert row["within_one_segment"] is True and row["agree"] is True


def test_a_step_one_size_off_is_within_one_segment_and_a_far_one_is_not():
    points = _points([70.0, 70.0, 105.0, 105.0])  # steps between 21000 and 22000
    (row,) = sweep.step_rows(points, [(3, 22300)], LINK)  # cliff 300 bytes above
    assert row["at_chain_bytes"] == 22000 and row["within_one_segment"] is True
    rows = sweep.step_rows(_points([70.0, 105.0, 105.0, 105.0, 105.0]), [(3, 23900)], LINK)
    measured = next(r for r in rows if r["measured_step"])
    assert measured["within_one_segment"] is False  # no cliff within 1448 bytes
    hidden = next(r for r in rows if r["predicted_cliff_bytes"])
    assert hidden["measured_step"] is None and hidden["within_one_segment"] is None


def test_serialisation_is_not_a_step_and_a_faster_response_is_a_step_down():
    slow = {"rate_bps": 1e6, "mss": 1448, "rtt_ms": 35.0}
    per_kb = sweep.serialisation_ms(1000, 1e6, 1448)  # ~8.4 ms per 1000 bytes
    points = _points([100 + i * per_kb for i in range(5)])
    assert sweep.step_rows(points, [], slow) == []
    # Below the threshold (a quarter of the RTT) either way: noise, not a step.
    assert sweep.step_rows(_points([70.0, 78.0, 70.5]), [], LINK) == []
    (row,) = sweep.step_rows(_points([175.0, 175.2, 140.6]), [], LINK)
    assert row["measured_step"] == "down" and row["within_one_segment"] is None


def test_report_keeps_padded_chains_of_one_algorithm_apart(store):
    """With --chain-bytes 8000,16000 the 8 KB and 16 KB chains of one algorithm are two
    combinations: each has its own CDF and increase figures and its own bar (they shared
    one line and one bar, the first size found standing for both)."""
    from pqlab.experiments.ttlb import report

    cells = {
        (spec, combo, s): 5
        for spec in ("1mbps-35ms",)
        for combo in (BASE, PQ, CHAIN16)
        for s in (0, 10240)
    }
    _fill(store, cells)
    params = {"group": "X25519", "chain": "RSA-2048", "chain_bytes": 8000}
    with store.cell("ttlb", "first", params):
        pass
    section = report.export(store)
    figs = {f.name for f in (store.path / "figures").iterdir() if f.suffix == ".png"}
    for combo in (BASE, PQ, CHAIN16):
        assert f"ttlb_cdf_{combo[0]}_{combo[1]}_{combo[2]}.png" in figs
    assert "ttlb_increase_1mbps-35ms_X25519_RSA-2048_16000.png" in figs
    assert "ttlb_increase_1mbps-35ms_X25519MLKEM768_RSA-2048_16000.png" in figs
    captions = [b[2] for b in section.blocks if b[0] == "figure"]
    assert any("X25519 + RSA-2048 16000 B" in c for c in captions)


def test_a_later_sweep_does_not_move_the_baseline(store):
    """The classical combination is the first ttlb command's first group and chain at its
    smallest --chain-bytes size; a sweep run later into the same directory (a suite's
    last step) with smaller sizes of the same chain leaves it there (before, the smallest
    size of any command became the baseline, and every other profile lost its increases)."""
    meta = {"ttlb_groups": ["X25519", "X25519MLKEM768"], "ttlb_chains": ["RSA-2048"]}
    store.begin("ttlb", {**meta, "ttlb_chain_bytes": [16000, 8000]})
    store.begin("ttlb", {**meta, "ttlb_chain_bytes": list(range(2000, 40001, 1000))})
    assert analyse.baseline(store) == BASE
    cells = {(spec, combo, 0): 5 for spec in ("1mbps-35ms", "1mbps-200ms") for combo in (BASE, PQ)}
    cells.update({("1gbps-35ms", ("X25519", "RSA-2048", b), 0): 3 for b in (2000, 3000, 8000)})
    _fill(store, cells)
    summary = analyse.cell_summaries(store)
    inc = analyse.increases(summary, analyse.baseline(store))
    assert {r["profile"] for r in inc} >= {"1mbps-35ms", "1mbps-200ms"}
    assert {r["baseline"] for r in inc} == {"X25519 + RSA-2048 8000 B"}
    assert {sweep.key(r)[0] for r in summary if sweep.key(r) in sweep.swept(summary)} == {
        "1gbps-35ms"
    }


def test_the_documents_lossy_link_with_loss_one_way_or_both():
    """The document does not say whether netem ran on one veth end or both: 10 % from the
    server, with 10 % or nothing the other way, is its link; 10 % only towards the server,
    5 %, or another RTT is not."""
    descs = _descs(
        [
            "lossy-10pct",
            "rtt=200ms,rate=1mbit,s2c.loss=10%,initcwnd=20",
            "rtt=200ms,rate=1mbit,c2s.loss=10%,initcwnd=20",
            "rtt=200ms,rate=1mbit,loss=5%,initcwnd=20",
            "rtt=35ms,rate=1mbit,loss=10%,initcwnd=20",
        ]
    )
    got = [document.is_loss_condition(d) for d in descs.values()]
    assert got == [True, True, False, False, False]


def _full_suite_cdf_profiles(group: str) -> set[str]:
    """The profiles the full suite measures at figure 6's 200 KiB for `group`."""
    import tomllib
    from pathlib import Path

    import pqlab
    from pqlab import units
    from pqlab.experiments.ttlb.plan import DEFAULT_SIZES

    suite = Path(pqlab.__file__).parent / "suites" / "full.toml"
    out: set[str] = set()
    for step in tomllib.loads(suite.read_text())["step"]:
        groups = step.get("groups")
        if step["experiment"] != "ttlb" or group not in (
            [groups] if isinstance(groups, str) else groups
        ):
            continue
        sizes = units.parse_list(step.get("sizes", ",".join(DEFAULT_SIZES)), "sizes")
        if document.FIGURE6_RESPONSE_BYTES in {units.parse_size(s) for s in sizes}:
            profile = step["profile"]
            out |= {profile} if isinstance(profile, str) else set(profile)
    return out


def test_the_full_suites_figure6_draws_the_documents_paths():
    """Document 003's figure 6: the post-quantum connections' TTLB at 200 KiB over five
    paths of RTT 35 ms (1 Gbit/s with 0 and 5 % loss, 1 Mbit/s with 0 and 10 %, paretonormal
    jitter). The full suite's CDF at 35 ms holds each path once and nothing else; its 200 ms
    links are a figure of their own."""
    profiles = _full_suite_cdf_profiles("X25519MLKEM768")
    descs = _descs(sorted(profiles))
    groups = dict(report.cdf_groups(descs))
    at35 = [descs[n] for n in groups[document.FIGURE6_RTT_MS]]
    got = sorted((document.figure6_path(d) for d in at35), key=str)
    assert got == sorted(document.FIGURE6_PATHS, key=str)
    assert all(abs(d["rtt_ms"] - 35) > 1 for r, names in groups.items() if r != 35 for d in
               (descs[n] for n in names))  # fmt: skip


def test_the_documents_figure6_paths_and_a_figure_that_lacks_one(store):
    """The transcription against the document's words (five lines; the 1 Gbit/s and the
    jitter ones start near the origin, the 1 Mbit/s ones near 2,000 ms: 200 KiB at 1 Mbit/s
    is 1.6 s of serialisation), and the report's caption names figure 6 only for a figure
    that draws all five paths."""
    assert len(document.FIGURE6_PATHS) == 5
    assert {p[0] for p in document.FIGURE6_PATHS} == {1e9, 1e6}
    assert document.FIGURE6_RESPONSE_BYTES * 8 / 1e6 > 1.6
    pq = ("X25519MLKEM768", "ML-DSA-44", 16000)
    fig6 = ["1gbps-35ms", "lossy-5pct-1gbps", "pareto-35ms", "1mbps-35ms",
            "rtt=35ms,rate=1mbit,loss=10%,initcwnd=20"]  # fmt: skip
    cells = {(spec, pq, s): 4 for spec in [*fig6, "1mbps-200ms"] for s in (0, 200 * 1024)}
    cells |= {(spec, BASE, s): 4 for spec in fig6[:3] for s in (0, 200 * 1024)}
    _fill(store, cells)
    with store.cell("ttlb", "first", {"group": BASE[0], "chain": BASE[1], "chain_bytes": BASE[2]}):
        pass
    from pqlab.experiments.ttlb import report as ttlb_report

    section = ttlb_report.export(store)
    cdfs = [b[2] for b in section.blocks if b[0] == "figure" and b[2].startswith("CDF")]
    named = [c for c in cdfs if "(its five paths)" in c]
    assert len(named) == 1 and "RTT 35 ms" in named[0] and "X25519MLKEM768" in named[0], cdfs
    assert any("RTT 200 ms" in c for c in cdfs)
    assert len(cdfs) == 3  # the post-quantum 35 ms and 200 ms figures, the classical 35 ms
