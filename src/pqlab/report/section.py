"""What an experiment hands the report: a `Section` of prose, figures and tables, and the
report's prose templates (`report/templates/*.html`)."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path


def template(name: str, **values) -> str:
    """The report prose `report/templates/<name>.html`, with `$name` placeholders filled."""
    text = resources.files("pqlab.report").joinpath("templates", f"{name}.html").read_text()
    return string.Template(text).substitute(values) if values else text


@dataclass
class Section:
    """One experiment's part of the report."""

    title: str
    intro: str = ""  # HTML: what it shows and how to read it
    blocks: list = field(default_factory=list)

    def text(self, html_text: str) -> None:
        self.blocks.append(("html", html_text))

    def figure(self, png: Path, caption: str) -> None:
        self.blocks.append(("figure", Path(png), caption))

    def table(self, csv_path: Path, caption: str, max_rows: int = 60) -> None:
        self.blocks.append(("table", Path(csv_path), caption, max_rows))
