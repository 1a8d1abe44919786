"""Stream arguments as RabbitMQ accepts them, parsed without any I/O or clock (protocol-neutral).

Queue arguments (``queue.declare``, or STOMP headers that declare a stream):

- ``x-max-length-bytes``: integer >= 0, total bytes the stream keeps (retention, segment-wise).
- ``x-max-age``: a string ``<positive integer><unit>``, unit one of ``Y`` (365 days), ``M`` (30 days),
  ``D``, ``h``, ``m``, ``s`` (RabbitMQ's rabbit_amqqueue check); e.g. ``7D``, ``12h``.
- ``x-stream-max-segment-size-bytes``: integer >= 1, at most 3 000 000 000 (default 500 000 000).

Consumer argument ``x-stream-offset`` (``basic.consume`` argument or STOMP SUBSCRIBE header):
``first``, ``last`` (start of the last chunk), ``next`` (only new messages), an integer offset >= 0,
an AMQP timestamp (a datetime; seconds since the epoch), or an interval string such as ``1h`` (the
``x-max-age`` units: start at the first message appended at most that long ago). Over STOMP the
value is text: ``offset=<n>``, ``timestamp=<unix seconds>`` and a bare integer are accepted too.

Stream filtering (``filtering``): queue argument ``x-stream-filter-size-bytes`` (16..255, default 16);
consumer arguments ``x-stream-filter`` (a string or a list of strings; over STOMP a comma-separated
list) and ``x-stream-match-unfiltered`` (true/false, default false).

Every error is a :class:`StreamArgumentError` whose ``argument`` names the offending argument and
whose message is fit for a 406 PRECONDITION_FAILED reply (or a STOMP ERROR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._log import DEFAULT_SEGMENT_BYTES, StreamLog, StreamSettings
from .filtering import (
    DEFAULT_FILTER_BYTES,
    FILTER_ARG,
    FILTER_SIZE_ARG,
    MATCH_UNFILTERED_ARG,
    MAX_FILTER_BYTES,
    MIN_FILTER_BYTES,
    StreamFilter,
)

__all__ = [
    "StreamArgumentError",
    "OffsetSpec",
    "parse_stream_offset",
    "parse_stomp_stream_offset",
    "parse_interval_ms",
    "parse_max_age",
    "parse_max_length_bytes",
    "parse_max_segment_size",
    "parse_filter_size",
    "parse_stream_filter",
    "stream_settings",
    "resolve_offset",
    "DEFAULT_SEGMENT_BYTES",
    "MAX_SEGMENT_BYTES",
    "STREAM_QUEUE_ARGS",
]

#: RabbitMQ's default ``x-stream-max-segment-size-bytes``
#: RabbitMQ refuses segment sizes above this
MAX_SEGMENT_BYTES = 3_000_000_000
#: queue arguments only a stream accepts (on another queue type they are a 406)
STREAM_QUEUE_ARGS = ("x-max-age", "x-stream-max-segment-size-bytes", FILTER_SIZE_ARG)

_DAY_MS = 86_400_000
_UNIT_MS = {"Y": 365 * _DAY_MS, "M": 30 * _DAY_MS, "D": _DAY_MS, "h": 3_600_000, "m": 60_000, "s": 1000}
_INTERVAL = re.compile(r"([0-9]+)([YMDhms])")


class StreamArgumentError(ValueError):
    """A stream argument has the wrong type or value; ``argument`` is its name."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"invalid arg '{argument}': {problem}")
        self.argument = argument


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a consumer starts. ``kind``: ``first`` | ``last`` | ``next`` | ``offset`` (``value`` =
    the offset) | ``timestamp`` (``value`` = ms since the epoch) | ``interval`` (``value`` = ms back
    from ``now`` when resolved)."""

    kind: str
    value: int = 0


FIRST, LAST, NEXT = OffsetSpec("first"), OffsetSpec("last"), OffsetSpec("next")
_NAMED = {"first": FIRST, "last": LAST, "next": NEXT}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_interval_ms(argument: str, value: Any) -> int:
    """``<positive integer><Y|M|D|h|m|s>`` in milliseconds."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str):
        raise StreamArgumentError(argument, f"expected a string such as '7D' or '12h', got {type(value).__name__}")
    m = _INTERVAL.fullmatch(value)
    if m is None:
        raise StreamArgumentError(argument, f"{value!r} is not <positive integer><unit>, unit one of Y, M, D, h, m, s")
    n = int(m.group(1))
    if n <= 0:
        raise StreamArgumentError(argument, f"{value!r}: the amount must be positive")
    return n * _UNIT_MS[m.group(2)]


def parse_stream_offset(value: Any, argument: str = "x-stream-offset") -> OffsetSpec:
    """An ``x-stream-offset`` as an AMQP client sends it (string, integer or timestamp)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        named = _NAMED.get(value)
        if named is not None:
            return named
        if _INTERVAL.fullmatch(value):
            return OffsetSpec("interval", parse_interval_ms(argument, value))
        raise StreamArgumentError(
            argument, f"{value!r} is not first, last, next, an offset, a timestamp or an interval such as '1h'")
    if isinstance(value, datetime):  # an AMQP timestamp (naive: UTC, never the local zone)
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return OffsetSpec("timestamp", int(value.timestamp() * 1000))
    if _is_int(value):
        if value < 0:
            raise StreamArgumentError(argument, f"offset {value} is negative")
        return OffsetSpec("offset", value)
    raise StreamArgumentError(argument, f"unsupported type {type(value).__name__}")


def parse_stomp_stream_offset(text: str, argument: str = "x-stream-offset") -> OffsetSpec:
    """An ``x-stream-offset`` STOMP header: as for AMQP, plus ``offset=<n>``,
    ``timestamp=<unix seconds>`` and a bare decimal offset."""
    for prefix, kind, scale in (("offset=", "offset", 1), ("timestamp=", "timestamp", 1000)):
        if text.startswith(prefix):
            digits = text[len(prefix):]
            if not (digits.isascii() and digits.isdigit()):
                raise StreamArgumentError(argument, f"{text!r}: expected {prefix}<non-negative integer>")
            return OffsetSpec(kind, int(digits) * scale)
    if text.isascii() and text.isdigit():
        return OffsetSpec("offset", int(text))
    if text.startswith("-") and text[1:].isdigit():
        raise StreamArgumentError(argument, f"offset {text} is negative")
    return parse_stream_offset(text, argument)


def _non_neg_int(argument: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    if not _is_int(value):
        raise StreamArgumentError(argument, f"expected an integer, got {type(value).__name__}")
    if value < minimum:
        raise StreamArgumentError(argument, f"{value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise StreamArgumentError(argument, f"{value} is above the maximum {maximum}")
    return value  # type: ignore[no-any-return]


def parse_max_length_bytes(value: Any, argument: str = "x-max-length-bytes") -> int:
    return _non_neg_int(argument, value)


def parse_max_age(value: Any, argument: str = "x-max-age") -> int:
    """``x-max-age`` in milliseconds."""
    return parse_interval_ms(argument, value)


def parse_max_segment_size(value: Any, argument: str = "x-stream-max-segment-size-bytes") -> int:
    return _non_neg_int(argument, value, 1, MAX_SEGMENT_BYTES)


def parse_filter_size(value: Any, argument: str = FILTER_SIZE_ARG) -> int:
    return _non_neg_int(argument, value, MIN_FILTER_BYTES, MAX_FILTER_BYTES)


def _text(value: Any) -> Any:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


def parse_stream_filter(args: Mapping[str, Any], stomp: bool = False) -> StreamFilter | None:
    """A consumer's ``x-stream-filter`` and ``x-stream-match-unfiltered`` (STOMP headers are text:
    a comma-separated list, ``true``/``false``); None without a filter."""
    raw = _text(args.get(FILTER_ARG))
    match = _text(args.get(MATCH_UNFILTERED_ARG, False))
    if isinstance(match, str) and stomp:
        match = {"true": True, "false": False}.get(match.lower(), match)
    if not isinstance(match, bool):
        raise StreamArgumentError(MATCH_UNFILTERED_ARG, f"expected true or false, got {match!r}")
    if raw is None:
        return None
    if isinstance(raw, str):
        values = [v.strip() for v in raw.split(",")] if stomp else [raw]
    elif isinstance(raw, (list, tuple)):
        values = [_text(v) for v in raw]
    else:
        raise StreamArgumentError(FILTER_ARG, f"expected a string or a list of strings, got {type(raw).__name__}")
    for v in values:
        if not isinstance(v, str) or not v:
            raise StreamArgumentError(FILTER_ARG, f"filter values must be non-empty strings, got {v!r}")
    return StreamFilter(frozenset(values), match)


def stream_settings(args: Mapping[str, Any] | None) -> StreamSettings:
    """The retention/segment settings of a stream from its queue arguments (validated)."""
    args = args or {}
    max_bytes = args.get("x-max-length-bytes")
    max_age = args.get("x-max-age")
    seg = args.get("x-stream-max-segment-size-bytes")
    filter_bytes = args.get(FILTER_SIZE_ARG)
    return StreamSettings(
        max_bytes=None if max_bytes is None else parse_max_length_bytes(max_bytes),
        max_age_ms=None if max_age is None else parse_max_age(max_age),
        segment_bytes=DEFAULT_SEGMENT_BYTES if seg is None else parse_max_segment_size(seg),
        filter_bytes=DEFAULT_FILTER_BYTES if filter_bytes is None else parse_filter_size(filter_bytes),
    )


def resolve_offset(spec: OffsetSpec, log: StreamLog, now: float) -> int:
    """The offset a consumer with ``spec`` reads first, given the log's state and the broker's clock
    ``now`` (seconds). Offsets below the log's first (removed by retention) start at the first; past
    the end, at the next offset to be appended (the consumer waits there)."""
    kind = spec.kind
    if kind == "first":
        return log.first
    if kind == "next":
        return log.tail
    if kind == "last":
        return log.last_chunk if log.last_chunk >= 0 else log.tail
    if kind == "offset":
        return min(max(spec.value, log.first), log.tail)
    if kind == "timestamp":
        return log.offset_at(spec.value)
    if kind == "interval":
        return log.offset_at(int(now * 1000) - spec.value)
    raise ValueError(f"unknown offset spec {spec!r}")
