"""Stream arguments parsed as RabbitMQ accepts them (engine.streams.args): x-stream-offset over AMQP
and STOMP, retention and segment-size arguments, and every error naming its argument."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.streams import (
    DEFAULT_SEGMENT_BYTES,
    OffsetSpec,
    StreamArgumentError,
    StreamSettings,
    parse_max_age,
    parse_max_length_bytes,
    parse_max_segment_size,
    parse_stomp_stream_offset,
    parse_stream_offset,
    stream_settings,
)

DAY = 86_400_000


@pytest.mark.parametrize("value, spec", [
    ("first", OffsetSpec("first")),
    ("last", OffsetSpec("last")),
    ("next", OffsetSpec("next")),
    (b"next", OffsetSpec("next")),
    (0, OffsetSpec("offset", 0)),
    (12345, OffsetSpec("offset", 12345)),
    (datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), OffsetSpec("timestamp", 1_700_000_000_000)),
    (datetime(2023, 11, 14, 22, 13, 20), OffsetSpec("timestamp", 1_700_000_000_000)),  # naive = UTC
    ("1h", OffsetSpec("interval", 3_600_000)),
    ("30m", OffsetSpec("interval", 1_800_000)),
    ("45s", OffsetSpec("interval", 45_000)),
    ("7D", OffsetSpec("interval", 7 * DAY)),
    ("2M", OffsetSpec("interval", 60 * DAY)),
    ("1Y", OffsetSpec("interval", 365 * DAY)),
])
def test_amqp_stream_offsets(value, spec) -> None:
    assert parse_stream_offset(value) == spec


@pytest.mark.parametrize("value, problem", [
    ("start", "is not first, last, next"),
    ("1w", "is not first, last, next"),
    ("0h", "must be positive"),
    ("h", "is not first"),
    ("1.5h", "is not first"),
    (-1, "negative"),
    (True, "unsupported type bool"),
    (1.5, "unsupported type float"),
    (None, "unsupported type NoneType"),
    ({"a": 1}, "unsupported type dict"),
])
def test_bad_amqp_stream_offsets_name_the_argument(value, problem) -> None:
    with pytest.raises(StreamArgumentError, match=problem) as info:
        parse_stream_offset(value)
    assert info.value.argument == "x-stream-offset"
    assert "x-stream-offset" in str(info.value)


@pytest.mark.parametrize("text, spec", [
    ("first", OffsetSpec("first")),
    ("last", OffsetSpec("last")),
    ("next", OffsetSpec("next")),
    ("42", OffsetSpec("offset", 42)),
    ("offset=7", OffsetSpec("offset", 7)),
    ("timestamp=1700000000", OffsetSpec("timestamp", 1_700_000_000_000)),
    ("12h", OffsetSpec("interval", 12 * 3_600_000)),
])
def test_stomp_stream_offsets(text, spec) -> None:
    assert parse_stomp_stream_offset(text) == spec


@pytest.mark.parametrize("text", ["-3", "offset=-1", "offset=x", "timestamp=", "timestamp=1.5", "soon", ""])
def test_bad_stomp_stream_offsets(text) -> None:
    with pytest.raises(StreamArgumentError) as info:
        parse_stomp_stream_offset(text)
    assert info.value.argument == "x-stream-offset"


@given(st.integers(0, 2**63 - 1))
def test_any_non_negative_integer_is_an_offset_in_both_protocols(n: int) -> None:
    assert parse_stream_offset(n) == parse_stomp_stream_offset(str(n)) == OffsetSpec("offset", n)


def test_retention_arguments() -> None:
    assert parse_max_age("7D") == 7 * DAY and parse_max_age("12h") == 12 * 3_600_000
    assert parse_max_length_bytes(0) == 0 and parse_max_length_bytes(10**12) == 10**12
    assert parse_max_segment_size(1) == 1 and parse_max_segment_size(3_000_000_000) == 3_000_000_000
    assert stream_settings(None) == StreamSettings(None, None, DEFAULT_SEGMENT_BYTES)
    assert stream_settings({"x-max-length-bytes": 5000, "x-max-age": "1m", "x-stream-max-segment-size-bytes": 100,
                            "x-queue-type": "stream"}) == StreamSettings(5000, 60_000, 100)


@pytest.mark.parametrize("args, argument, problem", [
    ({"x-max-age": "7d"}, "x-max-age", "unit one of Y, M, D, h, m, s"),
    ({"x-max-age": "0D"}, "x-max-age", "must be positive"),
    ({"x-max-age": 3600}, "x-max-age", "expected a string"),
    ({"x-max-age": "-1h"}, "x-max-age", "not <positive integer><unit>"),
    ({"x-max-length-bytes": -1}, "x-max-length-bytes", "below 0"),
    ({"x-max-length-bytes": "100"}, "x-max-length-bytes", "expected an integer, got str"),
    ({"x-max-length-bytes": 1.0}, "x-max-length-bytes", "expected an integer, got float"),
    ({"x-stream-max-segment-size-bytes": 0}, "x-stream-max-segment-size-bytes", "below 1"),
    ({"x-stream-max-segment-size-bytes": 3_000_000_001}, "x-stream-max-segment-size-bytes", "above the maximum"),
    ({"x-stream-max-segment-size-bytes": True}, "x-stream-max-segment-size-bytes", "got bool"),
])
def test_bad_retention_arguments_name_the_argument(args, argument, problem) -> None:
    with pytest.raises(StreamArgumentError, match=problem) as info:
        stream_settings(args)
    assert info.value.argument == argument
    assert str(info.value).startswith(f"invalid arg '{argument}'")
