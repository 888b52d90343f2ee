"""Adding to pqlab, done once each, as docs/architecture.md says it is done: an experiment
is its module plus one line in the registry; an algorithm is one catalogue entry. (A stack
is its engine module plus one registry line: tests/test_stacks.py.) If one of these needs
more than the files the documentation lists, these tests fail."""

from __future__ import annotations

import textwrap

import pytest

import pqlab.experiments
from pqlab import catalog, cli, experiment
from pqlab.commands import compare
from pqlab.store import RunStore

FAKE = '''
"""`pqlab fakecount`: a counter measured per size (the experiment protocol's own test)."""

from pqlab import estimate, units
from pqlab.experiment import Cells, CompareSpec, Experiment, Option
from pqlab.report.section import Section
from pqlab.report.summary import Summary, row

NAME = "fakecount"
CELLS = Cells(NAME, ("size",))
DDL = "CREATE TABLE IF NOT EXISTS fakecount_raw (cell_id TEXT, size INTEGER, i INTEGER, v DOUBLE)"


def from_values(values):
    return [units.parse_positive_int(x, "--sizes", maximum=100) for x in values.sizes.split(",")]


def measure(plan, store):
    store.ensure_table(DDL)
    done = CELLS.done(store)
    for size in plan:
        cell = CELLS.id(size)
        if cell in done:
            continue
        rows = [{"cell_id": str(cell), "size": size, "i": i, "v": size + i / 10} for i in range(5)]
        with store.cell(NAME, cell, {"size": size}):
            store.insert_rows("fakecount_raw", rows)


def export(store):
    if not store.has_table("fakecount_raw"):
        return None
    section = Section("Fake count")
    sql = "SELECT size, median(v) AS v FROM fakecount_raw GROUP BY size ORDER BY size"
    section.table(store.export_table("fakecount", sql), "the counter per size")
    return section


def summarize(store):
    return Summary([row("fake", "size 1 -> 2", "v", "x", 1.0, 2.0)], ["the fake summary line"])


class FakeCount(Experiment):
    name = NAME
    help = "a fake experiment"
    description = "a fake experiment"
    cells = CELLS
    options = (Option("sizes", "sizes, comma separated", default="1,2"),)
    compare = (CompareSpec("fakecount", "fakecount_raw", ("size",), "v", "x"),)

    def work(self, plan):
        return estimate.Work(f"{len(plan)} sizes x 5 values", exact_s=0.0, cells=len(plan))


EXPERIMENT = FakeCount()
'''


@pytest.fixture
def fake_experiment(tmp_path, monkeypatch):
    """The two steps of adding an experiment: its module, and its line in the registry."""
    pkg = tmp_path / "more_experiments"
    pkg.mkdir()
    (pkg / "fakecount.py").write_text(textwrap.dedent(FAKE))
    monkeypatch.setattr(pqlab.experiments, "__path__", [*pqlab.experiments.__path__, str(pkg)])
    monkeypatch.setattr(
        experiment, "EXPERIMENT_MODULES", (*experiment.EXPERIMENT_MODULES, "fakecount")
    )
    yield
    import sys

    sys.modules.pop("pqlab.experiments.fakecount", None)


def test_an_experiment_is_its_module_and_one_registry_line(fake_experiment, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(["fakecount", "--sizes", "1,2", "--out", str(a)]) == 0
    assert (a / "tables" / "fakecount.csv").read_text().splitlines()[1:] == ["1,1.2", "2,2.2"]
    page = (a / "report.html").read_text()
    assert "Fake count" in page and "the fake summary line" in page
    # resume adds cells; a second run compares equal in structure
    assert cli.main(["fakecount", "--sizes", "1,2,3", "--out", str(a), "--resume"]) == 0
    assert cli.main(["fakecount", "--sizes", "1,2,3", "--out", str(b)]) == 0
    rows, _, structure, _ = compare.compare(a, b)
    assert structure == [] and {r["key"] for r in rows} == {"1", "2", "3"}
    # the suite takes it like any other
    suite = tmp_path / "s.toml"
    suite.write_text('[[step]]\nexperiment = "fakecount"\nsizes = "4"\n')
    assert cli.main(["suite", str(suite), "--check"]) == 0
    assert "  step 1/1 fakecount | 1 sizes x 5 values | <1 s |" in capsys.readouterr().out
    assert cli.main(["suite", str(suite), "--out", str(tmp_path / "c")]) == 0
    store = RunStore.open(tmp_path / "c")
    try:
        assert store.cells_done("fakecount") == {"4"}
        recorded = store.invocations("fakecount")[-1]["metadata"]["estimate"]
        assert recorded["size"] == "1 sizes x 5 values" and recorded["resumed"] is False
    finally:
        store.close()
    assert "error" not in capsys.readouterr().err


def test_an_algorithm_is_one_catalogue_entry(monkeypatch):
    from importlib import resources

    text = resources.files("pqlab.data").joinpath("algorithms.toml").read_text()
    entry = textwrap.dedent(
        """
        [[algorithm]]
        name = "Toy-KEM-1"
        kind = "kem"
        family = "Toy"
        nist_level = 1
        aliases = ["toykem1"]
        sizes = { public_key = 10, secret_key = 20, ciphertext = 30, shared_secret = 32 }
        """
    )
    monkeypatch.setattr(catalog, "_load", catalog._load.__wrapped__)
    real_files = resources.files

    class Files:
        def __init__(self, pkg):
            self.pkg = pkg

        def joinpath(self, name):
            node = real_files(self.pkg).joinpath(name)
            if name == "algorithms.toml":
                return type("T", (), {"read_text": lambda self: text + entry})()
            return node

    monkeypatch.setattr(catalog.resources, "files", lambda pkg: Files(pkg))
    toy = catalog.resolve("toy kem 1", "kem")
    assert toy.name == "Toy-KEM-1" and toy.sizes["ciphertext"] == 30
    assert "Toy-KEM-1" in [a.name for a in catalog.all_algorithms("kem")]
    assert catalog.close_matches("toykem", "kem")[0] == "Toy-KEM-1"
