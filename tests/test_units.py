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
