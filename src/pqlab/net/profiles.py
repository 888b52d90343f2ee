"""Link profiles: one description of an emulated link, from the command line or a TOML file.

A profile gives, per direction (client-to-server `c2s`, server-to-client `s2c`), a one-way
delay, jitter with a netem distribution (uniform, normal, pareto, paretonormal) and
correlation, random loss with correlation, a rate and a queue limit in packets; plus the
hosts' TCP settings (initcwnd, initrwnd, congestion control) and the MTU. Both shaping
backends (kernel netem, pqlab's userspace emulator) apply it with netem's semantics.

Text form: comma-separated `key=value` pairs, optionally starting with a preset name:
    rtt=50ms,rate=1mbit,loss=1%,jitter=8.75ms,dist=paretonormal,limit=1000,initcwnd=10
    1mbps-200ms,initcwnd=10,s2c.loss=3%
Unprefixed link keys apply to both directions; `c2s.` / `s2c.` set one direction.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pqlab.errors import UserError
from pqlab.units import parse_duration, parse_percent, parse_positive_int, parse_rate, split_list

DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
DEFAULT_LIMIT = 1000  # netem's default queue limit, packets

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
        from pqlab.net.topology import TcpSettings

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
                out.append(
                    f"{self.name} {name}: at {_fmt_rate(d.rate_bps)} about {held:.0f} "
                    f"full-size packets are in the delay line, above limit={d.limit}; netem "
                    "counts them against the limit, so the link cannot carry its rate "
                    f"(raise limit= above {int(held * 1.5)})"
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
        f"unknown profile key {key!r} in {where}{hint}; accepted: "
        f"{', '.join(ACCEPTED_KEYS)} (prefix c2s. or s2c. for one direction)"
    )


def _apply(fields: dict, key: str, value, where: str) -> None:
    """Validate one key=value into `fields` (host keys and per-direction dicts)."""
    text = str(value).strip()
    prefix = None
    if "." in key:
        prefix, key = key.split(".", 1)
        if prefix not in ("c2s", "s2c"):
            raise UserError(
                f"profile key {prefix + '.' + key!r} in {where}: the direction "
                "prefix must be c2s. (client to server) or s2c. (server to client)"
            )
    if key in _HOST_KEYS and prefix is None:
        canon = _HOST_KEYS[key]
        if canon == "rtt":
            fields["rtt"] = parse_duration(text, f"rtt in {where}")
        elif canon in ("initcwnd", "initrwnd"):
            fields[canon] = parse_positive_int(text, f"{canon} in {where}")
        elif canon == "cc":
            if text not in CONGESTION_CONTROLS:
                raise UserError(
                    f"congestion control {text!r} in {where} is not one of "
                    f"{', '.join(CONGESTION_CONTROLS)}"
                )
            fields["cc"] = text
        elif canon == "mtu":
            mtu = parse_positive_int(text, f"mtu in {where}", minimum=576)
            if mtu > 9000:
                raise UserError(f"mtu {text!r} in {where} is above 9000")
            fields["mtu"] = mtu
        elif canon == "name":
            fields["name"] = text
        return
    if key not in _DIR_KEYS:
        raise _unknown_key(key, where)
    canon = _DIR_KEYS[key]
    label = f"{(prefix + '.') if prefix else ''}{key} in {where}"
    if canon in ("delay", "jitter"):
        parsed = parse_duration(text, label)
    elif canon == "dist":
        if text not in DISTRIBUTIONS:
            raise UserError(
                f"distribution {text!r} ({label}) is not one of {', '.join(DISTRIBUTIONS)}"
            )
        parsed = text
    elif canon in ("loss", "delay_corr", "loss_corr"):
        parsed = parse_percent(text, label)
    elif canon == "rate":
        parsed = None if text in ("none", "unlimited") else parse_rate(text, label)
    else:  # limit
        parsed = parse_positive_int(text, label)
    for d in (prefix,) if prefix else ("c2s", "s2c"):
        fields.setdefault(d, {})[canon] = parsed


def _build(name: str, spec: str, fields: dict) -> LinkProfile:
    where = repr(spec) if spec else name
    dirs = {}
    for d in ("c2s", "s2c"):
        f = fields.get(d, {})
        if "rtt" in fields and "delay" in f:
            raise UserError(
                f"profile {where} gives both rtt and delay; give the round trip "
                "(rtt=, split evenly) or the one-way delay (delay=), not both"
            )
        delay = fields["rtt"] / 2 if "rtt" in fields else f.get("delay", 0.0)
        dist = f.get("dist", "uniform")
        jitter = f.get("jitter", 0.0)
        if dist != "uniform" and not jitter:
            raise UserError(f"profile {where}: dist={dist} needs a jitter (e.g. jitter=8.75ms)")
        if jitter > 2.1:
            raise UserError(f"profile {where}: jitter {jitter:g}s is above netem's 2.1 s")
        dirs[d] = Direction(
            delay_s=delay,
            jitter_s=jitter,
            dist=dist,
            delay_corr_pct=f.get("delay_corr", 0.0),
            loss_pct=f.get("loss", 0.0),
            loss_corr_pct=f.get("loss_corr", 0.0),
            rate_bps=f.get("rate"),
            limit=f.get("limit", DEFAULT_LIMIT),
        )
    return LinkProfile(
        name=fields.get("name", name),
        c2s=dirs["c2s"],
        s2c=dirs["s2c"],
        initcwnd=fields.get("initcwnd"),
        initrwnd=fields.get("initrwnd"),
        congestion_control=fields.get("cc", "cubic"),
        mtu=fields.get("mtu", 1500),
        spec=spec,
    )


def _fields_from_text(text: str, fields: dict, where: str) -> None:
    for part in split_list(text):
        if "=" not in part:
            raise UserError(
                f"{part!r} in profile {where} is not key=value (e.g. rtt=50ms); "
                f"keys: {', '.join(ACCEPTED_KEYS)}"
            )
        key, value = part.split("=", 1)
        _apply(fields, key.strip().lower(), value, where)


def parse_profile(text: str) -> LinkProfile:
    """A preset name, `key=value,...`, or a preset followed by overrides."""
    spec = str(text).strip()
    if not spec:
        raise UserError(
            "empty link profile; give a preset ("
            + ", ".join(PRESETS)
            + ") or key=value pairs like rtt=50ms,rate=1mbit"
        )
    parts = split_list(spec)
    fields: dict = {}
    name = spec
    if "=" not in parts[0]:
        preset = parts[0].lower()
        if preset not in PRESETS:
            close = difflib.get_close_matches(preset, list(PRESETS), n=3, cutoff=0.4)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UserError(
                f"unknown link profile preset {parts[0]!r}{hint}; presets: "
                f"{', '.join(PRESETS)}; or give key=value pairs like "
                "rtt=50ms,rate=1mbit"
            )
        _fields_from_text(PRESETS[preset][0], fields, repr(preset))
        parts = parts[1:]
        name = spec if parts else preset
    _fields_from_text(",".join(parts), fields, repr(spec))
    return _build(name, spec, fields)


def _toml_value(v) -> str:
    if isinstance(v, bool) or isinstance(v, (list, dict)):
        raise UserError(f"profile value {v!r} must be a string or a number")
    return str(v)


def _profile_from_table(table: dict, default_name: str, where: str) -> LinkProfile:
    fields: dict = {}
    spec_parts = []
    preset = table.get("preset")
    if preset is not None:
        parse_profile(str(preset))  # validates the name, with a clear error
        spec_parts.append(str(preset))
        _fields_from_text(PRESETS[str(preset).lower()][0], fields, where)
    for key, value in table.items():
        if key == "preset":
            continue
        if key in ("c2s", "s2c") and isinstance(value, dict):
            for k, v in value.items():
                _apply(fields, f"{key}.{k}", _toml_value(v), where)
                spec_parts.append(f"{key}.{k}={v}")
            continue
        _apply(fields, str(key).lower(), _toml_value(value), where)
        if key != "name":
            spec_parts.append(f"{key}={value}")
    name = fields.get("name") or (str(preset) if preset and len(spec_parts) == 1 else default_name)
    return _build(name, ",".join(spec_parts), fields)


def load_toml(path: str | Path) -> list[LinkProfile]:
    """Profiles from a TOML file: a single profile at top level, `[[profile]]` entries,
    and/or a `[grid]` whose list values are combined (cartesian product)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read profile file {str(path)!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"profile file {str(path)!r} is not valid TOML: {e}") from None
    where = repr(str(path))
    out: list[LinkProfile] = []
    entries = data.pop("profile", None)
    grid = data.pop("grid", None)
    if entries is not None:
        if not isinstance(entries, list):
            raise UserError(f"{where}: 'profile' must be an array of tables ([[profile]])")
        for i, entry in enumerate(entries):
            out.append(_profile_from_table(entry, f"{path.stem}-{i + 1}", where))
    if grid is not None:
        if not isinstance(grid, dict):
            raise UserError(f"{where}: 'grid' must be a table ([grid])")
        keys = list(grid)
        values = [v if isinstance(v, list) else [v] for v in grid.values()]
        if any(not v for v in values):
            raise UserError(f"{where}: every [grid] list needs at least one value")
        for combo in itertools.product(*values):
            table = dict(zip(keys, combo, strict=True))
            spec = ",".join(f"{k}={v}" for k, v in table.items())
            out.append(_profile_from_table(table, spec, where))
    if data:
        out.append(_profile_from_table(data, path.stem, where))
    if not out:
        raise UserError(f"{where} defines no profile (use top-level keys, [[profile]] or [grid])")
    return out


def load_profiles(specs: list[str] | None) -> list[LinkProfile]:
    """Each spec is a preset, a key=value string or a .toml file; names must be unique."""
    out: list[LinkProfile] = []
    for spec in specs or []:
        p = Path(spec)
        if spec.endswith(".toml") or (p.is_file() and "=" not in spec):
            out.extend(load_toml(p))
        else:
            out.append(parse_profile(spec))
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"link profile names must be unique; repeated: {', '.join(dupes)}")
    return out


def with_overrides(profile: LinkProfile, **changes) -> LinkProfile:
    return dataclasses.replace(profile, **changes)
