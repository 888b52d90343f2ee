"""Figures drawn by worker processes during an export: the same files as drawn in place,
every file written when the block ends, a drawing's error raised there."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from pqlab import figures, files
from pqlab.errors import UserError


class _Store:
    def __init__(self, root):
        self.root = root
        self._figures = None

    def figures(self):
        if self._figures is None:
            self._figures = files.Dir.open(self.root / "figures", create=True)
        return self._figures


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


def _broken(i: int):
    raise ValueError(f"figure {i} cannot be built")


def test_a_drawing_that_fails_is_raised_when_the_block_ends(tmp_path):
    store = _Store(tmp_path)
    reached = []
    with pytest.raises(ValueError, match="figure 1 cannot be built"):
        with figures.rendering(wait=True):
            figures.save(_draw(0), store, "ok")
            figures.draw(store, "bad", _broken, 1)  # in a worker: no error yet
            reached.append(True)
    assert reached  # the error came from the worker, when the block ended


def test_a_figure_is_written_whole_and_never_through_a_link(tmp_path):
    """The workers draw, the lab writes: a link planted at a figure's name is replaced,
    its target untouched; a directory there is one error line, and no temporary file
    stays behind."""
    store = _Store(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    figs = tmp_path / "figures"
    figs.mkdir()
    (figs / "linked.png").symlink_to(victim)
    (figs / "blocked.png").mkdir()
    with figures.rendering(wait=True):
        figures.save(_draw(0), store, "linked")
    assert victim.read_text() == "precious"
    assert not (figs / "linked.png").is_symlink()
    assert (figs / "linked.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UserError, match="blocked.png"):
        with figures.rendering(wait=True):
            figures.save(_draw(1), store, "blocked")
    assert sorted(p.name for p in figs.iterdir()) == ["blocked.png", "linked.png", "linked.svg"]


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
