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

from pqlab import __version__, files
from pqlab.errors import UserError


def _read(path: str, default: str = "unavailable") -> str:
    try:
        return files.read_input_text(path, path, "record").strip()
    except UserError:
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
    interesting = INTERESTING_FLAGS
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    return {
        "model": model,
        "count": os.cpu_count(),
        "features": {f: (f in flags) for f in interesting},
        "aes_ni": "aes" in flags,
        "governor": governor,
        "turbo": _turbo(no_turbo, boost),
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


# --- hosts probed with one POSIX shell script (this machine or a remote host over SSH) --------

# The clock's synchronisation state: chrony's own report, else systemd-timesyncd's, else
# ntpd's. Each output line is prefixed with its source so one parser reads all of them.
CLOCK_SCRIPT = r"""
if command -v chronyc >/dev/null 2>&1; then chronyc -n tracking 2>&1 | sed 's/^/chrony|/'; fi
if command -v timedatectl >/dev/null 2>&1; then
  timedatectl show 2>/dev/null | sed 's/^/timedatectl|/'
  timedatectl show-timesync 2>/dev/null | sed 's/^/timesync|/'
fi
if command -v ntpq >/dev/null 2>&1; then ntpq -c 'rv 0 offset,sys_jitter,stratum,rootdelay,rootdisp,leap' 2>&1 | tr ',' '\n' | sed 's/^ *//; s/^/ntpq|/'; fi
echo "clocksource|$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unavailable)"
"""

# Everything recorded about a host (CPU, kernel, governor, congestion control, clock) and
# what pqlab needs there (tools, privileges), as `key=value` lines.
HOST_SCRIPT = r"""
r() { cat "$1" 2>/dev/null || echo unavailable; }
echo "hostname=$(uname -n)"
echo "kernel=$(uname -s) $(uname -r) $(uname -v)"
echo "machine=$(uname -m)"
echo "uid=$(id -u)"
echo "user=$(id -un)"
echo "capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)"
echo "cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)"
echo "cpu_count=$(getconf _NPROCESSORS_ONLN 2>/dev/null)"
echo "cpu_flags=$(sed -n 's/^flags[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)"
echo "governor=$(r /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor)"
echo "no_turbo=$(r /sys/devices/system/cpu/intel_pstate/no_turbo)"
echo "boost=$(r /sys/devices/system/cpu/cpufreq/boost)"
echo "memory_total_kb=$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\).*/\1/p' /proc/meminfo)"
echo "congestion_control=$(r /proc/sys/net/ipv4/tcp_congestion_control)"
echo "available_congestion_control=$(r /proc/sys/net/ipv4/tcp_available_congestion_control)"
echo "tcp_timestamps=$(r /proc/sys/net/ipv4/tcp_timestamps)"
for t in sh ip ethtool setsid timeout kill cat rm mkdir sleep sha256sum taskset chronyc timedatectl ntpq pqlab-engine pqlab-engine-wolfssl; do
  if command -v "$t" >/dev/null 2>&1; then echo "tool_$t=$(command -v "$t")"; else echo "tool_$t="; fi
done
"""

INTERESTING_FLAGS = [
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
CAP_NET_RAW = 13
CAP_NET_ADMIN = 12


def parse_kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out


def _turbo(no_turbo: str, boost: str) -> str:
    if no_turbo == "1":
        return "off"
    if no_turbo == "0":
        return "on"
    return "on" if boost == "1" else "off" if boost == "0" else "unavailable"


def has_capability(capeff_hex: str, bit: int) -> bool:
    try:
        return bool(int(capeff_hex, 16) >> bit & 1)
    except ValueError:
        return False


def host_from_probe(kv: dict[str, str]) -> dict:
    """A host's metadata from HOST_SCRIPT's output, shaped like this machine's in `collect`."""
    flags = kv.get("cpu_flags", "").split()
    count = kv.get("cpu_count", "")
    mem = kv.get("memory_total_kb", "")
    return {
        "hostname": kv.get("hostname"),
        "kernel": kv.get("kernel"),
        "machine": kv.get("machine"),
        "user": kv.get("user"),
        "cpu": {
            "model": kv.get("cpu_model") or "unknown",
            "count": int(count) if count.isdigit() else None,
            "features": {f: (f in flags) for f in INTERESTING_FLAGS},
            "aes_ni": "aes" in flags,
            "governor": kv.get("governor", "unavailable"),
            "turbo": _turbo(kv.get("no_turbo", ""), kv.get("boost", "")),
        },
        "memory_total_kb": int(mem) if mem.isdigit() else None,
        "network": {
            "congestion_control": kv.get("congestion_control"),
            "available_congestion_control": kv.get("available_congestion_control"),
            "tcp_timestamps": kv.get("tcp_timestamps"),
        },
        "capabilities": {
            "uid": kv.get("uid"),
            "cap_net_raw": has_capability(kv.get("capeff", ""), CAP_NET_RAW),
            "cap_net_admin": has_capability(kv.get("capeff", ""), CAP_NET_ADMIN),
        },
    }


def _seconds(text: str) -> float | None:
    """'0.000012345 seconds fast of NTP time' -> +1.2345e-05 (fast positive, slow negative);
    '+0.000000797 seconds' -> 7.97e-07."""
    words = text.split()
    if not words:
        return None
    try:
        value = float(words[0])
    except ValueError:
        return None
    return -value if "slow" in words else value


def parse_chrony_tracking(lines: list[str]) -> dict:
    """`chronyc -n tracking` as numbers. `max_error_s` is chrony's documented bound on this
    clock's error against true time: |system time offset| + root dispersion + root delay / 2
    (chronyc(1), "tracking")."""
    raw = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            raw[key.strip()] = value.strip()
    if "Reference ID" not in raw:
        return {"available": False, "message": " ".join(lines).strip()[:200]}
    out: dict = {
        "available": True,
        "reference": raw.get("Reference ID"),
        "stratum": int(raw["Stratum"]) if raw.get("Stratum", "").isdigit() else None,
        "system_time_offset_s": _seconds(raw.get("System time", "")),
        "last_offset_s": _seconds(raw.get("Last offset", "")),
        "rms_offset_s": _seconds(raw.get("RMS offset", "")),
        "root_delay_s": _seconds(raw.get("Root delay", "")),
        "root_dispersion_s": _seconds(raw.get("Root dispersion", "")),
        "frequency_ppm": _seconds(raw.get("Frequency", "").replace("ppm", "seconds")),
        "leap_status": raw.get("Leap status"),
    }
    out["synchronised"] = out["leap_status"] not in (None, "Not synchronised")
    parts = (out["system_time_offset_s"], out["root_dispersion_s"], out["root_delay_s"])
    if all(p is not None for p in parts):
        out["max_error_s"] = abs(parts[0]) + parts[1] + parts[2] / 2
    return out


def parse_clock(text: str) -> dict:
    """CLOCK_SCRIPT's output: clock source and synchronisation state (chrony, systemd-timesyncd,
    ntpd, whichever answered)."""
    by_source: dict[str, list[str]] = {}
    for line in text.splitlines():
        source, sep, rest = line.partition("|")
        if sep:
            by_source.setdefault(source, []).append(rest)
    out: dict = {"clocksource": (by_source.get("clocksource") or ["unavailable"])[0]}
    if "chrony" in by_source:
        out["chrony"] = parse_chrony_tracking(by_source["chrony"])
    if "timedatectl" in by_source:
        td = parse_kv("\n".join(by_source["timedatectl"]))
        out["timedatectl"] = {k: td[k] for k in ("NTP", "NTPSynchronized", "Timezone") if k in td}
    if "timesync" in by_source:
        out["timesyncd"] = parse_kv("\n".join(by_source["timesync"]))
    if "ntpq" in by_source:
        out["ntpq"] = parse_kv("\n".join(by_source["ntpq"]))
    out["synchronised"] = _synchronised(out)
    return out


def _synchronised(clock: dict) -> bool | None:
    """Whether some time daemon says the clock is synchronised (None: no daemon answered)."""
    chrony = clock.get("chrony") or {}
    if chrony.get("available"):
        return bool(chrony.get("synchronised"))
    td = clock.get("timedatectl") or {}
    if "NTPSynchronized" in td:
        return td["NTPSynchronized"] == "yes"
    ntpq = clock.get("ntpq") or {}
    if "leap" in ntpq:
        return ntpq["leap"] != "11" and ntpq["leap"] != "alarm"
    return None


def local_clock() -> dict:
    """This machine's clock source and synchronisation state (CLOCK_SCRIPT run here)."""
    try:
        out = subprocess.run(
            ["sh", "-c", CLOCK_SCRIPT], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return {"clocksource": "unavailable", "error": str(e), "synchronised": None}
    return parse_clock(out)


def add_to_invocation(store, key: str, value: dict) -> None:
    """Merge `value` into `key` of the running invocation's metadata (and metadata.json):
    what is known only once measuring began (a remote pair's network as read back, the
    clock offsets found)."""
    if store.invocation_id is None:
        return
    store.merge_metadata(store.invocation_id, key, value)
    store.write_metadata_json()


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
        "clock": local_clock(),
        "env": {k: os.environ[k] for k in ("OPENSSL_ia32cap",) if k in os.environ},
    }
    if engine_info is not None:
        meta["engine"] = engine_info
    return meta
