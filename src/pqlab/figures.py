"""Figure helpers: a consistent style, and saving each figure as PNG and SVG.

Drawing the files is most of an export's time (about 90 % of the default suite's). Inside
`rendering()` (the report's export) `save` hands each figure, pickled, to worker processes
and returns at once, and `draw` hands over only what a figure is made from, so a worker
builds it too (for figures with many artists building costs as much as drawing, and a
built figure is slow to pickle); the block ends when every file is written, so the report
page, which embeds them, comes after. Nothing is measured while a run exports.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
    }
)


def save(fig, store, name: str) -> Path:
    """Write figures/<name>.png and .svg (in a worker inside `rendering()`); the PNG path."""
    png = store.figure_path(f"{name}.png")
    svg = store.figure_path(f"{name}.svg")
    if not _handed_to_worker(fig, png, svg):
        _write(fig, png, svg)
    plt.close(fig)
    return png


def draw(store, name: str, build: Callable, *args) -> Path:
    """Write figures/<name>.png and .svg of the figure `build(*args)` returns; inside
    `rendering()` (past its first IN_PLACE figures) a worker builds and writes it, so
    `build` must be a module-level function and `args` picklable. The PNG path."""
    png = store.figure_path(f"{name}.png")
    svg = store.figure_path(f"{name}.svg")
    if _in_worker():
        _pending.append(_pool.submit(_build, (build, args, str(png), str(svg))))
    else:
        fig = build(*args)
        _write(fig, png, svg)
        plt.close(fig)
    return png


def _in_worker() -> bool:
    """Whether the next figure goes to a worker: inside `rendering()`, past its first
    IN_PLACE figures (counted)."""
    global _saved
    if _pending is None:
        return False
    _saved += 1
    return _saved > IN_PLACE


def _handed_to_worker(fig, png: Path, svg: Path) -> bool:
    """Inside `rendering()`, past its first IN_PLACE figures: the figure pickled to a worker."""
    if not _in_worker():
        return False
    try:
        data = pickle.dumps(fig)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False  # an artist that does not pickle: drawn here
    _pending.append(_pool.submit(_render, (data, str(png), str(svg))))
    return True


def _write(fig, png, svg) -> None:
    """Both files, cropped to the figure's tight box. The box is found once: savefig's
    "tight" lays the figure out anew (a draw that renders nothing) for each file."""
    fig.draw_without_rendering()
    box = fig.get_tightbbox().padded(plt.rcParams["savefig.pad_inches"])
    fig.savefig(png, bbox_inches=box)
    fig.savefig(svg, bbox_inches=box, metadata={"Date": None})


def _build(job: tuple) -> None:
    """In a worker: one figure built from its data, and its two files."""
    build, args, png, svg = job
    fig = build(*args)
    _write(fig, png, svg)
    plt.close(fig)


def _render(job: tuple[bytes, str, str]) -> None:
    """In a worker: one pickled figure's two files."""
    data, png, svg = job
    fig = pickle.loads(data)
    _write(fig, png, svg)
    plt.close(fig)


_pending: list | None = None
_pool = None
# The first figures of a block are drawn in place: starting the workers (each imports
# matplotlib) costs about a second, more than a small run's few figures take.
IN_PLACE = 6
_saved = 0  # figures saved in the current block


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """Figures saved inside the block are drawn by worker processes, one per CPU; every file
    is written (or a drawing's error raised) when the block ends."""
    global _pending, _pool, _saved
    if _pending is not None:  # already inside
        yield
        return
    with workers.Workers() as pool:
        _pending, _pool = [], pool
        _saved = 0
        try:
            yield
            for job in _pending:
                job.get()
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
