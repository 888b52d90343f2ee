"""The lab's structure: pqlab's own modules import each other without circles, and at the top
of the file, except where a comment says why an import waits ("# deferred import: ..." on the
line of the import or the line above it: an optional dependency, a measured start-up cost).

These read the source, not the running program, so they hold for every path through the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MARK = "deferred import:"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / "pqlab").rglob("*.py"))}


def _targets(node: ast.AST, here: str, is_package: bool, known: set[str]) -> list[str]:
    """The pqlab modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return [n for n in names if n.split(".")[0] == "pqlab"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = here.split(".") if is_package else here.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != "pqlab":
        return []
    out = []
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        out.append(sub if sub in known else module)
    return out


def imports(with_lines: bool = False):
    """(importer, imported, line, at_top_level, commented) for every import of a pqlab
    module in src/pqlab."""
    mods = _modules()
    known = set(mods)
    rows = []
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top = {id(n) for n in tree.body}
        # Imports guarded by `if TYPE_CHECKING:` never run; they are not edges.
        typing_only = set()
        for n in tree.body:
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                typing_only |= {id(x) for x in ast.walk(n)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in typing_only:
                continue
            here = lines[node.lineno - 1]
            above = lines[node.lineno - 2] if node.lineno >= 2 else ""
            commented = MARK in here or MARK in above
            targets = _targets(node, name, path.name == "__init__.py", known)
            # Importing a.b.c runs the __init__ of a.b first (unless the importer lives in
            # a.b, which is then already being imported): an edge to that package too.
            parents = [
                ".".join(t.split(".")[:i])
                for t in targets
                for i in range(2, t.count(".") + 1)
                if not (name + ".").startswith(".".join(t.split(".")[:i]) + ".")
            ]
            for target in dict.fromkeys(targets + [p for p in parents if p in known]):
                if target != name:
                    rows.append((name, target, f"{path}:{node.lineno}", id(node) in top, commented))
    return rows


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_lab():
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for a, b, loc, _, _ in imports():
        edges.setdefault(a, set()).add(b)
        where.setdefault((a, b), loc)
    cycles = _cycles(edges)
    detail = []
    for comp in cycles:
        members = set(comp)
        ties = [f"{a} -> {b} ({where[a, b]})" for a in comp for b in edges[a] if b in members]
        detail.append(f"{len(comp)} modules: " + "; ".join(ties))
    assert not cycles, "import circles:\n" + "\n".join(detail)


def test_own_imports_sit_at_the_top_unless_a_comment_says_why():
    late = [
        f"{loc} imports {b}" for a, b, loc, top, commented in imports() if not top and not commented
    ]
    assert not late, (
        f"{len(late)} imports of pqlab modules inside functions without a "
        f"'# {MARK} <why>' comment:\n" + "\n".join(late)
    )


def unreachable(tree: ast.AST) -> list[int]:
    """Lines of statements that follow a return, raise, continue or break in the same block
    (code that never runs: how arguments were once dropped on the way to the engine)."""
    out = []
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, name, None)
            if not isinstance(block, list):
                continue
            for a, b in zip(block, block[1:], strict=False):
                if isinstance(a, ast.Return | ast.Raise | ast.Continue | ast.Break):
                    out.append(b.lineno)
    return out


def test_no_unreachable_code():
    root = SRC.parent
    found = []
    for base in ("src", "tests", "benchmarks"):
        for path in sorted((root / base).rglob("*.py")):
            found += [f"{path}:{n}" for n in unreachable(ast.parse(path.read_text()))]
    assert not found, "statements that never run:\n" + "\n".join(found)


def test_the_unreachable_check_can_fail():
    code = "def f(x):\n    out = [x]\n    return out\n    out.append(1)\n"
    assert unreachable(ast.parse(code)) == [4]


def test_the_circle_check_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# --- the experiments: one shape, side by side, above what they share ------------------------

EXPERIMENTS = SRC / "pqlab" / "experiments"
# Every experiment's package: its declaration (__init__), options and validation (plan), the
# measuring (run) and the tables, figures and report section (report); `schema` when it
# owns tables (sizes writes the table primitives shares, pqlab.algorithms.sizes).
SHAPE = ("__init__.py", "plan.py", "run.py", "report.py")


def experiment_names() -> list[str]:
    from pqlab.experiment import EXPERIMENT_MODULES

    return list(EXPERIMENT_MODULES)


def shape_faults(root: Path, names: list[str]) -> list[str]:
    """What breaks the one shape under `root` (the experiments' folder): a module that is
    not a package, a package missing one of SHAPE's files, a registered name without one."""
    faults = [f"{p.name}: a module, not a package" for p in sorted(root.glob("*.py"))]
    faults = [f for f in faults if not f.startswith("__init__.py")]
    for name in names:
        missing = [f for f in SHAPE if not (root / name / f).is_file()]
        if missing:
            faults.append(f"{name}: no {', '.join(missing)}")
    for pkg in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if pkg.name not in names:
            faults.append(f"{pkg.name}: a package that is not a registered experiment")
    return faults


def experiment_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["pqlab", "experiments"] else None


def misplaced_edges(rows) -> list[str]:
    """Imports across experiments (what two share moves below them), and imports of an
    experiment from below (only the registry finds them, by name)."""
    out = []
    for a, b, loc, _, _ in rows:
        here, there = experiment_of(a), experiment_of(b)
        if there is None:
            continue
        if here is None:
            out.append(f"{a} imports the experiment {b} ({loc})")
        elif here != there:
            out.append(f"{a} imports another experiment, {b} ({loc})")
    return out


def experiment_names_in(text: str, names: list[str]) -> list[str]:
    """String constants naming an experiment's unit (`handshake.cell`) or module."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for name in names:
                if node.value.startswith((f"{name}.", f"pqlab.experiments.{name}")):
                    found.append(f"line {node.lineno}: {node.value!r}")
    return sorted(found)


def test_every_experiment_is_a_package_of_the_same_files():
    assert not shape_faults(EXPERIMENTS, experiment_names())


def test_experiments_import_neither_each_other_nor_are_imported_from_below():
    assert not misplaced_edges(imports())


def test_the_estimate_keeps_the_model_and_names_no_experiment():
    text = (SRC / "pqlab" / "estimate.py").read_text()
    assert not experiment_names_in(text, experiment_names())
    from pqlab import experiment

    for exp in experiment.registry():
        assert exp.costs, f"{exp.name} declares no costs"
        assert all(unit.startswith(f"{exp.name}.") for unit in exp.costs), exp.name
    assert experiment.costs()  # every name checked once more, none twice


def test_the_experiment_rules_can_fail(tmp_path):
    (tmp_path / "single.py").write_text("")
    (tmp_path / "half").mkdir()
    for f in ("__init__.py", "plan.py"):
        (tmp_path / "half" / f).write_text("")
    (tmp_path / "stray").mkdir()
    assert shape_faults(tmp_path, ["half", "gone"]) == [
        "single.py: a module, not a package",
        "half: no run.py, report.py",
        "gone: no __init__.py, plan.py, run.py, report.py",
        "stray: a package that is not a registered experiment",
    ]
    rows = [
        (
            "pqlab.experiments.throughput.run",
            "pqlab.experiments.handshake.plan",
            "x:1",
            True,
            False,
        ),
        ("pqlab.estimate", "pqlab.experiments.tls12", "y:2", True, False),
        ("pqlab.experiments.ttlb.run", "pqlab.experiments.ttlb.plan", "z:3", True, False),
        ("pqlab.experiments.ttlb.run", "pqlab.tls.phases", "z:4", True, False),
    ]
    assert misplaced_edges(rows) == [
        "pqlab.experiments.throughput.run imports another experiment, "
        "pqlab.experiments.handshake.plan (x:1)",
        "pqlab.estimate imports the experiment pqlab.experiments.tls12 (y:2)",
    ]
    code = 'COSTS = {"chain": 1, "ttlb.cell": 2}\nX = "pqlab.experiments.aead.run"\n'
    assert experiment_names_in(code, ["ttlb", "aead"]) == [
        "line 1: 'ttlb.cell'",
        "line 2: 'pqlab.experiments.aead.run'",
    ]
