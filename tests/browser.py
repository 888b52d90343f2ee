"""A real headless Chromium driven over the DevTools protocol (CDP), for the browser tests.

Playwright cannot be installed offline; Debian's `chromium` can, and it speaks CDP on a
websocket when started with `--remote-debugging-port`. This is the smallest client that the
tests need: start Chromium with a fresh profile (port 0: Chromium picks a free one and
writes it to DevToolsActivePort in the profile), attach to its page over a websocket
(`websocket-client` from PyPI), send commands, collect events (console messages, exceptions,
network responses), take screenshots, and stop the whole process group.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(Exception):
    pass


class Chromium:
    """One headless Chromium with one page, driven over CDP."""

    def __init__(self, workdir: Path, extra_flags=(), env: dict | None = None, timeout=60):
        import websocket  # websocket-client

        self.profile = Path(workdir) / "chromium-profile"
        self.profile.mkdir(parents=True)
        self.log = open(Path(workdir) / "chromium.log", "w")  # noqa: SIM115
        argv = [chromium_path(), *FLAGS, f"--user-data-dir={self.profile}", *extra_flags]
        self.proc = subprocess.Popen(
            [*argv, "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.events: list[dict] = []
        self._id = 0
        try:
            port = self._port(timeout)
            page = self._page_ws(port, timeout)
            self.ws = websocket.create_connection(page, timeout=timeout, suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def _port(self, timeout: float) -> int:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if active.exists() and active.read_text().strip():
                return int(active.read_text().split()[0])
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited {self.proc.returncode}; see {self.log.name}")
            time.sleep(0.1)
        raise CdpError("chromium did not open its DevTools port")

    def _page_ws(self, port: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise CdpError("chromium has no page target")

    def send(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        """Send one command and return its result; events arriving meanwhile are kept."""
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._recv(deadline)
            if msg is None:
                continue
            if msg.get("id") == my:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error']}")
                return msg.get("result", {})
        raise CdpError(f"{method}: no answer within {timeout} s")

    def _recv(self, deadline: float) -> dict | None:
        import websocket

        self.ws.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
        try:
            msg = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return None
        if "method" in msg:
            self.events.append(msg)
        return msg

    def wait_event(self, method: str, timeout: float = 60, since: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events[since:]:
                if ev["method"] == method:
                    return ev
            if time.monotonic() >= deadline:
                raise CdpError(f"no {method} within {timeout} s")
            self._recv(deadline)

    def drain(self, seconds: float) -> None:
        """Keep collecting events for a while (late console messages, requests)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._recv(deadline)

    def open(self, url: str, timeout: float = 60) -> dict:
        """Navigate and wait for the load event; the navigation's result (errorText when
        the page could not be loaded, e.g. a certificate error)."""
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        since = len(self.events)
        result = self.send("Page.navigate", {"url": url}, timeout)
        if not result.get("errorText"):
            self.wait_event("Page.loadEventFired", timeout, since)
        return result

    def evaluate(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise CdpError(f"{expression[:60]}...: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        out = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif ev["method"] == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif ev["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path, width: int = 1280, height: int = 1600) -> Path:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        shot = self.send("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
