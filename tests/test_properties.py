"""Property-based tests (Hypothesis) of every parser users feed: link profile strings and
TOML files, sizes, durations, rates, percentages, counts, seconds, CPU fractions, lists and
algorithm names.

Two kinds of property:
- round trip: values generated inside the bounds, written the way a user would (in any of
  the accepted units), parse back to exactly those values;
- robustness: arbitrary text or bytes either parse (to a value inside the bounds) or raise
  UserError with a one-line message, never another exception.

Deterministic (derandomize, no example database) and bounded so the module runs in seconds.
"""

from __future__ import annotations

import math
import os
import tempfile
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pqlab import catalog
from pqlab.cpuquota import parse_fraction
from pqlab.errors import UserError
from pqlab.net import profiles as pr
from pqlab.units import (
    INT64_MAX,
    parse_duration,
    parse_list,
    parse_percent,
    parse_positive_int,
    parse_rate,
    parse_seconds,
    parse_size,
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FEW = settings(SETTINGS, max_examples=60)


def refused_cleanly(fn, *args):
    """Call fn; a UserError must be one line. Returns the value or None when refused."""
    try:
        return fn(*args)
    except UserError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "\r" not in msg, msg
        return None


# --- Exact spellings of numbers ---------------------------------------------------------------


def _decimal(n: int, scale_digits: int) -> str:
    """n / 10**scale_digits written exactly as a decimal ('1234', 3 -> '1.234')."""
    if scale_digits == 0:
        return str(n)
    q, r = divmod(n, 10**scale_digits)
    return f"{q}.{r:0{scale_digits}d}"


@st.composite
def duration_text(draw, max_ns: int) -> tuple[int, str]:
    """(nanoseconds, a spelling of it in ns, us, ms or s)."""
    ns = draw(st.integers(0, max_ns))
    unit, digits = draw(st.sampled_from([("ns", 0), ("us", 3), ("ms", 6), ("s", 9)]))
    return ns, _decimal(ns, digits) + unit


@st.composite
def rate_text(draw) -> tuple[int, str]:
    """(bit/s, a spelling) for a rate inside the profile bounds (a multiple of 8 bit/s)."""
    bps = 8 * draw(st.integers(pr.RATE_MIN_BPS // 8, pr.RATE_MAX_BPS // 8))
    unit, digits = draw(
        st.sampled_from([("bit", 0), ("kbit", 3), ("mbit", 6), ("gbit", 9), ("Mbps", 6)])
    )
    return bps, _decimal(bps, digits) + unit


@st.composite
def percent_text(draw, maximum: int) -> tuple[Fraction, str]:
    milli = draw(st.integers(0, maximum * 1000))
    return Fraction(milli, 1000), _decimal(milli, 3) + draw(st.sampled_from(["%", "", " %"]))


# --- Link profiles: generated valid ones round-trip ---------------------------------------------


def _draw_direction(draw, prefix: str, target: dict, items: list, use_rtt: bool) -> None:
    """Link keys for one slot (both directions, c2s. or s2c.), inside every bound."""
    if not use_rtt and draw(st.booleans()):
        ns, text = draw(duration_text(int(pr.DELAY_MAX_S * 1e9)))
        items.append((prefix + "delay", text))
        target["latency_ns"] = ns
    if draw(st.booleans()):
        ns, text = draw(duration_text(int(pr.JITTER_MAX_S * 1e9)))
        items.append((prefix + "jitter", text))
        target["jitter_ns"] = ns
    if draw(st.booleans()):
        dist = draw(st.sampled_from(pr.DISTRIBUTIONS))
        items.append((prefix + draw(st.sampled_from(["dist", "distribution"])), dist))
        target["dist"] = dist
    for key, cfg, top in (
        ("loss", "loss_pct", pr.LOSS_MAX_PCT),
        ("corr", "delay_corr_pct", pr.CORR_MAX_PCT),
        ("loss_corr", "loss_corr_pct", pr.CORR_MAX_PCT),
    ):
        if draw(st.booleans()):
            value, text = draw(percent_text(int(top)))
            items.append((prefix + key, text))
            target[cfg] = float(value)
    if draw(st.booleans()):
        if draw(st.integers(0, 9)) == 0:
            items.append((prefix + "rate", draw(st.sampled_from(["none", "unlimited"]))))
            target["rate_bps"] = 0
        else:
            bps, text = draw(rate_text())
            items.append((prefix + "rate", text))
            target["rate_bps"] = bps
    if draw(st.booleans()):
        limit = draw(st.integers(1, pr.LIMIT_MAX))
        items.append((prefix + "limit", str(limit)))
        target["limit"] = limit


def _draw_host(draw, items: list) -> dict:
    """Host keys (initcwnd, initrwnd, mtu, cc) inside every bound."""
    host: dict = {}
    for key, lo, hi in (
        ("initcwnd", 1, pr.WINDOW_MAX),
        ("initrwnd", 1, pr.WINDOW_MAX),
        ("mtu", pr.MTU_MIN, pr.MTU_MAX),
    ):
        if draw(st.booleans()):
            value = draw(st.integers(lo, hi))
            items.append((key, str(value)))
            host[key] = value
    if draw(st.booleans()):
        cc = draw(st.sampled_from(pr.CONGESTION_CONTROLS))
        items.append(("cc", cc))
        host["cc"] = cc
    return host


@st.composite
def valid_profiles(draw):
    """(items, expected): key=value items inside every bound, and the link they describe
    {'c2s': {...}, 's2c': {...}, 'host': {...}} in the units linkem_config uses."""
    items: list[tuple[str, str]] = []
    both: dict = {}
    per = {"c2s": {}, "s2c": {}}
    use_rtt = draw(st.booleans())
    if use_rtt:
        ns, text = draw(duration_text(int(pr.RTT_MAX_S * 1e9)))
        ns -= ns % 2  # split evenly into two whole-ns delays
        text = f"{ns}ns" if ns % 2 == 0 else text
        items.append(("rtt", text))
        both["latency_ns"] = ns // 2
    for slot in draw(st.lists(st.sampled_from(["both", "c2s", "s2c"]), unique=True)):
        target = both if slot == "both" else per[slot]
        prefix = "" if slot == "both" else f"{slot}."
        _draw_direction(draw, prefix, target, items, use_rtt)
    host = _draw_host(draw, items)
    items = draw(st.permutations(items))  # order must not matter
    defaults = {
        "latency_ns": 0,
        "jitter_ns": 0,
        "dist": "uniform",
        "delay_corr_pct": 0.0,
        "loss_pct": 0.0,
        "loss_corr_pct": 0.0,
        "rate_bps": 0,
        "limit": pr.DEFAULT_LIMIT,
    }
    expected = {d: {**defaults, **both, **per[d]} for d in ("c2s", "s2c")}
    expected["host"] = host
    return list(items), expected


def _check(p: pr.LinkProfile, expected: dict) -> None:
    for d in ("c2s", "s2c"):
        got = getattr(p, d).linkem_config(14)
        got.pop("overhead_bytes")
        assert got == expected[d], d
    host = expected["host"]
    assert p.initcwnd == host.get("initcwnd")
    assert p.initrwnd == host.get("initrwnd")
    assert p.mtu == host.get("mtu", 1500)
    assert p.congestion_control == host.get("cc", "cubic")


def _needs_jitter(expected: dict) -> bool:
    return any(
        expected[d]["dist"] != "uniform" and not expected[d]["jitter_ns"] for d in ("c2s", "s2c")
    )


@SETTINGS
@given(valid_profiles())
def test_valid_profile_strings_round_trip(case):
    items, expected = case
    text = ",".join(f"{k}={v}" for k, v in items)
    if not items:
        return
    if _needs_jitter(expected):
        with pytest.raises(UserError, match="needs a jitter"):
            pr.parse_profile(text)
        return
    p = pr.parse_profile(text)
    _check(p, expected)
    # Both shapers get the same exact rate: netem's argument and the emulator's integer.
    for d in (p.c2s, p.s2c):
        args = d.netem_args()
        if d.rate_bps:
            assert args[args.index("rate") + 1] == f"{d.linkem_config(14)['rate_bps']}bit"
        else:
            assert "rate" not in args


def _toml(items: list[tuple[str, str]]) -> str:
    """The same profile as a TOML document: top-level keys, then [c2s] / [s2c] tables.
    Whole numbers go in as TOML integers, the rest as strings."""

    def value(v: str) -> str:
        return v if v.isdigit() else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    top = [f"{k} = {value(v)}" for k, v in items if "." not in k]
    lines = top[:]
    for d in ("c2s", "s2c"):
        sub = [(k.split(".", 1)[1], v) for k, v in items if k.startswith(d + ".")]
        if sub:
            lines.append(f"[{d}]")
            lines += [f"{k} = {value(v)}" for k, v in sub]
    return "\n".join(lines) + "\n"


def _load_text(content: bytes) -> list:
    fd, name = tempfile.mkstemp(suffix=".toml")
    try:
        os.write(fd, content)
        os.close(fd)
        return pr.load_toml(name)
    finally:
        os.unlink(name)


@SETTINGS
@given(valid_profiles())
def test_valid_profile_toml_round_trips(case):
    items, expected = case
    doc = _toml(items)
    if _needs_jitter(expected):
        with pytest.raises(UserError, match="needs a jitter"):
            _load_text(doc.encode())
        return
    if not items:
        with pytest.raises(UserError, match="defines no profile"):
            _load_text(doc.encode())
        return
    (p,) = _load_text(doc.encode())
    _check(p, expected)


# --- Link profiles: arbitrary input parses inside the bounds or is refused cleanly -------------

_KEYS = [*pr.ACCEPTED_KEYS, "name", "c2s.delay", "s2c.rate", "x2y.loss", "c2s.rtt", "preset"]
_VALUES = st.one_of(
    st.text(max_size=12),
    st.builds(
        lambda sign, num, unit: f"{sign}{num}{unit}",
        st.sampled_from(["", "-", " "]),
        st.one_of(
            st.integers(0, 10**25).map(str),
            st.decimals(allow_nan=True, allow_infinity=True).map(str),
            st.floats().map(repr),
        ),
        st.sampled_from(["", "ns", "us", "µs", "ms", "s", "%", "bit", "kbit", "mbit", "gbit", "x"]),
    ),
    st.sampled_from([*pr.DISTRIBUTIONS, *pr.CONGESTION_CONTROLS, "none", "unlimited", ""]),
)
_PROFILE_TEXT = st.one_of(
    st.text(max_size=60),
    st.lists(
        st.tuples(st.sampled_from(_KEYS), st.sampled_from(["=", "", " = ", "=="]), _VALUES).map(
            "".join
        ),
        max_size=8,
    ).map(",".join),
    st.tuples(st.sampled_from([*pr.PRESETS, "LAN", "nope"]), st.text(max_size=30)).map(",".join),
)


def _within_bounds(p: pr.LinkProfile) -> None:
    assert 0 <= p.rtt_s <= pr.RTT_MAX_S
    for d in (p.c2s, p.s2c):
        cfg = d.linkem_config(14)
        assert 0 <= d.delay_s <= pr.DELAY_MAX_S and 0 <= d.jitter_s <= pr.JITTER_MAX_S
        assert cfg["latency_ns"] == d.delay_s * 1e9 or math.isclose(
            cfg["latency_ns"], d.delay_s * 1e9, abs_tol=1e-3
        )
        assert 0 <= d.loss_pct <= pr.LOSS_MAX_PCT
        assert 0 <= d.delay_corr_pct <= pr.CORR_MAX_PCT and 0 <= d.loss_corr_pct <= pr.CORR_MAX_PCT
        assert 1 <= d.limit <= pr.LIMIT_MAX
        if d.rate_bps is not None:
            assert pr.RATE_MIN_BPS <= d.rate_bps <= pr.RATE_MAX_BPS
            assert d.rate_bps == cfg["rate_bps"] and cfg["rate_bps"] % 8 == 0
    assert pr.MTU_MIN <= p.mtu <= pr.MTU_MAX
    assert p.initcwnd is None or 1 <= p.initcwnd <= pr.WINDOW_MAX
    assert p.name and p.name.isprintable()


@SETTINGS
@given(_PROFILE_TEXT)
def test_arbitrary_profile_strings_parse_within_bounds_or_refuse(text):
    p = refused_cleanly(pr.parse_profile, text)
    if p is not None:
        _within_bounds(p)


_TOML_LINES = st.one_of(
    st.tuples(st.sampled_from(_KEYS), _VALUES).map(lambda kv: f'{kv[0]} = "{kv[1]}"'),
    st.tuples(
        st.sampled_from(_KEYS),
        st.sampled_from(
            [
                "1",
                "0",
                "-1",
                "1e400",
                "nan",
                "true",
                "[]",
                '["5ms", 1]',
                "{a = 1}",
                "1979-05-27",
                "99999999999999999999",
            ]
        ),
    ).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.sampled_from(
        [
            "[grid]",
            "[[profile]]",
            "[c2s]",
            "[s2c]",
            "[grid.c2s]",
            "[profile]",
            "profile = 1",
            "grid = [1]",
            'rtt = ["5ms", "10ms"]',
            'preset = "lan"',
            'preset = "lan,rtt=5ms"',
            "",
            "# comment",
            "rtt = ",
            "[",
            "a = [[[[1]]]]",
        ]
    ),
    st.text(max_size=20),
)


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=200),
        st.lists(_TOML_LINES, max_size=10).map(lambda lines: "\n".join(lines).encode()),
        st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )
)
def test_arbitrary_toml_files_parse_within_bounds_or_refuse(content):
    profiles = refused_cleanly(_load_text, content)
    for p in profiles or []:
        _within_bounds(p)


# --- Units --------------------------------------------------------------------------------------

_NUMBERISH = st.one_of(
    st.text(max_size=30),
    st.builds(
        "{}{}{}{}".format,
        st.sampled_from(["", " ", "-", "+", "\t", "\u2003"]),
        st.one_of(
            st.integers(-(10**30), 10**30).map(str),
            st.decimals(allow_nan=True, allow_infinity=True).map(str),
            st.floats().map(repr),
            st.sampled_from(["nan", "inf", "1_000", "١٢", "１", "1e3", ".5", "5.", "0x10"]),
        ),
        st.sampled_from(
            [
                "",
                " ",
                "%",
                "ns",
                "ms",
                "s",
                "µs",
                "μs",
                "KiB",
                "kb",
                "B",
                "bit",
                "kbit",
                "Mbit",
                "gbit",
                "x",
                "\n",
            ]
        ),
        st.sampled_from(["", " ", "\n", "\x00"]),
    ),
)


@SETTINGS
@given(_NUMBERISH)
def test_units_parse_or_refuse(text):
    size = refused_cleanly(parse_size, text)
    assert size is None or (isinstance(size, int) and 0 <= size <= INT64_MAX)
    dur = refused_cleanly(parse_duration, text)
    assert dur is None or (math.isfinite(dur) and dur >= 0 and math.copysign(1, dur) == 1)
    rate = refused_cleanly(parse_rate, text)
    assert rate is None or (math.isfinite(rate) and rate > 0)
    pct = refused_cleanly(parse_percent, text)
    assert pct is None or (0 <= pct <= 100 and math.copysign(1, pct) == 1)
    n = refused_cleanly(parse_positive_int, text, "-n", 0, 10**6)
    assert n is None or 0 <= n <= 10**6
    s = refused_cleanly(parse_seconds, text, "--rate-seconds", 120)
    assert s is None or 0 < s <= 120
    f = refused_cleanly(parse_fraction, text)
    assert f is None or 0.01 <= f <= 1


@SETTINGS
@given(
    st.integers(0, 2**40),
    st.sampled_from(
        [("", 1), ("B", 1), ("KiB", 1024), ("kb", 1000), ("MiB", 1024**2), ("GB", 1000**3)]
    ),
)
def test_sizes_round_trip(n, unit):
    name, scale = unit
    if n * scale > INT64_MAX:
        assert "out of range" in str(pytest.raises(UserError, parse_size, f"{n}{name}").value)
        return
    assert parse_size(f"{n}{name}") == n * scale
    assert parse_size(f" {n} {name} ") == n * scale


@SETTINGS
@given(duration_text(10**15))
def test_durations_round_trip(case):
    ns, text = case
    assert parse_duration(text) == float(Fraction(ns, 10**9))
    assert parse_duration(text, whole_ns=True) == float(Fraction(ns, 10**9))


@SETTINGS
@given(rate_text())
def test_rates_round_trip(case):
    bps, text = case
    assert parse_rate(text, whole_bytes=True) == bps


@SETTINGS
@given(percent_text(100))
def test_percentages_round_trip(case):
    value, text = case
    assert parse_percent(text) == float(value)


@SETTINGS
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_seconds_from_floats(x):
    s = refused_cleanly(parse_seconds, x, "--rate-seconds", 120)
    if 0 < x <= 120:
        assert s == x
    else:
        assert s is None


@SETTINGS
@given(st.integers(-(10**25), 10**25))
def test_ints_round_trip_or_name_the_range(n):
    got = refused_cleanly(parse_positive_int, str(n), "--warmup", 0, 10**6)
    assert got == (n if 0 <= n <= 10**6 else None)


# --- Lists --------------------------------------------------------------------------------------

_ITEM = st.text(min_size=1, max_size=10).filter(lambda s: "," not in s and s.strip())


@SETTINGS
@given(st.lists(_ITEM, min_size=1, max_size=8))
def test_lists_round_trip(items):
    assert parse_list(",".join(items), "--kem") == [i.strip() for i in items]


@SETTINGS
@given(st.text(max_size=40))
def test_lists_never_empty_nor_with_empty_items(text):
    got = refused_cleanly(parse_list, text, "--kem")
    if got is not None:
        assert got and all(item and item == item.strip() for item in got)
    else:
        assert not text.strip() or any(not p.strip() for p in text.split(","))


# --- Algorithm names ------------------------------------------------------------------------------

_ALGS = catalog.all_algorithms()


@FEW
@given(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from([n for a in _ALGS for n in (*a.names, *a.library_names)]).map(
            lambda n: n + "x"
        ),
    ),
    st.sampled_from([None, "kem", "kex", "sig"]),
)
def test_algorithm_names_resolve_or_refuse(text, kind):
    alg = refused_cleanly(catalog.resolve, text, kind)
    assert alg is None or isinstance(alg, catalog.Algorithm)
    algs = refused_cleanly(catalog.resolve_list, [text, text], kind)
    assert algs is None or len(algs) == 1


@FEW
@given(st.sampled_from(_ALGS), st.data())
def test_algorithm_names_in_any_case_and_punctuation_resolve(alg, data):
    name = data.draw(st.sampled_from(alg.names))
    chars = [data.draw(st.sampled_from([c.lower(), c.upper()])) for c in name]
    seps = [data.draw(st.sampled_from(["", "", "-", "_", " ", "/"])) for _ in chars]
    spelled = "".join(c + s for c, s in zip(chars, seps, strict=True))
    kind = "sig" if alg.kind == "sig" else "kem"
    assert catalog.resolve(spelled, kind) is alg
