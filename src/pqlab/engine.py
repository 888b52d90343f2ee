"""Finding and running the engine's programs, and reading their JSON-lines output.

The engine is one library and several programs (engine/, found in its workspace's manifests:
`programs`): `pqlab-engine`, and programs that link a library under another licence and
carry its TLS stack (`pqlab-engine-wolfssl`, GPL). Every program speaks the same protocol
and lists its TLS stacks in `info`; each stack knows the program that has it
(`pqlab.tls.stacks.Stack.program`, the first that lists it), and a command runs on the
program it is given (a spec's `program`), else on `pqlab-engine`. A program that is not
built simply contributes no stacks.

The engine prints one JSON record per line; a record `{"type": "error", "kind": ...,
"message": ...}` ends a failed run and becomes the matching `pqlab.errors` exception (see
docs/engine-protocol.md). Long-running engine processes (TLS servers and clients, captures)
are supervised by the process layer (`pqlab.process`); `run` here is for short one-shot calls.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Sequence
from pathlib import Path

from pqlab import files
from pqlab.errors import EngineError, EngineIOError, UserError, engine_error

PROTOCOL = 2
REPO_ROOT = Path(__file__).resolve().parents[2]
# Exit codes the engine uses for each error kind (docs/engine-protocol.md).
EXIT_KINDS = {2: "usage", 3: "library", 5: "check", 6: "io", 7: "peer"}


MAIN = "pqlab-engine"
# The engine's cargo workspace: its programs are the [[bin]] targets of its packages.
MANIFEST = REPO_ROOT / "engine" / "Cargo.toml"
MAX_MANIFEST_BYTES = 1 << 16


def _manifest(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.loads(f.read(MAX_MANIFEST_BYTES).decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _bins(manifest: dict) -> list[str]:
    named = [
        str(b["name"]) for b in manifest.get("bin") or [] if isinstance(b, dict) and "name" in b
    ]
    return named or ([str(manifest["package"]["name"])] if "package" in manifest else [])


@functools.lru_cache(maxsize=1)
def programs() -> tuple[str, ...]:
    """The engine's programs, the main one first (it runs everything that names no stack;
    a stack two programs list runs on the first): every program the engine's workspace
    builds (engine/Cargo.toml and its members, which `make engine` builds), so a program
    added there is found with no list to edit; and any other a `$PQLAB_ENGINE_...`
    variable names or that is on PATH as `pqlab-engine-...` (an engine installed apart)."""
    root = _manifest(MANIFEST)
    found = _bins(root)
    for member in (root.get("workspace") or {}).get("members") or []:
        found += _bins(_manifest(MANIFEST.parent / str(member) / "Cargo.toml"))
    found += sorted(
        v.lower().replace("_", "-") for v in os.environ if v.startswith(_env_var(MAIN) + "_")
    )
    for d in os.environ.get("PATH", "").split(os.pathsep):
        with contextlib.suppress(OSError):
            found += sorted(p.name for p in Path(d or ".").glob(MAIN + "-*") if p.is_file())
    return (MAIN, *(p for p in dict.fromkeys(found) if p != MAIN))


def _env_var(program: str) -> str:
    return program.upper().replace("-", "_")  # PQLAB_ENGINE, PQLAB_ENGINE_WOLFSSL


def program_path(program: str = MAIN) -> Path | None:
    """A program's binary: $PQLAB_ENGINE (or $PQLAB_ENGINE_WOLFSSL ...), else the repo's
    release build, else PATH; None when it is not built."""
    var = _env_var(program)
    env = os.environ.get(var)
    if env:
        path = Path(env)
        if not path.is_file():
            raise UserError(f"{var}={env!r} is not a file; build it with 'make engine'")
        return path
    built = REPO_ROOT / "engine" / "target" / "release" / program
    if built.is_file():
        return built
    found = shutil.which(program)
    return Path(found) if found else None


def engine_path() -> Path:
    """The main engine binary (`pqlab-engine`)."""
    path = program_path(MAIN)
    if path is None:
        raise UserError(
            "pqlab-engine is not built; run 'make engine' in the pqlab checkout "
            "(or set PQLAB_ENGINE to the binary)"
        )
    return path


def binary(program: str = MAIN) -> Path:
    """The binary of `program` (one of `programs()`: the one a stack names, `Stack.program`),
    else the main engine's, which then says what it lacks."""
    return program_path(program) or engine_path()


def command(args: Sequence, netns: str | None = None, program: str = MAIN) -> list[str]:
    """The argv that runs the engine's `program` with `args`, inside network namespace
    `netns` if given."""
    argv = [str(binary(program)), *map(str, args)]
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
    program: str = MAIN,
) -> list[dict]:
    """Run the engine to completion and return its records; the engine's own error record
    (or, without one, its exit code and last stderr line) becomes the matching exception."""
    argv = command(args, netns, program)
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


@functools.cache
def program_info(program: str) -> dict | None:
    """A program's `info` record; None when the program is not built. The record describes
    the binary alone (its build, libraries and stacks), so it is kept beside it
    (`<binary>.info.json`, with the binary's identity) and read from there while the binary
    is the same file: `info` takes some 0.15 s a program, every pqlab command asks."""
    path = program_path(program)
    if path is None:
        return None
    rec = _kept_info(path)
    if rec is None:
        rec = _run_info(program, path)
        _keep_info(path, rec)
    if rec.get("protocol") != PROTOCOL:
        raise EngineError(
            f"{program} speaks protocol {rec.get('protocol')}, this pqlab expects {PROTOCOL}; "
            "rebuild it with 'make engine'"
        )
    return rec


def _run_info(program: str, path: Path) -> dict:
    try:
        proc = subprocess.run(
            [str(path), "info"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineError(f"{program} info did not run: {e}") from None
    records = [parse_line(line) for line in proc.stdout.splitlines() if line.strip()]
    rec = next((r for r in records if r["type"] == "info"), None)
    if rec is None:
        raise EngineError(f"{program} 'info' printed no info record")
    return rec


def _identity(path: Path) -> list[int]:
    """What changes when a binary is rebuilt or replaced: its file, size and time."""
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _info_file(path: Path) -> Path:
    return path.with_name(path.name + ".info.json")


def _kept_info(path: Path) -> dict | None:
    """The `info` record kept beside the binary, if it was kept for this very file."""
    try:
        kept = json.loads(files.read_input(_info_file(path), "engine info", "record"))
        if kept.get("binary") == _identity(path) and kept.get("info", {}).get("type") == "info":
            return kept["info"]
    except (UserError, ValueError, AttributeError):
        pass
    return None


def _keep_info(path: Path, rec: dict) -> None:
    """Keep the record beside the binary (whole or not at all, `pqlab.files`; nothing when
    that directory cannot or may not be written)."""
    with contextlib.suppress(OSError, UserError):
        files.write_file(_info_file(path), json.dumps({"binary": _identity(path), "info": rec}))


def built_programs() -> list[str]:
    """The engine's programs that are built here, the main one first."""
    engine_path()  # the main one must be
    return [p for p in programs() if program_path(p) is not None]


@functools.lru_cache(maxsize=1)
def info() -> dict:
    """The main engine's build record (library versions, build id, the algorithms each
    backend has), with the TLS stacks of every built program (each entry names its
    `program`), the union of their certificate key types, and every program's build id
    (`programs`)."""
    rec = dict(program_info(MAIN) or {})
    stacks, seen, key_types, programs = [], set(), [], {}
    for program in built_programs():
        r = program_info(program) or {}
        programs[program] = r.get("build_id")
        for s in r.get("tls_stacks") or []:
            if s.get("name") not in seen:
                seen.add(s.get("name"))
                stacks.append({**s, "program": program})
        for k in r.get("certificate_key_types") or []:
            if k not in key_types:
                key_types.append(k)
    rec["tls_stacks"] = stacks
    rec["certificate_key_types"] = key_types
    rec["programs"] = programs
    return rec
