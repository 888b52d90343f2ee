"""Figures drawn by worker processes during an export: the same files as drawn in place,
every file written when the block ends, a drawing's error raised there."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from pqlab import figures


class _Store:
    def __init__(self, root):
        self.root = root

    def figure_path(self, name):
        (self.root / "figures").mkdir(exist_ok=True)
        return self.root / "figures" / name


def _draw(i: int):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [i, i * i, 1])
    ax.set_title(f"figure {i}")
    return fig


def test_workers_draw_the_same_files_as_in_place(tmp_path):
    here, there = _Store(tmp_path / "here"), _Store(tmp_path / "there")
    for d in (here.root, there.root):
        d.mkdir()
    for i in range(figures.IN_PLACE + 4):
        figures.save(_draw(i), here, f"f{i}")
    with figures.rendering():
        pngs = [figures.save(_draw(i), there, f"f{i}") for i in range(figures.IN_PLACE + 4)]
    for i, png in enumerate(pngs):
        for ext in ("png", "svg"):
            a = (here.root / "figures" / f"f{i}.{ext}").read_bytes()
            b = (there.root / "figures" / f"f{i}.{ext}").read_bytes()
            assert a == b and len(a) > 1000, (i, ext)
        assert png == there.root / "figures" / f"f{i}.png"
    assert not plt.get_fignums()  # every figure closed in this process


def test_figures_built_by_workers_are_the_same_files(tmp_path):
    """`draw` hands a worker the figure's function and data: built and written there, the
    files equal those built and written in place (and `save`'s)."""
    here, there = _Store(tmp_path / "here"), _Store(tmp_path / "there")
    for d in (here.root, there.root):
        d.mkdir()
    n = figures.IN_PLACE + 4
    for i in range(n):
        figures.save(_draw(i), here, f"f{i}")
    with figures.rendering():
        pngs = [figures.draw(there, f"f{i}", _draw, i) for i in range(n)]
    for i, png in enumerate(pngs):
        for ext in ("png", "svg"):
            a = (here.root / "figures" / f"f{i}.{ext}").read_bytes()
            assert a == (there.root / "figures" / f"f{i}.{ext}").read_bytes(), (i, ext)
        assert png == there.root / "figures" / f"f{i}.png"
    assert not plt.get_fignums()


def test_a_drawing_that_fails_is_raised_when_the_block_ends(tmp_path):
    store = _Store(tmp_path)
    reached = []
    with pytest.raises(OSError):
        with figures.rendering():
            # A directory where the PNG should go: the worker's savefig fails.
            (tmp_path / "figures").mkdir()
            (tmp_path / "figures" / "bad.png").mkdir()
            for i in range(figures.IN_PLACE):
                figures.save(_draw(i), store, f"ok{i}")
            figures.save(_draw(1), store, "bad")  # in a worker: no error yet
            reached.append(True)
    assert reached  # the error came from the worker, when the block ended
