"""The handshake matrix's rounds: how -n is split, the shuffled order, and the drift that
keeps a comparison from being called significant (pure logic; the real runs are in
test_handshake_e2e)."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import numpy as np
import pytest

from pqlab import stats
from pqlab.errors import UserError
from pqlab.experiments.handshake import plan as hplan
from pqlab.experiments.handshake.run import schedule


def _plan(n=100, warmup=20, rounds=None):
    return hplan.Plan(
        groups=[], server_sigs=[], ca_sigs=[], n=n, warmup=warmup, keep_pcap=False,
        port=4433, profile=None, rounds=rounds,
    )  # fmt: skip


def test_rounds_split_n_evenly_and_warm_up_each_new_client():
    plan = _plan(n=103, warmup=20)
    assert plan.rounds_for(1) == 1 and plan.rounds_for(4) == hplan.AUTO_ROUNDS
    sizes = plan.round_sizes(10)
    assert sum(n for _, n in sizes) == 103
    assert [n for _, n in sizes] == [11, 11, 11] + [10] * 7
    assert [w for w, _ in sizes] == [20] + [2] * 9
    assert _plan(warmup=0).round_sizes(5) == [(0, 20)] * 5
    # Never more rounds than measured handshakes; an explicit count holds for one cell too.
    assert _plan(n=3, rounds=10).rounds_for(5) == 3
    assert _plan(rounds=4).rounds_for(1) == 4


def test_schedule_gives_every_cell_one_turn_per_round_in_a_reproducible_shuffle():
    order = schedule(6, 5, seed=7)
    assert order == schedule(6, 5, seed=7)
    assert order != schedule(6, 5, seed=8)
    per_round = collections.defaultdict(list)
    for r, i in order:
        per_round[r].append(i)
    assert sorted(per_round) == list(range(5))
    assert all(sorted(cells) == list(range(6)) for cells in per_round.values())
    assert len({tuple(c) for c in per_round.values()}) > 1  # shuffled anew each round


def test_drift_is_the_later_rounds_median_against_the_earlier():
    rounds = np.repeat(np.arange(4), 50)
    steady = np.full(200, 1.0)
    assert stats.drift(steady, rounds) == 0
    # The first two rounds 20 % slower (a burner), the last two at speed.
    slow_start = np.where(rounds < 2, 1.2, 1.0)
    d = stats.drift(slow_start, rounds)
    assert d == pytest.approx(-0.2 / np.median(slow_start))
    # Odd count: the middle round is in neither half.
    assert stats.drift([1, 1, 9, 2, 2], [0, 0, 1, 2, 2]) == pytest.approx(1 / 2)
    assert stats.drift([1.0, 2.0], [0, 0]) is None  # one round: nothing to compare
    assert stats.drift([1.0, 2.0], [None, None]) is None  # runs made before rounds


def test_a_change_within_the_drift_is_not_significant():
    assert stats.within_drift(-0.07, [0.1, None])
    assert not stats.within_drift(-0.07, [0.02, 0.03])
    assert not stats.within_drift(0.5, [None, None])


def test_the_summary_refuses_a_difference_smaller_than_the_drift():
    """X25519MLKEM768 truly 5 % slower than X25519, X25519's first two of four rounds made
    30 % slower by something else on the machine: whatever the medians say, no difference
    within that drift is called significant; without the burner the 5 % is."""
    from pqlab.experiments.handshake import summary as hs

    rng = np.random.default_rng(1)
    rounds = np.repeat(np.arange(4), 100)
    base = 1.0 + rng.normal(0, 0.01, rounds.size)
    hybrid = 1.05 + rng.normal(0, 0.01, rounds.size)
    base = np.where(rounds < 2, base * 1.3, base)  # the burner hit X25519's early rounds

    class Data:
        load: dict = {}

        def values(self, cell):
            v = base if cell.group == "X25519" else hybrid
            return {"handshake_ns": v * 1e6, "round": rounds.astype(float)}

    a, b = (
        hs.Cell("X25519", "ML-DSA-44", "ML-DSA-44"),
        hs.Cell("X25519MLKEM768", "ML-DSA-44", "ML-DSA-44"),
    )
    (row, *_) = hs._handshake_rows(Data(), "key exchange", a, b)
    assert row["drift_pct"] > abs(row["change_pct"])
    assert row["significant"] is False
    sentence = hs._sentence([row], a, b)
    assert "not significant" in sentence and "drifted" in sentence
    # Without the burner the same 5 % is significant.
    base[:] = 1.0 + rng.normal(0, 0.01, rounds.size)
    (row, *_) = hs._handshake_rows(Data(), "key exchange", a, b)
    assert row["significant"] is True and row["change_pct"] > 0


@pytest.mark.parametrize(
    "values, needle",
    [
        ({"rounds": "0"}, "--rounds"),
        ({"rounds": "x"}, "--rounds"),
        ({"rounds": "1001"}, "--rounds"),
        ({"seed": "-1"}, "--seed"),
        ({"port": "65530"}, "--port 65530"),
    ],
)
def test_bad_rounds_seed_and_ports_are_refused_in_one_line(values, needle):
    base = dict(
        groups="X25519,X25519MLKEM768", server_sig="ECDSA-P256,ML-DSA-44",
        ca_sig="ECDSA-P256,ML-DSA-44", n="10", warmup="1", port="4433", rounds="auto",
        seed=None, keep_pcap=False, send_root=False, chain_bytes=None, messages="auto", profile=None,
        shaper="auto", stack=None, server_host=None, client_host=None, hosts_file=None,
    )  # fmt: skip
    base.update(values)
    with pytest.raises(UserError) as e:
        hplan.from_values(SimpleNamespace(**base))
    assert needle in str(e.value) and "\n" not in str(e.value)
