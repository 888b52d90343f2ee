"""Small network probes run inside the two namespaces (`python -m pqlab.net.probes CMD`):
UDP packets carrying their send time (one-way delay, loss), TCP connects (RTT as TCP sees
it), and a TCP bulk transfer (rate). Each prints JSON lines on stdout (a `ready` record
when it serves, then one `probe_result`). Every wait is
bounded by --timeout. Both namespaces share the host's clocks, so one-way delays are exact (UDP: send time
in the packet, kernel receive timestamp).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
from pathlib import Path

_HDR = struct.Struct("!QQ")  # sequence number, send time (CLOCK_REALTIME ns)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
UDP_BUFFER = 1 << 22


def set_buffer(s: socket.socket, receive: bool, size: int = UDP_BUFFER) -> int:
    """Give a probe socket a `size`-byte buffer and return what the kernel granted.

    Plain SO_RCVBUF / SO_SNDBUF are capped at net.core.rmem_max / wmem_max (212992 bytes on
    a stock kernel): a probe sink that falls a few hundred packets behind would then drop
    probes in its own socket (RcvbufErrors) and count them as link loss. The probes run as
    root in the lab's namespaces, so the FORCE variants (CAP_NET_ADMIN) bypass the cap;
    without the capability the plain option still applies up to the cap."""
    force, plain = (
        (SO_RCVBUFFORCE, socket.SO_RCVBUF) if receive else (SO_SNDBUFFORCE, socket.SO_SNDBUF)
    )
    try:
        s.setsockopt(socket.SOL_SOCKET, force, size)
    except PermissionError:
        s.setsockopt(socket.SOL_SOCKET, plain, size)
    return s.getsockopt(socket.SOL_SOCKET, plain)


def argv(cmd: str, *args) -> list[str]:
    """The command line that runs a probe (same interpreter, pqlab importable)."""
    return [sys.executable, "-m", "pqlab.net.probes", cmd, *map(str, args)]


def env() -> dict:
    src = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{src}:{path}" if path else src}


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def tcp_info(sock: socket.socket) -> dict:
    """The TCP_INFO fields the checks use (struct tcp_info, include/uapi/linux/tcp.h)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    u32 = struct.unpack_from("=24I", raw, 8)
    return {
        "retransmits": raw[2],
        "rtt_us": u32[15],
        "rttvar_us": u32[16],
        "snd_cwnd": u32[18],
        "snd_mss": u32[2],
        "total_retrans": u32[23],
    }


def udp_send(a) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    buffer = set_buffer(s, receive=False)
    pad = b"\0" * max(0, a.size - _HDR.size)
    start = time.monotonic_ns()
    interval = a.interval_us * 1000
    sent = 0
    for seq in range(a.count):
        due = start + seq * interval
        while True:  # sleep most of the gap, spin the rest: even spacing
            left = due - time.monotonic_ns()
            if left <= 0:
                break
            if left > 300_000:
                time.sleep((left - 200_000) / 1e9)
        s.sendto(_HDR.pack(seq, time.time_ns()) + pad, _addr(a.to))
        sent += 1
    return {"sent": sent, "size": max(a.size, _HDR.size), "sndbuf": buffer}


def udp_sink(a) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    buffer = set_buffer(s, receive=True)
    # The kernel stamps each datagram on arrival (CLOCK_REALTIME, shared by all namespaces),
    # so the receiver's own wake-up latency stays out of the one-way delay.
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind(_addr(a.bind))
    print(json.dumps({"type": "ready"}), flush=True)
    got = []
    deadline = time.monotonic() + a.timeout
    s.settimeout(a.idle)
    first = True
    while len(got) < a.count and time.monotonic() < deadline:
        try:
            data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(16))
        except TimeoutError:
            if first:
                continue
            break
        t = time.time_ns()
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = struct.unpack_from("=qq", payload)
                t = sec * 1_000_000_000 + nsec
        first = False
        seq, sent = _HDR.unpack_from(data)
        got.append((seq, sent, t))
    return {"received": got, "rcvbuf": buffer}


def tcp_accept(a) -> dict:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(_addr(a.bind))
    s.listen(64)
    s.settimeout(a.timeout)
    print(json.dumps({"type": "ready"}), flush=True)
    n = 0
    for _ in range(a.count):
        c, _ = s.accept()
        c.recv(1)  # wait for the client's close, so both ends finish cleanly
        c.close()
        n += 1
    return {"accepted": n}


def tcp_connect(a) -> dict:
    out = []
    deadline = time.monotonic() + a.timeout
    for _ in range(a.count):
        if time.monotonic() > deadline:
            break
        c = socket.socket()
        c.settimeout(a.timeout)
        t0 = time.monotonic_ns()
        c.connect(_addr(a.to))
        t1 = time.monotonic_ns()
        info = tcp_info(c)
        c.close()
        out.append({"connect_ns": t1 - t0, "tcpi_rtt_us": info["rtt_us"]})
        time.sleep(a.gap_ms / 1000)
    return {"connects": out}


def tcp_source(a) -> dict:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(_addr(a.bind))
    s.listen(1)
    s.settimeout(a.timeout)
    print(json.dumps({"type": "ready"}), flush=True)
    c, _ = s.accept()
    c.settimeout(a.timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    block = b"x" * 65536
    left = a.bytes
    while left > 0:
        n = c.send(block[: min(left, len(block))])
        left -= n
    c.shutdown(socket.SHUT_WR)
    c.recv(1)  # until the client closes
    info = tcp_info(c)
    c.close()
    return {"sent": a.bytes, "tcp_info": info}


def tcp_sink(a) -> dict:
    c = socket.socket()
    c.settimeout(a.timeout)
    t0 = time.monotonic_ns()
    c.connect(_addr(a.to))
    t1 = time.monotonic_ns()
    samples = []
    total = 0
    while True:
        data = c.recv(1 << 20)
        if not data:
            break
        total += len(data)
        samples.append((time.monotonic_ns(), total))
    info = tcp_info(c)
    c.close()
    return {
        "t_connect_start": t0,
        "t_connected": t1,
        "received": total,
        "samples": samples,
        "tcp_info": info,
    }


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pqlab.net.probes")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (
        ("udp-send", udp_send),
        ("udp-sink", udp_sink),
        ("tcp-accept", tcp_accept),
        ("tcp-connect", tcp_connect),
        ("tcp-source", tcp_source),
        ("tcp-sink", tcp_sink),
    ):
        sp = sub.add_parser(name)
        sp.set_defaults(fn=fn)
        sp.add_argument("--timeout", type=float, default=60.0)
        if name in ("udp-send", "tcp-connect", "tcp-sink"):
            sp.add_argument("--to", required=True)
        else:
            sp.add_argument("--bind", required=True)
        if name in ("udp-send", "udp-sink", "tcp-accept", "tcp-connect"):
            sp.add_argument("--count", type=int, required=True)
        if name == "udp-send":
            sp.add_argument("--interval-us", type=int, default=1000)
            sp.add_argument("--size", type=int, default=64)
        if name == "udp-sink":
            sp.add_argument("--idle", type=float, default=2.0)
        if name == "tcp-connect":
            sp.add_argument("--gap-ms", type=float, default=5.0)
        if name in ("tcp-source",):
            sp.add_argument("--bytes", type=int, required=True)
    a = p.parse_args(args)
    print(json.dumps({"type": "probe_result", **a.fn(a)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
