"""Parsing of sizes, durations, rates, percentages, counts and lists given by users.

Every parser raises UserError with one line naming the value and what is accepted, and
never returns a value the user did not write: numbers are ASCII decimals read exactly
(`fractions.Fraction`, so '1.0000000000000000001KiB' is not silently 1024 bytes), NaN,
infinities and exponents are not numbers here, Unicode digits ('١٢ms', fullwidth '１')
and Python's '1_000' are refused, '-0' is zero, and every result has a ceiling that the
engine can hold (64-bit integers, nanoseconds in a signed 64-bit integer) unless the
caller sets a tighter one.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from pqlab.errors import UserError

# The engine takes counts and sizes as 64-bit integers and times as signed 64-bit
# nanoseconds: these are the default ceilings, so nothing the lab accepts fails there later.
INT64_MAX = 2**63 - 1
DURATION_MAX_S = Fraction(INT64_MAX, 10**9)  # about 292 years
RATE_MAX_BPS = INT64_MAX
# Longer values are not numbers anyone means; refusing them bounds the work (and Python's
# 4300-digit limit on int() would otherwise raise a ValueError of its own).
MAX_TEXT = 100

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
_TIME_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),  # U+00B5 MICRO SIGN
    "μs": Fraction(1, 10**6),  # U+03BC GREEK SMALL LETTER MU
    "ms": Fraction(1, 10**3),
    "s": Fraction(1),
    "": Fraction(1),
}
_RATE_UNITS = {
    "bit": 1,
    "bps": 1,
    "kbit": 10**3,
    "kbps": 10**3,
    "mbit": 10**6,
    "mbps": 10**6,
    "gbit": 10**9,
    "gbps": 10**9,
}

# ASCII only: \d and \s would also match Unicode digits and spaces (re's default for str).
_NUM = r"(-?)([0-9]+(?:\.[0-9]+)?)"
_WS = r"[ \t\n\r\f\v]*"
_QUANTITY = re.compile(_WS + _NUM + _WS + r"([a-zA-Zµμ]*)" + _WS)
_PERCENT = re.compile(_WS + _NUM + _WS + r"%?" + _WS)
_INT = re.compile(_WS + r"(-?[0-9]+)" + _WS)


def show(text, limit: int = 60) -> str:
    """`repr` of a user's value for a one-line message: control characters escaped, values
    longer than `limit` shortened in the middle (both ends stay recognisable)."""
    r = repr(text if isinstance(text, str) else str(text))
    if len(r) <= limit:
        return r
    tail = max(15, limit // 4)
    return r[: limit - tail - 3] + "..." + r[-tail:]


def _too_long(text: str, what: str, kind: str) -> None:
    if len(text) > MAX_TEXT:
        raise UserError(
            f"{what} {show(text)} is {len(text)} characters long; a {kind} has at most {MAX_TEXT}"
        )


def _exact(sign: str, digits: str) -> Fraction:
    value = Fraction(digits)  # exact: '0.1' is 1/10, not the nearest double
    return -value if sign and value else value  # '-0' is zero, not negative zero


def _fmt(value: Fraction | float | int) -> str:
    """A number for a message: integers whole, others with up to 6 significant digits."""
    if Fraction(value).denominator == 1:
        return str(int(value))
    return f"{float(value):.6g}"


def fmt_duration(seconds: Fraction | float) -> str:
    """'5s', '2.5ms', '800us', '3ns': the largest unit the value is at least one of."""
    s = Fraction(seconds)
    for unit, scale in (("s", 1), ("ms", Fraction(1, 10**3)), ("us", Fraction(1, 10**6))):
        if s >= scale:
            return f"{_fmt(s / scale)}{unit}"
    return f"{_fmt(s * 10**9)}ns"


def fmt_rate(bps: Fraction | float) -> str:
    """'100gbit', '8kbit', '1.5mbit', '12bit' (units parse_rate accepts)."""
    b = Fraction(bps)
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if b >= scale:
            return f"{_fmt(b / scale)}{unit}"
    return f"{_fmt(b)}bit"


def parse_size(text, what: str = "size", maximum: int | None = None) -> int:
    """'200KiB' -> 204800, '1k' -> 1000, '16384' -> 16384 (whole bytes, 0 or more).

    `maximum` (bytes) defaults to the largest 64-bit signed integer."""
    s = str(text)
    _too_long(s, what, "size")
    m = _QUANTITY.fullmatch(s)
    unit = m.group(3).lower() if m else None
    if not m or unit not in _SIZE_UNITS:
        raise UserError(
            f"{what} {show(text)} is not a size; use a number of bytes with an optional unit "
            "(B, KB, KiB, MB, MiB, GB, GiB), e.g. 16384 or 200KiB"
        )
    value = _exact(m.group(1), m.group(2)) * _SIZE_UNITS[unit]
    if value < 0:
        raise UserError(f"{what} {show(text)} is negative; a size is 0 bytes or more")
    if value.denominator != 1:
        raise UserError(f"{what} {show(text)} is not a whole number of bytes")
    top = INT64_MAX if maximum is None else maximum
    if value > top:
        raise UserError(f"{what} {show(text)} is out of range; accepted: 0 to {top} bytes")
    return int(value)


def parse_duration(
    text, what: str = "duration", maximum: float | None = None, whole_ns: bool = False
) -> float:
    """'35ms' -> 0.035 seconds; '0' and '-0' -> 0.0; a plain number is seconds.

    Negative durations are refused; so are durations above `maximum` seconds (default:
    what a signed 64-bit count of nanoseconds holds, about 292 years) and, with
    `whole_ns`, durations that are not a whole number of nanoseconds."""
    s = str(text)
    _too_long(s, what, "duration")
    m = _QUANTITY.fullmatch(s)
    unit = m.group(3).lower() if m else None
    if not m or unit not in _TIME_UNITS:
        raise UserError(
            f"{what} {show(text)} is not a duration; use a number with a unit "
            "(ns, us, ms, s), e.g. 35ms"
        )
    value = _exact(m.group(1), m.group(2)) * _TIME_UNITS[unit]
    if value < 0:
        raise UserError(f"{what} {show(text)} is negative; durations must be 0 or more")
    top = DURATION_MAX_S if maximum is None else Fraction(maximum)
    if value > top:
        raise UserError(f"{what} {show(text)} is out of range; accepted: 0 to {fmt_duration(top)}")
    if whole_ns and (value * 10**9).denominator != 1:
        raise UserError(
            f"{what} {show(text)} is not a whole number of nanoseconds, the resolution "
            "both link shapers work in"
        )
    return float(value)


def parse_seconds(text, what: str, maximum: float) -> float:
    """A positive, finite number of seconds up to `maximum`: '2', '2.5', '500ms'.

    Also takes a float (argparse `type=float` gives one): NaN, infinities, zero and
    negative values are refused like their text forms."""
    accepted = f"accepted: more than 0 up to {_fmt(maximum)} seconds, e.g. 2 or 2.5s"
    if isinstance(text, float | int) and not isinstance(text, bool):
        if not math.isfinite(text):
            raise UserError(f"{what} {show(text)} is not a number of seconds; {accepted}")
        value = Fraction(text)
    else:
        s = str(text)
        _too_long(s, what, "number of seconds")
        m = _QUANTITY.fullmatch(s)
        unit = m.group(3).lower() if m else None
        if not m or unit not in _TIME_UNITS:
            raise UserError(f"{what} {show(text)} is not a number of seconds; {accepted}")
        value = _exact(m.group(1), m.group(2)) * _TIME_UNITS[unit]
    if value <= 0 or value > Fraction(maximum):
        raise UserError(f"{what} {show(text)} is out of range; {accepted}")
    return float(value)


def parse_rate(
    text,
    what: str = "rate",
    minimum: float | None = None,
    maximum: float | None = None,
    whole_bytes: bool = False,
) -> float:
    """'1mbit' -> 1e6 bits per second. Zero or negative rates are refused.

    `minimum` / `maximum` bound it (bit/s; the default ceiling is the largest signed 64-bit
    integer); `whole_bytes` refuses rates that are not a multiple of 8 bit/s: netem keeps
    its rate in whole bytes per second, so such a rate would be truncated there."""
    s = str(text)
    _too_long(s, what, "rate")
    m = _QUANTITY.fullmatch(s)
    unit = m.group(3).lower() if m else None
    if not m or unit not in _RATE_UNITS:
        raise UserError(
            f"{what} {show(text)} is not a rate; use a number with a unit "
            "(bit, kbit, mbit, gbit), e.g. 1mbit or 1gbit"
        )
    value = _exact(m.group(1), m.group(2)) * _RATE_UNITS[unit]
    if value <= 0:
        raise UserError(f"{what} {show(text)} must be greater than zero")
    lo = Fraction(minimum) if minimum is not None else None
    hi = Fraction(maximum) if maximum is not None else Fraction(RATE_MAX_BPS)
    if (lo is not None and value < lo) or value > hi:
        low = fmt_rate(lo) if lo is not None else "more than 0bit"
        raise UserError(f"{what} {show(text)} is out of range; accepted: {low} to {fmt_rate(hi)}")
    if whole_bytes and (value / 8).denominator != 1:
        down = (value // 8) * 8
        raise UserError(
            f"{what} {show(text)} is not a whole number of bytes per second (a multiple "
            f"of 8 bit/s), which is what netem counts; use {_fmt(down)}bit or "
            f"{_fmt(down + 8)}bit"
        )
    return float(value)


def parse_percent(text, what: str = "percentage", maximum: float = 100) -> float:
    """'3%' or '3' -> 3.0; must lie in [0, maximum] (default 100); '-0' -> 0.0."""
    s = str(text)
    _too_long(s, what, "percentage")
    m = _PERCENT.fullmatch(s)
    if not m:
        raise UserError(f"{what} {show(text)} is not a percentage; use e.g. 1% or 0.5")
    value = _exact(m.group(1), m.group(2))
    if not 0 <= value <= Fraction(maximum):
        raise UserError(f"{what} {show(text)} is outside 0-{_fmt(Fraction(maximum))}%")
    return float(value)


def parse_positive_int(text, what: str, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number in [minimum, maximum]: ASCII digits only (no '1_000', no '+5', no
    Unicode digits). `maximum` defaults to the largest signed 64-bit integer, which the
    engine's 64-bit arguments hold."""
    s = str(text)
    top = INT64_MAX if maximum is None else maximum
    both = f"at least {minimum} and at most {top}"
    # Without a caller's maximum, name only the minimum unless the ceiling is what failed.
    accepted = f"at least {minimum}" if maximum is None else both
    if len(s) > MAX_TEXT:
        raise UserError(f"{what} {show(text)} is too large; it must be {both}")
    m = _INT.fullmatch(s)
    if not m:
        raise UserError(f"{what} {show(text)} is not a whole number; it must be {accepted}")
    value = int(m.group(1))
    if value > top:
        raise UserError(f"{what} {show(text)} must be {both}")
    if value < minimum:
        raise UserError(f"{what} {show(text)} must be {accepted}")
    return value


def split_list(text: str | None) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c'], tolerant of empty items.

    For lists a user gives on the command line use `parse_list`, which refuses an empty
    list instead of returning [] (callers read [] as "not given, use the defaults")."""
    if not text:
        return []
    return [part.strip() for part in str(text).split(",") if part.strip()]


def parse_list(
    text: str | None, what: str, example: str = "", max_items: int | None = None
) -> list[str]:
    """A comma-separated list the user gave: 'a, b' -> ['a', 'b'].

    None (the option was not given) -> [] so callers keep their defaults; but a given value
    must name something: '', ',' and empty items ('a,,b', 'a,') are refused, so an option
    that names nothing never silently selects the default set."""
    if text is None:
        return []
    s = str(text)
    hint = f", e.g. {example}" if example else ""
    parts = [p.strip() for p in s.split(",")]
    if not any(parts):
        raise UserError(
            f"{what} {show(text)} names nothing; give one or more comma-separated values{hint}"
        )
    if not all(parts):
        pos = parts.index("") + 1
        raise UserError(
            f"{what} {show(text)} has an empty item (number {pos}); give comma-separated "
            f"values without empty ones{hint}"
        )
    if max_items is not None and len(parts) > max_items:
        raise UserError(f"{what} {show(text)} has {len(parts)} items; at most {max_items}")
    return parts


def format_bytes(n: float) -> str:
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"


MAX_RANGE_POINTS = 1000


def parse_size_points(
    text, what: str, default_step: int, maximum: int | None = None, minimum: int = 1
) -> list[int]:
    """Sizes as a list ('8000,16000', units allowed: '8KiB') or a range ('2000..40000' in
    steps of `default_step`, or '2000..40000/500'), sorted, without repeats; each within
    [minimum, maximum], at most MAX_RANGE_POINTS of them."""
    out: list[int] = []
    example = "8000,16000 or 2000..40000/1000"
    for item in parse_list(text, what, example=example):
        if ".." not in item:
            out.append(parse_size(item, f"{what} entry", maximum))
            continue
        span, _, step_text = item.partition("/")
        low_text, _, high_text = span.partition("..")
        low = parse_size(low_text, f"{what} range start", maximum)
        high = parse_size(high_text, f"{what} range end", maximum)
        step = parse_size(step_text, f"{what} range step") if step_text else default_step
        if high < low or step < 1:
            raise UserError(
                f"{what} {show(item)}: a range runs from a smaller size to a larger one in "
                f"steps of at least 1 byte, e.g. {example}"
            )
        if (high - low) // step + 1 > MAX_RANGE_POINTS:
            raise UserError(
                f"{what} {show(item)} has more than {MAX_RANGE_POINTS} points; use a larger step"
            )
        out += list(range(low, high + 1, step))
    points = sorted(set(out))
    if len(points) > MAX_RANGE_POINTS:
        raise UserError(f"{what} {show(text)} has more than {MAX_RANGE_POINTS} points")
    if points and points[0] < minimum:
        raise UserError(f"{what} {show(text)}: every size must be at least {minimum} bytes")
    return points
