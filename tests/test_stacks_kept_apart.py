"""One run holding the same handshake cells on two TLS stacks (OpenSSL and rustls, as the full
suite does for ML-DSA-44) keeps them apart everywhere: every table, the bars of the
stacked-phase figures, the summary and `compare` give each stack exactly the numbers of
that stack's run alone.

A stack's "run alone" is the two-stack run with the other stack's raw samples removed and
its tables, figures and summary rebuilt from what is left: the same handshakes, so a table
row, a bar or a summary line of one stack must equal it to the last digit; a value pooled
over both stacks cannot."""

from __future__ import annotations

import csv
import json
import os
import shutil

import duckdb
import pytest

from conftest import run_pqlab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

STACKS = ("openssl", "rustls")
# Two server signers, so the figure varying the server signer holds both stacks' bars.
SUITE = """
description = "the same cells on two stacks"
{steps}
"""
STEP = """
[[step]]
experiment = "handshake"
stack = "{stack}"
groups = "X25519MLKEM768"
server-sig = ["ECDSA-P256", "ML-DSA-44"]
ca-sig = "same"
n = 12
warmup = 2
rounds = 1
"""


def _alone(run, stack: str, dest):
    """A copy of `run` holding only `stack`'s raw samples, its outputs rebuilt from them."""
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("tables", "figures", "report.html"))
    con = duckdb.connect(str(dest / "results.duckdb"))
    tables = [
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    ]
    for t in tables:
        cols = {r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()}
        if "stack" in cols:
            con.execute(f"DELETE FROM {t} WHERE coalesce(stack, 'openssl') <> ?", [stack])
    con.execute("DELETE FROM cells WHERE experiment = 'handshake' AND cell_id NOT LIKE ?",
                [f"%|{stack}%"])  # fmt: skip
    con.close()
    run_pqlab("report", dest, check=True, timeout=600)
    return dest


def _rows(path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _stack_of(row: dict) -> str | None:
    """The stack a table row is of: its `stack` or `stack_impl` column, else the stack in its
    cell id (`AXIS|...|STACK|+OPTION@PAIR`); None for a row of no cell (a document's)."""
    for col in ("stack", "stack_impl"):
        if row.get(col):
            return row[col]
    if row.get("cell_id"):
        parts = [p for p in row["cell_id"].split("@")[0].split("|") if not p.startswith("+")]
        return parts[-1]
    return None


# Tables whose rows are not cells: the features of document 000 (one row per feature; the
# cells that show one are named with their stack) and the summary (each line names its
# stack in its topic when the run has several: checked apart below).
NOT_CELLS = {"handshake_features.csv", "summary.csv"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stacks")
    suite = tmp / "two-stacks.toml"
    suite.write_text(SUITE.format(steps="".join(STEP.format(stack=s) for s in STACKS)))
    both = tmp / "both"
    run_pqlab("suite", suite, "--out", both, "--no-report", check=True, timeout=900)
    return both, {s: _alone(both, s, tmp / s) for s in STACKS}


def test_every_table_gives_each_stack_its_run_alone(runs):
    both, alone = runs
    checked = 0
    for path in sorted((both / "tables").glob("*.csv")):
        cols, rows = _rows(path)
        if not rows or path.name in NOT_CELLS:
            continue
        # A table that holds the cells of both stacks names the stack in every cell's row.
        assert {"stack", "stack_impl", "cell_id"} & set(cols), f"{path.name}: no stack: {cols}"
        impl = "stack_impl" in cols and "stack" not in cols
        for stack in STACKS:
            _, mine = _rows(alone[stack] / "tables" / path.name)
            name = {_stack_of(r) for r in mine if _stack_of(r)} if impl else {stack}
            theirs = [r for r in rows if _stack_of(r) in name]
            key = lambda r: sorted(r.items())  # noqa: E731
            assert sorted(theirs, key=key) == sorted(
                [r for r in mine if _stack_of(r) in name], key=key
            ), f"{path.name}: {stack}'s rows differ from its run alone"
            checked += 1
    assert checked >= 10, checked


def test_every_phase_bar_is_one_stacks_mean(runs):
    """The bars of the stacked-phase figures (document figures 8 and 13-18): the same
    (group, server, CA) on two stacks is two bars, each named by its stack and each the
    mean of its own stack's handshakes."""
    from pqlab.experiments.handshake import report
    from pqlab.store import RunStore

    def bars(run) -> dict:
        store = RunStore.open(run)
        try:
            report._order_sql(store)
            means = report._PhaseMeans(store)
            out = {}
            for vary, (a, b), *_ in report.FAMILIES:
                for va in means.axes[a]:
                    for vb in means.axes[b]:
                        labels, rows = means.family(vary, {a: va, b: vb})
                        for (label, view, phase), ms in rows.items():
                            out[(vary, va, vb, label, view, phase)] = ms
                        assert len(labels) == len(set(labels)), labels
            return out
        finally:
            store.close()

    mixed = bars(runs[0])
    for stack in STACKS:
        alone = bars(runs[1][stack])
        assert alone, stack
        for (vary, va, vb, label, view, phase), ms in alone.items():
            assert mixed[(vary, va, vb, f"{label} ({stack})", view, phase)] == ms
    # Nothing unnamed: every bar of the two-stack run carries its stack.
    assert all(k[3].endswith((" (openssl)", " (rustls)")) for k in mixed)
    assert len(mixed) == sum(len(bars(runs[1][s])) for s in STACKS)


def test_summary_and_compare_keep_the_stacks_apart(runs):
    from pqlab.experiments.handshake import summary
    from pqlab.store import RunStore

    def lines(run) -> list[dict]:
        store = RunStore.open(run)
        try:
            return summary.summarize(store).rows
        finally:
            store.close()

    mixed = lines(runs[0])
    for stack in STACKS:
        own = [dict(r, topic=f"{r['topic']} on {stack}") for r in lines(runs[1][stack])]
        assert own and all(r in mixed for r in own), stack
    assert len(mixed) == sum(len(lines(runs[1][s])) for s in STACKS)
    # `compare` against one stack's run alone: that stack's cells are the same samples (no
    # change at all), the other stack's cells are not matched to them.
    proc = run_pqlab("compare", runs[0], runs[1]["openssl"], "--json", check=True)
    hs = [r for r in json.loads(proc.stdout)["rows"] if r["experiment"] == "handshake"]
    assert len(hs) == 2, hs
    for r in hs:
        assert r["key"].endswith(" / openssl"), r
        assert float(r["change_pct"]) == 0 and r["median_a"] == r["median_b"], r
