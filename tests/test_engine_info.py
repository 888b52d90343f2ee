"""A program's `info` record is kept beside its binary and read from there while the
binary is the same file; a rebuilt (or replaced) binary is asked again."""

from __future__ import annotations

import json

from pqlab import engine


def _fake(path, marker: str, runs) -> None:
    record = {"type": "info", "protocol": engine.PROTOCOL, "build_id": marker}
    path.write_text(f"#!/bin/sh\necho run >> \"{runs}\"\necho '{json.dumps(record)}'\n")
    path.chmod(0o755)


def test_info_is_kept_beside_the_binary_until_it_changes(tmp_path, monkeypatch):
    fake, runs = tmp_path / "pqlab-engine", tmp_path / "runs"
    _fake(fake, "first", runs)
    monkeypatch.setenv("PQLAB_ENGINE", str(fake))
    engine.program_info.cache_clear()
    try:
        assert engine.program_info(engine.MAIN)["build_id"] == "first"
        assert (tmp_path / "pqlab-engine.info.json").exists()
        engine.program_info.cache_clear()
        assert engine.program_info(engine.MAIN)["build_id"] == "first"
        assert runs.read_text().count("run") == 1  # the second answer was the kept one
        _fake(fake, "second build", runs)  # a rebuild: another size and time
        engine.program_info.cache_clear()
        assert engine.program_info(engine.MAIN)["build_id"] == "second build"
        assert runs.read_text().count("run") == 2
        # A kept record that is not JSON, or is of another file, is asked again.
        (tmp_path / "pqlab-engine.info.json").write_text("{not json")
        engine.program_info.cache_clear()
        assert engine.program_info(engine.MAIN)["build_id"] == "second build"
        assert runs.read_text().count("run") == 3
    finally:
        engine.program_info.cache_clear()
        engine.info.cache_clear()
