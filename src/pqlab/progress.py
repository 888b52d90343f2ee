"""Progress display: cells done, the current cell, time left (rich), quiet when not a TTY."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True)
# How often `start` redraws the display at most (seconds).
REDRAW_S = 0.1


class CellProgress:
    """`ticking=False`: redrawn on each update only, never by rich's refresh thread, which
    would wake ten times a second on the CPUs of the measurements (the handshake
    experiment, whose rounds update it often enough)."""

    def __init__(self, title: str, total: int, ticking: bool = True):
        self.title = title
        self.total = total
        self._progress = Progress(
            TextColumn("[bold]{task.fields[title]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cells"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
            disable=not sys.stderr.isatty(),
            auto_refresh=ticking,
        )
        self._task = None
        self._drawn = float("-inf")  # when the display was last redrawn (monotonic s)

    def __enter__(self) -> CellProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task("", total=self.total, title=self.title)
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def start(self, description: str) -> None:
        """Show what runs now: redrawn at most every REDRAW_S (a redraw takes some 0.6 ms,
        and the handshake experiment's 800 rounds each say theirs while its engines wait)."""
        now = time.monotonic()
        redraw = now - self._drawn >= REDRAW_S
        if redraw:
            self._drawn = now
        self._progress.update(self._task, description=description, refresh=redraw)
        if not sys.stderr.isatty():
            print(f"[{self.title}] {description}", file=sys.stderr, flush=True)

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)
        self._progress.refresh()

    def log(self, text: str) -> None:
        self._progress.console.print(text)
