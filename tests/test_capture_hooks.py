"""Captures hooked only while their cell runs: the kernel offers every packet on an interface
to every packet socket hooked on it and runs each one's filter in the packet's path, so a
batch of cells' captures all hooked would slow every timed packet. Checked against the
kernel's own list of packet sockets (/proc/net/packet: each socket's protocol, 0003 for
every packet, 88b5 for the parked protocol of an unhooked capture)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import pqlab_env
from pqlab import engine

pytestmark = pytest.mark.net

ALL = "0003"  # ETH_P_ALL: offered every packet
PARKED = "88b5"  # what an unhooked capture is bound to


def _protocols(netns: str | None = None) -> list[str]:
    """The protocol of every packet socket in a network namespace (this one without)."""
    argv = ["cat", "/proc/net/packet"]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    return [line.split()[3] for line in out.splitlines()[1:] if line.strip()]


def _knock(port: int) -> None:
    """One TCP connection attempt to a closed port on 127.0.0.1: a SYN and its RST."""
    with socket.socket() as s:
        s.settimeout(1)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            pass


def test_an_unhooked_capture_sees_nothing_until_hooked(tmp_path):
    port = 40000 + int(time.time()) % 10000
    before = _protocols().count(PARKED)
    proc = subprocess.Popen(
        [str(engine.engine_path()), "capture", "--interface", "lo", "--port", str(port)]
        + ["--pcap", str(tmp_path / "c.pcap"), "--unhooked", "--max-seconds", "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def record() -> dict:
            return json.loads(proc.stdout.readline())

        assert record()["hooked"] is False
        assert _protocols().count(PARKED) == before + 1
        _knock(port)  # not captured
        proc.send_signal(signal.SIGUSR1)
        assert record()["type"] == "hooked"
        _knock(port)  # captured: SYN and RST
        time.sleep(0.1)
        proc.send_signal(signal.SIGUSR2)
        assert record()["type"] == "unhooked"
        assert _protocols().count(PARKED) == before + 1
        _knock(port)  # not captured
        time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        summary = record()
    finally:
        proc.kill()
        proc.wait()
    assert summary["type"] == "capture_summary"
    assert summary["packets"] == 2, summary


def test_a_batch_hooks_only_the_running_cells_captures(tmp_path):
    """Four cells side by side: while they run, at most the running cell's capture (and
    the one before it, for the moment its port stays quiet) is offered the server's
    packets; the others are parked. With every capture hooked all along there would be
    four. (A hooked capture captures on a fresh socket and keeps its parked one aside.)"""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pqlab", "handshake", "-n", "400", "--groups", "X25519,ML-KEM-768"]
        + ["--server-sig", "ECDSA-P256,ML-DSA-44", "--ca-sig", "ECDSA-P256", "--out", str(out)],
        env=pqlab_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    netns = f"pqlab-{proc.pid}-"
    seen: list[list[str]] = []
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
            server = [n.split()[0] for n in names.stdout.splitlines() if n.startswith(netns)]
            server = [n for n in server if n.endswith("-s")]
            if server:
                protocols = _protocols(server[0])
                if protocols.count(PARKED) == 4:
                    seen.append(protocols)
            time.sleep(0.005)
        _, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert proc.returncode == 0, err
    assert len(seen) > 20, f"only {len(seen)} samples with the batch's four captures up"
    assert max(p.count(ALL) for p in seen) <= 2, seen
    assert any(p.count(ALL) == 1 for p in seen), seen


def _switches(pid: int) -> int:
    """A process's voluntary context switches (each time it slept and was woken)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt"))


def test_a_hooked_capture_reads_on_a_timer_not_per_packet(tmp_path):
    """A capture asleep on its socket would be woken by every packet, by the process that
    sent it, in the packet's path; hooked, it sleeps on a timer instead (10 ms) and takes
    the queue in batches, every packet still captured with its kernel timestamp. 300
    connection attempts a millisecond apart (600 packets in about 0.4 s): a per-packet
    reader wakes at least 300 times, a timed one about 40."""
    port = 40000 + (int(time.time()) + 5000) % 10000
    proc = subprocess.Popen(
        [str(engine.engine_path()), "capture", "--interface", "lo", "--port", str(port)]
        + ["--pcap", str(tmp_path / "c.pcap"), "--max-seconds", "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(proc.stdout.readline())["type"] == "capturing"
        time.sleep(0.05)
        before = _switches(proc.pid)
        t0 = time.monotonic()
        for _ in range(300):
            _knock(port)
            time.sleep(0.001)
        seconds = time.monotonic() - t0
        time.sleep(0.05)
        woken = _switches(proc.pid) - before
        proc.send_signal(signal.SIGTERM)
        summary = json.loads(proc.stdout.read().strip().splitlines()[-1])
    finally:
        proc.kill()
        proc.wait()
    assert summary["packets"] == 600, summary
    assert summary["kernel_drops"] == 0 and summary["userspace_timestamps"] == 0, summary
    # A tick every 10 ms over the knocks and the pauses around them, and room to spare.
    assert woken <= 2 * (seconds + 0.1) / 0.010 + 20, (woken, seconds)
