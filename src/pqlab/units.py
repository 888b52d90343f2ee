"""Parsing of sizes, durations, rates and lists given on the command line.

Every parser raises UserError naming the bad value and what is accepted.
"""

import re

from pqlab.errors import UserError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}
_RATE_UNITS = {
    "bit": 1,
    "bps": 1,
    "kbit": 1e3,
    "kbps": 1e3,
    "mbit": 1e6,
    "mbps": 1e6,
    "gbit": 1e9,
    "gbps": 1e9,
}


def parse_size(text: str, what: str = "size") -> int:
    """'200KiB' -> 204800, '1k' -> 1000, '16384' -> 16384 (bytes, non-negative)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _SIZE_UNITS:
        raise UserError(
            f"{what} {text!r} is not a size; use a number of bytes with an optional unit "
            "(B, KB, KiB, MB, MiB, GB, GiB), e.g. 16384 or 200KiB"
        )
    value = float(m.group(1)) * _SIZE_UNITS[unit]
    if value != int(value):
        raise UserError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def parse_duration(text: str, what: str = "duration") -> float:
    """'35ms' -> 0.035 seconds; '0' -> 0.0. Negative durations are refused."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Zµ]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _TIME_UNITS:
        raise UserError(
            f"{what} {text!r} is not a duration; use a number with a unit "
            "(ns, us, ms, s), e.g. 35ms"
        )
    value = float(m.group(1)) * _TIME_UNITS[unit]
    if value < 0:
        raise UserError(f"{what} {text!r} is negative; durations must be 0 or more")
    return value


def parse_rate(text: str, what: str = "rate") -> float:
    """'1mbit' -> 1e6 bits per second. Zero or negative rates are refused."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _RATE_UNITS:
        raise UserError(
            f"{what} {text!r} is not a rate; use a number with a unit "
            "(bit, kbit, mbit, gbit), e.g. 1mbit or 1gbit"
        )
    value = float(m.group(1)) * _RATE_UNITS[unit]
    if value <= 0:
        raise UserError(f"{what} {text!r} must be greater than zero")
    return value


def parse_percent(text: str, what: str = "percentage") -> float:
    """'3%' or '3' -> 3.0; must lie in [0, 100]."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*%?\s*", str(text))
    if not m:
        raise UserError(f"{what} {text!r} is not a percentage; use e.g. 1% or 0.5")
    value = float(m.group(1))
    if not 0 <= value <= 100:
        raise UserError(f"{what} {text!r} is outside 0-100%")
    return value


def parse_positive_int(text: str, what: str, minimum: int = 1) -> int:
    try:
        value = int(str(text))
    except ValueError:
        raise UserError(f"{what} {text!r} is not a whole number") from None
    if value < minimum:
        raise UserError(f"{what} {text!r} must be at least {minimum}")
    return value


def split_list(text: str | None) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    if not text:
        return []
    return [part.strip() for part in str(text).split(",") if part.strip()]


def format_bytes(n: float) -> str:
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"
