"""The TLS 1.3 handshake lab (document 000, section 4-3): for every (group, server
signature, CA signature) cell, N full handshakes between two network namespaces, captured
on both hosts and taken apart message by message (pqlab.experiments.handshake_phases).

A cell: captures start in both namespaces, then the engine's TLS server, then the client
runs warm-up + N handshakes; everything stops, the two pcaps are analysed, and the raw
per-handshake rows, per-phase rows and capture statistics are committed with the cell.
`export(store)` rebuilds every table and figure from the database alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import catalog, engine, pcap
from pqlab.errors import EngineError, UserError
from pqlab.experiments import handshake_phases as hp

EXPERIMENT = "handshake"
DEFAULT_GROUPS = ["X25519", "ML-KEM-512", "ML-KEM-768", "ML-KEM-1024", "X25519MLKEM768"]
DEFAULT_SIGS = ["RSA-2048", "RSA-3072", "P-256", "ML-DSA-44"]
DEFAULT_PORT = 4433
DEFAULT_INITCWND = 10
CONTENT_TYPES = {"change_cipher_spec": 20, "alert": 21, "handshake": 22, "application_data": 23}
MESSAGE_NAMES = {
    "client_hello": "ClientHello",
    "server_hello": "ServerHello",
    "encrypted_extensions": "EncryptedExtensions",
    "certificate": "Certificate",
    "certificate_verify": "CertificateVerify",
    "finished": "Finished",
    "new_session_ticket": "NewSessionTicket",
    "certificate_request": "CertificateRequest",
}
# Sizes reported per handshake (handshake message bytes, 4-byte header included).
SIZE_COLUMNS = [
    ("client", "ClientHello", "client_hello_bytes"),
    ("server", "ServerHello", "server_hello_bytes"),
    ("server", "EncryptedExtensions", "encrypted_extensions_bytes"),
    ("server", "Certificate", "certificate_bytes"),
    ("server", "CertificateVerify", "certificate_verify_bytes"),
    ("server", "Finished", "server_finished_bytes"),
    ("client", "Finished", "client_finished_bytes"),
]

RAW_DDL = """
CREATE TABLE IF NOT EXISTS handshake_raw (
    cell_id TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT, idx INTEGER,
    client_port INTEGER, t_syn_ns BIGINT,
    handshake_ns BIGINT, total_ns BIGINT, client_processing_ns BIGINT,
    sh_to_cert_ns BIGINT, sh_to_fin_ns BIGINT,
    server_flight_segments INTEGER, server_flight_bytes INTEGER,
    bytes_through_certificate INTEGER, server_flight_retransmissions INTEGER,
    writes_predicted INTEGER, flush_offsets_predicted TEXT, short_segment_ends TEXT,
    split_by_write_buffer BOOLEAN, cwnd_stalls INTEGER, cwnd_stall_wait_ns BIGINT,
    client_bytes INTEGER, server_bytes INTEGER,
    client_hello_bytes INTEGER, server_hello_bytes INTEGER,
    encrypted_extensions_bytes INTEGER, certificate_bytes INTEGER,
    certificate_verify_bytes INTEGER, server_finished_bytes INTEGER,
    client_finished_bytes INTEGER,
    negotiated_group TEXT, negotiated_sigalg TEXT, congestion_control TEXT, chain_sent TEXT,
    server_snd_cwnd INTEGER, server_total_retrans INTEGER, server_snd_mss INTEGER,
    points JSON)
"""
PHASE_DDL = """
CREATE TABLE IF NOT EXISTS handshake_phase (
    cell_id TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT, idx INTEGER,
    view TEXT, phase_order INTEGER, phase TEXT, family TEXT, ns BIGINT)
"""
CAPTURE_DDL = """
CREATE TABLE IF NOT EXISTS handshake_capture (
    cell_id TEXT, side TEXT, packets BIGINT, kernel_packets BIGINT, kernel_drops BIGINT,
    userspace_timestamps BIGINT, pcap TEXT, seconds DOUBLE, handshakes INTEGER,
    topology JSON)
"""


@dataclass
class Plan:
    groups: list[catalog.Algorithm]
    server_sigs: list[catalog.Algorithm]
    ca_sigs: list[catalog.Algorithm]
    n: int
    warmup: int
    keep_pcap: bool
    port: int
    profile: str | None
    initcwnd: int = DEFAULT_INITCWND
    congestion_control: str = "cubic"
    rtt_s: float = 0.0  # configured round trip of the link (0: the bare link)
    send_root: bool = False  # also send the root CA certificate (as document 000's servers)
    # (server CPU, client CPU): the two run on different cores, as on two machines, so the
    # client waking up on data cannot preempt the server in the middle of its flight.
    cpus: tuple[int, int] | None = field(default_factory=lambda: pick_cpus())

    def cells(self):
        for g in self.groups:
            for s in self.server_sigs:
                for c in self.ca_sigs:
                    yield g, s, c


def pick_cpus() -> tuple[int, int] | None:
    """Two different CPUs this process may use (server, client), or None with fewer."""
    if not shutil.which("taskset"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[-1], cpus[0]) if len(cpus) >= 2 else None


def cell_id(group, server_sig, ca_sig, send_root: bool = False) -> str:
    return f"{group.name}|{server_sig.name}|{ca_sig.name}" + ("|+root" if send_root else "")


def _tls_capable(alg: catalog.Algorithm, option: str) -> catalog.Algorithm:
    if not alg.tls_name:
        raise UserError(
            f"{option} {alg.name}: no TLS code point in this build's TLS stack "
            "(see 'pqlab algorithms')"
        )
    return alg


def resolve_matrix(groups: list[str], server_sigs: list[str], ca_sigs: list[str]):
    g = [_tls_capable(a, "--groups") for a in catalog.resolve_list(groups, "kem")]
    s = [_tls_capable(a, "--server-sig") for a in catalog.resolve_list(server_sigs, "sig")]
    c = catalog.resolve_list(ca_sigs, "sig")
    return g, s, c


# --- the network seam ------------------------------------------------------------------------


def topology_for(profile: str | None, plan: Plan):
    """The two hosts a cell runs on. This is the one place that knows about links: without
    a profile a bare veth link; with one, the network-emulation module's shaped link
    (netem or the userspace emulator) behind the same interface, with the profile's MTU
    and TCP settings."""
    from pqlab.net.topology import TcpSettings, TwoHosts

    if profile is None:
        tcp = TcpSettings(congestion_control=plan.congestion_control, initcwnd=plan.initcwnd)
        return TwoHosts(tcp=tcp)
    from pqlab.net.profiles import parse_profile
    from pqlab.net.shaping import make_link

    lp = parse_profile(profile)
    return TwoHosts(link=make_link(lp), mtu=lp.mtu, tcp=lp.tcp_settings())


def check_profile(plan: Plan) -> None:
    """Validate --profile before anything is created, and take its TCP settings and round
    trip into the plan (the analysis replays the window from initcwnd; timeouts scale
    with the RTT)."""
    if plan.profile is None:
        return
    try:
        from pqlab.net.profiles import parse_profile
    except ImportError:
        raise UserError(
            f"--profile {plan.profile!r}: network profiles are not part of this "
            "build (pqlab.net.profiles); run without --profile"
        ) from None
    lp = parse_profile(plan.profile)
    plan.initcwnd = lp.initcwnd or DEFAULT_INITCWND
    plan.congestion_control = lp.congestion_control
    plan.rtt_s = lp.rtt_s


# --- processes ----------------------------------------------------------------------------------


class Proc:
    """An engine process inside a namespace. Its output is read by background threads, so a
    chatty process (the server prints one large record per connection) never blocks on a
    full pipe while we wait for another one."""

    def __init__(self, args: list[str], netns: str, what: str, cpu: int | None = None):
        self.what = what
        argv = engine.command(args)
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        self.p = subprocess.Popen(
            ["ip", "netns", "exec", netns, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.records: list[dict] = []
        self._lines: list[str] = []
        self._err: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.p.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # pipe closed by stop()
            for line in self.p.stdout:
                with self._cond:
                    self._lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.p.stderr is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.p.stderr:
                self._err.append(line)

    def _parse_pending(self) -> list[dict]:
        with self._cond:
            lines, self._lines = self._lines, []
        new = [engine.parse_line(line) for line in lines if line.strip()]
        self.records.extend(new)
        return new

    def _last_error(self) -> str:
        err = "".join(self._err).strip()
        return err.splitlines()[-1] if err else ""

    def wait_for(self, rtype: str, timeout: float) -> dict:
        """Wait until a record of type `rtype` arrives (bounded by `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            for rec in self._parse_pending():
                if rec["type"] == rtype:
                    return rec
            with self._cond:
                if self._eof and not self._lines:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self._lines:
                    self._cond.wait(timeout=min(left, 0.5))
        self.stop()
        err = self._last_error()
        raise EngineError(
            f"{self.what} did not report {rtype!r} within {timeout:.0f} s"
            + (f": {err}" if err else "")
        )

    def finish(self, timeout: float) -> list[dict]:
        """Wait for the process to exit; all its records, or EngineError."""
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise EngineError(f"{self.what} did not finish within {timeout:.0f} s") from None
        for t in self._threads:
            t.join(timeout=10)
        self._parse_pending()
        if self.p.returncode != 0:
            raise EngineError(
                f"{self.what} failed: {self._last_error() or f'exit {self.p.returncode}'}"
            )
        return self.records

    def signal(self, sig: int) -> None:
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, sig)  # the session holds ip netns exec and the engine

    def stop(self) -> None:
        """Terminate (then kill) this process and its children; never leaves them."""
        if self.p.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.p.wait(timeout=5)
        for t in self._threads:
            t.join(timeout=2)
        for f in (self.p.stdout, self.p.stderr):
            if f:
                with contextlib.suppress(Exception):
                    f.close()


# --- engine records -> TLS records ---------------------------------------------------------------


def tls_records(conn_record: dict, sender: str) -> list[hp.TlsRecord]:
    """The records one side wrote (dir "sent"), with the handshake messages they carried."""
    out: list[hp.TlsRecord] = []
    messages: dict[int, list] = {}
    for ev in conn_record.get("events", []):
        if ev.get("dir") != "sent":
            continue
        if ev.get("ev") == "record":
            out.append(
                hp.TlsRecord(
                    sender, int(ev["offset_end"]), CONTENT_TYPES.get(ev["content_type"], 0)
                )
            )
        elif ev.get("ev") == "handshake":
            name = MESSAGE_NAMES.get(ev["msg"], ev["msg"])
            messages.setdefault(int(ev["offset_end"]), []).append((name, int(ev["length"])))
    return [
        hp.TlsRecord(r.sender, r.end, r.content_type, tuple(messages.get(r.end, ()))) for r in out
    ]


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def pair_records(client_recs: list[dict], server_recs: list[dict]) -> list[tuple[dict, dict]]:
    """Measured (non-warm-up) client connections with their server record, by client port
    (in order, should a port ever be reused within a cell)."""
    by_port: dict[int, list[dict]] = {}
    for r in server_recs:
        by_port.setdefault(_port(r["peer"]), []).append(r)
    pairs = []
    for c in client_recs:
        lst = by_port.get(_port(c["local"]))
        if not lst:
            raise EngineError(f"client connection from {c['local']} has no server record")
        s = lst.pop(0)
        if not c.get("warmup"):
            pairs.append((c, s))
    return pairs


def analyse_cell(
    client_pcap: Path,
    server_pcap: Path,
    pairs: list[tuple[dict, dict]],
    port: int,
    initcwnd: int,
    expect_group: str,
    expect_sigalg: str,
    expect_cc: str | None = None,
):
    """Per-handshake rows and phase rows for one cell (without the cell's labels)."""
    c_conns = pcap.split_connections(pcap.tcp_packets(client_pcap), port)
    s_conns = pcap.split_connections(pcap.tcp_packets(server_pcap), port)
    c_by_port: dict[int, list] = {}
    s_by_port: dict[int, list] = {}
    for conn in c_conns:
        c_by_port.setdefault(conn.client[1], []).append(conn)
    for conn in s_conns:
        s_by_port.setdefault(conn.client[1], []).append(conn)
    rows, phase_rows = [], []
    for idx, (crec, srec) in enumerate(pairs):
        cport = _port(crec["local"])
        neg_c, neg_s = crec.get("negotiated", {}), srec.get("negotiated", {})
        if str(neg_c.get("group", "")).lower() != expect_group.lower():
            raise EngineError(
                f"handshake {idx} negotiated group {neg_c.get('group')!r}, expected {expect_group}"
            )
        if str(neg_s.get("sigalg", neg_c.get("sigalg", ""))).lower() != expect_sigalg.lower():
            raise EngineError(
                f"handshake {idx} used signature {neg_s.get('sigalg')!r}, expected {expect_sigalg}"
            )
        cc = srec.get("congestion_control")
        if expect_cc and cc and cc != expect_cc:
            raise EngineError(
                f"handshake {idx}: the server socket used congestion control {cc!r}, "
                f"the lab set {expect_cc!r}"
            )
        if not crec.get("verified"):
            raise EngineError(f"handshake {idx}: the client did not verify the chain")
        cl, sl = c_by_port.get(cport), s_by_port.get(cport)
        if not cl or not sl:
            raise EngineError(
                f"handshake {idx} (client port {cport}) is missing from the "
                f"{'client' if not cl else 'server'} capture"
            )
        cconn, sconn = cl.pop(0), sl.pop(0)
        records = tls_records(crec, "client") + tls_records(srec, "server")
        mss = int((srec.get("tcp_info") or {}).get("snd_mss") or 1448)
        try:
            h = hp.analyse(cconn, sconn, records, mss=mss, initcwnd=initcwnd)
        except hp.AnalysisError as e:
            raise EngineError(f"handshake {idx} (client port {cport}): {e}") from None
        f = h.flight
        p = h.points
        sizes = f["message_sizes"]
        info = srec.get("tcp_info") or {}
        row = {
            "idx": idx,
            "client_port": cport,
            "t_syn_ns": p["1"],
            "handshake_ns": h.handshake_ns,
            "total_ns": h.total_ns,
            "client_processing_ns": h.client_processing_ns,
            "sh_to_cert_ns": p["F"] - p["E"],
            "sh_to_fin_ns": p["H"] - p["E"],
            "server_flight_segments": f["segments"],
            "server_flight_bytes": f["bytes"],
            "bytes_through_certificate": f["bytes_through_certificate"],
            "server_flight_retransmissions": f["retransmissions"],
            "writes_predicted": f["writes_predicted"],
            "flush_offsets_predicted": json.dumps(f["flush_offsets_predicted"]),
            "short_segment_ends": json.dumps(f["short_segment_ends"]),
            "split_by_write_buffer": f["split_by_write_buffer"],
            "cwnd_stalls": f["cwnd_stalls"],
            "cwnd_stall_wait_ns": f["cwnd_stall_wait_ns"],
            "client_bytes": f["client_wire_bytes"],
            "server_bytes": f["server_wire_bytes"],
            "negotiated_group": neg_c.get("group"),
            "negotiated_sigalg": neg_s.get("sigalg") or neg_c.get("sigalg"),
            "congestion_control": cc,
            "server_snd_cwnd": info.get("snd_cwnd"),
            "server_total_retrans": info.get("total_retrans"),
            "server_snd_mss": info.get("snd_mss"),
            "points": json.dumps({k: v - p["1"] for k, v in p.items()}),
        }
        for side, name, col in SIZE_COLUMNS:
            row[col] = sizes.get(f"{side} {name}")
        rows.append(row)
        for view, table in hp.VIEWS.items():
            for order, ((name, ns), (_, _, _, family)) in enumerate(
                zip(h.phases[view], table, strict=True)
            ):
                phase_rows.append(
                    {
                        "idx": idx,
                        "view": view,
                        "phase_order": order,
                        "phase": name,
                        "family": family,
                        "ns": ns,
                    }
                )
    return rows, phase_rows


# --- running ---------------------------------------------------------------------------------------


def _columns(rows: list[dict], extra: dict) -> dict[str, list]:
    if not rows:
        return {}
    keys = list(extra) + list(rows[0])
    return {k: [extra[k]] * len(rows) if k in extra else [r[k] for r in rows] for k in keys}


def run_cell(store, hosts, plan: Plan, group, server_sig, ca_sig, chain: dict, work: Path) -> None:
    """Run one cell (captures, server, client), analyse it and commit it to the store."""
    cid = cell_id(group, server_sig, ca_sig, plan.send_root)
    name = f"{group.name}_{server_sig.name}_{ca_sig.name}".replace("/", "_")
    pcap_dir = store.path / "pcap" if plan.keep_pcap else work
    pcap_dir.mkdir(parents=True, exist_ok=True)
    client_pcap, server_pcap = pcap_dir / f"{name}.client.pcap", pcap_dir / f"{name}.server.pcap"
    keylog = pcap_dir / f"{name}.keys.log" if plan.keep_pcap else None
    total = plan.warmup + plan.n
    # A generous bound on one cell (seconds): a handshake takes 2 RTTs plus processing.
    budget = 120 + total * (0.2 + 4 * plan.rtt_s)
    procs: list[Proc] = []
    started = time.monotonic()
    try:
        caps = {}
        for side, ns, ifname, path in (
            ("client", hosts.client_ns, hosts.client_if, client_pcap),
            ("server", hosts.server_ns, hosts.server_if, server_pcap),
        ):
            cap = Proc(
                [
                    "capture",
                    "--interface",
                    ifname,
                    "--port",
                    plan.port,
                    "--pcap",
                    path,
                    "--snaplen",
                    # Headers suffice for the analysis; Wireshark needs whole packets.
                    262144 if plan.keep_pcap else 128,
                    "--max-seconds",
                    f"{budget:.0f}",
                ],
                ns,
                f"capture in {side} namespace",
            )
            procs.append(cap)
            caps[side] = cap
            cap.wait_for("capturing", 30)
        tls = ["--groups", group.tls_name, "--sigalgs", server_sig.tls_name]
        server_args = [
            "tls",
            "server",
            "--listen",
            f"{hosts.server_ip}:{plan.port}",
            "--cert-chain",
            chain["chain"],
            "--key",
            chain["key"],
            *tls,
            "--max-connections",
            total,
            "--response-mode",
            "none",
        ]
        client_args = [
            "tls",
            "client",
            "--connect",
            f"{hosts.server_ip}:{plan.port}",
            "--ca",
            chain["root"],
            *tls,
            "-n",
            plan.n,
            "--warmup",
            plan.warmup,
            "--time-limit",
            f"{budget:.0f}",
        ]
        if keylog:
            server_args += ["--keylog", keylog]
        server_cpu, client_cpu = plan.cpus or (None, None)
        server = Proc(server_args, hosts.server_ns, "TLS server", server_cpu)
        procs.append(server)
        server.wait_for("listening", 30)
        client = Proc(client_args, hosts.client_ns, "TLS client", client_cpu)
        procs.append(client)
        client_recs = [r for r in client.finish(budget) if r["type"] == "connection"]
        server_recs = [r for r in server.finish(30) if r["type"] == "connection"]
        bad = [r for r in client.records + server.records if r["type"] == "connection_error"]
        if bad:
            raise EngineError(f"{len(bad)} connection(s) failed: {bad[0].get('message')}")
        summaries = {}
        for side, cap in caps.items():
            cap.signal(signal.SIGTERM)
            summaries[side] = next(r for r in cap.finish(30) if r["type"] == "capture_summary")
        elapsed = time.monotonic() - started
        if len(client_recs) != total or len(server_recs) != total:
            raise EngineError(
                f"expected {total} connections, the client reported "
                f"{len(client_recs)} and the server {len(server_recs)}"
            )
        pairs = pair_records(client_recs, server_recs)
        rows, phase_rows = analyse_cell(
            client_pcap,
            server_pcap,
            pairs,
            plan.port,
            plan.initcwnd,
            group.tls_name,
            server_sig.tls_name,
            plan.congestion_control,
        )
        labels = {
            "cell_id": cid,
            "group": group.name,
            "server_sig": server_sig.name,
            "ca_sig": ca_sig.name,
        }
        topo = json.dumps(hosts.describe(), default=str)
        with store.cell(
            EXPERIMENT,
            cid,
            {
                **labels,
                "n": plan.n,
                "warmup": plan.warmup,
                "port": plan.port,
                "profile": plan.profile,
                "send_root": plan.send_root,
            },
        ):
            chain_sent = "server+root" if plan.send_root else "server"
            store.insert("handshake_raw", _columns(rows, {**labels, "chain_sent": chain_sent}))
            store.insert("handshake_phase", _columns(phase_rows, labels))
            store.insert_rows(
                "handshake_capture",
                [
                    {
                        "cell_id": cid,
                        "side": side,
                        "packets": s["packets"],
                        "kernel_packets": s["kernel_packets"],
                        "kernel_drops": s["kernel_drops"],
                        "userspace_timestamps": s["userspace_timestamps"],
                        "pcap": str(client_pcap if side == "client" else server_pcap)
                        if plan.keep_pcap
                        else None,
                        "seconds": elapsed,
                        "handshakes": total,
                        "topology": topo,
                    }
                    for side, s in summaries.items()
                ],
            )
            from pqlab.stats import noise_warnings, summarize

            store.add_warnings(
                EXPERIMENT,
                cid,
                noise_warnings(f"handshake {cid}", summarize([r["handshake_ns"] for r in rows])),
            )
            drops = sum(s["kernel_drops"] for s in summaries.values())
            if drops:
                from pqlab.stats import Warning_

                store.add_warnings(
                    EXPERIMENT,
                    cid,
                    [
                        Warning_(
                            "capture-drops",
                            cid,
                            f"the kernel dropped {drops} captured packets",
                            "rerun the cell with fewer parallel jobs on the machine",
                        )
                    ],
                )
    finally:
        for p in reversed(procs):
            p.stop()
        if not plan.keep_pcap:
            for f in (client_pcap, server_pcap):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()


def body(plan: Plan, store) -> None:
    """Every cell of the plan not yet done in `store`, on one topology."""
    from pqlab.experiments import certs
    from pqlab.progress import CellProgress

    store.ensure_table(RAW_DDL)
    store.ensure_table(PHASE_DDL)
    store.ensure_table(CAPTURE_DDL)
    done = store.cells_done(EXPERIMENT)
    other = {c for c in done if c.endswith("|+root") != plan.send_root}
    if other:
        raise UserError(
            f"this run directory holds cells {'without' if plan.send_root else 'with'} "
            "--send-root; use another --out to compare the two"
        )
    todo = [c for c in plan.cells() if cell_id(*c, plan.send_root) not in done]
    if not todo:
        return
    cert_dir = store.path / "certs"
    work = store.path / ".work"
    work.mkdir(exist_ok=True)
    try:
        with (
            topology_for(plan.profile, plan) as hosts,
            CellProgress("handshake", len(todo)) as progress,
        ):
            for group, ssig, csig in todo:
                progress.start(f"{group.name} / {ssig.name} / CA {csig.name}")
                chain = _chain_paths(certs.ensure_chain(csig, ssig, cert_dir))
                if plan.send_root:
                    chain = with_root(chain)
                run_cell(store, hosts, plan, group, ssig, csig, chain, work)
                progress.advance()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def with_root(chain: dict) -> dict:
    """The same chain with the root CA certificate appended to what the server sends."""
    combined = Path(chain["chain"]).with_name("chain+root.pem")
    if not combined.exists():
        text = Path(chain["chain"]).read_text().rstrip("\n") + "\n"
        tmp = combined.with_suffix(".tmp")
        tmp.write_text(text + Path(chain["root"]).read_text())
        tmp.replace(combined)
    return {**chain, "chain": combined}


def _chain_paths(chain) -> dict:
    """ensure_chain's result (pqlab.experiments.certs.ChainPaths) as a dict of paths."""
    return {k: getattr(chain, k) for k in ("root", "chain", "key")}


# --- tables, figures, report --------------------------------------------------------------------

THRESHOLDS = [
    (4096, "4096 B: write buffer"),
    (8192, "8192 B: two buffers"),
    (14232, "14232 B: 4096 + 7 x 1448 (10 segments)"),
]
FAMILY_COLOURS = {
    "transmission": ["#00441b", "#1b7837", "#41ab5d", "#74c476", "#a1d99b", "#c7e9c0"],
    "tcp": ["#525252", "#969696"],
    "client": ["#08306b", "#2171b5", "#6baed6", "#c6dbef"],
    "server": ["#67000d", "#a50f15", "#ef3b2c", "#fc9272", "#fcbba1"],
    "waiting": ["#8c6d00", "#e6b800", "#ffe680"],
}
HATCHED = {"server", "waiting"}


def phase_colours() -> dict[str, tuple[str, str]]:
    """Colour and hatch of every phase name: one shade per phase within its family."""
    out: dict[str, tuple[str, str]] = {}
    used: dict[str, int] = {}
    for table in (hp.CLIENT_PHASES, hp.SERVER_PHASES):
        for name, _, _, family in table:
            if name in out:
                continue
            i = used.get(family, 0)
            used[family] = i + 1
            shades = FAMILY_COLOURS[family]
            out[name] = (shades[i % len(shades)], "//" if family in HATCHED else "")
    return out


def _order_sql(store) -> None:
    """A temporary table giving each algorithm name its position (the documents' order
    first, then catalogue order), so every table lists cells the same way."""
    names = [
        r["n"]
        for r in store.query(
            'SELECT DISTINCT "group" AS n FROM handshake_raw UNION '
            "SELECT DISTINCT server_sig FROM handshake_raw UNION "
            "SELECT DISTINCT ca_sig FROM handshake_raw"
        )
    ]
    pref = []
    for name, kind in [(g, "kem") for g in DEFAULT_GROUPS] + [(x, "sig") for x in DEFAULT_SIGS]:
        try:
            pref.append(catalog.resolve(name, kind).name)  # canonical: "P-256" -> "ECDSA-P256"
        except UserError:
            pref.append(name)
    ranked = sorted(names, key=lambda n: (pref.index(n) if n in pref else len(pref), n))
    store.con.execute("CREATE OR REPLACE TEMP TABLE hs_order (name TEXT, pos INTEGER)")
    if ranked:
        store.con.executemany(
            "INSERT INTO hs_order VALUES (?, ?)", [[n, i] for i, n in enumerate(ranked)]
        )


ORDER_JOIN = """
JOIN hs_order og ON og.name = t."group" JOIN hs_order os ON os.name = t.server_sig
JOIN hs_order oc ON oc.name = t.ca_sig
"""


def export(store):
    from pqlab.report import Section

    section = Section("TLS 1.3 handshakes, message by message", intro=INTRO)
    if not store.has_table("handshake_raw"):
        section.text("<p>No handshake cell finished.</p>")
        return section
    _order_sql(store)
    ms = "/ 1e6"
    summary = store.export_table(
        "handshake_summary",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig, count(*) AS n,
          median(handshake_ns) {ms} AS median_ms, avg(handshake_ns) {ms} AS mean_ms,
          quantile_cont(handshake_ns, 0.9) {ms} AS p90_ms,
          median(server_flight_segments) AS server_flight_segments,
          median(server_flight_bytes) AS server_flight_bytes,
          median(client_bytes) AS client_bytes, median(server_bytes) AS server_bytes,
          median(total_ns) {ms} AS median_total_ms,
          median(client_processing_ns) {ms} AS median_client_processing_ms,
          median(bytes_through_certificate) AS bytes_through_certificate,
          median(server_hello_bytes) + median(certificate_bytes) AS server_hello_certificate_bytes,
          median(writes_predicted) AS flight_writes,
          avg(CASE WHEN split_by_write_buffer THEN 1 ELSE 0 END) AS flight_split_fraction,
          avg(CASE WHEN cwnd_stalls > 0 THEN 1 ELSE 0 END) AS cwnd_stall_fraction,
          avg(cwnd_stall_wait_ns) {ms} AS mean_cwnd_stall_wait_ms,
          avg(sh_to_cert_ns) {ms} AS mean_sh_to_cert_ms,
          avg(sh_to_fin_ns) {ms} AS mean_sh_to_fin_ms,
          sum(server_flight_retransmissions) AS retransmissions,
          median(server_snd_cwnd) AS server_snd_cwnd_after
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", t.server_sig, t.ca_sig, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos""",
    )
    phases = store.export_table(
        "handshake_phases",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig, t.view, t.phase,
          avg(ns) {ms} AS mean_ms, median(ns) {ms} AS median_ms, t.phase_order, t.family
        FROM handshake_phase t {ORDER_JOIN}
        GROUP BY t."group", t.server_sig, t.ca_sig, t.view, t.phase, t.phase_order, t.family,
          og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos, t.view, t.phase_order""",
    )
    sizes = store.export_table(
        "handshake_message_sizes",
        f"""
        SELECT t."group", t.server_sig, t.ca_sig,
          {", ".join(f"median({c}) AS {c}" for _, _, c in SIZE_COLUMNS)},
          median(bytes_through_certificate) AS bytes_through_certificate,
          median(server_flight_bytes) AS server_flight_bytes,
          median(server_flight_segments) AS server_flight_segments,
          mode(flush_offsets_predicted) AS flush_offsets_predicted,
          mode(short_segment_ends) AS short_segment_ends
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", t.server_sig, t.ca_sig, og.pos, os.pos, oc.pos
        ORDER BY og.pos, os.pos, oc.pos""",
    )
    cas = [
        r["ca_sig"]
        for r in store.query(
            "SELECT DISTINCT ca_sig, pos FROM handshake_raw JOIN hs_order ON name = ca_sig "
            "ORDER BY pos"
        )
    ]
    pivot = ", ".join(
        f"avg(CASE WHEN t.ca_sig = '{c.replace(chr(39), chr(39) * 2)}' THEN "
        f'client_processing_ns END) {ms} AS "CA {c}"'
        for c in cas
    )
    processing = store.export_table(
        "handshake_client_processing",
        f"""
        SELECT t."group", t.server_sig, {pivot}
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", t.server_sig, og.pos, os.pos ORDER BY og.pos, os.pos""",
    )
    pairs = store.query(
        "SELECT DISTINCT ca_sig, server_sig, oc.pos AS cp, os.pos AS sp FROM handshake_raw "
        "JOIN hs_order oc ON oc.name = ca_sig JOIN hs_order os ON os.name = server_sig "
        "ORDER BY cp, sp"
    )

    def q(text: str) -> str:
        return text.replace("'", "''")

    seg_pivot = ", ".join(
        f"median(CASE WHEN t.ca_sig = '{q(r['ca_sig'])}' AND t.server_sig = "
        f"'{q(r['server_sig'])}' THEN server_flight_segments END) AS "
        f'"CA {r["ca_sig"]} / server {r["server_sig"]}"'
        for r in pairs
    )
    segments = store.export_table(
        "handshake_server_segments",
        f"""
        SELECT t."group", {seg_pivot}
        FROM handshake_raw t {ORDER_JOIN}
        GROUP BY t."group", og.pos ORDER BY og.pos""",
    )
    section.table(
        segments,
        "TCP segments the server sent from ServerHello through Finished (median), as table "
        "9 of the document: rows key exchange, columns CA / server signer",
    )
    section.table(
        summary,
        "Per cell: handshake time (SYN sent to the server's Finished "
        "received at the client), server flight, bytes each way, write-buffer "
        "splits and congestion-window stalls (table 9 and more)",
    )
    section.table(
        phases, "Mean and median of every phase of the legend, client and server view", max_rows=48
    )
    section.table(
        sizes,
        "Handshake message sizes (bytes, 4-byte handshake header included) "
        "and where OpenSSL's 4096-byte write buffer flushes the server flight",
    )
    section.table(
        processing,
        "Client processing time: ServerHello received to client "
        "Finished sent, mean ms, server signer x CA signer per group (tables 10-12)",
    )
    if store.has_table("handshake_capture"):
        captures = store.export_table(
            "handshake_captures",
            "SELECT cell_id, side, handshakes, packets, kernel_packets, kernel_drops, "
            "userspace_timestamps, round(seconds, 3) AS seconds, pcap "
            "FROM handshake_capture ORDER BY cell_id, side",
        )
        section.text(_lab_text(store))
        section.table(
            captures,
            "Captures per cell and host: packets written, packets the kernel's filter "
            "saw, drops (must be 0), time the cell's handshakes took",
        )
    for png, caption in _figures(store):
        section.figure(png, caption)
    section.text(MECHANISMS)
    return section


def _lab_text(store) -> str:
    """The link and TCP settings the cells ran with, from the stored topology."""
    import html

    rows = store.query("SELECT DISTINCT topology FROM handshake_capture")
    parts = []
    for r in rows:
        try:
            t = json.loads(r["topology"])
        except (TypeError, ValueError):
            continue
        server = t.get("sides", {}).get("server", {})
        offloads = ", ".join(f"{k} {v}" for k, v in server.get("offloads", {}).items())
        parts.append(
            f"link {t.get('link', {}).get('kind', '?')}, MTU {t.get('mtu')}, MSS payload "
            f"{t.get('mss_payload')} bytes, congestion control "
            f"{t.get('congestion_control')}, initcwnd {t.get('initcwnd') or 'kernel default'}"
            f"; server interface offloads: {offloads}"
        )
    if not parts:
        return ""
    return "<p><b>Lab:</b> " + "<br>".join(html.escape(p) for p in parts) + "</p>"


def _stacked(store, title: str, name: str, labels: list[str], rows: dict) -> Path:
    """One stacked-bar figure: client view left, server view right, one bar per label."""
    from pqlab import figures

    plt = figures.plt
    colours = phase_colours()
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * len(labels) + 2.2), sharey=True)
    for ax, view in zip(axes, ("client", "server"), strict=True):
        table = hp.VIEWS[view]
        left = [0.0] * len(labels)
        for pname, *_ in table:
            vals = [rows.get((lab, view, pname), 0.0) for lab in labels]
            colour, hatch = colours[pname]
            ax.barh(
                range(len(labels)),
                vals,
                left=left,
                color=colour,
                hatch=hatch,
                edgecolor="white",
                linewidth=0.4,
                label=pname,
            )
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.set_title(f"{view} view")
        ax.set_xlabel("mean time (ms)")
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.legend(
            fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False
        )
    fig.suptitle(title)
    return figures.save(fig, store, name)


def _figures(store) -> list[tuple[Path, str]]:
    from pqlab import figures

    out = []
    data = store.query(
        'SELECT "group", server_sig, ca_sig, view, phase, avg(ns) / 1e6 AS ms '
        "FROM handshake_phase GROUP BY ALL"
    )
    cells = store.query(
        'SELECT DISTINCT t."group", t.server_sig, t.ca_sig, og.pos AS gp, os.pos AS sp, '
        f"oc.pos AS cp FROM handshake_raw t {ORDER_JOIN} ORDER BY gp, sp, cp"
    )
    groups = list(dict.fromkeys(c["group"] for c in cells))
    ssigs = list(dict.fromkeys(c["server_sig"] for c in cells))
    cas = list(dict.fromkeys(c["ca_sig"] for c in cells))
    means = {
        (d["group"], d["server_sig"], d["ca_sig"], d["view"], d["phase"]): d["ms"] for d in data
    }
    present = {(c["group"], c["server_sig"], c["ca_sig"]) for c in cells}

    def family(vary: str, fixed: dict):
        axis = {"server_sig": ssigs, "group": groups, "ca_sig": cas}[vary]
        labels, rows = [], {}
        for v in axis:
            key = {**fixed, vary: v}
            k = (key["group"], key["server_sig"], key["ca_sig"])
            if k not in present:
                continue
            labels.append(v)
            for (g, s, c, view, phase), ms in means.items():
                if (g, s, c) == k:
                    rows[(v, view, phase)] = ms
        return labels, rows

    # Per server signer for a fixed group and CA (figures 8, 13, 14).
    for g in groups:
        for c in cas:
            labels, rows = family("server_sig", {"group": g, "ca_sig": c})
            if labels:  # always drawn, even for one cell
                title = f"group {g}, CA {c}: by server signature"
                out.append(
                    (
                        _stacked(
                            store,
                            title,
                            figures.safe_name(f"handshake_phases_group-{g}_ca-{c}"),
                            labels,
                            rows,
                        ),
                        f"Mean phases, {title} (as figures 8, 13, 14)",
                    )
                )
    # Per group for a fixed server signer and CA (figures 15, 16, 18).
    for s in ssigs:
        for c in cas:
            labels, rows = family("group", {"server_sig": s, "ca_sig": c})
            if len(labels) > 1:
                title = f"server {s}, CA {c}: by key exchange"
                out.append(
                    (
                        _stacked(
                            store,
                            title,
                            figures.safe_name(f"handshake_phases_server-{s}_ca-{c}"),
                            labels,
                            rows,
                        ),
                        f"Mean phases, {title} (as figures 15, 16, 18)",
                    )
                )
    # Per CA for a fixed group and server signer (figure 17).
    for g in groups:
        for s in ssigs:
            labels, rows = family("ca_sig", {"group": g, "server_sig": s})
            if len(labels) > 1:
                title = f"group {g}, server {s}: by CA signature"
                out.append(
                    (
                        _stacked(
                            store,
                            title,
                            figures.safe_name(f"handshake_phases_group-{g}_server-{s}"),
                            labels,
                            rows,
                        ),
                        f"Mean phases, {title} (as figure 17)",
                    )
                )
    out += _size_time_figures(store)
    return out


def _size_time_figures(store) -> list[tuple[Path, str]]:
    from pqlab import figures

    plt = figures.plt
    rows = store.query(
        'SELECT "group", server_sig, ca_sig, median(server_flight_bytes) AS flight, '
        "median(bytes_through_certificate) AS through_cert, avg(sh_to_fin_ns) / 1e6 AS "
        "sh_fin, avg(sh_to_cert_ns) / 1e6 AS sh_cert FROM handshake_raw GROUP BY ALL"
    )
    out = []
    for key_x, key_y, name, xlabel, ylabel, zoom, caption in (
        (
            "flight",
            "sh_fin",
            "handshake_flight_size_vs_sh_to_fin",
            "server flight: bytes from ServerHello through Finished (TCP stream)",
            "ServerHello send -> Finished send, mean (ms)",
            0.1,
            "Server flight size against ServerHello-to-Finished time at the server "
            "(figures 9 and 10; right: zoomed to 0-0.1 ms)",
        ),
        (
            "through_cert",
            "sh_cert",
            "handshake_sh_cert_size_vs_sh_to_cert",
            "bytes from ServerHello through Certificate (TCP stream)",
            "ServerHello send -> Certificate send, mean (ms)",
            0.5,
            "ServerHello+Certificate size against ServerHello-to-Certificate time at the "
            "server (figures 11 and 12; right: zoomed to 0-0.5 ms)",
        ),
    ):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, limit in zip(axes, (None, zoom), strict=True):
            for r in rows:
                ax.scatter(r[key_x], r[key_y], s=18)
                if len(rows) <= 24:
                    ax.annotate(
                        f"{r['group']}/{r['server_sig']}/{r['ca_sig']}",
                        (r[key_x], r[key_y]),
                        fontsize=5,
                        alpha=0.7,
                    )
            for x, label in THRESHOLDS:
                ax.axvline(x, color="#888", linestyle="--", linewidth=0.8)
                ax.text(
                    x,
                    1.0,
                    f" {label}",
                    rotation=90,
                    fontsize=6,
                    va="top",
                    transform=ax.get_xaxis_transform(),
                )
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            if limit is not None:
                ax.set_ylim(0, limit)
        out.append((figures.save(fig, store, name), caption))
    return out


INTRO = """
<p>Each cell runs N full TLS 1.3 handshakes (fresh TCP connection, no resumption, the group
and server signature forced and checked, the chain validated) between a client and a server
network namespace joined by a 1500-byte-MTU link with offloads off. Both hosts capture with
kernel timestamps; both namespaces share one kernel clock (CLOCK_REALTIME), so a difference
between a client-side and a server-side timestamp needs no clock correction. Each TLS message
is placed at the TCP segment that carried the last byte of the record completing it (found
from the library's record sizes and stream offsets and the segments' sequence numbers, without
decrypting).</p>
<p><b>The points.</b> Client: 1 sends SYN, 2 receives SYN/ACK, 3 sends ACK, 4 sends
ClientHello, 5/6/7/8 receive ServerHello / Certificate / CertificateVerify / Finished, 9 sends
its Finished. Server: A receives SYN, B sends SYN/ACK, C receives ACK, D receives ClientHello,
E/F/G/H send ServerHello / Certificate / CertificateVerify / Finished. The handshake counts as
established at 8 (<code>median_ms</code>, <code>mean_ms</code>, <code>p90_ms</code> are 1 to
8); the stacked bars run to 9, adding the client's own Finished processing
("Finished rcv -&gt; Finished send"). Each view's phases add up exactly to 1-9.</p>
<p><b>Certificates sent.</b> Unless the run used <code>--send-root</code> (column
<code>chain_sent</code>), the server sends only its own certificate; the document's servers
also sent the root CA certificate, so its table 9 counts match runs with
<code>--send-root</code>.</p>
<p><b>Stacked bars.</b> Left: the client view, right: the server view. Colours follow the
document's legend: green = transmission (one capture point to the other), grey = the TCP
layer, blue = client processing or waiting for the client, red (hatched) = server
processing, yellow (hatched) = the client waiting for data from the server. A phase that is
missing or very thin was either very short or simultaneous at the TLS level (ServerHello
and Certificate often leave in the same write).</p>
"""

MECHANISMS = """
<h3>Two mechanisms behind the server's timing</h3>
<p><b>OpenSSL's 4096-byte write buffer.</b> During the handshake OpenSSL writes records into
a 4096-byte buffering BIO. Records that fit are held; when one does not fit, the buffer is
topped up and flushed, data of 4096 bytes or more goes straight to the socket, and a smaller
rest is held until the flight ends with Finished. So a flight of at most 4096 bytes leaves in
one piece when Finished is ready (ServerHello-to-Finished near zero, and ServerHello is
"sent" late); between 4096 and 8192 bytes of ServerHello+Certificate, the first 4096 bytes
leave at once and the rest of the Certificate waits for CertificateVerify (the signature):
ServerHello-to-Certificate then shows the signing time. <code>flight_writes</code>,
<code>flight_split_fraction</code> and the predicted flush offsets in the sizes table come
from this model applied to the measured record sizes; <code>short_segment_ends</code> are the
stream offsets where the capture shows a segment shorter than the MSS inside the flight (a
write boundary) and should match.</p>
<p><b>The initial congestion window.</b> A new connection may send 10 segments (initcwnd)
before the first ACK; Linux counts segments, not bytes. With a 1448-byte MSS, 4096 bytes
take 3 segments, so a ServerHello+Certificate over 14232 bytes (4096 + 7 x 1448) cannot
leave before an ACK comes back: ServerHello-to-Certificate then includes a round trip.
<code>cwnd_stall_fraction</code> is the share of handshakes in which part of the server
flight left only when an ACK arrived: the window (replayed from the server's capture with
slow start) was full at that ACK, or a segment written together with its predecessor left
right after the ACK rather than with it; the TCP_INFO congestion
window after the handshake is <code>server_snd_cwnd_after</code>.</p>
<p>On this lab's link the round trip is tens of microseconds, so a stall costs little
here; over a real network each one costs a full RTT. Run with a network profile to see it.</p>
"""
