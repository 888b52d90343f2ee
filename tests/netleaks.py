"""Leak checks that hold while other pqlab runs share the machine: only what this test
process created counts (its namespaces, its TUN devices, its engine children)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def my_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    mine = f"pqlab-{os.getpid()}-"
    return {line.split()[0] for line in out.splitlines() if line.startswith(mine)}


def my_tuns() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    mine = f"pqt{os.getpid() % 100000}-"
    return {
        line.split(":")[1].strip().split("@")[0]
        for line in out.splitlines()
        if line.split(":")[1].strip().startswith(mine)
    }


def my_engine_children() -> list[int]:
    """pqlab-engine processes whose parent is this process."""
    out = []
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError):
            continue
        if comm == "pqlab-engine" and ppid == me:
            out.append(int(d.name))
    return out


@pytest.fixture
def nothing_left():
    yield
    assert not my_namespaces(), f"namespaces left: {my_namespaces()}"
    assert not my_tuns(), f"TUN devices left: {my_tuns()}"
    assert not my_engine_children(), f"engine processes left: {my_engine_children()}"
