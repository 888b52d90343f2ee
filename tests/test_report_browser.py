"""report.html of a quick run, opened in a real headless Chromium (DevTools protocol, see
tests/browser.py): no console errors, every figure decoded, every table of tables/ on the
page with a working CSV download, the summary first and the warnings grouped, and a
screenshot of what a reader sees first saved into the run directory
(RUN/report-screenshot.png). Skipped with a message where chromium is missing.

The quick run is a suite of small steps: primitives (OpenSSL, liboqs and the python
harness), and, where this process may build network namespaces, handshake and ttlb, so the
summary has all its parts."""

from __future__ import annotations

import base64
import csv
import os

import duckdb
import pytest

from browser import Chromium, chromium_path
from conftest import run_pqlab

pytestmark = [
    pytest.mark.skipif(
        chromium_path() is None,
        reason="chromium is not installed (scripts/bootstrap.sh installs it: apt-get install "
        "chromium)",
    ),
]
pytest.importorskip("websocket", reason="websocket-client is not installed (pip install '.[test]')")

PRIMITIVES = """
[[step]]
experiment = "primitives"
kem = ["X25519", "ML-KEM-768"]
sig = ["ECDSA-P256", "ML-DSA-44"]
backend = "openssl,liboqs,python"
iterations = 60
"""
NETWORK = """
[[step]]
experiment = "handshake"
groups = ["X25519", "X25519MLKEM768"]
server-sig = ["ECDSA-P256", "ML-DSA-44"]
ca-sig = "ECDSA-P256"
n = 20
warmup = 2

[[step]]
experiment = "ttlb"
profile = "rtt=10ms,rate=100mbit"
groups = ["X25519", "X25519MLKEM768"]
chain = ["ECDSA-P256", "ML-DSA-44"]
sizes = ["0", "100KiB"]
n = 3
warmup = 1
"""


def _can_net() -> bool:
    from pqlab.net import privileges

    return privileges.can_admin_network()[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("quick")
    suite = base / "quick.toml"
    suite.write_text(
        'description = "report browser test"\n' + PRIMITIVES + (NETWORK if _can_net() else "")
    )
    out = base / "RUN"
    run_pqlab("suite", suite, "--out", out, check=True, timeout=1800)
    return out


@pytest.fixture(scope="module")
def page(run_dir, tmp_path_factory):
    """The report as Chromium shows it: what the tests below look at."""
    work = tmp_path_factory.mktemp("chromium")
    with Chromium(work) as c:
        nav = c.open((run_dir / "report.html").as_uri())
        c.drain(1.0)  # late console messages
        data = {
            "nav": nav,
            "errors": c.errors(),
            "images": c.evaluate(
                "Array.from(document.images).map(i => ({w: i.naturalWidth, "
                "h: i.naturalHeight, ok: i.complete, alt: i.alt}))"
            ),
            "tables": c.evaluate(
                "Array.from(document.querySelectorAll('table.data')).map(t => "
                "({name: t.dataset.table, rows: t.tBodies[0].rows.length}))"
            ),
            "links": c.evaluate(
                "Array.from(document.querySelectorAll('a.csv')).map(a => "
                "({name: a.getAttribute('download'), href: a.href}))"
            ),
            "headings": c.evaluate(
                "Array.from(document.querySelectorAll('h2')).map(h => h.innerText)"
            ),
            "causes": c.evaluate(
                "Array.from(document.querySelectorAll('details.cause')).map(d => "
                "({code: d.dataset.code, items: Array.from(d.querySelectorAll('li'))"
                ".map(li => li.textContent)}))"
            ),
            "summary": c.evaluate(
                "Array.from(document.querySelectorAll('ul.summary li')).map(li => li.innerText)"
            ),
        }
        data["screenshot"] = c.screenshot(run_dir / "report-screenshot.png")
        data["scroll_width"] = c.evaluate("document.documentElement.scrollWidth")
        data["download"] = _download_one(c, work / "downloads")
    return data


def _download_one(c: Chromium, target) -> dict:
    """Click the summary table's CSV link: Chromium must save exactly that CSV."""
    target.mkdir()
    c.send("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(target)})
    c.evaluate("document.querySelector('details.numbers').open = true")
    c.evaluate("document.querySelector('#table-summary a.csv').click()")
    path = target / "summary.csv"
    for _ in range(100):
        if path.exists() and not list(target.glob("*.crdownload")):
            return {"name": path.name, "bytes": path.read_bytes()}
        c.drain(0.1)
    return {"name": None, "bytes": b""}


def test_the_page_loads_without_console_errors(page):
    assert not page["nav"].get("errorText"), page["nav"]
    assert page["errors"] == []


def test_every_figure_loads(page, run_dir):
    imgs = page["images"]
    pngs = list((run_dir / "figures").glob("*.png"))
    assert imgs and len(imgs) == len(pngs)
    for img in imgs:
        assert img["ok"] and img["w"] > 0 and img["h"] > 0, img


def test_every_table_is_on_the_page_with_its_rows(page, run_dir):
    on_page = {t["name"]: t["rows"] for t in page["tables"]}
    files = {p.stem: p for p in (run_dir / "tables").glob("*.csv")}
    assert set(on_page) == set(files)
    for name, path in files.items():
        with open(path, newline="") as f:
            n = len(list(csv.reader(f))) - 1
        # Long tables show their first rows (all of them are in the CSV link).
        assert 0 < on_page[name] <= n or on_page[name] == n == 0, name


def test_every_table_downloads_as_its_csv(page, run_dir):
    links = {link["name"]: link["href"] for link in page["links"]}
    files = {p.name: p.read_bytes() for p in (run_dir / "tables").glob("*.csv")}
    assert set(links) == set(files)
    for name, href in links.items():
        head, data = href.split(",", 1)
        assert head == "data:text/csv;charset=utf-8;base64", name
        assert base64.b64decode(data) == files[name], name
    got = page["download"]
    assert got["name"] == "summary.csv" and got["bytes"] == files["summary.csv"]


def test_the_report_opens_with_the_summary_and_groups_warnings(page, run_dir):
    heads = page["headings"]
    assert heads[0].startswith("Summary")
    assert heads.index("Machine and libraries") == len(heads) - 1
    assert any(h.startswith("Warnings") for h in heads[:4])
    summary = " ".join(page["summary"])
    assert "X25519MLKEM768" in summary
    if _can_net():
        assert "Handshake, key exchange" in summary and "Handshake, certificate chain" in summary
        assert "Time to last byte" in summary
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        stored = con.execute("SELECT code, subject FROM warnings").fetchall()
    finally:
        con.close()
    causes = {c["code"]: c["items"] for c in page["causes"]}
    assert len(causes) == len(page["causes"])  # one line per cause
    assert sum(len(v) for v in causes.values()) <= len(stored)
    assert bool(causes) == bool(stored)
    # ML-DSA signing spreads, if warned about, are listed as the algorithm's, never as noise.
    mldsa_sign = [s for _, s in stored if s.startswith("ML-DSA-44 (") and s.endswith(" sign")]
    if mldsa_sign:
        assert any(i.startswith("ML-DSA-44 (") for i in causes["inherent-variance"])
    for code in ("noisy", "outliers"):
        assert not any(i.startswith("ML-DSA-44 (") and " sign:" in i for i in causes.get(code, []))


def test_wide_tables_scroll_inside_the_page(page):
    assert page["scroll_width"] <= 1280  # the screenshot's viewport: no sideways page


def test_a_screenshot_is_saved_in_the_run_directory(page, run_dir):
    shot = run_dir / "report-screenshot.png"
    assert page["screenshot"] == shot and shot.is_file()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1600)
    assert os.path.getsize(shot) > 20_000  # a rendered page, not a blank one
