"""The "sansmq" format's options, parsed and checked once on the driver.

Bad values fail here with a message naming the option, before any task starts. Names follow
Spark's Kafka source where the meaning is the same (startingOffsets, endingOffsets,
maxRecordsPerTrigger, minPartitions).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .client import parse_url

__all__ = ["ReadOptions", "WriteOptions", "OptionError", "parse_offsets_spec", "check_offsets_spec"]

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class OptionError(ValueError):
    """An option of the sansmq format is missing or has a bad value."""


def _int(options: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _url(options: Mapping[str, str]) -> str:
    url = options.get("url", DEFAULT_URL)
    try:
        parse_url(url)
    except ValueError as exc:
        raise OptionError(f"option url: {exc}") from None
    return url


def _streams(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("stream")
    if not raw:
        raise OptionError('option "stream" is required (one name, or several as "a,b,c")')
    names = tuple(s.strip() for s in raw.split(","))
    if any(not n for n in names) or len(set(names)) != len(names):
        raise OptionError(f'option stream must be distinct non-empty names separated by commas, got {raw!r}')
    return names


OffsetsSpec = str | dict[str, int]


def parse_offsets_spec(name: str, raw: str | None, default: str, streams: tuple[str, ...]) -> OffsetsSpec:
    """``earliest`` | ``latest`` | JSON ``{"stream": offset}`` (-2 = earliest, -1 = latest, as Kafka).
    The names are checked once partitioned streams are expanded (``check_offsets_spec``)."""
    if raw is None:
        return default
    text = raw.strip()
    if text in ("earliest", "latest"):
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(f'option {name} must be "earliest", "latest" or JSON such as '
                          f'{{"{streams[0]}": 42}}, got {raw!r}') from None
    if not isinstance(value, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= -2
                                              for v in value.values()):
        raise OptionError(f"option {name}: JSON must map stream names to offsets >= 0 "
                          f"(-2 earliest, -1 latest), got {raw!r}")
    return {str(k): int(v) for k, v in value.items()}


def check_offsets_spec(name: str, spec: OffsetsSpec, streams: tuple[str, ...]) -> None:
    unknown = set(spec) - set(streams) if isinstance(spec, dict) else set()
    if unknown:
        raise OptionError(f"option {name} names streams that are not read: {sorted(unknown)} "
                          f"(reading {list(streams)})")


@dataclass(frozen=True)
class ReadOptions:
    url: str
    streams: tuple[str, ...]
    starting: OffsetsSpec
    ending: OffsetsSpec
    max_records_per_trigger: int | None
    max_records_per_partition: int
    min_partitions: int
    prefetch: int
    batch_rows: int
    timeout: float
    probe_ms: int
    idle_wait_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        streams = _streams(options)
        mrt = options.get("maxRecordsPerTrigger")
        return cls(
            url=_url(options),
            streams=streams,
            starting=parse_offsets_spec("startingOffsets", options.get("startingOffsets"), "earliest", streams),
            ending=parse_offsets_spec("endingOffsets", options.get("endingOffsets"), "latest", streams),
            max_records_per_trigger=None if mrt is None else _int(options, "maxRecordsPerTrigger", 0),
            max_records_per_partition=_int(options, "maxRecordsPerPartition", 50_000),
            min_partitions=_int(options, "minPartitions", 1),
            prefetch=_int(options, "prefetch", 2000, minimum=2),
            batch_rows=_int(options, "batchRows", 10_000),
            timeout=float(_int(options, "timeoutMs", 30_000)) / 1000.0,
            probe_ms=_int(options, "endProbeMs", 200),
            idle_wait_ms=_int(options, "idleWaitMs", 2000),
        )


@dataclass(frozen=True)
class WriteOptions:
    url: str
    exchange: str
    routing_key: str | None  # fixed key (the stream's name for option stream); None: the column
    target_stream: str | None
    confirm_window: int
    timeout: float
    producer: str | None  # a fixed x-producer prefix; default: derived from the query id

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        if "body" not in columns:
            raise OptionError(f'the sansmq sink needs a "body" column (binary or string); the '
                              f'DataFrame has {columns}')
        stream, exchange = options.get("stream"), options.get("exchange")
        if bool(stream) == (exchange is not None):
            raise OptionError('the sansmq sink needs exactly one of option "stream" (publish to '
                              'that stream) or option "exchange" (publish there with a routing_key)')
        routing_key = options.get("routingKey")
        if exchange is not None and routing_key is None and "routing_key" not in columns:
            raise OptionError('with option exchange, give option routingKey or a "routing_key" column')
        return cls(
            url=_url(options),
            exchange=exchange or "",
            routing_key=stream if stream else routing_key,
            target_stream=stream or None,
            confirm_window=_int(options, "confirmWindow", 1000),
            timeout=float(_int(options, "timeoutMs", 30_000)) / 1000.0,
            producer=options.get("producerId"),
        )
