"""pqlab suite: steps into one run directory, exported once at the end."""

from conftest import run_pqlab


def test_suite_runs_steps_into_one_report(tmp_path):
    out = tmp_path / "suite"
    proc = run_pqlab("suite", "--quick", "--only", "sizes,certs", "--out", out, timeout=900)
    assert proc.returncode == 0, proc.stderr
    for table in ("sizes.csv", "certs_root.csv", "certs_server.csv"):
        assert (out / "tables" / table).is_file(), table
    html = (out / "report.html").read_text()
    assert "pqlab report" in html
    assert "<h2 id=machine>" in html
    assert html.count("<h2 id='") >= 2  # the two experiments' sections
    # the metadata lists both commands of the run
    import json

    meta = json.loads((out / "metadata.json").read_text())
    assert [i["experiment"] for i in meta["invocations"]] == ["sizes", "certs"]
    assert all(i["status"] == "complete" for i in meta["invocations"])


def test_suite_rejects_unknown_steps(tmp_path):
    proc = run_pqlab("suite", "--only", "sizes,bogus", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "bogus" in proc.stderr and "primitives" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_every_built_in_suite_is_valid_and_names_every_step():
    """The shipped suite files parse and validate (`--check` plans every step without
    creating anything); a merge that drops a `[[step]]` header fails here, not in a user's
    `make report`."""
    import tomllib
    from pathlib import Path

    import pqlab

    suites = Path(pqlab.__file__).parent / "suites"
    for name in ("quick", "default", "full"):
        proc = run_pqlab("suite", name, "--check", timeout=120)
        assert proc.returncode == 0, (name, proc.stderr)
        steps = tomllib.loads((suites / f"{name}.toml").read_text())["step"]
        planned = [ln.split(":")[0] for ln in proc.stdout.splitlines() if ":" in ln]
        for step in steps:
            assert step["experiment"] in planned, (name, step["experiment"], proc.stdout)


def test_docs_name_every_step_of_every_built_in_suite():
    """docs/suites.md lists the experiments each built-in suite runs, in order, as the
    suite files do (memory, capacity and throughput among them)."""
    import re
    import tomllib
    from pathlib import Path

    import pqlab

    suites = Path(pqlab.__file__).parent / "suites"
    docs = (Path(__file__).resolve().parents[1] / "docs" / "suites.md").read_text()
    for name in ("default", "quick", "full"):
        steps = tomllib.loads((suites / f"{name}.toml").read_text())["step"]
        ran = list(dict.fromkeys(step["experiment"] for step in steps))
        m = re.search(rf"^\| `{name}` \| ([a-z0-9, ]+) \|$", docs, re.M)
        assert m, f"docs/suites.md has no steps row for {name}"
        assert m.group(1).split(", ") == ran, (name, ran)
