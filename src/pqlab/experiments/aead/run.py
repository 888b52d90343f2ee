"""Measuring the aead experiment: the engine's `aead` runs per cell, under each AES-NI mask
(OPENSSL_ia32cap in its environment), every record checked, the capability vector stored.
"""

from __future__ import annotations

import json
import os

from pqlab import engine, process
from pqlab.errors import EngineError
from pqlab.experiments.aead.plan import CELLS, NAME, Plan, cell_id
from pqlab.experiments.aead.schema import DDL
from pqlab.progress import CellProgress
from pqlab.stats import Cause, Warning_

ENV_VAR = "OPENSSL_ia32cap"


def _engine_env(value: str | None) -> dict:
    return {ENV_VAR: value} if value is not None else {}


def probe_cpu(value: str | None) -> dict:
    """The engine's `cpu` record when started with this mask."""
    for rec in engine.run(["aead", "--cpu-only"], env=_engine_env(value), timeout=60):
        if rec["type"] == "cpu":
            return rec
    raise EngineError("engine 'aead --cpu-only' printed no cpu record")


def measure(plan: Plan, store) -> None:
    for ddl in DDL:
        store.ensure_table(ddl)
    _drop_user_mask(store)
    done = CELLS.done(store)
    cpus = {(a, m): _probe_environment(store, a, m, v, done) for a, m, v in plan.environments()}
    jobs = _jobs(plan, done)
    with CellProgress("aead", sum(len(j[-1]) for j in jobs)) as progress:
        for job in jobs:
            _run_job(store, plan, job, cpus, progress)
    _contention_warning(store)


def _drop_user_mask(store) -> None:
    """pqlab sets OPENSSL_ia32cap itself per --aesni/--mask; a user's value would skew every
    cell, so it is removed (and the run says so)."""
    user_mask = os.environ.pop(ENV_VAR, None)
    if user_mask is not None:
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.ENV_MASK_IGNORED,
                    ENV_VAR,
                    f"the environment had {ENV_VAR}={user_mask}, which pqlab removed",
                    "pqlab sets the mask itself per --aesni/--mask; unset it",
                )
            ],
        )


def _probe_environment(store, aesni: str, mask: str, value, done: set) -> dict:
    """OpenSSL's capabilities under this mask, checked to be what was asked, and stored."""
    cpu = probe_cpu(value)
    feats = cpu.get("features", {})
    if cpu.get("arch") != "x86_64" and aesni == "off":
        raise EngineError(
            f"--aesni off needs an x86_64 CPU: OPENSSL_ia32cap has no effect on {cpu.get('arch')}"
        )
    if aesni == "off" and feats.get("aesni"):
        raise EngineError(
            f"the {mask} mask {value} did not turn AES-NI off: OpenSSL still "
            f"reports {cpu.get('openssl_ia32cap')}"
        )
    if aesni == "on" and not feats.get("aesni"):
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.NO_AESNI,
                    "AES-NI on",
                    "this CPU (or OpenSSL) has no AES-NI, so 'on' measures software AES",
                    "run on a CPU with AES-NI to compare",
                )
            ],
        )
    cid = CELLS.auxiliary("cpu", aesni, mask)
    if cid not in done:
        with store.cell(NAME, cid, {"aesni": aesni, "mask": mask}):
            store.insert_rows(
                "aead_cpu",
                [
                    {
                        "aesni": aesni,
                        "mask": mask,
                        "ia32cap_env": value,
                        "openssl_ia32cap": cpu["openssl_ia32cap"],
                        "aes_gcm_path": cpu["aes_gcm_path"],
                        "features": json.dumps(feats),
                    }
                ],
            )
    return cpu


def _jobs(plan: Plan, done: set) -> list[tuple]:
    """One engine run per (environment, mode, cipher, direction) with its sizes not done."""
    jobs = []
    for aesni, mask, value in plan.environments():
        for mode in plan.modes:
            for cipher in plan.ciphers:
                for direction in plan.directions:
                    todo = [
                        s
                        for s in plan.sizes
                        if cell_id(cipher, aesni, mask, mode, direction, s) not in done
                    ]
                    if todo:
                        jobs.append((aesni, mask, value, mode, cipher, direction, todo))
    return jobs


def _run_job(store, plan: Plan, job: tuple, cpus: dict, progress) -> None:
    aesni, mask, value, mode, cipher, direction, todo = job
    progress.start(
        f"{cipher} {mode} {direction} AES-NI {aesni}"
        + (f" ({mask} mask)" if aesni == "off" else "")
    )
    window_ms = max(1.0, min(100.0, plan.seconds * 1000 / 10))
    args = [
        "aead",
        "--cipher",
        cipher,
        "--mode",
        mode,
        "--directions",
        direction,
        "--sizes",
        ",".join(map(str, todo)),
        "--seconds",
        f"{plan.seconds:g}",
        "--window-ms",
        f"{window_ms:g}",
    ]
    cpu = cpus[(aesni, mask)]
    windows: list[dict] = []
    cells: list[tuple] = []
    timeout = len(todo) * (plan.seconds * 20 + 30)
    for rec in process.stream(args, env=_engine_env(value), timeout=timeout):
        if rec["type"] == "cpu" and rec["openssl_ia32cap"] != cpu["openssl_ia32cap"]:
            raise EngineError(
                f"OpenSSL's capability vector changed between runs: {rec['openssl_ia32cap']}"
            )
        if rec["type"] == "window":
            windows.append(rec)
        elif rec["type"] == "cell":
            cells.append(_cell_rows(plan, rec, windows, aesni, mask, value, cpu))
            windows = []
            progress.advance()
    _save_cells(store, cells)


def _contention_warning(store) -> None:
    contended = store.query(
        "SELECT count(*) AS n, min(cpu_ns * 1.0 / ns) AS worst FROM aead_cells "
        "WHERE cpu_ns < 0.9 * ns"
    )[0]
    if contended["n"]:
        store.add_warnings(
            NAME,
            "-",
            [
                Warning_(
                    Cause.CPU_CONTENDED,
                    "aead",
                    f"in {contended['n']} cells the engine had the CPU for less than 90 % of "
                    f"the timed wall-clock time (worst {contended['worst']:.0%}): other "
                    "processes ran, so wall-clock MB/s (mb_per_s) understate the ciphers",
                    "compare cpu_mb_per_s (per CPU-second, like openssl speed without "
                    "-elapsed), or rerun on an idle machine",
                )
            ],
        )


def _cell_rows(plan, rec, windows, aesni, mask, value, cpu) -> tuple:
    """One cell's (id, parameters, window rows, cell row), checked: every record verified, the
    windows adding up to the cell."""
    size = rec["record_bytes"]
    cid = str(cell_id(rec["cipher"], aesni, mask, rec["mode"], rec["direction"], size))
    if rec["verified_records"] != rec["records"] or rec["records"] <= 0:
        raise EngineError(
            f"{cid}: {rec['verified_records']} of {rec['records']} records "
            "verified; refusing to store an unverified number"
        )
    if sum(w["records"] for w in windows) != rec["records"]:
        raise EngineError(f"{cid}: window samples do not add up to the cell total")
    params = {
        "cipher": rec["cipher"],
        "aesni": aesni,
        "mask": mask,
        "mode": rec["mode"],
        "direction": rec["direction"],
        "record_bytes": size,
    }
    window_rows = [
        {
            **params,
            "cell_id": cid,
            "window_index": w["index"],
            "records": w["records"],
            "bytes": w["bytes"],
            "ns": w["ns"],
            "cpu_ns": w["cpu_ns"],
        }
        for w in windows
    ]
    cell_row = {
        **params,
        "cell_id": cid,
        "ia32cap_env": value,
        "openssl_ia32cap": cpu["openssl_ia32cap"],
        "aes_gcm_path": cpu["aes_gcm_path"],
        "records": rec["records"],
        "bytes": rec["bytes"],
        "ns": rec["ns"],
        "cpu_ns": rec["cpu_ns"],
        "verified_records": rec["verified_records"],
        "windows": rec["windows"],
        "batch_records": rec["batch_records"],
        "aad_bytes": rec["aad_bytes"],
        "key_set_per_record": rec["key_set_per_record"],
        "nonce": rec["nonce"],
        "seconds_requested": plan.seconds,
    }
    return cid, params, window_rows, cell_row


def _save_cells(store, cells: list[tuple]) -> None:
    """The cells of one engine run, stored in one transaction with their 'done' marks."""
    if not cells:
        return
    with store.cells(NAME) as mark:
        store.insert_rows("aead_windows", [w for c in cells for w in c[2]])
        store.insert_rows("aead_cells", [c[3] for c in cells])
        for cid, params, _, _ in cells:
            mark(cid, params)
