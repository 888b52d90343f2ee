"""The linktest experiment's options and their validation, and the link physics (packet
times, rates, probe spacing) its checks and the estimate share.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pqlab import units
from pqlab.errors import UserError
from pqlab.experiment import Cells, Option
from pqlab.net import profiles
from pqlab.net.profiles import Direction, LinkProfile, load_profiles
from pqlab.net.shaping import check_shaper
from pqlab.options.shaper import shaper_option

NAME = "linktest"


CELLS = Cells(NAME, ("profile", "shaper"))


ETH = 14


def packet_time_ns(d: Direction, wire_bytes: int) -> int:
    return int(wire_bytes * 8 * 1_000_000_000 // int(d.rate_bps)) if d.rate_bps else 0


def connect_gap_ms(profile: LinkProfile) -> float:
    """The pause between two connects of the round-trip check: so that no packet of the
    previous one is still queued (with jitter and a rate, netem would hold the SYN behind
    it)."""
    spread = max(d.delay_s + 4.5 * d.jitter_s for d in (profile.c2s, profile.s2c))
    return max(5.0, 2e3 * spread + 5) if (profile.c2s.jitter_s or profile.s2c.jitter_s) else 5.0


def rate_bytes(profile: LinkProfile, seconds: float) -> int | None:
    """The bytes the rate check sends, or None when the link has no rate to check or the
    check does not apply."""
    d = profile.s2c
    if not d.rate_bps or any(x.loss_pct or x.jitter_s for x in (profile.c2s, profile.s2c)):
        # With loss, TCP's recovery leaves the link idle; with jitter and a rate, netem holds
        # packets behind the longest delay drawn (max(now + delay, last)), stretching the
        # RTT: serialisation alone predicts neither.
        return None
    # Long enough that slow start (about log2(BDP / initcwnd) round trips) is a small part.
    seconds = max(seconds, 30 * profile.rtt_s)
    return int(min(max(d.rate_bps / 8 * seconds, 200_000), 200_000_000))


UDP_PROBE_BYTES = 100


def udp_interval_us(d: Direction) -> int:
    """The pause between two UDP probes: three probes' time on the wire, at least 0.5 ms."""
    return max(500, 3 * packet_time_ns(d, UDP_PROBE_BYTES + 28 + ETH) // 1000)


def udp_idle_s(d: Direction) -> float:
    """How long the sink waits for more probes after the last one it received."""
    return max(1.0, 2 * (d.delay_s + 4.5 * d.jitter_s) + 0.5)


# 120 s plus 30 round trips stays within the probes' 300 s timeout.
MAX_RATE_SECONDS = 120.0


@dataclass
class Plan:
    profiles: list[LinkProfile]
    shaper: str
    probes: int
    connects: int
    rate_seconds: float


def _profile_help() -> str:

    return (
        "link profile: a preset ("
        + ", ".join(profiles.preset_names())
        + "), key=value pairs or a .toml file; repeatable"
    )


def from_values(values) -> Plan:

    if not values.profile:
        raise UserError("--profile is required (a preset, key=value pairs or a .toml file)")
    profiles = load_profiles(values.profile)
    probes = units.parse_positive_int(values.probes, "--probes", minimum=20)
    connects = units.parse_positive_int(values.connects, "--connects", minimum=3)
    if probes > 1_000_000 or connects > 100_000:
        raise UserError("--probes is at most 1000000 and --connects at most 100000")
    rate_seconds = units.parse_seconds(values.rate_seconds, "--rate-seconds", MAX_RATE_SECONDS)
    check_shaper(values.shaper or "auto")
    for p in profiles:
        for text in p.warnings():
            print(f"warning: {text}", file=sys.stderr)
    return Plan(profiles, values.shaper or "auto", probes, connects, rate_seconds)


OPTIONS = (
    Option("profile", _profile_help(), metavar="PROFILE", repeat=True),
    shaper_option("link emulator"),
    Option(
        "probes",
        "UDP probes per direction for loss and delay (20-1000000)",
        default="1000",
        metavar="N",
    ),
    Option("connects", "TCP connects for the RTT check (3-100000)", default="20", metavar="N"),
    Option(
        "rate-seconds",
        f"length of the bulk transfer for the rate check (above 0, at most {MAX_RATE_SECONDS:g})",
        default="2.0",
        metavar="S",
    ),
)
