from __future__ import annotations

import pytest

from tracemerge.core.units import decimal_text_to_int, plain_json, seconds_to_ns, us_to_ns


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (0, 0),
        (1, 1000),
        (1732924800123456, 1732924800123456000),
        ("1732924800123456.789", 1732924800123456789),
        ("1732924800123456.7895", 1732924800123456790),  # half up beyond the ns digit
        ("-1.5", -1500),
        ("12", 12000),
        (".5", 500),
        ("1e3", 1_000_000),
        (5109642442131.612, 5109642442131612),  # below 2**43 µs a float is still exact
        (8796093022207.999, 8796093022207999),
        (0.001, 1),
        (2.5, 2500),
        (24.8015, 24802),  # half a nanosecond: rounded up, as the decimal text says
        (55.1610625, 55161),
        (1e-05, 0),
    ],
)
def test_us_to_ns_is_exact(value, ns) -> None:
    assert us_to_ns(value) == ns


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", None, True, [1], float("nan"), float("inf"), float("-inf")])
def test_us_to_ns_rejects_non_numbers(bad) -> None:
    with pytest.raises(ValueError):
        us_to_ns(bad)


def test_seconds_to_ns() -> None:
    assert seconds_to_ns(1732900000.123456) == 1732900000123456000
    assert seconds_to_ns("1732900000.123456789") == 1732900000123456789
    assert seconds_to_ns(3) == 3_000_000_000


def test_decimal_rounding() -> None:
    assert decimal_text_to_int("0.0004", 3) == 0
    assert decimal_text_to_int("0.0005", 3) == 1
    assert decimal_text_to_int("+7", 0) == 7


def test_plain_json_is_what_trace_processor_shows_as_written() -> None:
    assert plain_json(b'{"External id": 123456789012345678, "s": "x"}')  # 18 digits fit int64
    assert not plain_json(b'{"a": null}')
    assert not plain_json(b'{"a": 1234567890123456789}')
    assert not plain_json(b'{"a": "nullable"}')  # a closer look then finds nothing to rewrite
