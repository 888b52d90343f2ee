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
