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
    for i in range(6):
        figures.save(_draw(i), here, f"f{i}")
    with figures.rendering(wait=True):
        pngs = [figures.save(_draw(i), there, f"f{i}") for i in range(6)]
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
    n = 6
    for i in range(n):
        figures.save(_draw(i), here, f"f{i}")
    with figures.rendering(wait=True):
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
        with figures.rendering(wait=True):
            # A directory where the PNG should go: the worker's savefig fails.
            (tmp_path / "figures").mkdir()
            (tmp_path / "figures" / "bad.png").mkdir()
            figures.save(_draw(0), store, "ok")
            figures.save(_draw(1), store, "bad")  # in a worker: no error yet
            reached.append(True)
    assert reached  # the error came from the worker, when the block ended


def test_figures_saved_before_the_workers_are_up_are_drawn_in_place(tmp_path, monkeypatch):
    """Until the block's workers are up, figures are drawn here (written at once); once
    they are, figures go to them, and every file is there when the block ends."""
    store = _Store(tmp_path)
    (tmp_path / "figures").mkdir()
    monkeypatch.setattr(figures.workers.Workers, "ready", property(lambda self: False))
    with figures.rendering():
        figures.save(_draw(0), store, "early")
        assert (tmp_path / "figures" / "early.svg").exists()  # drawn in place, already
        assert figures._pending == []
    monkeypatch.undo()
    with figures.rendering(wait=True):
        figures.save(_draw(1), store, "late")
        assert len(figures._pending) == 1  # handed to a worker
    assert (tmp_path / "figures" / "late.png").exists()
    assert (tmp_path / "figures" / "late.svg").exists()


def _png_size(path) -> tuple[int, int]:
    import struct

    data = path.read_bytes()
    return struct.unpack(">II", data[16:24])


def test_files_hold_what_is_drawn_past_the_figure_and_only_that(tmp_path):
    """A figure's files are cut to its tight box: a label far outside the figure (past the
    drawing's margin) is in both files, as savefig's tight box holds it; a figure without
    one is cut close. The PNG and the SVG have one box."""
    store = _Store(tmp_path)
    inside = _draw(0)
    far = _draw(0)
    far.text(3.0, 0.5, "far out", transform=far.axes[0].transAxes)  # ~6 inches right
    a, b = figures.save(inside, store, "inside"), figures.save(far, store, "far")
    (wa, ha), (wb, _) = _png_size(a), _png_size(b)
    pad = 2 * round(figures.plt.rcParams["savefig.pad_inches"] * 110)
    assert wa <= 3 * 110 + pad and ha <= 2 * 110 + pad  # the 3 x 2 in figure, cut close
    assert wb > (3 + figures.MARGIN_IN) * 110  # reaches past the margin: still drawn
    for png in (a, b):
        svg = png.with_suffix(".svg").read_text()
        width_pt = float(svg.split('width="', 1)[1].split("pt", 1)[0])
        assert abs(width_pt / 72 * 110 - _png_size(png)[0]) <= 2  # one box for both
