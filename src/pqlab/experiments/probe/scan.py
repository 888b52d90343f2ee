"""`pqlab probe --targets FILE`: the probe of one server, run on each target of a fleet.

Each target gets the single-server probe (`run.measure_cell` per configuration, its rows
in the per-probe tables under the target's name), at most `--parallel` targets at once and
at most `--rate` new connections a second over the whole scan. A target stops at its first
configuration that shows there is no TLS service there (a refused or silent port, bytes
that are not TLS): its other configurations would cost the same wait for nothing. Every
connection is bounded by `--timeout` as in a single probe, so a target's whole time is too.

As each target finishes, its rows, its `probe_targets` row and its flight predictions are
committed in one transaction with its cells' done marks, then appended to
tables/probe_targets.csv and .jsonl: a scan killed at any point loses at most the targets
in flight, and `--resume` (which rewrites both files from the database first) probes only
the targets without a row. Memory holds the targets' list and the results in flight."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import sys
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import units
from pqlab.catalog import Algorithm
from pqlab.errors import EngineError, UserError
from pqlab.experiment import Option
from pqlab.experiments.probe import fleet, fleet_plan, run, schema, targets
from pqlab.experiments.probe.plan import (
    MAX_N,
    MAX_TIMEOUT,
    NAME,
    SCAN_N,
    Cell,
    Plan,
    Target,
    matrix,
    parse_ca,
    parse_path,
    resolve,
    route_interface,
)
from pqlab.net import privileges
from pqlab.stats import Cause
from pqlab.tls import wire

DEFAULT_PARALLEL = 16
MAX_PARALLEL = 256
DEFAULT_RATE = 20.0  # new connections a second
MAX_RATE = 10_000.0
NOT_CAPTURED = "captures are off when scanning (--capture turns them on)"

OPTIONS = (
    Option(
        "targets",
        "scan many servers: a file of targets, one a line (HOST:PORT, [IPv6]:PORT or an "
        "https:// URL, then optionally a name; '#' comments; '-': standard input), or with "
        "--targets-from-inventory an Ansible inventory",
        metavar="FILE",
    ),
    Option(
        "targets-from-inventory",
        "with --targets INVENTORY: scan the hosts of this group (ansible_host, port from "
        f"{' or '.join(targets.PORT_VARS)}, else {targets.DEFAULT_PORT})",
        metavar="GROUP",
    ),
    Option(
        "parallel",
        f"with --targets: targets probed at once (1-{MAX_PARALLEL})",
        default=str(DEFAULT_PARALLEL),
        metavar="N",
    ),
    Option(
        "rate",
        f"with --targets: new connections a second over the whole scan (at most {MAX_RATE:g})",
        default=f"{DEFAULT_RATE:g}",
        metavar="PER_S",
    ),
    Option(
        "capture",
        "with --targets: capture each target's connections (off when scanning)",
        flag=True,
    ),
    *fleet_plan.OPTIONS,
)


@dataclass
class ScanPlan:
    """A scan: the targets and what each one's probe is (a single probe's plan but the
    target)."""

    targets: list[targets.TargetLine]
    source: str
    cells: list[Cell]
    n: int
    ca: Path
    path: str | None
    timeout: int
    parallel: int
    rate: float
    capture: bool
    interface: str | None
    plan_sigs: list[Algorithm]
    plan_paths: list
    skipped: list[str] = field(default_factory=list)

    def target_plan(self, line: targets.TargetLine, address: str) -> Plan:
        interface = None
        if self.capture:
            interface = self.interface or route_interface(address)
        return Plan(
            target=Target(line.text, line.host, line.port, address, line.path),
            name=line.name,
            cells=self.cells,
            n=self.n,
            servername=line.host,
            ca=self.ca,
            path=line.path or self.path,
            timeout=self.timeout,
            capture=interface,
            no_capture_reason=None if interface else NOT_CAPTURED,
            skipped=self.skipped,
        )


def scanning(values) -> bool:
    return bool(getattr(values, "targets", None) or getattr(values, "targets_from_inventory", None))


def from_values(values) -> ScanPlan:
    """Every target line and option checked; nothing resolved or sent."""
    if getattr(values, "target", None):
        raise UserError(f"give TARGET ({values.target!r}) or --targets FILE, not both")
    for flag, attr in (("--name", "name"), ("--servername", "servername")):
        if getattr(values, attr, None):
            raise UserError(
                f"{flag} names one server; with --targets each line names its target (and "
                "its server name is its host)"
            )
    lines, source = _lines(values)
    cells, skipped = matrix(values)
    rate = _rate(values.rate)
    interface = _interface(values)
    sigs, paths = fleet_plan.parse(values)
    return ScanPlan(
        targets=lines,
        source=source,
        cells=cells,
        n=units.parse_positive_int(values.n or SCAN_N, "-n", maximum=MAX_N),
        ca=parse_ca(values.ca),
        path=parse_path(values, None),
        timeout=units.parse_positive_int(values.timeout, "--timeout", maximum=MAX_TIMEOUT),
        parallel=units.parse_positive_int(values.parallel, "--parallel", maximum=MAX_PARALLEL),
        rate=rate,
        capture=bool(values.capture),
        interface=interface,
        plan_sigs=sigs,
        plan_paths=paths,
        skipped=skipped,
    )


def _rate(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_RATE):
        raise UserError(
            f"--rate {text!r}: new connections a second, a number above 0 up to {MAX_RATE:g}"
        )
    return value


def _lines(values) -> tuple[list[targets.TargetLine], str]:
    """The targets, and where they came from."""
    if not values.targets:
        raise UserError("--targets-from-inventory GROUP reads the inventory given as --targets")
    if values.targets_from_inventory:
        group = values.targets_from_inventory
        return targets.from_inventory(values.targets, group), f"{values.targets} (group {group})"
    source = "standard input" if values.targets == "-" else values.targets
    return targets.from_file(values.targets), source


def _interface(values) -> str | None:
    """With --capture: the interface given, or None (each target's route's)."""
    if not values.capture:
        return None
    if values.no_capture:
        raise UserError("--capture and --no-capture contradict each other; give one")
    ok, why = privileges.can_capture()
    if not ok:
        raise UserError(f"--capture: {why}")
    if values.interface and not Path("/sys/class/net", values.interface).exists():
        raise UserError(f"--interface {values.interface!r}: no such interface here")
    return values.interface


class Pacer:
    """At most `rate` new connections a second over every thread: each caller is given
    the next free slot and sleeps until it (a wait cut short when the scan stops)."""

    def __init__(self, rate: float, stop: threading.Event):
        self.interval = 1 / rate
        self.stop = stop
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, connections: int) -> bool:
        """False when the scan stopped meanwhile."""
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + connections * self.interval
        return not self.stop.wait(max(0.0, at - now))


@dataclass
class Finished:
    """A target's probe: its plan, its configurations' results, its row."""

    plan: Plan | None
    results: list[tuple[Cell, dict]]
    row: dict


def probe_target(scan: ScanPlan, line, pacer: Pacer, captures) -> Finished:
    """One target, as a single probe of it would go, configuration by configuration."""
    started = time.monotonic()
    try:
        address = resolve(line.host, line.text)
    except UserError as e:
        return Finished(None, [], fleet.row(line, None, [], dns_error=str(e)))
    try:
        plan = scan.target_plan(line, address)
    except UserError as e:  # no route to capture on: this target's error, not the scan's
        return Finished(None, [], {**fleet.row(line, address, []), "verdict": "error",
                                   "detail": str(e)})  # fmt: skip
    results: list[tuple[Cell, dict]] = []
    for cell in scan.cells:
        if not pacer.acquire(scan.n):
            break
        try:
            result = run.measure_cell(plan, cell, captures(line) if plan.capture else None)
        except EngineError as e:  # the engine refused before connecting: this target's error
            return Finished(plan, [], {**fleet.row(line, address, []), "verdict": "error",
                                       "detail": str(e)})  # fmt: skip
        if plan.capture is None:  # said once for the whole scan, not per configuration
            result["warnings"] = [w for w in result["warnings"] if w.cause != Cause.PROBE_UNSEEN]
        results.append((cell, result))
        if fleet.no_tls(result) is not None:
            break
    return Finished(
        plan, results, fleet.row(line, address, results, seconds=time.monotonic() - started)
    )


class Live:
    """tables/probe_targets.csv and .jsonl, grown a row at a time as targets finish; each
    made anew at the start from the database (so a resumed scan's files hold each target
    once)."""

    def __init__(self, store):
        self.dir = store.dir.sub("tables")
        self._stack = contextlib.ExitStack()
        rows = store.query(f"SELECT {', '.join(fleet.COLUMNS)} FROM probe_targets ORDER BY line")
        self.csv = self._stack.enter_context(
            self.dir.growing("probe_targets.csv", self._csv(rows, header=True))
        )
        self.jsonl = self._stack.enter_context(
            self.dir.growing("probe_targets.jsonl", "".join(self._json(r) for r in rows).encode())
        )

    @staticmethod
    def _csv(rows: list[dict], header: bool = False) -> bytes:
        text = io.StringIO(newline="")
        w = csv.DictWriter(text, fieldnames=list(fleet.COLUMNS), lineterminator="\n")
        if header:
            w.writeheader()
        w.writerows(rows)
        return text.getvalue().encode()

    @staticmethod
    def _json(row: dict) -> str:
        return json.dumps(row, default=str) + "\n"

    def add(self, row: dict) -> None:
        self.csv.write(self._csv([row]))
        self.jsonl.write(self._json(row).encode())

    def close(self) -> None:
        self._stack.close()


def _store(store, scan: ScanPlan, done: Finished, planned, mss: int) -> None:
    with store.cells(NAME) as mark:
        for cell, result in done.results:
            run.store_cell(store, done.plan, cell, result, mark)
        store.insert_rows("probe_targets", [done.row])
        chain = done.results and next((r["chain"] for _, r in done.results if r["chain"]), [])
        store.insert_rows(
            "probe_target_plans",
            fleet_plan.rows(done.row, chain or [], planned, scan.plan_paths, mss),
        )


def ensure(store) -> None:
    schema.ensure(store)
    store.ensure_table(fleet.DDL)
    store.ensure_table(fleet_plan.DDL)


def _say(text: str) -> None:
    print(text, flush=True)


def measure(scan: ScanPlan, store) -> None:
    ensure(store)
    done = {r["target"] for r in store.query("SELECT target FROM probe_targets")}
    todo = [t for t in scan.targets if t.name not in done]
    planned = fleet_plan.certificates(scan.plan_sigs, store.path / "certs")
    _say(
        f"scanning {len(scan.targets)} target(s) of {scan.source}"
        + (f" ({len(done)} done before)" if done else "")
        + f": {len(scan.cells)} configuration(s), {scan.n} connection(s) each, "
        f"{scan.parallel} at once, at most {scan.rate:g} new connections a second, "
        f"--timeout {scan.timeout} s per connection"
    )
    _say(
        "capturing each target's connections" if scan.capture else f"not capturing: {NOT_CAPTURED}"
    )
    for note in scan.skipped:
        _say(f"skipped {note}")
    captures_dir = store.dir.sub("captures", private=True) if scan.capture else None
    subs: dict[str, object] = {}
    lock = threading.Lock()

    def captures(line):
        with lock:
            if line.name not in subs:
                slug = run.capture_stem(str(line.line), line.name, "")
                subs[line.name] = captures_dir.sub(slug, private=True)
            return subs[line.name]

    stop = threading.Event()
    pacer = Pacer(scan.rate, stop)
    live = Live(store)
    counts: Counter = Counter()
    width = len(str(len(scan.targets)))
    pending = iter(todo)
    running: set[Future] = set()
    pool = ThreadPoolExecutor(max_workers=scan.parallel, thread_name_prefix="probe-target")
    try:
        while True:
            for line in pending:
                running.add(pool.submit(probe_target, scan, line, pacer, captures))
                if len(running) >= scan.parallel:
                    break
            if not running:
                break
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                result = future.result()
                _store(store, scan, result, planned, wire.DEFAULT_MSS)
                live.add(result.row)
                counts[result.row["verdict"]] += 1
                n = len(done) + sum(counts.values())
                row = result.row
                _say(f"[{n:>{width}}/{len(scan.targets)}] {row['target']}: {row['verdict']}"
                     + (f" ({row['unreachable_reason']})" if row["unreachable_reason"] else "")
                     + (f", {row['browser_group']}" if row["browser_group"] else ""))  # fmt: skip
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        live.close()
    _say("verdicts: " + ", ".join(f"{v} {counts[v]}" for v in fleet.VERDICTS if counts[v]))
    sys.stdout.flush()
