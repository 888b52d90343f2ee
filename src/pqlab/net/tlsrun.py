"""Running the engine's TLS server and client, on the host or inside a TwoHosts topology.

    with EngineServer(["--cert-chain", chain, "--key", key, "--groups", "X25519"],
                      topo=topo, max_connections=10) as server:
        records = run_client(["--connect", f"{topo.server_ip}:{server.port}", "--ca", root,
                              "--groups", "X25519", "-n", "10"], topo=topo)
    server_records = server.records()

The server's JSON lines go to a file, never to a pipe: a pipe nobody reads fills after
about 64 KB of records (a few dozen connections with events) and then stalls the server.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from pqlab import engine
from pqlab.errors import EngineError


def _records(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


class EngineServer:
    """`pqlab-engine tls server` listening on `listen` (default: the topology's server
    address, else 127.0.0.1, port 0 = any free port). Stopped (and reaped) on exit."""

    def __init__(
        self,
        args: list[str],
        topo=None,
        side: str = "server",
        listen: str | None = None,
        max_connections: int | None = None,
        log_path: str | Path | None = None,
        start_timeout: float = 30,
    ):
        self.topo, self.side = topo, side
        host = listen or (f"{topo.server_ip}:0" if topo is not None else "127.0.0.1:0")
        argv = ["tls", "server", "--listen", host, *map(str, args)]
        if max_connections is not None:
            argv += ["--max-connections", str(max_connections)]
        self._tmp = None
        if log_path is None:
            self._tmp = tempfile.NamedTemporaryFile(
                prefix="pqlab-server-", suffix=".jsonl", delete=False
            )
            log_path = self._tmp.name
            self._tmp.close()
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w+")
        cmd = engine.command(argv)
        if topo is not None:
            self.proc = topo.popen(side, cmd, stdout=self._log, stderr=subprocess.PIPE)
        else:
            self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.PIPE)
        try:
            self.listening = self._wait_listening(start_timeout)
        except BaseException:
            self.stop()
            self.remove_log()
            raise
        self.port = int(self.listening["port"])
        self.address = self.listening["address"]

    def _wait_listening(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path) as f:
                first = f.readline()
            if first.endswith("\n"):
                rec = json.loads(first)
                if rec.get("type") == "error":
                    self.stop()
                    raise EngineError(rec.get("message", "server failed to start"))
                return rec
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                self._close()
                raise EngineError(f"server exited before listening: {err.strip()[-300:]}")
            time.sleep(0.01)
        self.stop()
        raise EngineError(f"server did not start listening within {timeout:.0f} s")

    def records(self) -> list[dict]:
        """Every record so far (listening, connection, connection_error, ...)."""
        with open(self.log_path) as f:
            return _records(f.read())

    def connections(self) -> list[dict]:
        return [r for r in self.records() if r.get("type") in ("connection", "connection_error")]

    def wait(self, timeout: float = 60) -> list[dict]:
        """Wait for the server to exit by itself (after --max-connections)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise EngineError(f"server still running after {timeout:.0f} s") from None
        recs = self.records()
        self._close()
        errors = [r for r in recs if r.get("type") == "error"]
        if errors:
            raise EngineError(errors[-1].get("message", "server failed"))
        return recs

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc.stderr:
            self.proc.stderr.close()
        if not self._log.closed:
            self._log.close()

    def remove_log(self) -> None:
        if self._tmp is not None:
            Path(self.log_path).unlink(missing_ok=True)

    def __enter__(self) -> EngineServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self.remove_log()


def run_client(
    args: list[str], topo=None, side: str = "client", timeout: float = 3600
) -> list[dict]:
    """`pqlab-engine tls client ARGS` to completion; its connection records. Any failed
    check (group, signature, chain, bytes) raises EngineError with the engine's message."""
    argv = ["tls", "client", *map(str, args)]
    if topo is None:
        return engine.run(argv, timeout=timeout)
    proc = topo.run(side, engine.command(argv), timeout=timeout)
    recs = []
    for line in proc.stdout.splitlines():
        if line.strip():
            recs.append(engine.parse_line(line))  # raises EngineError on an error record
    if proc.returncode != 0:
        raise EngineError(f"engine client exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return recs
