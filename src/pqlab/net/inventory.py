"""Ansible inventories: the hosts of a run over several host pairs.

Both of Ansible's static formats are read (what `ansible-inventory` accepts from a file):

- INI: `[group]` sections of host lines (`name key=value ...`, `name:port`, numeric ranges
  `web[01:03]`), `[group:vars]` sections of `key=value` lines, `[group:children]`
  sections of group names; hosts before any section are in `ungrouped`.
- YAML: `all:` (or any top-level group) with `hosts:` (name -> variables), `vars:` and
  `children:` (name -> group), nested.

Every host is in `all`. A host's variables merge, lowest priority first: `all`'s, then its
groups' by depth (a parent group before its children; groups of equal depth by name), then
its own; the same order Ansible uses. Patterns are one group or host name (`all` included);
Ansible's pattern operators (`:`, `&`, `!`, wildcards) are not supported.

An inventory may come from anyone; what reading one can cost is bounded: the file's size
(`pqlab.files.READ_LIMITS`), the hosts it may name (`MAX_HOSTS`, ranges included, checked
before a range is expanded), and for YAML the depth of its nesting and the values its
anchors and aliases expand to (`MAX_YAML_DEPTH`, `MAX_YAML_VALUES`; a cycle is refused).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import files
from pqlab.errors import UserError

_RANGE = re.compile(r"\[(\d+):(\d+)\]")
# The most hosts an inventory may name: far more than any lab's host pairs.
MAX_HOSTS = 10_000
# A YAML inventory nests groups in groups a few levels deep; its values are host names and
# variables. Anchors and aliases may share values, but not expand them past this.
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 100_000
_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+$")


@dataclass
class Group:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict = field(default_factory=dict)


@dataclass
class Inventory:
    path: str
    hosts: dict[str, dict] = field(default_factory=dict)  # name -> its own variables
    groups: dict[str, Group] = field(default_factory=dict)

    def group(self, name: str) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name)
        return self.groups[name]

    def add_host(self, name: str, group: str, variables: dict) -> None:
        if name not in self.hosts and len(self.hosts) >= MAX_HOSTS:
            raise UserError(f"{self.path} names more than {MAX_HOSTS} hosts; at most {MAX_HOSTS}")
        self.hosts.setdefault(name, {}).update(variables)
        g = self.group(group)
        if name not in g.hosts:
            g.hosts.append(name)

    # --- reading ---------------------------------------------------------------------------
    def _parents(self) -> dict[str, set[str]]:
        parents: dict[str, set[str]] = {}
        for g in self.groups.values():
            for c in g.children:
                parents.setdefault(c, set()).add(g.name)
        return parents

    def _depths(self) -> dict[str, int]:
        parents = self._parents()
        depths: dict[str, int] = {}

        def depth(name: str, seen: tuple = ()) -> int:
            if name in seen:
                raise UserError(f"{self.path}: group {name!r} is its own ancestor")
            if name not in depths:
                ps = parents.get(name, set()) - {"all"}
                depths[name] = 1 + max((depth(p, (*seen, name)) for p in ps), default=0)
            return depths[name]

        for name in self.groups:
            depth(name)
        depths["all"] = 0
        return depths

    def groups_of(self, host: str) -> set[str]:
        """Every group the host is in, directly or through children."""
        parents = self._parents()
        direct = {g.name for g in self.groups.values() if host in g.hosts}
        out, todo = set(), list(direct)
        while todo:
            g = todo.pop()
            if g not in out:
                out.add(g)
                todo += parents.get(g, ())
        return out | {"all"}

    def host_vars(self, host: str) -> dict:
        if host not in self.hosts:
            raise UserError(f"{self.path}: no host {host!r}")
        depths = self._depths()
        merged: dict = {}
        for g in sorted(self.groups_of(host), key=lambda g: (depths.get(g, 0), g)):
            if g in self.groups:
                merged.update(self.groups[g].vars)
        merged.update(self.hosts[host])
        return merged

    def resolve(self, pattern: str) -> list[str]:
        """The hosts a pattern names: a group (with its children's hosts) or one host."""
        pattern = pattern.strip()
        if pattern == "all":
            return list(self.hosts)
        if pattern in self.groups:
            out: list[str] = []
            todo, seen = [pattern], set()
            while todo:
                g = self.groups[todo.pop(0)]
                if g.name in seen:
                    continue
                seen.add(g.name)
                out += [h for h in g.hosts if h not in out]
                todo += [c for c in g.children if c in self.groups]
            return out
        if pattern in self.hosts:
            return [pattern]
        known = sorted(set(self.groups) | {"all"})
        raise UserError(
            f"{self.path}: {pattern!r} is neither a group nor a host (groups: {', '.join(known)})"
        )


def _under_all(inv: Inventory) -> None:
    """Every group is (also) a child of `all`."""
    top = inv.group("all")
    for g in list(inv.groups.values()):
        if g.name != "all" and g.name not in top.children:
            top.children.append(g.name)


# --- INI ------------------------------------------------------------------------------------


def expand_ranges(name: str) -> list[str]:
    """`web[01:03]` -> web01, web02, web03 (numeric ranges, zero padding kept); at most
    MAX_HOSTS names, counted before anything is expanded."""
    total = 1
    for lo, hi in _RANGE.findall(name):
        if len(lo) > 9 or len(hi) > 9 or int(hi) < int(lo):
            if len(lo) <= 9 and len(hi) <= 9:
                raise UserError(f"host range {name!r} runs backwards")
            total = MAX_HOSTS + 1
        else:
            total *= int(hi) - int(lo) + 1
        if total > MAX_HOSTS:
            raise UserError(
                f"host range {name!r} makes more than {MAX_HOSTS} hosts; an inventory names "
                f"at most {MAX_HOSTS}"
            )
    return _expand(name)


def _expand(name: str) -> list[str]:
    m = _RANGE.search(name)
    if not m:
        return [name]
    a, b = m.group(1), m.group(2)
    width = len(a) if a.startswith("0") else 0
    out = []
    for i in range(int(a), int(b) + 1):
        out += _expand(name[: m.start()] + str(i).zfill(width) + name[m.end() :])
    return out


def _value(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _host_line(inv: Inventory, line: str, group: str, where: str) -> None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None
    if not words:
        return
    name, variables = words[0], {}
    for w in words[1:]:
        key, sep, value = w.partition("=")
        if not sep or not key:
            raise UserError(f"{where}: {w!r} is not key=value")
        variables[key] = value
    m = re.match(r"^(.*[^:\]]):(\d+)$", name)  # host:port (not an IPv6 address)
    if m and name.count(":") == 1:
        name = m.group(1)
        variables.setdefault("ansible_port", m.group(2))
    if not _NAME.match(name):
        raise UserError(f"{where}: {name!r} is not a host name")
    for host in expand_ranges(name):
        inv.add_host(host, group, variables)


def parse_ini(text: str, path: str = "inventory") -> Inventory:
    inv = Inventory(path)
    section, kind = "ungrouped", "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{path}:{n}"
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = re.match(r"^\[([A-Za-z0-9_.\-]+)(?::(vars|children))?\]$", line)
            if not m:
                raise UserError(
                    f"{where}: {line!r} is not a [group], [group:vars] or [group:children] header"
                )
            section, kind = m.group(1), m.group(2) or "hosts"
            inv.group(section)
            continue
        if kind == "hosts":
            _host_line(inv, line, section, where)
        elif kind == "vars":
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise UserError(f"{where}: {line!r} is not key=value")
            inv.group(section).vars[key.strip()] = _value(value)
        else:
            child = line.split()[0]
            inv.group(child)
            if child not in inv.group(section).children:
                inv.group(section).children.append(child)
    _under_all(inv)
    return inv


# --- YAML -----------------------------------------------------------------------------------


def _yaml_group(inv: Inventory, name: str, body, where: str) -> None:
    g = inv.group(name)
    if body is None:
        return
    if not isinstance(body, dict):
        raise UserError(f"{where}: group {name!r} must be a mapping (hosts, vars, children)")
    unknown = set(body) - {"hosts", "vars", "children"}
    if unknown:
        raise UserError(
            f"{where}: group {name!r} has {', '.join(sorted(unknown))}; "
            "a group has hosts, vars and children"
        )
    for host, hvars in (body.get("hosts") or {}).items():
        if hvars is not None and not isinstance(hvars, dict):
            raise UserError(f"{where}: host {host!r} must map to its variables")
        for h in expand_ranges(str(host)):
            inv.add_host(h, name, {k: str(v) for k, v in (hvars or {}).items()})
    g.vars.update({k: str(v) for k, v in (body.get("vars") or {}).items()})
    for child, cbody in (body.get("children") or {}).items():
        if child not in g.children:
            g.children.append(child)
        _yaml_group(inv, child, cbody, where)


def _yaml_error(e: Exception) -> str:
    """A YAML parser's error in one line: what is wrong, and where."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(str(problem).split()) + where


def _check_yaml_size(data, path: str) -> None:
    """Refuse a document that nests deeper than MAX_YAML_DEPTH, refers to itself, or
    expands (through aliases) to more than MAX_YAML_VALUES values; before it is walked."""
    seen = 0
    todo = [(data, 0, ())]
    while todo:
        value, depth, above = todo.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise UserError(
                f"{path}: its values (aliases expanded) number more than {MAX_YAML_VALUES}; "
                "an inventory names hosts, groups and variables"
            )
        if isinstance(value, dict | list):
            if id(value) in above:
                raise UserError(f"{path}: a YAML alias refers to a value that contains it")
            if depth >= MAX_YAML_DEPTH:
                raise UserError(f"{path}: nests deeper than {MAX_YAML_DEPTH} levels")
            items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
            for key, item in items:
                if not isinstance(key, str | int | float | bool | type(None)):
                    raise UserError(f"{path}: a mapping key is a {type(key).__name__}")
                todo.append((item, depth + 1, (*above, id(value))))


def parse_yaml(text: str, path: str = "inventory") -> Inventory:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML: {_yaml_error(e)}") from None
    except RecursionError:
        raise UserError(f"{path}: not valid YAML: it nests too deeply") from None
    _check_yaml_size(data, path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: a YAML inventory is a mapping of groups (all: ...)")
    inv = Inventory(path)
    for name, body in data.items():
        _yaml_group(inv, str(name), body, path)
    _under_all(inv)
    for h in inv.hosts:
        if not any(h in g.hosts for g in inv.groups.values() if g.name != "all"):
            inv.group("ungrouped").hosts.append(h)
    return inv


def load(path: str | Path) -> Inventory:
    p = Path(path)
    text = files.read_input_text(p, f"--inventory {str(path)!r}", "inventory")
    if p.suffix in (".yml", ".yaml") or text.lstrip().startswith(("---", "all:")):
        inv = parse_yaml(text, str(path))
    else:
        inv = parse_ini(text, str(path))
    if not inv.hosts:
        raise UserError(f"--inventory {str(path)!r} names no hosts")
    return inv
