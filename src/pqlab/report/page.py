"""The report page: every present experiment's section, the summary and the warnings,
stitched into one self-contained report.html (figures and every table's CSV embedded)."""

from __future__ import annotations

import base64
import csv
import html
import io
from pathlib import Path

from pqlab import figures, files, stages
from pqlab.experiment import registry
from pqlab.report import summary, warnings
from pqlab.report.section import Section
from pqlab.store import RunStore


def export_all(store: RunStore, html: bool = True) -> list[Section]:
    sections = []
    present = set(store.experiments())
    with figures.rendering():  # every figure file written before the page embeds them
        for exp in registry():
            if exp.name not in present:
                continue
            section = exp.export(store)
            if section is not None:
                sections.append(section)
        # The summary draws nothing: made while the figure workers finish.
        head, rows = summary.build(store)
        top = Section("Summary", intro=head)
        csv_path = store.export_rows("summary", rows, summary.SUMMARY_COLUMNS)
        if csv_path is not None:
            top.table(csv_path, "The summary's numbers: baseline, candidate and change")
    if html:
        write_html(store, sections, top)
    return sections


# A table's CSV is embedded in the page (a data: URL with `download`) so report.html keeps
# working when mailed or moved on its own; a larger one is linked as tables/NAME.csv, which
# resolves when report.html is opened from the run directory.
MAX_EMBEDDED_CSV = 2 * 1024 * 1024


def csv_link(csv_path: Path) -> str:
    """The download link of one table's CSV."""
    name = html.escape(csv_path.name)
    data = files.read_input(csv_path, str(csv_path), "table", follow=False)
    if len(data) <= MAX_EMBEDDED_CSV:
        href = "data:text/csv;charset=utf-8;base64," + base64.b64encode(data).decode()
        return f"<a class=csv download='{name}' href='{href}'>download CSV</a>"
    return (
        f"<a class=csv href='tables/{name}'>CSV (tables/{name}, {len(data) // 1024} KiB: "
        "not embedded; open this page from the run directory)</a>"
    )


def _table_html(csv_path: Path, max_rows: int) -> str:
    text = files.read_input_text(csv_path, str(csv_path), "table", follow=False)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return "<p>(empty)</p>"
    head, body = rows[0], rows[1:]
    more = len(body) - max_rows
    out = [
        f"<div class=scroll><table class=data data-table='{html.escape(csv_path.stem)}'><thead><tr>"
    ]
    out += [f"<th>{html.escape(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in body[:max_rows]:
        cells = []
        for v in row:
            try:
                x = float(v)
                v = f"{x:.4g}" if not x.is_integer() else str(int(x))
                cells.append(f"<td class=num>{v}</td>")
            except ValueError:
                cells.append(f"<td>{html.escape(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    if more > 0:
        out.append(
            f"<p class=note>{more} more rows in {html.escape(csv_path.name)} (the CSV link "
            "has them all)</p>"
        )
    return "".join(out)


CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.6em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px} th{background:#f4f4f4} td.num{text-align:right;
font-variant-numeric:tabular-nums}
figure{margin:1em 0} figcaption{font-size:.85em;color:#555} img{max-width:100%}
.warn{background:#fff6e0;border-left:4px solid #e0a000;padding:.4em .8em;margin:.3em 0}
.note{font-size:.85em;color:#666} code{background:#f4f4f4;padding:0 3px}
details{margin:.5em 0} a.csv{font-size:.8em;margin-left:.5em}
div.scroll{overflow-x:auto;max-width:100%} details.numbers>summary{cursor:pointer}
table:not(.data){display:block;overflow-x:auto;max-width:100%}
ul.summary li{margin:.4em 0} nav ul{columns:2;font-size:.9em}
details.cause>summary{cursor:pointer;padding:.3em .6em;background:#fff6e0;
border-left:4px solid #e0a000}
details.cause.inherent>summary{background:#eef4ff;border-left-color:#4c72b0}
details.cause ul{font-size:.85em}
"""


def _python_harness(store: RunStore) -> dict | None:
    """The python harness's versions, from any invocation that used it."""
    for inv in store.invocations():
        harness = inv["metadata"].get("python_harness")
        if harness:
            return harness
    return None


def _machine_html(meta: dict, harness: dict | None = None) -> str:
    cpu = meta.get("cpu", {})
    eng = meta.get("engine", {})
    machine = [
        ("CPU", f"{cpu.get('model', '?')} ({cpu.get('count', '?')} logical CPUs)"),
        (
            "AES-NI / AVX2 / AVX-512",
            " / ".join(
                "yes" if cpu.get("features", {}).get(f) else "no"
                for f in ("aes", "avx2", "avx512f")
            ),
        ),
        ("Frequency governor / turbo", f"{cpu.get('governor')} / {cpu.get('turbo')}"),
        ("Kernel", meta.get("kernel", "?")),
        ("TCP congestion control (host)", meta.get("network", {}).get("congestion_control")),
        ("OpenSSL", eng.get("openssl", {}).get("version_text", "?")),
        ("liboqs", eng.get("liboqs", {}).get("version", "?")),
        *(
            (f"TLS stack {st.get('name')}", st.get("implementation", "?"))
            for st in eng.get("tls_stacks") or []
        ),
        ("Engine build", eng.get("build_id", "?")),
        *(
            [
                (
                    "Python harness (primitives --backend python)",
                    f"{harness.get('implementation', 'Python')} {harness.get('python')}, "
                    f"cryptography {harness.get('cryptography')} with "
                    f"{harness.get('openssl')}",
                )
            ]
            if harness
            else []
        ),
        ("pqlab", f"{meta.get('pqlab_version')} ({meta.get('pqlab_commit')})"),
    ]
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in machine
    )
    return f"<h2 id=machine>Machine and libraries</h2><table>{rows}</table>"


def _invocations_html(store: RunStore) -> str:
    invocations = store.invocations()
    if not invocations:
        return ""
    items = "".join(
        f"<li><code>{html.escape(i['command_line'])}</code> ({i['status']}"
        + _time_taken(i["metadata"].get("stages"))
        + ")</li>"
        for i in invocations
    )
    return (
        "<details><summary>Commands in this run and where their time went</summary>"
        f"<ul>{items}</ul></details>"
    )


def _time_taken(summary: dict | None) -> str:
    """`, 71 s: handshakes 40.1 s (56 %), ...` from a step's stages (`pqlab.stages`)."""
    if not summary or not summary.get("wall_s"):
        return ""
    return html.escape(f", {summary['wall_s']:.0f} s: {stages.describe(summary, top=5)}")


def _warnings_html(store: RunStore) -> str:
    return warnings.html_grouped(store)


def _block_html(block) -> str:
    if block[0] == "html":
        return block[1]
    if block[0] == "figure":
        png, caption = block[1], block[2]
        if not png.exists():
            return ""
        data = base64.b64encode(files.read_input(png, str(png), "figure", follow=False)).decode()
        return (
            f"<figure><img alt='{html.escape(caption)}' "
            f"src='data:image/png;base64,{data}'><figcaption>"
            f"{html.escape(caption)} ({html.escape(png.name)})"
            "</figcaption></figure>"
        )
    csv_path, caption, max_rows = block[1], block[2], block[3]
    return (
        f"<p id='table-{html.escape(csv_path.stem)}'><b>{html.escape(caption)}</b> "
        f"(<code>tables/{html.escape(csv_path.name)}</code>) {csv_link(csv_path)}</p>"
        + _table_html(csv_path, max_rows)
    )


def _anchor(title: str) -> str:
    return "sec-" + "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def _contents(sections: list[Section]) -> str:
    items = "".join(
        f"<li><a href='#{_anchor(s.title)}'>{html.escape(s.title)}</a></li>" for s in sections
    )
    return (
        "<nav><h2>Experiments in this run</h2><ul>"
        + items
        + "<li><a href='#machine'>Machine and libraries</a></li></ul></nav>"
    )


def write_html(store: RunStore, sections: list[Section], top: Section | None = None) -> Path:
    name = html.escape(store.path.name)
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>pqlab report: {name}</title>"
        f"<style>{CSS}</style></head><body><h1>pqlab report: {name}</h1>",
        "<p>Every number below is derived from the raw samples in "
        "<code>results.duckdb</code>; every table can be downloaded as CSV from its link "
        "(also in <code>tables/</code> as CSV and Parquet; <code>pqlab export</code> writes "
        "every table in CSV, Parquet or JSON), figures are in <code>figures/</code> as PNG "
        "and SVG. Rebuild this page with <code>pqlab report "
        + html.escape(str(store.path))
        + "</code>.</p>",
    ]
    if top is not None:
        parts.append(top.intro)
        if top.blocks:
            parts.append(
                "<details class=numbers><summary>The numbers behind the summary</summary>"
                + "".join(_block_html(b) for b in top.blocks)
                + "</details>"
            )
    parts += [_contents(sections), _warnings_html(store)]
    for s in sections:
        parts.append(f"<h2 id='{_anchor(s.title)}'>{html.escape(s.title)}</h2>{s.intro}")
        parts += [_block_html(b) for b in s.blocks]
    parts += [
        _machine_html(store.metadata(), _python_harness(store)),
        _invocations_html(store),
        "</body></html>",
    ]
    return store.write_output("report.html", "".join(parts))
