import pytest

from pqlab.errors import UserError
from pqlab.units import (
    parse_duration,
    parse_percent,
    parse_positive_int,
    parse_rate,
    parse_size,
    split_list,
)


@pytest.mark.parametrize(
    "text,value",
    [
        ("0", 0),
        ("16384", 16384),
        ("1KiB", 1024),
        ("200KiB", 204800),
        ("1k", 1000),
        ("1.5MiB", 1572864),
    ],
)
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1", "1.5", "10 parsecs"])
def test_bad_sizes_name_the_value(text):
    with pytest.raises(UserError, match="size"):
        parse_size(text)


def test_durations_and_rates():
    assert parse_duration("35ms") == pytest.approx(0.035)
    assert parse_duration("200us") == pytest.approx(200e-6)
    assert parse_rate("1mbit") == 1e6
    assert parse_rate("1gbit") == 1e9
    with pytest.raises(UserError, match="negative"):
        parse_duration("-5ms")
    with pytest.raises(UserError, match="greater than zero"):
        parse_rate("0mbit")


def test_percent_and_ints():
    assert parse_percent("3%") == 3.0
    with pytest.raises(UserError, match="outside"):
        parse_percent("101%")
    assert parse_positive_int("5", "-n") == 5
    with pytest.raises(UserError, match="at least 1"):
        parse_positive_int("0", "--iterations")
    assert split_list(" a, b,,c ") == ["a", "b", "c"]


# --- Edge cases a tester found: each value is refused with one line naming it and what is
# accepted, or read exactly as written; never a traceback, never a silent other value.


def _one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "fn, text",
    [
        (parse_duration, "nan"),
        (parse_duration, "inf"),
        (parse_duration, "1e3ms"),
        (parse_duration, "١٢ms"),  # Arabic-Indic digits: \d matches them, int() reads them
        (parse_rate, "１mbit"),  # fullwidth digit
        (parse_size, "１KiB"),
        (parse_percent, "٣%"),
        (parse_size, "1_000"),
        (parse_rate, "nanmbit"),
        (parse_percent, "nan"),
    ],
)
def test_non_ascii_and_non_finite_numbers_are_refused(fn, text):
    msg = _one_line_error(fn, text)
    assert repr(text) in msg


def test_negative_zero_is_zero():
    assert str(parse_duration("-0")) == "0.0"
    assert str(parse_duration("-0ms")) == "0.0"
    assert str(parse_percent("-0%")) == "0.0"
    assert parse_size("-0") == 0


def test_whitespace_around_values_is_ascii_only():
    assert parse_duration(" 35ms\n") == pytest.approx(0.035)
    assert parse_size("\t1 KiB ") == 1024
    _one_line_error(parse_duration, "\u200335ms")  # EM SPACE is not whitespace here


def test_huge_values_hit_the_ceiling_not_infinity():
    msg = _one_line_error(parse_size, "99999999999999999999999999999999999GiB")
    assert "accepted: 0 to 9223372036854775807 bytes" in msg
    msg = _one_line_error(parse_rate, "99999999999999999999gbit")
    assert "out of range" in msg
    msg = _one_line_error(parse_duration, "9" * 400 + "s")
    assert "401 characters" in msg and "..." in msg  # the value is shortened, not dropped


def test_exact_decimals_are_not_rounded_into_validity():
    # As a double this is exactly 1024 bytes; as written it is not a whole number of bytes.
    msg = _one_line_error(parse_size, "1.00000000000000000000000000000000000000001KiB")
    assert "not a whole number of bytes" in msg
    assert parse_size("1.5KiB") == 1536


def test_duration_maximum_and_whole_nanoseconds():
    assert parse_duration("5s", "delay", maximum=5) == 5.0
    msg = _one_line_error(parse_duration, "100000s", "rtt", maximum=10)
    assert "rtt '100000s'" in msg and "accepted: 0 to 10s" in msg
    msg = _one_line_error(parse_duration, "1.5ns", "jitter", whole_ns=True)
    assert "whole number of nanoseconds" in msg
    assert parse_duration("1.5us", whole_ns=True) == pytest.approx(1.5e-6)


def test_rate_bounds_and_whole_bytes():
    msg = _one_line_error(parse_rate, "0.4bit", "rate", minimum=8000, maximum=100e9)
    assert "'0.4bit'" in msg and "accepted: 8kbit to 100gbit" in msg
    msg = _one_line_error(parse_rate, "12345bit", "rate", whole_bytes=True)
    assert "multiple of 8 bit/s" in msg and "12344bit or 12352bit" in msg
    assert parse_rate("1.5mbit", whole_bytes=True) == 1.5e6


def test_percent_maximum():
    assert parse_percent("50%", "loss", maximum=50) == 50
    msg = _one_line_error(parse_percent, "51%", "loss", maximum=50)
    assert "loss '51%' is outside 0-50%" in msg


def test_positive_int_maximum():
    # --warmup 100000000000000000000 reached the engine and failed there.
    msg = _one_line_error(parse_positive_int, "100000000000000000000", "--warmup", 0)
    assert "--warmup '100000000000000000000'" in msg
    assert "at most 9223372036854775807" in msg
    msg = _one_line_error(parse_positive_int, "1000001", "--warmup", 0, 1_000_000)
    assert "must be at least 0 and at most 1000000" in msg
    assert parse_positive_int("1000000", "--warmup", 0, 1_000_000) == 1_000_000
    for text in ("1_000", "+5", "٣", "5.0", "1e3", "9" * 5000):
        assert show_in(_one_line_error(parse_positive_int, text, "-n"), text)


def show_in(msg: str, text: str) -> bool:
    """The message names the value (shortened in the middle when it is long)."""
    return repr(text) in msg or repr(text)[:30] in msg


def test_seconds():
    from pqlab.units import parse_seconds

    assert parse_seconds("2", "--rate-seconds", 120) == 2.0
    assert parse_seconds("500ms", "--rate-seconds", 120) == 0.5
    assert parse_seconds(2.0, "--rate-seconds", 120) == 2.0  # argparse type=float
    for bad in ("nan", "inf", "-1", "0", "-0", "121", "", "2x", float("nan"), float("-inf"), -2.0):
        msg = _one_line_error(parse_seconds, bad, "--rate-seconds", 120)
        assert "--rate-seconds" in msg and "more than 0 up to 120 seconds" in msg


def test_parse_list_refuses_empty_lists_and_items():
    from pqlab.units import parse_list

    assert parse_list(None, "--kem") == []  # not given: the caller's default
    assert parse_list(" ML-KEM-768 , X25519 ", "--kem") == ["ML-KEM-768", "X25519"]
    # `pqlab primitives --kem ,` measured the whole default set.
    msg = _one_line_error(parse_list, ",", "--kem", example="ML-KEM-768,X25519")
    assert "--kem ','" in msg and "names nothing" in msg and "ML-KEM-768,X25519" in msg
    for bad in ("", "  ", ",,"):
        assert "names nothing" in _one_line_error(parse_list, bad, "--sig")
    for bad, pos in (("a,,b", 2), ("a,", 2), (",a", 1)):
        assert f"empty item (number {pos})" in _one_line_error(parse_list, bad, "--sizes")
    assert "at most 2" in _one_line_error(parse_list, "a,b,c", "--x", max_items=2)


def test_cpu_fraction():
    from pqlab.cpuquota import parse_fraction

    assert parse_fraction("0.25") == 0.25
    assert parse_fraction("25%") == 0.25
    assert parse_fraction("0.01") == 0.01  # the bound itself (0.01 is not a double)
    assert parse_fraction("1") == 1.0
    # float() took nan ('must lie between' by luck), '0.5_0', '１' and '1e-1' as numbers.
    for bad in ("nan", "inf", "0.5_0", "０.5", "1e-1", "", "quarter"):
        msg = _one_line_error(parse_fraction, bad)
        assert show_in(msg, bad) and "not a number" in msg and "0.01 to 1" in msg
    for bad in ("0.009", "1.0000001", "-0.5", "-0", "101%", "0"):
        msg = _one_line_error(parse_fraction, bad, "--server-cpu")
        assert f"--server-cpu {bad!r} is out of range" in msg and "0.01 to 1" in msg
