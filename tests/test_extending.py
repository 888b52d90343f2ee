"""Adding to pqlab, done once each, as docs/architecture.md says it is done: an experiment
is a package of the files the walk-through lists plus one line in the registry, its costs its
own; an algorithm is one catalogue entry. (A stack is its engine module plus one registry
line: tests/test_stacks.py.) If one of these needs more than the files the documentation
lists, these tests fail."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

import pqlab.experiments
from pqlab import catalog, cli, estimate, experiment
from pqlab.commands import compare
from pqlab.store import RunStore

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

# The fake experiment, file by file: what docs/architecture.md's walk-through lists.
FAKE = {
    "__init__.py": '''
        """`pqlab fakecount`: a counter measured per size (the experiment protocol's own test)."""

        from pqlab import estimate
        from pqlab.estimate import Cost
        from pqlab.experiment import CompareSpec, Experiment
        from pqlab.experiments.fakecount import plan as _plan
        from pqlab.experiments.fakecount import report as _report
        from pqlab.experiments.fakecount import run as _run

        COSTS = {"fakecount.value": Cost(0.001, "a fake: a thousandth of a second per value")}


        class FakeCount(Experiment):
            name = _plan.NAME
            help = "a fake experiment"
            description = "a fake experiment"
            cells = _plan.CELLS
            options = _plan.OPTIONS
            costs = COSTS
            plan_module, run_module, report_module = _plan, _run, _report
            compare = (CompareSpec("fakecount", "fakecount_raw", ("size",), "v", "x"),)

            def work(self, plan):
                work = estimate.Work(f"{len(plan)} sizes x 5 values", cells=len(plan), costs=COSTS)
                work.add("fakecount.value", 5 * len(plan))
                return work


        EXPERIMENT = FakeCount()
    ''',
    "plan.py": """
        from pqlab import units
        from pqlab.experiment import Cells, Option

        NAME = "fakecount"
        CELLS = Cells(NAME, ("size",))
        OPTIONS = (Option("sizes", "sizes, comma separated", default="1,2"),)


        def from_values(values):
            return [
                units.parse_positive_int(x, "--sizes", maximum=100) for x in values.sizes.split(",")
            ]
    """,
    "run.py": """
        from pqlab.experiments.fakecount.plan import CELLS, NAME
        from pqlab.experiments.fakecount.schema import DDL


        def measure(plan, store):
            store.ensure_table(DDL)
            done = CELLS.done(store)
            for size in plan:
                cell = CELLS.id(size)
                if cell in done:
                    continue
                rows = [
                    {"cell_id": str(cell), "size": size, "i": i, "v": size + i / 10} for i in range(5)
                ]
                with store.cell(NAME, cell, {"size": size}):
                    store.insert_rows("fakecount_raw", rows)
    """,
    "schema.py": """
        DDL = (
            "CREATE TABLE IF NOT EXISTS fakecount_raw "
            "(cell_id TEXT, size INTEGER, i INTEGER, v DOUBLE)"
        )
    """,
    "report.py": """
        from pqlab.report.section import Section
        from pqlab.report.summary import Summary, row


        def export(store):
            if not store.has_table("fakecount_raw"):
                return None
            section = Section("Fake count")
            sql = "SELECT size, median(v) AS v FROM fakecount_raw GROUP BY size ORDER BY size"
            section.table(store.export_table("fakecount", sql), "the counter per size")
            return section


        def summarize(store):
            return Summary([row("fake", "size 1 -> 2", "v", "x", 1.0, 2.0)], ["the fake summary line"])
    """,
}


def documented_files() -> tuple[set[str], str]:
    """The files docs/architecture.md's walk-through says a new experiment is, and the
    registry it says names it."""
    text = ARCHITECTURE.read_text()
    files = set(re.findall(r"^src/pqlab/experiments/NAME/(\S+)", text, re.M))
    registry = re.search(r"^src/pqlab/experiment\.py\s+NAME in (\w+)", text, re.M)
    assert files and registry, "docs/architecture.md lost its walk-through of a new experiment"
    return files, registry.group(1)


@pytest.fixture
def fake_experiment(tmp_path, monkeypatch):
    """The steps of adding an experiment, as documented: its package, and its line in the
    registry (nothing else: no cost in pqlab.estimate, no other list)."""
    files, registry = documented_files()
    assert set(FAKE) == files, f"the walk-through lists {sorted(files)}"
    pkg = tmp_path / "more_experiments" / "fakecount"
    pkg.mkdir(parents=True)
    for name, code in FAKE.items():
        (pkg / name).write_text(textwrap.dedent(code))
    monkeypatch.setattr(
        pqlab.experiments, "__path__", [*pqlab.experiments.__path__, str(pkg.parent)]
    )
    monkeypatch.setattr(experiment, registry, (*getattr(experiment, registry), "fakecount"))
    yield
    for name in [m for m in sys.modules if m.startswith("pqlab.experiments.fakecount")]:
        sys.modules.pop(name)


def test_an_experiment_is_its_package_and_one_registry_line(fake_experiment, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(["fakecount", "--sizes", "1,2", "--out", str(a)]) == 0
    assert (a / "tables" / "fakecount.csv").read_text().splitlines()[1:] == ["1,1.2", "2,2.2"]
    page = (a / "report.html").read_text()
    assert "Fake count" in page and "the fake summary line" in page
    # resume adds cells; a second run compares equal in structure
    assert cli.main(["fakecount", "--sizes", "1,2,3", "--out", str(a), "--resume"]) == 0
    assert cli.main(["fakecount", "--sizes", "1,2,3", "--out", str(b)]) == 0
    rows, _, structure = compare.compare(a, b)
    assert structure == [] and {r["key"] for r in rows} == {"1", "2", "3"}
    # the suite takes it like any other
    suite = tmp_path / "s.toml"
    suite.write_text('[[step]]\nexperiment = "fakecount"\nsizes = "4"\n')
    assert cli.main(["suite", str(suite), "--check"]) == 0
    assert "  step 1/1 fakecount | 1 sizes x 5 values | <1 s |" in capsys.readouterr().out
    # priced from the costs it declares, which pqlab.estimate does not hold
    assert "fakecount.value" in experiment.costs() and "fakecount.value" not in estimate.COSTS
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
