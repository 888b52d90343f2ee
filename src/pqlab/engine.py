"""Finding and running `pqlab-engine`, and reading its JSON-lines output.

The engine prints one JSON record per line; a record `{"type": "error", "message": ...}`
ends a failed run. See docs/engine-protocol.md.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from pqlab.errors import EngineError, UserError

PROTOCOL = 1
REPO_ROOT = Path(__file__).resolve().parents[2]


def engine_path() -> Path:
    """The engine binary: $PQLAB_ENGINE, else the repo's release build, else PATH."""
    env = os.environ.get("PQLAB_ENGINE")
    if env:
        path = Path(env)
        if not path.is_file():
            raise UserError(f"PQLAB_ENGINE={env!r} is not a file; build it with 'make engine'")
        return path
    built = REPO_ROOT / "engine" / "target" / "release" / "pqlab-engine"
    if built.is_file():
        return built
    found = shutil.which("pqlab-engine")
    if found:
        return Path(found)
    raise UserError(
        "pqlab-engine is not built; run 'make engine' in the pqlab checkout "
        "(or set PQLAB_ENGINE to the binary)"
    )


def command(args: Sequence[str], netns: str | None = None) -> list[str]:
    """The argv that runs the engine with `args`, inside network namespace `netns` if given."""
    argv = [str(engine_path()), *map(str, args)]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    return argv


def parse_line(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise EngineError(f"engine printed a line that is not JSON: {line[:200]!r} ({e})") from e
    if not isinstance(record, dict) or "type" not in record:
        raise EngineError(f"engine record without a type: {line[:200]!r}")
    if record["type"] == "error":
        raise EngineError(record.get("message", "engine failed without a message"))
    return record


def stream(
    args: Sequence[str],
    netns: str | None = None,
    timeout: float | None = None,
    env: dict | None = None,
) -> Iterator[dict]:
    """Run the engine and yield its records as they arrive; raise EngineError on failure."""
    argv = command(args, netns)
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                yield parse_line(line)
        proc.wait(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        err = (proc.stderr.read() if proc.stderr else "").strip()
        raise EngineError(
            f"engine exited with {proc.returncode}: {err.splitlines()[-1] if err else argv}"
        )


def run(
    args: Sequence[str],
    netns: str | None = None,
    timeout: float | None = None,
    env: dict | None = None,
) -> list[dict]:
    """Run the engine to completion and return all its records."""
    return list(stream(args, netns=netns, timeout=timeout, env=env))


@functools.lru_cache(maxsize=1)
def info() -> dict:
    """The engine's build record: library versions and the algorithms each backend has."""
    records = run(["info"], timeout=60)
    rec = next((r for r in records if r["type"] == "info"), None)
    if rec is None:
        raise EngineError("engine 'info' printed no info record")
    if rec.get("protocol") != PROTOCOL:
        raise EngineError(
            f"engine speaks protocol {rec.get('protocol')}, this pqlab expects {PROTOCOL}; "
            "rebuild it with 'make engine'"
        )
    return rec
