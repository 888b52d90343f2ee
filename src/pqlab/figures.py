"""Figure helpers: a consistent style, and saving each figure as PNG and SVG.

Drawing the files is most of an export's time (about 90 % of the default suite's). Inside
`rendering()` (the report's export) `save` hands each figure, pickled, to worker processes
and returns at once, and `draw` hands over only what a figure is made from, so a worker
builds it too (for figures with many artists building costs as much as drawing, and a
built figure is slow to pickle). Workers only draw: the files are written by the lab's own
process (`pqlab.files`, whole or not at all) as the drawings come back, and the block ends
when every file is written, so the report page, which embeds them, comes after. The workers start as the block begins; figures
saved before they are up are drawn in place. Nothing is measured while a run exports.
"""

from __future__ import annotations

import contextlib
import io
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from pqlab import workers  # noqa: E402

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "font.size": 9,
        "svg.hashsalt": "pqlab",  # reproducible SVG ids
        # Text as text, in the viewer's font (DejaVu Sans, else its sans-serif): searchable,
        # half the file, and a third less time to write than every glyph as a path.
        "svg.fonttype": "none",
    }
)
# PNG compression: level 3 writes a figure in 13 ms against 18 ms at zlib's default 6, for
# files some 8 % larger.
PNG = {"compress_level": 3}


def save(fig, store, name: str) -> Path:
    """Write figures/<name>.png and .svg (drawn by a worker inside `rendering()`); the PNG
    path."""
    figs = store.figures()
    if _in_worker():
        try:
            data = pickle.dumps(fig)
        except (pickle.PicklingError, TypeError, AttributeError):
            data = None  # an artist that does not pickle: drawn here
        if data is not None:
            _pending.append((figs, name, _pool.submit(_render, data)))
            plt.close(fig)
            return figs.path_of(f"{name}.png")
    _store(figs, name, _files(fig))
    plt.close(fig)
    return figs.path_of(f"{name}.png")


def draw(store, name: str, build: Callable, *args) -> Path:
    """Write figures/<name>.png and .svg of the figure `build(*args)` returns; inside
    `rendering()` (once its workers are up) a worker builds and draws it, so `build` must
    be a module-level function and `args` picklable. The PNG path."""
    figs = store.figures()
    if _in_worker():
        _pending.append((figs, name, _pool.submit(_build, (build, args))))
    else:
        fig = build(*args)
        _store(figs, name, _files(fig))
        plt.close(fig)
    return figs.path_of(f"{name}.png")


def _in_worker() -> bool:
    """Whether the next figure goes to a worker: inside `rendering()`, once its workers
    are up."""
    return _pending is not None and _pool.ready


def _store(figs, name: str, drawn: tuple[bytes, bytes]) -> None:
    """The figure's two files, written by this process into figures/ (`pqlab.files`: whole
    or not at all, never through a link); workers only draw."""
    png, svg = drawn
    figs.write(f"{name}.png", png)
    figs.write(f"{name}.svg", svg)


# How far past the figure's edges (inches) the drawing of `_files` reaches: a legend
# below the axes, a label sticking out, is in it without a second drawing.
MARGIN_IN = 2.0


def _files(fig) -> tuple[bytes, bytes]:
    """The PNG and the SVG, cropped to the figure's tight box. One Agg drawing makes the PNG and
    finds the box: the figure is drawn onto a canvas MARGIN_IN larger on every side, the
    box measured on the artists that drawing placed (its text already laid out), and the
    PNG cut out of it; savefig's "tight" would lay the figure out once more per file (a
    draw that renders nothing) before drawing it. The SVG is drawn to the box. A box
    reaching past the canvas draws the PNG again, to the box."""
    dpi = plt.rcParams["savefig.dpi"]
    dpi = fig.dpi if dpi == "figure" else float(dpi)
    width, height = fig.get_size_inches()
    canvas = Bbox.from_extents(-MARGIN_IN, -MARGIN_IN, width + MARGIN_IN, height + MARGIN_IN)
    raw = io.BytesIO()
    fig.savefig(raw, format="rgba", bbox_inches=canvas, dpi=dpi)
    renderer = getattr(fig.canvas, "renderer", None) or fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer).padded(plt.rcParams["savefig.pad_inches"])
    pixels = _cut(raw.getbuffer(), canvas, box, dpi)
    png, svg = io.BytesIO(), io.BytesIO()
    if pixels is None:
        fig.savefig(png, format="png", bbox_inches=box, dpi=dpi, pil_kwargs=PNG)
    else:
        matplotlib.image.imsave(png, pixels, format="png", dpi=dpi, pil_kwargs=PNG)
    fig.savefig(svg, format="svg", bbox_inches=box, metadata={"Date": None})
    return png.getvalue(), svg.getvalue()


def _cut(rgba, canvas, box, dpi: float):
    """The pixels of `box` (inches, figure coordinates) out of an RGBA drawing of `canvas`
    (rows from the top, its bottom edge the canvas's), as many as savefig gives a drawing
    of `box` itself; None when the box is not all inside the drawing."""
    w = round(canvas.width * dpi)
    h = len(rgba) // (4 * w) if w > 0 else 0
    if w * h * 4 != len(rgba) or abs(h - canvas.height * dpi) > 1:
        return None
    left = round((box.x0 - canvas.x0) * dpi)
    bottom = h - round((box.y0 - canvas.y0) * dpi)
    right, top = left + int(box.width * dpi), bottom - int(box.height * dpi)
    if left < 0 or top < 0 or right > w or bottom > h:
        return None
    return np.frombuffer(rgba, dtype=np.uint8).reshape(h, w, 4)[top:bottom, left:right]


def _build(job: tuple) -> tuple[bytes, bytes]:
    """In a worker: one figure built from its data, drawn."""
    build, args = job
    fig = build(*args)
    try:
        return _files(fig)
    finally:
        plt.close(fig)


def _render(data: bytes) -> tuple[bytes, bytes]:
    """In a worker: one pickled figure, drawn."""
    fig = pickle.loads(data)
    try:
        return _files(fig)
    finally:
        plt.close(fig)


_pending: list | None = None
_pool = None


@contextlib.contextmanager
def rendering(wait: bool = False) -> Iterator[None]:
    """Figures saved inside the block are drawn by worker processes, one per CPU, started
    as the block begins (until they are up, figures are drawn here: the first pool of a
    process takes about half a second; `wait` waits for it instead); every file is written
    (or a drawing's error raised) when the block ends: the workers draw, this process writes.
    """
    global _pending, _pool
    if _pending is not None:  # already inside
        yield
        return
    with workers.Workers() as pool:
        _pending, _pool = [], pool
        pool.start_soon()
        if wait:
            pool.wait_started()
        try:
            yield
            for figs, name, job in _pending:
                _store(figs, name, job.get())
        finally:
            _pending, _pool = None, None


def legend_below(ax, entries: list[tuple[str, dict]], columns: int = 2, fontsize: float = 6):
    """A legend under `ax`'s x label, its entries (label, the patch's colour and hatch
    keywords) in `columns` columns filled top to bottom, as `ax.legend(ncol=...)` orders
    them. Drawn as plain patches and texts: matplotlib's legend lays its boxes out anew at
    every draw, half the drawing of a stacked-bar figure with two 12-entry legends."""
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Affine2D, ScaledTranslation

    fig = ax.figure
    rows = -(-len(entries) // columns)
    line = fontsize * 1.5 / 72  # inches
    top = 38 / 72  # below the axes' bottom: past the tick labels and the x label
    for i, (label, style) in enumerate(entries):
        col, row = divmod(i, rows)
        anchor = ScaledTranslation(0.04 + col / columns, 0, ax.transAxes)
        y = -top - row * line
        box = Affine2D().scale(2 * fontsize / 72, fontsize / 72).translate(0, y)
        ax.add_artist(
            Rectangle(
                (0, -0.5),
                1,
                1,
                transform=box + fig.dpi_scale_trans + anchor,
                clip_on=False,
                **style,
            )
        )
        at = Affine2D().translate(2.6 * fontsize / 72, y) + fig.dpi_scale_trans + anchor
        ax.text(0, 0, label, transform=at, fontsize=fontsize, va="center", clip_on=False)


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
