"""The time estimate of `pqlab suite --check` (`pqlab.estimate`): the model's arithmetic,
every experiment's units of work, calibration from earlier runs, and the CLI's lines."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import pqlab_env, run_pqlab
from pqlab import catalog, estimate, experiment, suite
from pqlab.store import RunStore

# --- the model's arithmetic (pure logic) ------------------------------------------------


def test_about_rounds_as_an_estimate_deserves():
    assert estimate.about(0.2) == "<1 s"
    assert estimate.about(0.7) == "~1 s"
    assert estimate.about(42.4) == "~42 s"
    assert estimate.about(100) == "~1 min 40 s"
    assert estimate.about(120.4) == "~2 min"
    assert estimate.about(1500) == "~25 min"
    assert estimate.about(7_500) == "~2 h 05 min"


def test_work_prices_its_units_and_refuses_unknown_ones():
    work = estimate.Work("2 cells", exact_s=3.0)
    work.add("operation_seconds", 1.5)
    work.add("chain", 2)
    assert work.seconds == pytest.approx(3.0 + 1.5 + 2 * estimate.cost("chain"))
    with pytest.raises(KeyError, match="no cost 'nonsense'"):
        work.add("nonsense", 1)
    record = work.record()
    assert record["units"] == {"chain": 2.0, "operation_seconds": 1.5}
    assert record["exact_s"] == 3.0


def test_every_cost_says_what_it_was_measured_from():
    for name, cost in {**estimate.COSTS, **experiment.costs()}.items():
        assert cost.seconds > 0, name
        assert len(cost.measured) > 20, name


def test_engine_phases_are_capped_by_the_time_budget():
    slow = estimate.Operations(0.1, 0.001, 0.1, 0.0005, 0.0005)
    exact, priced = estimate.engine_phases_s(slow, 1000, 10, max_seconds=60)
    assert exact == 0
    # key generation: 1 s of warm-up (10 runs), then 60 s, the budget; the pair: 1.001 s
    assert priced == pytest.approx(1.0 + 60 + 0.01 + 1.001)
    exact, priced = estimate.engine_phases_s(slow, 1000, 100, max_seconds=None)
    assert priced == pytest.approx(2.0 + 100.1 + 0.1 + 1.001)  # warm-up stops after 2 s


def test_fixed_time_phases_are_fixed_by_the_plan():
    ops = estimate.Operations(0.002, 0.003, 0.001, 0.001, 0.002)
    exact, priced = estimate.engine_phases_s(ops, 1_000_000, 0, None, seconds=3)
    assert exact == 6  # each phase at least its 3 s
    # key generation: 3000 runs of 2 ms; the pair until the faster operation has 3 s: 3000
    # runs of 3 ms
    assert exact + priced == pytest.approx(6 + 9)


def test_operations_fall_back_to_the_family():
    measured, known = estimate.operations(catalog.resolve("ML-DSA-65"), "openssl")
    assert known and measured == estimate.OPERATIONS[("ML-DSA-65", "openssl")]
    sphincs = catalog.resolve("SLH-DSA-SHA2-128f")
    assert (sphincs.name, "openssl") not in estimate.OPERATIONS
    _, known = estimate.operations(sphincs, "openssl")
    assert not known


# --- calibration (pure logic over measured records) -----------------------------------


def _measured(seconds: float, units: dict, exact_s: float = 0.0, run="runA", when="2026-11-26"):
    return estimate.Measured(Path(run), when, "sizes", seconds, units, exact_s, 4)


def test_built_in_model_without_earlier_runs():
    work = estimate.Work("x", {"chain": 10})
    assert estimate.calibrate("sizes", work, estimate.Earlier()) == (
        work.seconds,
        "built-in model",
    )


def test_the_same_work_measured_before_gives_its_seconds():
    work = estimate.Work("x", {"chain": 10}, exact_s=2.0)
    earlier = estimate.Earlier([_measured(42.0, {"chain": 10.0}, exact_s=2.0)])
    seconds, basis = estimate.calibrate("sizes", work, earlier)
    assert seconds == 42.0
    assert "the same work" in basis and "runA" in basis


def test_other_work_is_scaled_by_the_measured_ratio():
    unit = estimate.cost("chain")
    model = 20 * unit  # the earlier step's units, at the built-in costs
    earlier = estimate.Earlier([_measured(2.0 + 1.5 * model, {"chain": 20.0}, exact_s=2.0)])
    work = estimate.Work("x", {"chain": 10}, exact_s=5.0)
    seconds, basis = estimate.calibrate("sizes", work, earlier)
    # the model counts as PRIOR_S seconds of measurement beside the earlier step's
    ratio = (1.5 * model + estimate.PRIOR_S) / (model + estimate.PRIOR_S)
    assert seconds == pytest.approx(5.0 + 10 * unit * ratio)
    assert f"x{ratio:.2f}" in basis and "runA" in basis
    # another experiment's steps say nothing about this one
    assert estimate.calibrate("certs", work, earlier)[1] == "built-in model"


def test_a_long_measurement_moves_the_estimate_more_than_a_short_one():
    work = estimate.Work("x", {"operation_seconds": 100.0})
    short = estimate.Earlier([_measured(2.0, {"operation_seconds": 1.0})])
    long = estimate.Earlier([_measured(100.0, {"operation_seconds": 50.0})])
    # both measured twice the model's seconds
    assert estimate.calibrate("sizes", work, short)[0] == pytest.approx(100 * 22 / 21)
    assert estimate.calibrate("sizes", work, long)[0] == pytest.approx(100 * 120 / 70)


def test_an_implausible_ratio_is_not_used():
    unit = estimate.cost("chain")
    earlier = estimate.Earlier([_measured(20 * unit * 10, {"chain": 20.0})])
    work = estimate.Work("x", {"chain": 10})
    assert estimate.calibrate("sizes", work, earlier)[1] == "built-in model"


def test_runs_of_another_model_are_not_used(tmp_path):
    record = {**estimate.Work("x", {"chain": 10}).record(), "resumed": False}
    assert record["model"] == estimate.MODEL
    meta = {"cpu": dict(zip(("model", "count"), estimate._this_machine(), strict=True))}
    meta["stages"] = {"wall_s": 3.0, "seconds": {}}
    for model, found in ((estimate.MODEL, 1), (estimate.MODEL + 1, 0)):
        earlier = estimate.Earlier()
        inv = {"metadata": {**meta, "estimate": {**record, "model": model}}}
        inv |= {"status": "complete", "experiment": "sizes", "started": "2026-11-26T10:00"}
        estimate._read_invocations(tmp_path, [inv], estimate._this_machine(), earlier)
        assert len(earlier.steps) == found


def test_units_the_model_no_longer_knows_are_not_used():
    earlier = estimate.Earlier([_measured(5.0, {"gone": 3.0})])
    assert math.isnan(estimate.modelled({"gone": 3.0}))
    work = estimate.Work("x", {"chain": 10})
    assert estimate.calibrate("sizes", work, earlier)[1] == "built-in model"


# --- every experiment declares its work ------------------------------------------------


def test_every_experiment_prices_its_export():
    for exp in experiment.registry():
        assert f"{exp.name}.export" in exp.costs, exp.name


@pytest.mark.parametrize("name", suite.BUILT_IN)
def test_every_built_in_step_has_finite_work(name):
    for step in suite.plan_steps(suite.load(name)):
        work = step.experiment.work(step.plan)
        assert isinstance(work, estimate.Work), step.experiment.name
        assert work.size and work.cells > 0, step.experiment.name
        known = {**estimate.COSTS, **step.experiment.costs}
        assert all(n in known for n in work.units), work.units
        assert 0 < work.seconds < 86_400 and math.isfinite(work.seconds), work.record()


@pytest.mark.parametrize(
    "name, values",
    [
        ("probe", {"target": "127.0.0.1:4433", "no_capture": True}),
        ("linktest", {"profile": ["lan", "lossy-10pct"]}),
    ],
)
def test_experiments_outside_the_built_in_suites_declare_their_work(name, values):
    exp = experiment.get(name)
    v = exp.defaults()
    for key, value in values.items():
        setattr(v, key, value)
    work = exp.work(exp.plan(v))
    assert work.cells > 0 and 0 < work.seconds < 3600, work.record()
    assert all(n in {**estimate.COSTS, **exp.costs} for n in work.units)


def test_linktest_is_timed_by_its_checks():
    """A link's checks take the times the link and the options fix (a second of the UDP
    probes' pacing, 20 connects a round trip and a pause apart, the rate check's bytes at
    the rate): what the plan fixes, not priced."""
    from pqlab.experiments.linktest import plan as linktest

    exp = experiment.get("linktest")
    v = exp.defaults()
    v.profile = ["rtt=100ms,rate=10mbit"]
    v.probes, v.connects = "1000", "20"
    plan = exp.plan(v)
    (profile,) = plan.profiles
    interval = linktest.udp_interval_us(profile.s2c) / 1e6
    rate = linktest.rate_bytes(profile, plan.rate_seconds) * 8 / 10e6
    fixed = 20 * (0.1 + 0.005) + rate + 3 * 0.1 + 2 * (1000 * interval + 0.05)
    assert exp.work(plan).exact_s == pytest.approx(fixed)


def test_every_experiment_overrides_work():
    for exp in experiment.registry():
        assert type(exp).work is not experiment.Experiment.work, exp.name


# --- the CLI: `pqlab suite --check` -----------------------------------------------------

ESTIMATE = re.compile(r"  step (\d+)/(\d+) (\S+) \| (.+) \| (~\d[^|]*|<1 s) \| (.+)")


def _check(*args, cwd, env=None):
    proc = run_pqlab("suite", *args, "--check", cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("size", ["default", "quick"])
def test_check_prints_every_steps_estimate_and_a_total_and_creates_nothing(tmp_path, size):
    args = () if size == "default" else ("--quick",)
    lines = _check(*args, cwd=tmp_path)
    steps = suite.plan_steps(suite.load(size))
    # as before: one `EXPERIMENT: {per-cell parameters}` line per step, each followed by its
    # estimate (two spaces first, so a script reading the old lines can skip the new ones)
    old = [ln for ln in lines if not ln.startswith("  ")]
    assert [ln.split(": ", 1)[0] for ln in old] == [s.experiment.name for s in steps]
    for line, step in zip(old, steps, strict=True):
        assert ast.literal_eval(line.split(": ", 1)[1]) == step.experiment.resume_key(step.plan)
    for i, step in enumerate(steps):
        assert lines[2 * i] == old[i]
        m = ESTIMATE.fullmatch(lines[2 * i + 1])
        assert m, lines[2 * i + 1]
        assert (int(m[1]), int(m[2]), m[3]) == (i + 1, len(steps), step.experiment.name)
        assert m[4] == step.experiment.work(step.plan).size
        assert m[6] == "built-in model"  # no earlier run here
    rest = lines[2 * len(steps) :]
    assert rest[0].startswith("  export | tables, figures and report of ")
    total = re.fullmatch(
        r"  total \| (\d+) of (\d+) steps and the export \| (~.+) \| (.+)", rest[1]
    )
    assert total and total[1] == total[2] == str(len(steps)), rest[1]
    assert list(tmp_path.iterdir()) == []  # no results/, no run directory, nothing


def test_check_without_cap_net_admin_says_which_steps_would_be_skipped(tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_NET_ADMIN")
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-net_admin", sys.executable, "-m", "pqlab", "suite",
         "--quick", "--check"],
        capture_output=True, text=True, env=pqlab_env(), timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    steps = suite.plan_steps(suite.load("quick"))
    net = [i for i, s in enumerate(steps, 1) if s.experiment.needs_net]
    assert net
    for i in range(1, len(steps) + 1):
        line = lines[2 * i - 1]
        if i in net:
            assert line.endswith(" | - | skipped: needs CAP_NET_ADMIN"), line
        else:
            assert ESTIMATE.fullmatch(line), line
    total = next(ln for ln in lines if ln.startswith("  total | "))
    assert total.startswith(f"  total | {len(steps) - len(net)} of {len(steps)} steps")
    note = next(ln for ln in lines if "need CAP_NET_ADMIN" in ln)
    assert "this process lacks CAP_NET_ADMIN" in note and "they are not in the total" in note
    assert all(f"{i} {steps[i - 1].experiment.name}" in note for i in net)


def test_check_refuses_a_missing_estimate_from(tmp_path):
    proc = run_pqlab("suite", "--check", "--estimate-from", tmp_path / "nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --estimate-from ") and "nope" in proc.stderr
    proc = run_pqlab("suite", "--estimate-from", tmp_path, "--out", tmp_path / "x")
    assert proc.returncode == 2 and "give --check too" in proc.stderr
    assert not (tmp_path / "x").exists()


# --- calibration from a real earlier run ------------------------------------------------

# One cheap step whose built-in model is a second or two (RSA-3072 key generation), in two
# sizes.
SIZES_STEP = (
    '[[step]]\nexperiment = "sizes"\nkem = "ML-KEM-512"\nsig = "RSA-3072"\nbackend = "openssl"\n'
)


def _set_measured(run: Path, seconds: float) -> None:
    """Stand the run's measured step seconds at `seconds` (its units stay what it did)."""
    con = duckdb.connect(str(run / "results.duckdb"))
    try:
        (meta,) = con.execute("SELECT metadata FROM invocations").fetchone()
        meta = json.loads(meta)
        export = meta["stages"]["seconds"].get("export", 0.0)
        meta["stages"]["wall_s"] = seconds + export
        con.execute("UPDATE invocations SET metadata = ?", [json.dumps(meta)])
    finally:
        con.close()


def test_an_earlier_runs_measured_seconds_calibrate_the_estimate(tmp_path):
    small = tmp_path / "small.toml"
    small.write_text(SIZES_STEP + 'samples = "8"\n')
    large = tmp_path / "large.toml"
    large.write_text(SIZES_STEP + 'samples = "16"\n')
    run = tmp_path / "results" / "earlier"
    proc = run_pqlab("suite", small, "--out", run, "--no-report", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    store = RunStore.open(run)
    try:
        (inv,) = store.invocations()
    finally:
        store.close()
    recorded = inv["metadata"]["estimate"]
    stages = inv["metadata"]["stages"]
    measured = stages["wall_s"] - stages["seconds"].get("export", 0.0)
    assert recorded["size"] == "2 cells x 8 samples" and not recorded["resumed"]

    # the same work: its own measured seconds, and the run named
    when = inv["started"][:16].replace("T", " ")
    step = _check(small, cwd=tmp_path)[1]
    assert step.endswith(f"| measured: the same work in {run.resolve()} ({when})"), step
    earlier = estimate.earlier_runs([tmp_path / "results"])
    same = suite.plan_steps(suite.load(str(small)))[0]
    assert estimate.calibrate("sizes", same.experiment.work(same.plan), earlier)[0] == measured

    # an earlier step measured at 3 times the built-in model's seconds gives this step's
    # estimate, and other sizes of the same experiment are scaled by the ratio
    model_small = estimate.modelled(recorded["units"], experiment.get("sizes").costs)
    _set_measured(run, recorded["exact_s"] + 3 * model_small)
    shown = ESTIMATE.fullmatch(_check(small, cwd=tmp_path)[1])[5]
    assert shown == estimate.about(recorded["exact_s"] + 3 * model_small)
    (tmp_path / "nothing-here").mkdir()
    built_in = _check(large, "--estimate-from", tmp_path / "nothing-here", cwd=tmp_path)[1]
    line = _check(large, cwd=tmp_path)[1]
    ratio = (3 * model_small + estimate.PRIOR_S) / (model_small + estimate.PRIOR_S)
    assert line.endswith(f"| measured in {run.resolve()} ({when}): built-in model x{ratio:.2f}")
    big = suite.plan_steps(suite.load(str(large)))[0]
    work = big.experiment.work(big.plan)
    seconds, _ = estimate.calibrate("sizes", work, estimate.earlier_runs([tmp_path / "results"]))
    assert seconds == pytest.approx(work.exact_s + ratio * work.variable_s)
    assert ESTIMATE.fullmatch(line)[5] == estimate.about(seconds)
    assert ESTIMATE.fullmatch(built_in)[6] == "built-in model"
    assert ESTIMATE.fullmatch(built_in)[5] == estimate.about(work.seconds)
    assert seconds > work.seconds * 1.05  # the earlier run changed it
