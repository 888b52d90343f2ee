"""Finding and running `pqlab-engine`, and reading its JSON-lines output.

The engine prints one JSON record per line; a record `{"type": "error", "kind": ...,
"message": ...}` ends a failed run and becomes the matching `pqlab.errors` exception (see
docs/engine-protocol.md). Long-running engine processes (TLS servers and clients, captures)
are supervised by the process layer (`pqlab.process`); `run` here is for short one-shot calls.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pqlab.errors import EngineError, EngineIOError, UserError, engine_error

PROTOCOL = 2
REPO_ROOT = Path(__file__).resolve().parents[2]
# Exit codes the engine uses for each error kind (docs/engine-protocol.md).
EXIT_KINDS = {2: "usage", 3: "library", 5: "check", 6: "io", 7: "peer"}


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


def command(args: Sequence, netns: str | None = None) -> list[str]:
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
        raise engine_error(record.get("kind"), record.get("message", "engine failed"))
    return record


def run(
    args: Sequence,
    netns: str | None = None,
    timeout: float | None = None,
    env: dict | None = None,
) -> list[dict]:
    """Run the engine to completion and return its records; the engine's own error record
    (or, without one, its exit code and last stderr line) becomes the matching exception."""
    argv = command(args, netns)
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineIOError(
            f"engine {' '.join(map(str, args[:2]))} did not finish within {timeout:.0f} s"
        ) from None
    records = [parse_line(line) for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        raise engine_error(
            EXIT_KINDS.get(proc.returncode, "library"),
            f"engine exited with {proc.returncode}: {err[-1] if err else argv}",
        )
    return records


@functools.lru_cache(maxsize=1)
def info() -> dict:
    """The engine's build record: library versions, build id, the algorithms each backend
    has and the TLS stacks with their capabilities."""
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
