"""Link profiles: one description of an emulated link, from the command line or a TOML file.

A profile gives, per direction (client-to-server `c2s`, server-to-client `s2c`), a one-way
delay, jitter with a netem distribution (uniform, normal, pareto, paretonormal) and
correlation, random loss with correlation, a rate and a queue limit in packets; plus the
hosts' TCP settings (initcwnd, initrwnd, congestion control) and the MTU. Both shaping
backends (kernel netem, pqlab's userspace emulator) apply it with netem's semantics.

Text form: comma-separated `key=value` pairs, optionally starting with a preset name:
    rtt=50ms,rate=1mbit,loss=1%,jitter=8.75ms,dist=paretonormal,limit=1000,initcwnd=10
    1mbps-200ms,initcwnd=10,s2c.loss=3%
Unprefixed link keys apply to both directions; `c2s.` / `s2c.` set one direction and win
over an unprefixed key wherever it stands; a key given twice in one place is refused, and
the keys after a preset override the preset's.

Every value is checked against the bounds below (the reason for each is next to it), in
strings, TOML files and per-direction keys alike, so a profile either describes a link
both shapers build exactly and the engine can measure within its timeouts, or is refused
with one line naming the key, the value and the accepted range.
"""

from __future__ import annotations

import difflib
import itertools
import math
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from pqlab import files
from pqlab.errors import UserError
from pqlab.net.topology import TcpSettings
from pqlab.units import (
    parse_duration,
    parse_percent,
    parse_positive_int,
    parse_rate,
    show,
)

DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
DEFAULT_LIMIT = 1000  # netem's default queue limit, packets

# --- Bounds of every field, and why --------------------------------------------------------
# The engine waits at most 30 s for any single read or write on a TLS socket (its
# --io-timeout) and for a TCP connect; the lab's cells are budgeted in RTTs (linktest's bulk
# transfer runs 30 RTTs under a 300 s probe timeout). The bounds keep every wait inside that.
#
# Rate: netem keeps it in whole bytes per second (tc divides bits by 8 and truncates) and
# computes len * 1e9 / rate in whole ns; the userspace emulator takes whole bits per second
# and computes len * 8 * 1e9 / rate. A multiple of 8 bit/s makes the two the same integer.
# 8 kbit/s (1000 B/s) puts a full 1514-byte frame at 1.5 s and a 9014-byte jumbo frame at
# 9 s on the wire, well inside the 30 s per-read timeout (below it a rate rounds towards
# zero, which both shapers read as "unlimited"). 100 Gbit/s: no veth or TUN path carries
# more, and a 60-byte frame then takes 5 ns, the whole-ns resolution both shapers work in.
RATE_MIN_BPS = 8_000
RATE_MAX_BPS = 100_000_000_000
# One-way delay 5 s, RTT 10 s, jitter 1 s: netem's tables reach 4 x jitter past the delay,
# so one packet's one-way delay stays <= 9 s and a round trip <= 18 s, leaving the 30 s
# per-read timeout room for a jumbo frame at the rate floor; 30 RTTs fit linktest's 300 s.
# (Real links: geostationary satellite ~0.6 s RTT; bufferbloat a few seconds.)
DELAY_MAX_S = 5.0
RTT_MAX_S = 2 * DELAY_MAX_S
JITTER_MAX_S = 1.0
# Loss 50 %: a TCP connect needs its SYN and SYN-ACK through; at 50 % each way that is 1 in
# 4 attempts, and the 5 SYNs Linux sends within the engine's 30 s connect timeout fail
# together about 1 time in 4: beyond that most cells measure timeouts, not TLS.
LOSS_MAX_PCT = 50.0
# Correlation 99 %: at 100 % netem's correlated random source never moves from its first
# draw, so loss is all-or-nothing for the whole run and the jitter one constant.
CORR_MAX_PCT = 99.0
# Queue limit 100000 packets: enough for 1 Gbit/s with a 1 s one-way delay in the delay
# line (about 83000 full-size frames); every queued packet is memory (kernel memory for
# netem), and 100000 jumbo frames are already 900 MB per direction.
LIMIT_MAX = 100_000
# initcwnd / initrwnd 1000 segments (about 1.4 MB): far above any deployed setting (Linux
# uses 10; RFC 6928 studied 10); the kernel clamps larger windows to its buffers anyway.
WINDOW_MAX = 1000
# MTU: IPv4's minimum datagram every host must accept, up to the usual jumbo frame.
MTU_MIN, MTU_MAX = 576, 9000
# Names end up in tables, figure titles and terminal output: printable, bounded.
NAME_MAX = 200
# A profile file is a few lines (read within files.READ_LIMITS["profile file"]); this bounds
# what expanding one can cost.
MAX_GRID_PROFILES = 1000

# Keys that describe one direction of the link, and their aliases.
_DIR_KEYS = {
    "delay": "delay",
    "jitter": "jitter",
    "dist": "dist",
    "distribution": "dist",
    "corr": "delay_corr",
    "delay_corr": "delay_corr",
    "loss": "loss",
    "loss_corr": "loss_corr",
    "rate": "rate",
    "limit": "limit",
}
_HOST_KEYS = {
    "rtt": "rtt",
    "initcwnd": "initcwnd",
    "initrwnd": "initrwnd",
    "cc": "cc",
    "congestion_control": "cc",
    "mtu": "mtu",
    "name": "name",
}
ACCEPTED_KEYS = sorted({*_DIR_KEYS, *_HOST_KEYS} - {"name"})


@dataclass(frozen=True)
class Direction:
    """One direction of the link, in netem's terms."""

    delay_s: float = 0.0
    jitter_s: float = 0.0
    dist: str = "uniform"
    delay_corr_pct: float = 0.0
    loss_pct: float = 0.0
    loss_corr_pct: float = 0.0
    rate_bps: float | None = None  # None = unlimited
    limit: int = DEFAULT_LIMIT

    def linkem_config(self, overhead_bytes: int) -> dict:
        """This direction for `pqlab-engine linkem --config` (exact integers in ns/bit/s)."""
        return {
            "latency_ns": round(self.delay_s * 1e9),
            "jitter_ns": round(self.jitter_s * 1e9),
            "dist": self.dist,
            "delay_corr_pct": self.delay_corr_pct,
            "loss_pct": self.loss_pct,
            "loss_corr_pct": self.loss_corr_pct,
            "rate_bps": round(self.rate_bps) if self.rate_bps else 0,
            "limit": self.limit,
            "overhead_bytes": overhead_bytes,
        }

    def netem_args(self) -> list[str]:
        """Arguments after `tc qdisc add dev IF root netem` (iproute2 syntax)."""
        args = ["limit", str(self.limit)]
        if self.delay_s or self.jitter_s:
            args += ["delay", _tc_time(self.delay_s)]
            if self.jitter_s:
                args.append(_tc_time(self.jitter_s))
                if self.delay_corr_pct:
                    args.append(f"{self.delay_corr_pct:g}%")
                # No table means uniform in the kernel; tc has no uniform.dist to load.
                if self.dist != "uniform":
                    args += ["distribution", self.dist]
        if self.loss_pct:
            args += ["loss", "random", f"{self.loss_pct:g}%"]
            if self.loss_corr_pct:
                args.append(f"{self.loss_corr_pct:g}%")
        if self.rate_bps:
            args += ["rate", f"{round(self.rate_bps)}bit"]
        return args

    def describe(self) -> dict:
        return {
            "delay_ms": self.delay_s * 1e3,
            "jitter_ms": self.jitter_s * 1e3,
            "dist": self.dist,
            "delay_corr_pct": self.delay_corr_pct,
            "loss_pct": self.loss_pct,
            "loss_corr_pct": self.loss_corr_pct,
            "rate_bps": self.rate_bps,
            "limit": self.limit,
        }


def _tc_time(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.3f}".rstrip("0").rstrip(".") + "us"


@dataclass(frozen=True)
class LinkProfile:
    """A whole link: both directions and the hosts' TCP settings."""

    name: str
    c2s: Direction = field(default_factory=Direction)
    s2c: Direction = field(default_factory=Direction)
    initcwnd: int | None = None
    initrwnd: int | None = None
    congestion_control: str = "cubic"
    mtu: int = 1500
    spec: str = ""

    @property
    def rtt_s(self) -> float:
        """Configured round-trip time (the two one-way delays, jitter's mean aside)."""
        return self.c2s.delay_s + self.s2c.delay_s

    @property
    def symmetric(self) -> bool:
        return self.c2s == self.s2c

    def tcp_settings(self):
        """The hosts' TCP settings for `TwoHosts(tcp=...)` (pqlab.net.topology.TcpSettings)."""

        return TcpSettings(
            congestion_control=self.congestion_control,
            initcwnd=self.initcwnd,
            initrwnd=self.initrwnd,
        )

    def linkem_config(self, seed: int = 1, overhead_bytes: int = 14) -> dict:
        """Config for the userspace emulator; side A is the client, B the server."""
        return {
            "a_to_b": self.c2s.linkem_config(overhead_bytes),
            "b_to_a": self.s2c.linkem_config(overhead_bytes),
            "seed": seed,
        }

    def describe(self) -> dict:
        """Everything that defines the link, for results and metadata."""
        return {
            "name": self.name,
            "spec": self.spec,
            "rtt_ms": self.rtt_s * 1e3,
            "c2s": self.c2s.describe(),
            "s2c": self.s2c.describe(),
            "initcwnd": self.initcwnd,
            "initrwnd": self.initrwnd,
            "congestion_control": self.congestion_control,
            "mtu": self.mtu,
        }

    def warnings(self) -> list[str]:
        """Things about this profile a user should know before trusting its numbers."""
        out = []
        for name, d in (("c2s", self.c2s), ("s2c", self.s2c)):
            if not d.rate_bps:
                continue
            held = d.rate_bps * (d.delay_s + 4 * d.jitter_s) / ((self.mtu + 14) * 8)
            if held > d.limit:
                fix = (
                    f"raise limit= above {int(held * 1.5)}"
                    if held * 1.5 < LIMIT_MAX
                    else f"limit= is at most {LIMIT_MAX}: lower the rate or the delay"
                )
                out.append(
                    f"{self.name} {name}: at {_fmt_rate(d.rate_bps)} about {held:.0f} "
                    f"full-size packets are in the delay line, above limit={d.limit}; netem "
                    f"counts them against the limit, so the link cannot carry its rate ({fix})"
                )
        if self.rtt_s >= 1.0:
            out.append(
                f"{self.name}: RTT {self.rtt_s:g} s is above TCP's initial retransmission "
                "timeout (1 s): the kernel retransmits the SYN before the SYN-ACK can "
                "arrive, so retransmission counts include it even without loss"
            )
        return out

    def summary(self) -> str:
        """A short human description, e.g. 'RTT 50 ms, 1 Mbit/s, loss 1%'."""
        parts = [f"RTT {self.rtt_s * 1e3:g} ms"]
        d = self.s2c
        if d.rate_bps:
            parts.append(_fmt_rate(d.rate_bps))
        if d.jitter_s:
            parts.append(f"jitter {d.jitter_s * 1e3:g} ms {d.dist}")
        if d.loss_pct:
            parts.append(f"loss {d.loss_pct:g}%")
        if not self.symmetric:
            parts.append("asymmetric")
        if self.initcwnd:
            parts.append(f"initcwnd {self.initcwnd}")
        parts.append(self.congestion_control)
        return ", ".join(parts)


def _fmt_rate(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


# The document's conditions (003): initcwnd 20 throughout; RTT split evenly between the two
# directions; loss and jitter applied to each direction, as netem on both veth ends does.
# netem's limit counts every packet it holds, including those still being delayed, so a
# 1 Gbit/s link with 17.5 ms one way needs ~1450 packets just in flight: the gigabit presets
# raise the limit from netem's default 1000 to 10000 so the link can carry its rate.
PRESETS: dict[str, tuple[str, str]] = {
    "lan": ("rtt=0.5ms,rate=1gbit", "a local network: 0.5 ms RTT, 1 Gbit/s"),
    "1gbps-35ms": (
        "rtt=35ms,rate=1gbit,limit=10000,initcwnd=20",
        "document figure 2: 1 Gbit/s, 35 ms",
    ),
    "1mbps-35ms": ("rtt=35ms,rate=1mbit,initcwnd=20", "document figure 1: 1 Mbit/s, 35 ms"),
    "1mbps-200ms": ("rtt=200ms,rate=1mbit,initcwnd=20", "document figure 3: 1 Mbit/s, 200 ms"),
    "lossy-10pct": (
        "rtt=200ms,rate=1mbit,loss=10%,initcwnd=20",
        "document figure 4: 1 Mbit/s, 200 ms, 10% loss each way",
    ),
    "lossy-5pct-1gbps": (
        "rtt=35ms,rate=1gbit,loss=5%,limit=10000,initcwnd=20",
        "document figure 6: 1 Gbit/s, 35 ms, 5% loss each way",
    ),
    "pareto-35ms": (
        "rtt=35ms,rate=1gbit,jitter=8.75ms,dist=paretonormal,limit=10000,initcwnd=20",
        "document figure 5: 35 ms RTT with paretonormal jitter 35/4 ms each way, 1 Gbit/s",
    ),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def _unknown_key(key: str, where: str) -> UserError:
    close = difflib.get_close_matches(key, ACCEPTED_KEYS, n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return UserError(
        f"unknown profile key {show(key)} in {where}{hint}; accepted: "
        f"{', '.join(ACCEPTED_KEYS)} (prefix c2s. or s2c. for one direction)"
    )


def _preset(text: str, where: str) -> str:
    """The canonical preset name for `text`, or a UserError listing the presets."""
    name = str(text).strip().lower()
    if name in PRESETS:
        return name
    close = difflib.get_close_matches(name, list(PRESETS), n=3, cutoff=0.4)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UserError(
        f"unknown link profile preset {show(text)} in {where}{hint}; presets: "
        f"{', '.join(PRESETS)}; or give key=value pairs like rtt=50ms,rate=1mbit"
    )


def _classify(key: str, where: str) -> tuple[str, str]:
    """(slot, canonical key): slot is 'host' (whole link), 'both', 'c2s' or 's2c'."""
    if "." in key:
        prefix, base = key.split(".", 1)
        if prefix not in ("c2s", "s2c"):
            raise UserError(
                f"profile key {show(key)} in {where}: the direction prefix must be c2s. "
                "(client to server) or s2c. (server to client)"
            )
        if base in _DIR_KEYS:
            return prefix, _DIR_KEYS[base]
        if base in _HOST_KEYS:
            raise UserError(
                f"profile key {show(key)} in {where}: {base} applies to the whole link "
                "and takes no c2s./s2c. prefix"
            )
        raise _unknown_key(key, where)
    if key in _HOST_KEYS:
        return "host", _HOST_KEYS[key]
    if key in _DIR_KEYS:
        return "both", _DIR_KEYS[key]
    raise _unknown_key(key, where)


def _check_name(text: str) -> str:
    name = text.strip()
    if not name or len(name) > NAME_MAX or not name.isprintable():
        raise UserError(
            f"name {show(text)} must be 1 to {NAME_MAX} printable characters "
            "(no control characters)"
        )
    return name


def _parse_rtt(text: str, key: str) -> float:
    rtt = parse_duration(text, key, maximum=RTT_MAX_S, whole_ns=True)
    if round(rtt * 1e9) % 2:
        raise UserError(
            f"{key} {show(text)} is split evenly into two one-way delays, which must be "
            "whole nanoseconds; give an even number of nanoseconds"
        )
    return rtt


def _parse_choice(text: str, key: str, accepted: tuple[str, ...], what: str = "") -> str:
    value = text.strip().lower()
    if value not in accepted:
        raise UserError(f"{what}{key} {show(text)} is not one of {', '.join(accepted)}")
    return value


def _parse_link_rate(text: str, key: str) -> float | None:
    if text.strip().lower() in ("none", "unlimited"):
        return None
    return parse_rate(text, key, RATE_MIN_BPS, RATE_MAX_BPS, whole_bytes=True)


# Every profile key's parser with its bounds: canonical key -> f(text, key as written).
_VALUE_PARSERS = {
    "rtt": _parse_rtt,
    "delay": lambda t, k: parse_duration(t, k, maximum=DELAY_MAX_S, whole_ns=True),
    "jitter": lambda t, k: parse_duration(t, k, maximum=JITTER_MAX_S, whole_ns=True),
    "dist": lambda t, k: _parse_choice(t, k, DISTRIBUTIONS),
    "loss": lambda t, k: parse_percent(t, k, maximum=LOSS_MAX_PCT),
    "delay_corr": lambda t, k: parse_percent(t, k, maximum=CORR_MAX_PCT),
    "loss_corr": lambda t, k: parse_percent(t, k, maximum=CORR_MAX_PCT),
    "rate": _parse_link_rate,
    "limit": lambda t, k: parse_positive_int(t, f"{k} (packets)", 1, LIMIT_MAX),
    "initcwnd": lambda t, k: parse_positive_int(t, f"{k} (segments)", 1, WINDOW_MAX),
    "initrwnd": lambda t, k: parse_positive_int(t, f"{k} (segments)", 1, WINDOW_MAX),
    "cc": lambda t, k: _parse_choice(t, k, CONGESTION_CONTROLS, "congestion control "),
    "mtu": lambda t, k: parse_positive_int(t, f"{k} (bytes)", MTU_MIN, MTU_MAX),
    "name": lambda t, k: _check_name(t),
}


def _parse_value(canon: str, text: str, key: str):
    """One value, checked against its bounds; errors name `key` as the user wrote it."""
    return _VALUE_PARSERS[canon](text, key)


def _layer(items: list[tuple[str, str]], where: str) -> dict:
    """One place's key=value pairs (a preset, a string's pairs, one TOML table), checked:
    {'host': {...}, 'both': {...}, 'c2s': {...}, 's2c': {...}} by canonical key."""
    layer: dict = {"host": {}, "both": {}, "c2s": {}, "s2c": {}}
    given: dict[tuple[str, str], str] = {}
    for raw_key, value in items:
        key = str(raw_key).strip().lower()
        slot, canon = _classify(key, where)
        if (slot, canon) in given:
            raise UserError(
                f"profile key {show(key)} in {where} repeats {show(given[slot, canon])}; "
                "give each key once"
            )
        given[slot, canon] = key
        try:
            layer[slot][canon] = _parse_value(canon, str(value), key)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    if "rtt" in layer["host"] and any("delay" in layer[s] for s in ("both", "c2s", "s2c")):
        raise UserError(
            f"{where} gives both rtt and delay; give the round trip "
            "(rtt=, split evenly) or the one-way delay (delay=), not both"
        )
    return layer


def _build(name: str, spec: str, layers: list[dict], where: str) -> LinkProfile:
    """Later layers override earlier ones; within a layer c2s./s2c. win over unprefixed."""
    host: dict = {}
    dirs: dict = {"c2s": {}, "s2c": {}}
    for layer in layers:
        host.update({k: v for k, v in layer["host"].items() if k != "rtt"})
        for d in dirs:
            if "rtt" in layer["host"]:
                dirs[d]["delay"] = layer["host"]["rtt"] / 2
            dirs[d].update(layer["both"])
            dirs[d].update(layer[d])
    built = {}
    for d, f in dirs.items():
        dist = f.get("dist", "uniform")
        jitter = f.get("jitter", 0.0)
        if dist != "uniform" and not jitter:
            raise UserError(f"{where}: dist={dist} needs a jitter (e.g. jitter=8.75ms)")
        built[d] = Direction(
            delay_s=f.get("delay", 0.0),
            jitter_s=jitter,
            dist=dist,
            delay_corr_pct=f.get("delay_corr", 0.0),
            loss_pct=f.get("loss", 0.0),
            loss_corr_pct=f.get("loss_corr", 0.0),
            rate_bps=f.get("rate"),
            limit=f.get("limit", DEFAULT_LIMIT),
        )
    return LinkProfile(
        name=host.get("name", name),
        c2s=built["c2s"],
        s2c=built["s2c"],
        initcwnd=host.get("initcwnd"),
        initrwnd=host.get("initrwnd"),
        congestion_control=host.get("cc", "cubic"),
        mtu=host.get("mtu", 1500),
        spec=spec,
    )


def _pairs(text: str, where: str) -> list[tuple[str, str]]:
    """'a=1,b=2' -> [('a', '1'), ('b', '2')]; empty items and items without '=' refused."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UserError(
                f"{where} has an empty item (two commas in a row, or a comma at "
                "an end); give key=value pairs like rtt=50ms,rate=1mbit"
            )
        if "=" not in part:
            raise UserError(
                f"{show(part)} in {where} is not key=value (e.g. rtt=50ms); "
                f"keys: {', '.join(ACCEPTED_KEYS)}"
            )
        key, value = part.split("=", 1)
        out.append((key, value))
    return out


def _preset_layer(preset: str) -> dict:
    return _layer(_pairs(PRESETS[preset][0], repr(preset)), f"preset {preset!r}")


def parse_profile(text: str) -> LinkProfile:
    """A preset name, `key=value,...`, or a preset followed by overrides."""
    spec = str(text).strip()
    if not spec:
        raise UserError(
            "empty link profile; give a preset ("
            + ", ".join(PRESETS)
            + ") or key=value pairs like rtt=50ms,rate=1mbit"
        )
    where = f"profile {show(spec)}"
    first, comma, rest = spec.partition(",")
    if "=" in first:
        return _build(spec, spec, [_layer(_pairs(spec, where), where)], where)
    if not first.strip():
        _pairs(spec, where)  # raises: an empty item
    preset = _preset(first, where)
    layers = [_preset_layer(preset)]
    if comma:  # overrides after the preset (a trailing comma is an empty item, refused)
        layers.append(_layer(_pairs(rest, where), where))
    return _build(spec if comma else preset, spec, layers, where)


# --- TOML files -------------------------------------------------------------------------------


def _toml_text(key: str, value, where: str) -> str:
    """A TOML scalar as the text the string form would have."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = {bool: "a boolean", list: "a list", dict: "a table"}.get(type(value), "a date")
        raise UserError(
            f'{where}: {key} is {kind}; give a string like "50ms" or a number'
            + (" (lists belong in a [grid])" if isinstance(value, list) else "")
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)  # 'inf' / 'nan': refused by the key's parser, by name
        # 1e-05 as '0.00001': the shortest decimal that reads back as this float.
        return format(Decimal(repr(value)), "f")
    return str(value)


def _table_items(table: dict, where: str) -> list[tuple[str, str]]:
    """A profile table's key=value pairs; [c2s] / [s2c] sub-tables become prefixed keys."""
    items = []
    for key, value in table.items():
        k = str(key).strip().lower()
        if isinstance(value, dict):
            if k not in ("c2s", "s2c"):
                raise UserError(
                    f"{where}: [{key}] is a table; a profile takes only [c2s] and [s2c] "
                    "tables (one direction's keys)"
                )
            for k2, v2 in value.items():
                items.append((f"{k}.{k2}", _toml_text(f"{k}.{k2}", v2, where)))
            continue
        items.append((k, _toml_text(k, value, where)))
    return items


def _profile_from_table(table: dict, default_name: str, where: str) -> LinkProfile:
    table = dict(table)
    preset_keys = [k for k in table if str(k).strip().lower() == "preset"]
    preset = table.pop(preset_keys[0]) if len(preset_keys) == 1 else None
    if len(preset_keys) > 1:
        raise UserError(f"{where}: preset is given {len(preset_keys)} times; give it once")
    layers = []
    spec_parts = []
    if preset is not None:
        if not isinstance(preset, str):
            raise UserError(f"{where}: preset must be a preset name, one of {', '.join(PRESETS)}")
        preset = _preset(preset, where)
        layers.append(_preset_layer(preset))
        spec_parts.append(preset)
    items = _table_items(table, where)
    layers.append(_layer(items, where))
    spec_parts += [f"{k}={v}" for k, v in items if k != "name"]
    name = default_name
    if preset and len(spec_parts) == 1:
        name = preset
    return _build(name, ",".join(spec_parts), layers, where)


def _grid_columns(grid: dict, where: str) -> tuple[list[str], list[list]]:
    """[grid] keys and their value lists; `c2s.loss = [...]` (a [grid.c2s] table) too."""
    keys, values = [], []
    for key, value in grid.items():
        if isinstance(value, dict) and str(key).strip().lower() in ("c2s", "s2c"):
            for k2, v2 in value.items():
                keys.append(f"{key}.{k2}")
                values.append(v2 if isinstance(v2, list) else [v2])
        elif isinstance(value, dict):
            raise UserError(
                f"{where}: [grid.{key}] is a table; a [grid] takes lists of values "
                "(and [grid.c2s] / [grid.s2c] for one direction)"
            )
        else:
            keys.append(str(key))
            values.append(value if isinstance(value, list) else [value])
    for key, vals in zip(keys, values, strict=True):
        if not vals:
            raise UserError(f"{where}: [grid] {key} is an empty list; give at least one value")
        for v in vals:
            if isinstance(v, list | dict):
                kind = "a list" if isinstance(v, list) else "a table"
                raise UserError(
                    f"{where}: [grid] {key} has {kind} among its values; give strings or numbers"
                )
    return keys, values


def load_toml(path: str | Path) -> list[LinkProfile]:
    """Profiles from a TOML file: a single profile at top level, `[[profile]]` entries,
    and/or a `[grid]` whose list values are combined (cartesian product)."""
    path = Path(path)
    where = f"profile file {show(str(path), limit=300)}"
    data = files.read_toml(path, where, "profile file")
    out: list[LinkProfile] = []
    entries = data.pop("profile", None)
    grid = data.pop("grid", None)
    if entries is not None:
        if not isinstance(entries, list):
            raise UserError(f"{where}: 'profile' must be an array of tables ([[profile]])")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise UserError(
                    f"{where}: profile entry {i + 1} is not a table; write each as [[profile]]"
                )
            out.append(
                _profile_from_table(entry, f"{path.stem}-{i + 1}", f"{where} [[profile]] {i + 1}")
            )
    if grid is not None:
        if not isinstance(grid, dict):
            raise UserError(f"{where}: 'grid' must be a table ([grid])")
        keys, values = _grid_columns(grid, where)
        if not keys:  # the product of no lists is one empty profile, named ''
            raise UserError(f'{where}: [grid] has no keys; give lists like rtt = ["35ms", "200ms"]')
        count = math.prod(len(v) for v in values)
        if count > MAX_GRID_PROFILES:
            raise UserError(
                f"{where}: [grid] makes {count} profiles; at most {MAX_GRID_PROFILES} "
                "(each is a cell measured for seconds to minutes)"
            )
        for combo in itertools.product(*values):
            table = dict(zip(keys, combo, strict=True))
            spec = ",".join(f"{k}={_toml_text(k, v, where)}" for k, v in table.items())
            out.append(_profile_from_table(table, spec, f"{where} [grid] {show(spec)}"))
    if data:
        out.append(_profile_from_table(data, path.stem, where))
    if not out:
        raise UserError(f"{where} defines no profile (use top-level keys, [[profile]] or [grid])")
    return out


def _is_file(spec: str) -> bool:
    """Whether a --profile value names a file: a string with '=' only if such a file
    exists, a preset name never (give a file of that name as ./NAME), else an existing
    file or anything ending in .toml (so a missing file says so)."""
    s = spec.strip()
    try:
        exists = Path(s).is_file()
    except (OSError, ValueError):
        exists = False
    if "=" in s:
        return exists
    if s.split(",")[0].strip().lower() in PRESETS:
        return False
    return exists or s.endswith(".toml")


def load_profiles(specs: list[str] | None) -> list[LinkProfile]:
    """Each spec is a preset, a key=value string or a .toml file; names must be unique."""
    out: list[LinkProfile] = []
    for spec in specs or []:
        spec = str(spec)
        if _is_file(spec):
            out.extend(load_toml(spec.strip()))
        else:
            out.append(parse_profile(spec))
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"link profile names must be unique; repeated: {', '.join(dupes)}")
    return out
