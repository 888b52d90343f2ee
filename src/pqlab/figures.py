"""Figure helpers: a consistent style, and saving each figure as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
    """Write figures/<name>.png and .svg; return the PNG path."""
    png = store.figure_path(f"{name}.png")
    fig.savefig(png, bbox_inches="tight")
    fig.savefig(store.figure_path(f"{name}.svg"), bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return png


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
