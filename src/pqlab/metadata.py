"""Machine, library and run metadata recorded with every result (pyperf-style)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from pqlab import __version__


def _read(path: str, default: str = "unavailable") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def cpu_info() -> dict:
    model, flags = "unknown", []
    for line in _read("/proc/cpuinfo", "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = value.split()
    interesting = [
        "aes",
        "pclmulqdq",
        "vaes",
        "vpclmulqdq",
        "avx",
        "avx2",
        "avx512f",
        "bmi2",
        "adx",
        "sha_ni",
        "constant_tsc",
        "nonstop_tsc",
        "rdtscp",
    ]
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    return {
        "model": model,
        "count": os.cpu_count(),
        "features": {f: (f in flags) for f in interesting},
        "aes_ni": "aes" in flags,
        "governor": governor,
        "turbo": (
            "off"
            if no_turbo == "1"
            else "on"
            if no_turbo == "0"
            else ("on" if boost == "1" else "off" if boost == "0" else "unavailable")
        ),
        "flags": flags,
    }


def network_info() -> dict:
    return {
        "congestion_control": _read("/proc/sys/net/ipv4/tcp_congestion_control"),
        "allowed_congestion_control": _read("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
        "available_congestion_control": _read(
            "/proc/sys/net/ipv4/tcp_available_congestion_control"
        ),
    }


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        commit = out.stdout.strip() if out.returncode == 0 else "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def collect(argv: list[str] | None = None, engine_info: dict | None = None) -> dict:
    """Everything needed to compare this run with another one later."""
    uname = platform.uname()
    meta = {
        "schema_version": 1,
        "pqlab_version": __version__,
        "pqlab_commit": git_commit(),
        "command_line": shlex.join(argv if argv is not None else sys.argv),
        "started_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "machine": uname.machine,
        "python": sys.version.split()[0],
        "cpu": cpu_info(),
        "memory_total_kb": next(
            (
                int(line.split()[1])
                for line in _read("/proc/meminfo", "").splitlines()
                if line.startswith("MemTotal:")
            ),
            None,
        ),
        "network": network_info(),
        "env": {k: os.environ[k] for k in ("OPENSSL_ia32cap",) if k in os.environ},
    }
    if engine_info is not None:
        meta["engine"] = engine_info
    return meta
