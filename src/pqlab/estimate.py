"""How long a step will take, before it runs: the model `pqlab suite --check` prints.

Every experiment declares the units of work of its plan (`Experiment.work(plan)` returns a
`Work`): how many of each unit it will do (`units`, counted in the costs the experiment
declares, `Experiment.costs`, named `<experiment>.<unit>`, and the shared ones of `COSTS`
here) and the
seconds its plan fixes whatever the machine (`exact_s`: `--duration`, `--seconds`,
tls_bench's seconds, the pauses a client makes between connections). A unit's cost is
seconds measured on a 2-core machine, each documented with what it was measured from; the
operations of a primitive, a certificate or a handshake are priced from one table of
per-operation times (`OPERATIONS`), a connection over an emulated link by the wire model
(`pqlab.tls.predict`). This module keeps the model; each experiment's own units and
their costs live with the experiment.

Where the user has measured the same experiment before on this machine, the estimate is
calibrated (`calibrate`): every run records each step's units of work in its metadata
(`estimate`, beside the stages' measured seconds, `pqlab.stages`), so an earlier step of the
same work gives its measured seconds, and earlier steps of other sizes give the ratio of their
measured seconds to what the model says of their units, applied to this step's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import catalog, metadata
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.store import DB_NAME, RunStore
from pqlab.tls import messages, predict, stacks, wire

# --- the model's constants --------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """Seconds per unit of work, and what they were measured from."""

    seconds: float
    measured: str


# The runs the costs were measured from, on a quiet 2-core AMD EPYC (AVX-512, VAES, SHA-NI;
# 2026-11) with the engine of this tree, each step's seconds from its stages (`stages` in
# each invocation's metadata, the export apart):
#   DEFAULT  `pqlab suite --out DIR`: the default suite, 24 min 41 s, and its tables;
#   MATRIX   `pqlab handshake -n 1000 --send-root` (80 cells x 1000 handshakes);
#   and small runs of one experiment each, named where they are used.
# `pqlab suite --quick` was run apart, to check the model at other sizes (docs/suites.md).
COSTS: dict[str, Cost] = {
    # Units priced elsewhere: one second each.
    "operation_seconds": Cost(
        1.0, "seconds of cryptographic operations, each priced from OPERATIONS"
    ),
    "handshake_seconds": Cost(
        1.0, "seconds of TLS handshakes, priced by the experiment from handshakes it measured"
    ),
    "link_seconds": Cost(
        1.0,
        "seconds the wire model (pqlab.tls.predict) gives connections over an emulated link; "
        "DEFAULT's ttlb connections over 1mbps-200ms and 1gbps-35ms took 341.6 s in all "
        "against 340.4 s predicted",
    ),
    "chain": Cost(0.020, "DEFAULT's certs step: (2.273 s - 1.006 s of key generation) / 64 chains"),
    # The export (tables, figures, report.html) once per run, timed experiment by
    # experiment on copies of DEFAULT's run (two exports, 66.4 and 67.3 s; in the run itself
    # 65.3 s) and of QUICK's (23.3 s; 21.8 s in the run), per experiment a fixed part and,
    # where the two differ with the cells, a part per cell (the cells of its steps). The
    # figure-heavy two (primitives, handshake) re-timed with the figures drawn by worker
    # processes (`figures.rendering`): the whole DEFAULT export 50.1 s, QUICK's 25.7 s.
    "export.report": Cost(0.3, "the summary and report.html: 0.35 s (DEFAULT), 0.26 s (QUICK)"),
}
# A pqlab client's ClientHello without its key share: DEFAULT's ClientHellos were 179 bytes
# with X25519's 32-byte share (ttlb), 134-155 bytes plus the share in handshake's cells.
CLIENT_HELLO_BYTES = 145


def cost(name: str, costs: dict[str, Cost] | None = None) -> float:
    """Seconds of one unit `name`, from `costs` (an experiment's own) or the shared `COSTS`."""
    return _table(costs)[name].seconds


def _table(costs: dict[str, Cost] | None) -> dict[str, Cost]:
    return {**COSTS, **(costs or {})}


# --- work -------------------------------------------------------------------------------


@dataclass
class Work:
    """One step's units of work, from its validated plan."""

    size: str  # a short summary for people: "80 cells x 120 handshakes"
    units: dict[str, float] = field(default_factory=dict)  # cost name -> how many
    exact_s: float = 0.0  # seconds the plan fixes whatever the machine's speed
    cells: int = 0  # cells the step measures (the export's work grows with them)
    notes: list[str] = field(default_factory=list)  # e.g. a remote network not priced
    costs: dict[str, Cost] = field(default_factory=dict)  # the experiment's own units

    def add(self, name: str, count: float) -> None:
        if name not in _table(self.costs):
            raise KeyError(f"no cost {name!r} in the experiment's costs or pqlab.estimate.COSTS")
        if count:
            self.units[name] = self.units.get(name, 0.0) + count

    @property
    def variable_s(self) -> float:
        """The seconds of the units, at the built-in costs."""
        return modelled(self.units, self.costs)

    @property
    def seconds(self) -> float:
        return self.exact_s + self.variable_s

    def record(self) -> dict:
        """What a run keeps in the step's metadata, to calibrate later estimates."""
        return {
            "units": {k: round(v, 6) for k, v in sorted(self.units.items())},
            "exact_s": round(self.exact_s, 3),
            "cells": self.cells,
            "size": self.size,
            "model_s": round(self.seconds, 1),
            "model": MODEL,
        }


def count(n: int, thing: str) -> str:
    """'1 link', '2 links': for a step's size."""
    return f"{n} {thing}" + ("" if n == 1 else "s")


def modelled(units: dict[str, float], costs: dict[str, Cost] | None = None) -> float:
    """Seconds of `units` at the built-in costs, `costs` (an experiment's own, or every
    experiment's) beside the shared ones (units the model no longer knows: nan)."""
    table = _table(costs)
    total = 0.0
    for name, count in units.items():
        if name not in table:
            return math.nan
        total += table[name].seconds * count
    return total


# --- calibration from earlier runs ------------------------------------------------------

MAX_RUNS = 20  # the newest run directories read for calibration
# A calibration ratio outside these bounds says the earlier step met something the model
# does not know (a machine busy with other work, a network that failed): not used.
RATIO_BOUNDS = (0.25, 4.0)
# The built-in model counts as this many seconds of measurement beside an earlier run's: a
# ratio measured over a few seconds (where start-up and noise weigh most) moves the
# estimate of a long step little; one measured over minutes moves it almost all the way.
PRIOR_S = 20.0
# The meaning of the units a run records: runs that recorded units of another model (their
# names or what they count changed) are not used for calibration.
MODEL = 1


@dataclass(frozen=True)
class Measured:
    """One step an earlier run measured: its recorded units of work and measured seconds."""

    run: Path
    started: str  # the step's start (UTC, ISO 8601)
    experiment: str
    seconds: float  # wall seconds of the step, the run's export left out
    units: dict
    exact_s: float
    cells: int

    def same_work(self, work: Work) -> bool:
        return self.units == work.record()["units"] and self.exact_s == round(work.exact_s, 3)


@dataclass(frozen=True)
class MeasuredExport:
    """The export of an earlier run: its measured seconds and the cells it exported."""

    run: Path
    started: str
    seconds: float
    cells: dict  # experiment -> cells


@dataclass
class Earlier:
    """What earlier runs on this machine measured (newest first)."""

    steps: list[Measured] = field(default_factory=list)
    exports: list[MeasuredExport] = field(default_factory=list)


def run_dirs(places: Iterable[Path]) -> list[Path]:
    """Run directories at or directly under `places`, newest first (at most MAX_RUNS)."""
    found: dict[Path, float] = {}
    for place in places:
        candidates = [place] if (place / DB_NAME).is_file() else []
        if not candidates and place.is_dir():
            try:
                candidates = [d for d in place.iterdir() if (d / DB_NAME).is_file()]
            except OSError:
                continue
        for d in candidates:
            try:
                found[d.resolve()] = (d / DB_NAME).stat().st_mtime
            except OSError:
                continue
    return sorted(found, key=lambda d: -found[d])[:MAX_RUNS]


def _this_machine() -> tuple[str, int | None]:
    cpu = metadata.cpu_info()
    return cpu.get("model"), cpu.get("count")


def _step_seconds(meta: dict) -> tuple[float | None, float]:
    """(the step's wall seconds without the export, the export's seconds) from its stages."""
    stages = meta.get("stages") or {}
    wall = stages.get("wall_s")
    export = float((stages.get("seconds") or {}).get("export") or 0.0)
    return (None if wall is None else float(wall) - export), export


def _read_run(path: Path, machine: tuple, earlier: Earlier) -> None:
    try:
        store = RunStore.open(path)
    except UserError:
        return  # being written, another schema, damaged: nothing to learn from it here
    try:
        invocations = store.invocations()
    finally:
        store.close()
    _read_invocations(path, invocations, machine, earlier)


def _read_invocations(path: Path, invocations: list[dict], machine: tuple, earlier) -> None:
    """The measured steps and export of one run's invocations (`RunStore.invocations`)
    into `earlier`: only a run of `machine`, only complete steps of this MODEL's units
    that resumed no finished cells."""
    cells: dict[str, int] = {}
    export: tuple[float, str] | None = None
    for inv in invocations:
        meta = inv["metadata"]
        cpu = meta.get("cpu") or {}
        if (cpu.get("model"), cpu.get("count")) != machine:
            return  # another machine's run says nothing about this one
        record = meta.get("estimate")
        seconds, export_s = _step_seconds(meta)
        if export_s:
            export = (export_s, inv["started"])
        if inv["status"] != "complete" or not record or seconds is None:
            continue
        if record.get("model") != MODEL:
            continue  # units of another model: another pqlab's
        cells[inv["experiment"]] = cells.get(inv["experiment"], 0) + int(record.get("cells", 0))
        if record.get("resumed"):
            continue  # part of its work was done before: its seconds are not its units'
        earlier.steps.append(
            Measured(
                run=path,
                started=inv["started"] or "",
                experiment=inv["experiment"],
                seconds=seconds,
                units=dict(record.get("units") or {}),
                exact_s=float(record.get("exact_s") or 0.0),
                cells=int(record.get("cells") or 0),
            )
        )
    if export is not None and cells:
        earlier.exports.append(MeasuredExport(path, export[1] or "", export[0], cells))


def earlier_runs(places: Iterable[Path]) -> Earlier:
    """The steps and exports earlier runs under `places` measured on this machine."""
    earlier = Earlier()
    machine = _this_machine()
    for path in run_dirs(places):
        _read_run(path, machine, earlier)
    earlier.steps.sort(key=lambda m: m.started, reverse=True)
    earlier.exports.sort(key=lambda m: m.started, reverse=True)
    return earlier


def _when(started: str) -> str:
    return started[:16].replace("T", " ") if started else "an earlier run"


def ratio(measured: float, model: float) -> float | None:
    """Measured over modelled seconds, each with PRIOR_S more; None when the measurement
    is implausible for the model (outside RATIO_BOUNDS) or the model is unknown."""
    if not model or math.isnan(model):
        return None
    if not RATIO_BOUNDS[0] <= measured / model <= RATIO_BOUNDS[1]:
        return None
    return (measured + PRIOR_S) / (model + PRIOR_S)


def calibrate(experiment: str, work: Work, earlier: Earlier) -> tuple[float, str]:
    """(estimated seconds, basis) of `work`: an earlier step's measured seconds when it did
    the same work; else the built-in model scaled by the newest run's measured / modelled
    seconds for this experiment's steps (`ratio`); else the built-in model."""
    mine = [m for m in earlier.steps if m.experiment == experiment]
    for m in mine:
        if m.same_work(work):
            return m.seconds, f"measured: the same work in {m.run} ({_when(m.started)})"
    if mine:
        newest = [m for m in mine if m.run == mine[0].run]
        measured = sum(max(0.0, m.seconds - m.exact_s) for m in newest)
        r = ratio(measured, sum(modelled(m.units, work.costs) for m in newest))
        if r is not None:
            where = f"{mine[0].run} ({_when(mine[0].started)})"
            return (
                work.exact_s + r * work.variable_s,
                f"measured in {where}: built-in model x{r:.2f}",
            )
    return work.seconds, "built-in model"


# --- primitive operations ---------------------------------------------------------------


@dataclass(frozen=True)
class Operations:
    """One algorithm on one backend, in seconds: a run of each of the engine's two phases
    (key generation; the pair of operations that use a key: encapsulation and
    decapsulation, signing and verification, public key and shared secret), its checks
    included, and each operation alone."""

    keygen_phase: float
    pair_phase: float
    keygen: float
    first: float  # encaps, sign, public_key
    second: float  # decaps, verify, shared_secret


def _us(keygen_phase, pair_phase, keygen, first, second) -> Operations:
    return Operations(*(v / 1e6 for v in (keygen_phase, pair_phase, keygen, first, second)))


# Measured from DEFAULT's primitives step (`--iterations 1000 --warmup 10`): per algorithm and
# backend, each phase's `phase_seconds` / `timed_runs` (its op_done records), then each
# operation's mean kept sample; microseconds. Algorithms not here are priced as the mean of
# their family's (`operations`).
OPERATIONS: dict[tuple[str, str], Operations] = {
    ("X25519", "openssl"): _us(121, 37.2, 31.3, 1.23, 33.4),
    ("ML-KEM-512", "openssl"): _us(86.8, 38.4, 23, 14.5, 21.7),
    ("ML-KEM-512", "liboqs"): _us(27.6, 24, 8.24, 10.4, 10.4),
    ("ML-KEM-768", "openssl"): _us(118, 54.6, 34.7, 22.3, 29.3),
    ("ML-KEM-768", "liboqs"): _us(41.7, 29.1, 12.2, 12.2, 14.4),
    ("ML-KEM-1024", "openssl"): _us(160, 73.7, 56.1, 28.6, 42.6),
    ("ML-KEM-1024", "liboqs"): _us(57.3, 40.4, 16.5, 16.8, 21.3),
    ("X25519MLKEM768", "openssl"): _us(236, 152, 66.6, 85.1, 64.5),
    ("RSA-2048", "openssl"): _us(44200, 276, 43600, 253, 19.9),
    ("RSA-2048-PKCS1", "openssl"): _us(44400, 276, 43800, 255, 18.9),
    ("RSA-3072", "openssl"): _us(157000, 747, 155000, 706, 39.3),
    ("RSA-3072-PKCS1", "openssl"): _us(160000, 742, 159000, 702, 37.5),
    ("ECDSA-P256", "openssl"): _us(145, 84.2, 13.9, 21.1, 60.8),
    ("ML-DSA-44", "openssl"): _us(791, 693, 97.2, 580, 111),
    ("ML-DSA-44", "liboqs"): _us(108, 84.3, 23.1, 59.5, 22.3),
    ("MAYO-1", "liboqs"): _us(241, 204, 52.9, 123, 78.1),
    ("MAYO-2", "liboqs"): _us(122, 99.6, 32, 67.3, 30.1),
    ("CROSS-RSDP-128-balanced", "liboqs"): _us(1120, 1110, 15.1, 658, 451),
    ("CROSS-RSDP-128-fast", "liboqs"): _us(624, 616, 16.2, 381, 231),
    ("CROSS-RSDP-128-small", "liboqs"): _us(2330, 2250, 15.6, 1320, 923),
    ("CROSS-RSDPG-128-balanced", "liboqs"): _us(861, 847, 8.17, 508, 336),
    ("CROSS-RSDPG-128-fast", "liboqs"): _us(464, 453, 8.62, 281, 169),
    ("CROSS-RSDPG-128-small", "liboqs"): _us(1780, 1660, 7.87, 995, 664),
    ("OV-Is-pkc", "liboqs"): _us(1590, 74, 910, 20.8, 50.9),
    ("OV-Ip-pkc", "liboqs"): _us(1120, 66.9, 595, 21.4, 42.3),
    ("OV-Is-pkc-skc", "liboqs"): _us(1470, 563, 879, 507, 52.8),
    ("OV-Ip-pkc-skc", "liboqs"): _us(1040, 421, 583, 377, 41.4),
    ("ECDH-P256", "openssl"): _us(175, 69.8, 14.4, 11.1, 51.6),
    ("Falcon-512", "liboqs"): _us(6040, 240, 5810, 200, 37.9),
    ("Falcon-1024", "liboqs"): _us(18100, 466, 17600, 389, 74.5),
    ("ML-DSA-65", "openssl"): _us(1350, 1170, 175, 994, 172),
    ("ML-DSA-65", "liboqs"): _us(178, 140, 41, 97.4, 38.8),
    ("ML-DSA-87", "openssl"): _us(1620, 1380, 241, 1120, 266),
    ("ML-DSA-87", "liboqs"): _us(245, 179, 62.3, 118, 58.9),
}


def _mean(ops: list[Operations]) -> Operations:
    return Operations(
        *(sum(getattr(o, f) for o in ops) / len(ops) for f in Operations.__annotations__)
    )


def operations(alg: Algorithm, backend: str) -> tuple[Operations, bool]:
    """(the operations' seconds, whether measured for this algorithm): the algorithm's own
    on the backend, or on another backend, else the mean of its family's, else of all."""
    for key in ((alg.name, backend), *((alg.name, b) for b in ("openssl", "liboqs"))):
        if key in OPERATIONS:
            return OPERATIONS[key], True
    family = [o for (name, _), o in OPERATIONS.items() if _family(name) == alg.family]
    return _mean(family or list(OPERATIONS.values())), False


def _family(name: str) -> str | None:
    return catalog.resolve(name).family


def engine_phases_s(
    ops: Operations,
    iterations: int,
    warmup: int,
    max_seconds: float | None,
    seconds=None,
    keygen: bool = True,
) -> tuple[float, float]:
    """(seconds the plan fixes, modelled seconds) of one engine `kem`/`sig` run: each phase
    warms up (`warmup` runs, at most 2 s and at most `max_seconds`), then makes `iterations`
    + 1 timed runs, stopped by `max_seconds`; in fixed-time mode (`seconds`) it runs until
    its operations' own time reaches `seconds` (the pair phase until the faster operation's
    has: `iterations` is then the cap). `keygen=False`: a run without its key generation
    phase (`--skip-keygen`)."""
    cap = max_seconds or math.inf
    exact = modelled_s = 0.0
    phases = (
        *([(ops.keygen_phase, ops.keygen)] if keygen else []),
        (ops.pair_phase, min(ops.first, ops.second) or ops.pair_phase),
    )
    for per_run, own in phases:
        modelled_s += min(warmup * per_run, 2.0, cap)
        runs = iterations + 1
        if seconds:
            runs = min(runs, math.ceil(seconds / own) if own > 0 else runs)
        wall = min(runs * per_run, cap)
        fixed = min(seconds or 0.0, wall)
        exact += fixed
        modelled_s += wall - fixed
    return exact, modelled_s


# --- connections over a link ------------------------------------------------------------


def chain_der(server: Algorithm, ca: Algorithm, send_root: bool, chain_bytes=None) -> tuple:
    """The DER sizes of the certificates a server sends, from the catalogue's sizes
    (`stacks.certificate_bytes`), or the padded total `chain_bytes`."""
    count = 2 if send_root else 1
    if chain_bytes is not None:
        return predict.chain_of(int(chain_bytes), count)
    leaf = stacks.certificate_bytes(server, ca)
    return (leaf, stacks.root_certificate_bytes(ca)) if send_root else (leaf,)


def connection(
    stack: stacks.Stack,
    group: Algorithm,
    server: Algorithm,
    certificates: tuple,
    profile,
    response_bytes: int | None,
) -> wire.Prediction:
    """The wire model's connection over `profile`'s link (a `pqlab.net.profiles.LinkProfile`;
    no loss, no jitter) with a response of `response_bytes` (None: the handshake alone), the
    ClientHello's size from the catalogue (`CLIENT_HELLO_BYTES` and the key share)."""
    hello = CLIENT_HELLO_BYTES + messages.client_share_bytes(group)
    hs = predict.Handshake.of(group, server, certificates, hello, stack)
    return predict.predict(hs, wire.Link.from_profile(profile), response_bytes).wire


def link_seconds(prediction: wire.Prediction) -> float:
    """A predicted connection's time from its SYN to the last byte of its response."""
    return prediction.ttlb_s or prediction.ttfb_s


def lost_packets(profile, prediction: wire.Prediction) -> tuple[float, float]:
    """(handshake packets, response segments) a predicted connection is expected to lose on
    `profile`'s link: each direction's packets (its SYN or SYN-ACK and the wire model's
    segments) times that direction's loss."""
    c2s = 1 + len(prediction.client_hello) + len(prediction.client_flight)
    s2c = 1 + len(prediction.flight)
    handshake = c2s * profile.c2s.loss_pct / 100 + s2c * profile.s2c.loss_pct / 100
    return handshake, len(prediction.response) * profile.s2c.loss_pct / 100


def handshake_operations_s(
    group: Algorithm,
    server: Algorithm,
    ca: Algorithm,
    client: Algorithm | None = None,
    client_ca: Algorithm | None = None,
) -> float:
    """The cryptographic operations of one TLS 1.3 handshake, both sides (`OPERATIONS`,
    OpenSSL's where it has the algorithm): the key exchange (a KEM's key generation,
    encapsulation and decapsulation; a key agreement's key generation and derivation on
    both sides), the server's CertificateVerify signature and the client's verification of
    it and of the server certificate's, and in mutual TLS the same for the client."""
    g, _ = operations(group, "openssl")
    if group.kind == "kex":
        seconds = 2 * (g.keygen + g.first + g.second)
    else:
        seconds = g.keygen + g.first + g.second
    s, _ = operations(server, "openssl")
    c, _ = operations(ca, "openssl")
    seconds += s.first + s.second + c.second
    if client is not None:
        cl, _ = operations(client, "openssl")
        cc, _ = operations(client_ca or ca, "openssl")
        seconds += cl.first + cl.second + cc.second
    return seconds


def keygen_s(alg: Algorithm) -> float:
    """One key generation of `alg` (a certificate's key)."""
    return operations(alg, "openssl")[0].keygen


def add_engine_runs(
    work: Work, cells, iterations, warmup, max_seconds, seconds=None, shared=()
) -> None:
    """One engine `kem`/`sig` run per (algorithm, backend) cell (`pqlab.algorithms.selection.
    Cell`) into `work`: its phases' fixed and modelled seconds (`engine_phases_s`), and a
    note naming the algorithms priced from their family's operations. `shared`: the ids of
    cells whose key generation another cell times (`selection.shared_keygen`)."""
    estimated = []
    for cell in cells:
        ops, measured = operations(cell.algorithm, cell.backend)
        exact, priced = engine_phases_s(
            ops, iterations, warmup, max_seconds, seconds, keygen=cell.cell_id not in shared
        )
        work.exact_s += exact
        work.add("operation_seconds", priced)
        if not measured:
            estimated.append(cell.algorithm.name)
    if estimated:
        names = ", ".join(dict.fromkeys(estimated))
        work.notes.append(f"{names}: no measured operations, priced as their family's")


# --- the export -------------------------------------------------------------------------


def export_units(cells: dict[str, int], costs: dict[str, Cost]) -> dict[str, float]:
    """The export's units for a run holding `cells` (experiment -> cells): every
    experiment's own export (`<experiment>.export`) and, where its tables and figures grow
    with the cells, `<experiment>.export_cell` per cell; the report page once. `costs`:
    every experiment's own."""
    units = {"export.report": 1.0}
    for name, count in cells.items():
        if f"{name}.export" in costs:  # (every built-in experiment has one: tests say so)
            units[f"{name}.export"] = 1.0
        if f"{name}.export_cell" in costs:
            units[f"{name}.export_cell"] = float(count)
    return units


def calibrate_export(
    cells: dict[str, int], earlier: Earlier, costs: dict[str, Cost]
) -> tuple[float, str]:
    """(estimated seconds, basis) of exporting a run holding `cells`: the built-in model,
    scaled by the newest earlier export's measured / modelled seconds (`ratio`). `costs`:
    every experiment's own."""
    model = modelled(export_units(cells, costs), costs)
    for m in earlier.exports:
        r = ratio(m.seconds, modelled(export_units(m.cells, costs), costs))
        if r is not None:
            where = f"{m.run} ({_when(m.started)})"
            return model * r, f"measured in {where}: built-in model x{r:.2f}"
    return model, "built-in model"


# --- what `pqlab suite --check` prints ---------------------------------------------------


@dataclass
class Line:
    """One step's estimate (`index` None: the export)."""

    index: int | None
    experiment: str
    size: str
    seconds: float | None  # None: not estimated (no model, or the step would be skipped)
    basis: str
    notes: list[str] = field(default_factory=list)


def about(seconds: float) -> str:
    """'~40 s', '~1 min 40 s', '~2 h 05 min': rounded as far as an estimate deserves."""
    if seconds < 0.5:
        return "<1 s"
    if seconds < 60:
        return f"~{round(seconds)} s"
    if seconds < 600:
        s = 5 * round(seconds / 5)
        return f"~{s // 60} min {s % 60} s" if s % 60 else f"~{s // 60} min"
    if seconds < 3600:
        m = round(seconds / 60)
        return f"~{m} min"
    m = 5 * round(seconds / 300)
    return f"~{m // 60} h {m % 60:02d} min"


def step_lines(
    steps, earlier: Earlier, skipped: dict[int, str], costs: dict[str, Cost]
) -> list[Line]:
    """An estimate per step (`pqlab.session.Step`s, in order) and one for the export of
    what they measure; `skipped`: index -> why, for steps that would not run; `costs`:
    every experiment's own (`pqlab.experiment.costs`)."""
    lines, cells = [], {}
    for i, step in enumerate(steps, 1):
        exp = step.experiment
        work = exp.work(step.plan)
        if work is None:
            lines.append(Line(i, exp.name, "", None, "this experiment declares no units of work"))
            continue
        if i in skipped:
            lines.append(Line(i, exp.name, work.size, None, f"skipped: {skipped[i]}"))
            continue
        seconds, basis = calibrate(exp.name, work, earlier)
        lines.append(Line(i, exp.name, work.size, seconds, basis, list(work.notes)))
        cells[exp.name] = cells.get(exp.name, 0) + work.cells
    if cells:
        seconds, basis = calibrate_export(cells, earlier, costs)
        what = f"tables, figures and report of {count(len(cells), 'experiment')}"
        lines.append(Line(None, "export", what, seconds, basis))
    return lines


def render(line: Line, steps: int) -> str:
    """`  step 4/17 handshake | 80 cells x 100 handshakes (+38 warm-up) | ~45 s | built-in
    model` (the export: `  export | ...`)."""
    head = f"step {line.index}/{steps} {line.experiment}" if line.index else line.experiment
    time = about(line.seconds) if line.seconds is not None else "-"
    return f"  {head} | {line.size or '-'} | {time} | {line.basis}"
