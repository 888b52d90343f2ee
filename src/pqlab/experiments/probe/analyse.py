"""From one configuration's engine records (and capture) to rows: what each connection
showed (`probe_raw`), its messages (`probe_messages`), the chain the server sent
(`probe_chain`), and how each connection ended (`outcome`)."""

from __future__ import annotations

import json
from pathlib import Path

from pqlab.errors import UserError
from pqlab.experiments.probe import chain as chains
from pqlab.experiments.probe import wire as wires
from pqlab.experiments.probe.plan import Cell, Plan, is_post_quantum
from pqlab.tls import keylog as kl

# TLS alert descriptions (RFC 8446 6, and the TLS 1.2 ones still sent).
ALERTS = {
    0: "close_notify",
    10: "unexpected_message",
    20: "bad_record_mac",
    22: "record_overflow",
    40: "handshake_failure",
    42: "bad_certificate",
    43: "unsupported_certificate",
    44: "certificate_revoked",
    45: "certificate_expired",
    46: "certificate_unknown",
    47: "illegal_parameter",
    48: "unknown_ca",
    49: "access_denied",
    50: "decode_error",
    51: "decrypt_error",
    70: "protocol_version",
    71: "insufficient_security",
    80: "internal_error",
    86: "inappropriate_fallback",
    90: "user_canceled",
    109: "missing_extension",
    110: "unsupported_extension",
    112: "unrecognized_name",
    116: "certificate_required",
    120: "no_application_protocol",
}
PROTOCOL_VERSION = 70
# How a connection ended, in the order a configuration's outcome is told.
OUTCOMES = (
    "accepted",  # handshake completed at once
    "hello-retry",  # completed after a HelloRetryRequest
    "refused",  # the server answered the ClientHello with an alert
    "tls12",  # the server speaks TLS 1.2 (or older) only
    "closed",  # the server closed the connection without an alert
    "not-tls",  # the server's bytes are not TLS
    "timeout",  # no answer within --timeout
    "unreachable",  # the TCP connection could not be made
    "failed",  # anything else (the engine's message says what)
)
COMPLETED = ("accepted", "hello-retry")


def alert_name(alert: tuple[int, int] | None) -> str | None:
    if alert is None:
        return None
    level, desc = alert
    return f"{ALERTS.get(desc, 'alert')} ({desc})" + ("" if level == 2 else " (warning)")


def outcome(rec: dict, w: wires.Wire) -> str:
    """How one connection ended (OUTCOMES), from the engine's record and what the wire
    showed."""
    if rec.get("type") == "connection":
        return "hello-retry" if w.hello_retry else "accepted"
    message, kind = rec.get("message") or "", rec.get("kind")
    if "TCP connect failed" in message:
        return "unreachable"
    if w.not_tls:
        return "not-tls"
    desc = w.alert[1] if w.alert else None
    if w.server_version is not None and w.server_version < 0x0304:
        return "tls12"
    if (
        desc == PROTOCOL_VERSION
        or "unsupported protocol" in message
        or "ProtocolVersion" in message
    ):
        return "tls12"
    if w.alert is not None and w.first("server", "ServerHello") is None:
        return "refused"
    if kind == "io" and ("--io-timeout" in message or "--connection-timeout" in message):
        return "timeout"
    if "wrong version number" in message or "packet length too long" in message:
        return "not-tls"
    if kind == "peer" and ("closed the connection" in message or "EOF" in message):
        return "closed"
    if kind == "peer" and "sent" in message and w.first("server", "ServerHello") is None:
        return "refused"  # an alert named by the stack (no capture, no events)
    return "failed"


def _ms(ns) -> float | None:
    return None if ns is None else ns / 1e6


def _durations(rec: dict) -> dict:
    d = rec.get("durations") or {}
    return {
        "tcp_connect_ms": _ms(d.get("tcp_connect_ns")),
        "handshake_ms": _ms(d.get("handshake_ns")),
        "ttfb_ms": _ms(d.get("connect_to_handshake_ns")),
        "first_byte_ms": _ms(d.get("first_byte_ns")),
        "ttlb_ms": _ms(d.get("last_byte_ns")),
    }


def _port(rec: dict) -> int | None:
    local = rec.get("local")
    return int(local.rsplit(":", 1)[1]) if local else None


def server_chain(rec: dict, captured: wires.Wire | None) -> tuple[list[bytes], str | None]:
    """The server's certificates (DER, in the order sent) and where they come from: the
    capture's decrypted Certificate message ("capture": what crossed the wire) when it
    showed one, else what the client stack kept of it ("client"; None: no chain)."""
    if captured is not None and captured.certificates is not None:
        return captured.certificates, "capture"
    kept = [bytes.fromhex(h) for h in rec.get("peer_chain") or []]
    return kept, "client" if kept else None


def chain_kept_note(rec: dict, captured: wires.Wire | None, stack: str) -> str | None:
    """What the client stack kept of the chain the server sent, when that is not all of it
    (wolfSSL keeps at most 9 certificates, and none over 9 KiB): as the capture shows it,
    or, without the capture's, as the stack itself says."""
    if rec.get("type") != "connection":
        return None
    kept = [bytes.fromhex(h) for h in rec.get("peer_chain") or []]
    if captured is None or captured.certificates is None:
        if not rec.get("peer_chain_truncated"):
            return None
        return (
            f"the {stack} client kept only the first {len(kept)} certificates of a longer "
            "chain, and the chain reported is those; the capture would show the whole chain"
        )
    sent = captured.certificates
    if kept == sent:
        return None
    return (
        f"the {stack} client kept {len(kept)} of the {len(sent)} certificates the server sent "
        f"({sum(map(len, kept)):,} of {sum(map(len, sent)):,} B); the chain reported is the "
        "capture's"
    )


def raw_row(
    plan: Plan,
    cell: Cell,
    idx: int,
    rec: dict,
    w: wires.Wire,
    agree,
    chain: tuple[list[bytes], str | None],
) -> dict:
    """One connection's row; `chain`: `server_chain`'s."""
    neg = rec.get("negotiated") or {}
    st = cell.stack
    group_code = neg.get("group_code") or st.code_of_group(neg.get("group"))
    group = next(
        (g for g in cell.config.groups if g.tls_group == group_code), None
    )  # the catalogue's name for what was negotiated, when it was offered
    ders, chain_from = chain
    kept = rec.get("peer_chain_der_bytes") or []
    info = rec.get("tcp_info") or {}
    rtt_ms = _ms(w.rtt_ns) if w.rtt_ns else (info.get("rtt_us") or 0) / 1e3 or None
    http = rec.get("http") or {}
    out = outcome(rec, w)
    return {
        "probe": plan.name,
        "target": plan.target.text,
        "address": plan.target.connect,
        "stack": cell.stack.name,
        "config": cell.config.name,
        "offered_groups": ",".join(g.name for g in cell.config.groups),
        "key_shares": ",".join(g.name for g in cell.config.shares),
        "sig": cell.sig_name,
        "idx": idx,
        "client_port": _port(rec),
        "outcome": out,
        "error_kind": rec.get("kind"),
        "error": rec.get("message"),
        "alert": alert_name(w.alert),
        "version": neg.get("version"),
        "cipher": neg.get("cipher_standard_name") or neg.get("cipher"),
        "group": group.name if group is not None else neg.get("group"),
        "group_code": group_code,
        "post_quantum": is_post_quantum(group) if neg else None,
        "sigalg": neg.get("sigalg"),
        "sigalg_code": neg.get("sigalg_code"),
        "hello_retry": w.hello_retry if w.source != "none" else None,
        "verified": rec.get("verified"),
        "verify_error": rec.get("verify_error"),
        "chain_certs": len(ders) or None,
        "chain_der_bytes": sum(map(len, ders)) or None,
        "chain_from": chain_from,
        "stack_chain_certs": len(kept) if rec.get("type") == "connection" else None,
        "stack_chain_truncated": rec.get("peer_chain_truncated"),
        "client_hello_bytes": w.client_hello_bytes,
        "hello_retry_bytes": w.hello_retry_bytes,
        "server_flight_bytes": w.flight_bytes,
        "server_flight_segments": w.flight_segments,
        "certificate_bytes": w.certificate_bytes,
        "session_tickets": w.session_tickets if w.source != "none" else None,
        "round_trips": round_trips(w) if out in COMPLETED and w.source == "capture" else None,
        "ack_waits": w.ack_waits,
        "ack_wait_ms": _ms(w.ack_wait_ns),
        "flight_before_wait_segments": w.before_wait_segments,
        "flight_before_wait_bytes": w.before_wait_bytes,
        "tcp_rtt_ms": rtt_ms,
        **_durations(rec),
        "hello_retry_ms": _ms(w.hello_retry_ns),
        "server_wait_ms": _ms(w.server_wait_ns),
        "http_status": http.get("status"),
        "response_bytes": http.get("body_bytes"),
        "bytes_sent": rec.get("bytes_sent"),
        "bytes_received": rec.get("bytes_received"),
        "messages_from": w.source,
        "messages_agree": agree,
        "capture_note": w.note,
        "server_first_bytes": _shown(w.first_server_bytes) if w.not_tls else None,
        "failed_at_ms": _failed_at_ms(rec, w),
        "failed_in": rec.get("failed_in") if rec.get("type") == "connection_error" else None,
        "t_connect_start_ns": rec.get("t_connect_start"),
        "record": json.dumps({k: v for k, v in rec.items() if k not in ("events", "peer_chain")}),
    }


def _origin(rec: dict, w: wires.Wire) -> int | None:
    """The connection's time zero: the client's SYN in the capture, else the start of the
    TCP connect (the client's clock; both are CLOCK_REALTIME)."""
    return w.syn_ns if w.syn_ns is not None else rec.get("t_connect_start")


def _failed_at_ms(rec: dict, w: wires.Wire) -> float | None:
    origin, failed = _origin(rec, w), rec.get("t_failed")
    return _ms(failed - origin) if failed and origin else None


def _shown(data: bytes) -> str:
    """Bytes as hex and, beside them, as text where printable."""
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
    return f"{data.hex(' ')} ({text!r})"


def round_trips(w: wires.Wire) -> int:
    """Round trips the handshake took, as the client waited for them: the TCP handshake,
    the ClientHello's answer, one more for a HelloRetryRequest and one per time the
    server's flight waited for an ACK."""
    return 2 + int(w.hello_retry) + (w.ack_waits or 0)


def message_rows(plan: Plan, cell: Cell, idx: int, rec: dict, w: wires.Wire) -> list[dict]:
    origin = _origin(rec, w)
    rows = []
    for seq, m in enumerate(w.messages):
        rows.append(
            {
                "probe": plan.name,
                "stack": cell.stack.name,
                "config": cell.config.name,
                "sig": cell.sig_name,
                "idx": idx,
                "seq": seq,
                "sender": m.sender,
                "message": m.name,
                "type_code": m.type_code,
                "length_bytes": m.length,
                "record_end": m.record_end,
                "at_ms": _ms(m.at_ns - origin) if m.at_ns is not None and origin else None,
                "source": w.source,
            }
        )
    return rows


def chain_rows(
    plan: Plan, cell: Cell, idx: int, chain: tuple[list[bytes], str | None]
) -> list[dict]:
    """One row per certificate of `server_chain`'s chain, with where it came from."""
    ders, source = chain
    return [
        {
            "probe": plan.name,
            "stack": cell.stack.name,
            "config": cell.config.name,
            "sig": cell.sig_name,
            "idx": idx,
            **row,
            "source": source,
        }
        for row in chains.describe(ders)
    ]


def wires_of(records: list[dict], pcap_path: Path | None, keylog_path: Path, port: int):
    """(record, capture wire or None, events wire) for every connection record, in order."""
    conns: dict[int, list] = {}
    keys = None
    note = None
    if pcap_path is not None and pcap_path.exists():
        try:
            conns = wires.connections_by_port(pcap_path, port)
            keys = (
                kl.read_keylog(keylog_path) if keylog_path.exists() else kl.KeyLog(str(keylog_path))
            )
        except UserError as e:
            note = str(e)
    out = []
    for rec in records:
        events = wires.from_events(rec)
        captured = None
        cport = _port(rec)
        if keys is not None and cport is not None and conns.get(cport):
            info = rec.get("tcp_info") or {}
            mss = int(info.get("rcv_mss") or 0) or 1448
            advmss = int(info.get("advmss") or 0) or 1460
            captured = wires.from_capture(conns[cport].pop(0), keys, mss, advmss)
        elif note is not None:
            events.note = note
        out.append((rec, captured, events))
    return out


def pick(captured: wires.Wire | None, events: wires.Wire) -> tuple[wires.Wire, bool | None]:
    """The wire to report (the capture when it saw the connection's messages, else the
    client's events) and whether the two agree (None when they cannot be compared)."""
    if captured is not None and captured.messages:
        return captured, wires.agree(captured, events)
    if captured is not None and (captured.not_tls or captured.alert or not events.messages):
        return captured, None
    if events.messages or events.alert:
        return events, None
    return (captured or wires.Wire(note=events.note)), None
