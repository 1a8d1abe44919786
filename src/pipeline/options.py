"""The "sansmq" format's options, parsed and checked once on the driver.

Bad values fail here with a message naming the option, before any task starts. Names follow
Spark's Kafka source where the meaning is the same (startingOffsets, endingOffsets, failOnDataLoss,
minPartitions), and Kafka's own names are accepted as aliases (maxOffsetsPerTrigger, subscribe,
topic). Spark hands a data source its options case-insensitively (lower-cased keys), so names are
matched without regard to case; an unknown name is refused with the list of known ones, since a
misspelt option silently ignored (``failOnDataLos=false``) is a setting the user never got.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .driver import endpoint
from .listing import check_management_url, default_management_url

__all__ = ["ReadOptions", "WriteOptions", "OptionError", "parse_offsets_spec", "check_offsets_spec",
           "READ_OPTIONS", "WRITE_OPTIONS"]

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

#: every option a reader takes; ``ALIASES`` maps Kafka's names onto them
READ_OPTIONS = ("url", "stream", "startingOffsets", "endingOffsets", "failOnDataLoss", "startingTimestamp",
                "startingOffsetsByTimestamp", "maxRecordsPerTrigger", "minRecordsPerTrigger", "maxTriggerDelay",
                "maxBytesPerTrigger",
                "maxRecordsPerPartition", "minPartitions", "prefetch", "batchRows", "endProbeMs", "idleWaitMs",
                "timeoutMs", "retryDeadlineMs", "subscribePattern", "managementUrl", "filter", "filterPushdown")
WRITE_OPTIONS = ("url", "stream", "exchange", "routingKey", "confirmWindow", "producerId", "timeoutMs",
                 "retryDeadlineMs")
ALIASES = {"maxOffsetsPerTrigger": "maxRecordsPerTrigger", "minOffsetsPerTrigger": "minRecordsPerTrigger",
           "subscribe": "stream", "topic": "stream"}
#: what Spark itself puts among a streaming sink's options
SPARK_OPTIONS = ("checkpointLocation", "queryName")


class OptionError(ValueError):
    """An option of the sansmq format is missing or has a bad value."""


def canonical(options: Mapping[str, str], known: tuple[str, ...], side: str) -> dict[str, str]:
    """The options keyed by their canonical names (aliases resolved, any case); OptionError for a
    name that is not an option of ``side`` or an option given twice under two names."""
    by_lower = {name.lower(): name for name in known}
    by_lower.update({alias.lower(): name for alias, name in ALIASES.items() if name in known})
    spark = {name.lower() for name in SPARK_OPTIONS}
    out: dict[str, str] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower())
        if name is None:
            if key.lower() in spark:
                continue
            aliases = ", ".join(f"{a} (= {n})" for a, n in ALIASES.items() if n in known)
            raise OptionError(f"unknown option {key!r} for the sansmq {side}; known options: {', '.join(known)}; "
                              f"Kafka's names: {aliases}")
        if name in out:
            raise OptionError(f"option {name} is given twice (as {key!r} and under another name)")
        out[name] = value
    return out


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


def _optional_int(options: Mapping[str, str], name: str) -> int | None:
    return None if options.get(name) is None else _int(options, name, 0)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return text == "true"


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(options: Mapping[str, str], name: str, default: float) -> float:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``, ``1h``), in seconds."""
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    number, unit = text.rstrip("abcdefghijklmnopqrstuvwxyz"), text.lstrip("0123456789")
    if not number or number + unit != text or unit not in _UNITS:
        raise OptionError(f"option {name} must be a duration such as 15m, 30s or 500ms, got {raw!r}")
    return int(number) * _UNITS[unit]


def _management_url(options: Mapping[str, str]) -> str:
    raw = options.get("managementUrl")
    if raw is None:
        return default_management_url(endpoint(_url(options)))
    try:
        return check_management_url(raw)
    except ValueError as exc:
        raise OptionError(f"option managementUrl {exc}") from None


def _retry_deadline(options: Mapping[str, str]) -> float:
    return _int(options, "retryDeadlineMs", 60_000, minimum=0) / 1000.0


def _url(options: Mapping[str, str]) -> str:
    url = options.get("url", DEFAULT_URL)
    try:
        endpoint(url)
    except ValueError as exc:
        raise OptionError(f"option url: {exc}") from None
    return url


def _pattern(options: Mapping[str, str]) -> str | None:
    raw = options.get("subscribePattern")
    if raw is None:
        return None
    if options.get("stream"):
        raise OptionError('give one of option "stream" and option "subscribePattern", not both (as Kafka)')
    try:
        re.compile(raw)
    except re.error as exc:
        raise OptionError(f"option subscribePattern is not a regular expression: {exc}") from None
    return raw


def _streams(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("stream")
    if not raw and options.get("subscribePattern") is not None:
        return ()  # found on the broker (listing.matching_streams)
    if not raw:
        raise OptionError('option "stream" is required (one name, or several as "a,b,c"), or option '
                          '"subscribePattern"')
    names = tuple(s.strip() for s in raw.split(","))
    if any(not n for n in names) or len(set(names)) != len(names):
        raise OptionError(f'option stream must be distinct non-empty names separated by commas, got {raw!r}')
    return names


def _filter(options: Mapping[str, str]) -> tuple[str, ...] | None:
    raw = options.get("filter")
    if raw is None:
        return None
    values = tuple(sorted({v.strip() for v in raw.split(",")}))
    if not all(values):
        raise OptionError(f"option filter must be stream filter values separated by commas, got {raw!r}")
    return values


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
                          f'{{"{streams[0] if streams else "events"}": 42}}, got {raw!r}') from None
    if not isinstance(value, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= -2
                                              for v in value.values()):
        raise OptionError(f"option {name}: JSON must map stream names to offsets >= 0 "
                          f"(-2 earliest, -1 latest), got {raw!r}")
    return {str(k): int(v) for k, v in value.items()}


def parse_starting_times(options: Mapping[str, str]) -> int | dict[str, int] | None:
    """``startingTimestamp`` (ms since the epoch, every stream) or ``startingOffsetsByTimestamp``
    (JSON ``{"stream": ms}``); the first wins, as in Spark's Kafka source (over startingOffsets too)."""
    raw = options.get("startingTimestamp")
    if raw is not None:
        return _int(options, "startingTimestamp", 0, minimum=0)
    raw = options.get("startingOffsetsByTimestamp")
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value.values()):
        raise OptionError('option startingOffsetsByTimestamp must be JSON mapping stream names to times in ms '
                          f'since the epoch, such as {{"events": 1767225600000}}, got {raw!r}')
    return {str(k): int(v) for k, v in value.items()}


def check_offsets_spec(name: str, spec: OffsetsSpec, streams: tuple[str, ...]) -> None:
    unknown = set(spec) - set(streams) if isinstance(spec, dict) else set()
    if unknown:
        raise OptionError(f"option {name} names streams that are not read: {sorted(unknown)} "
                          f"(reading {list(streams)})")


def _means(spec: OffsetsSpec, which: str, code: int) -> bool:
    """``spec`` asks for ``which`` (earliest/latest) for some stream, by name or by its JSON code."""
    return spec == which or (isinstance(spec, dict) and code in spec.values())


@dataclass(frozen=True)
class ReadOptions:
    url: str
    streams: tuple[str, ...]
    starting: OffsetsSpec
    #: startingTimestamp (int) or startingOffsetsByTimestamp (per stream), ms; over ``starting``
    starting_times: int | dict[str, int] | None
    ending: OffsetsSpec
    ending_given: bool
    fail_on_data_loss: bool
    max_records_per_trigger: int | None
    min_records_per_trigger: int | None
    max_trigger_delay: float  # seconds a micro-batch waits at most for min_records_per_trigger
    #: maxBytesPerTrigger: a micro-batch's records take at most this many bytes on the broker
    max_bytes_per_trigger: int | None
    max_records_per_partition: int | None  # None: a stream's range is one task (Kafka's default)
    min_partitions: int | None
    prefetch: int
    batch_rows: int
    timeout: float
    probe_ms: int
    idle_wait_ms: int
    retry_deadline: float  # seconds a broker may be away before a query fails
    pattern: str | None  # subscribePattern: the streams whose names match, found on the broker
    management_url: str  # where the management API lists them
    #: the stream filter values read (option filter, or pushed down from a predicate on column
    #: ``filter``); None: every message
    filter: tuple[str, ...] | None = None
    #: the batch reader takes predicates on column ``filter`` (PySpark's pushFilters)
    filter_pushdown: bool = True
    #: the columns read, in the order of the schema the query gave (None: all of them)
    columns: tuple[str, ...] | None = None
    #: the session's default parallelism (its cores), for planning without minPartitions
    parallelism: int = 1

    @classmethod
    def parse(cls, given: Mapping[str, str]) -> ReadOptions:
        options = canonical(given, READ_OPTIONS, "source")
        streams = _streams(options)
        return cls(
            url=_url(options),
            streams=streams,
            starting=parse_offsets_spec("startingOffsets", options.get("startingOffsets"), "earliest", streams),
            starting_times=parse_starting_times(options),
            ending=parse_offsets_spec("endingOffsets", options.get("endingOffsets"), "latest", streams),
            ending_given="endingOffsets" in options,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_records_per_trigger=_optional_int(options, "maxRecordsPerTrigger"),
            min_records_per_trigger=_optional_int(options, "minRecordsPerTrigger"),
            max_trigger_delay=_duration(options, "maxTriggerDelay", 900.0),
            max_bytes_per_trigger=_optional_int(options, "maxBytesPerTrigger"),
            max_records_per_partition=_optional_int(options, "maxRecordsPerPartition"),
            min_partitions=_optional_int(options, "minPartitions"),
            prefetch=_int(options, "prefetch", 2000, minimum=2),
            batch_rows=_int(options, "batchRows", 10_000),
            timeout=float(_int(options, "timeoutMs", 30_000)) / 1000.0,
            probe_ms=_int(options, "endProbeMs", 200),
            idle_wait_ms=_int(options, "idleWaitMs", 2000),
            retry_deadline=_retry_deadline(options),
            pattern=_pattern(options),
            management_url=_management_url(options),
            filter=_filter(options),
            filter_pushdown=_bool(options, "filterPushdown", True),
        )

    def for_batch(self) -> ReadOptions:
        """Kafka's rules for a batch read: it cannot start at latest nor end at earliest."""
        if _means(self.starting, "latest", -1):
            raise OptionError("option startingOffsets cannot be latest (-1) for a batch read "
                              "(it would read nothing); use earliest or offsets")
        if _means(self.ending, "earliest", -2):
            raise OptionError("option endingOffsets cannot be earliest (-2) for a batch read; use latest or offsets")
        return self

    def for_stream(self) -> ReadOptions:
        """Kafka's rules for a streaming read: it has no end; a minimum per trigger is at most the
        maximum."""
        low, high = self.min_records_per_trigger, self.max_records_per_trigger
        if low is not None and high is not None and low > high:
            raise OptionError(f"option minOffsetsPerTrigger ({low}) is above maxOffsetsPerTrigger ({high})")
        if self.ending_given:
            raise OptionError("option endingOffsets is for batch reads (spark.read) only: a streaming query "
                              "reads on as the streams grow (use trigger(availableNow=True) to stop at the end)")
        return self


@dataclass(frozen=True)
class WriteOptions:
    url: str
    exchange: str
    routing_key: str | None  # fixed key (the stream's name for option stream); None: the column
    target_stream: str | None
    confirm_window: int
    timeout: float
    producer: str | None  # a fixed x-producer prefix; default: derived from the query id
    retry_deadline: float

    @classmethod
    def parse(cls, given: Mapping[str, str], columns: Mapping[str, str]) -> WriteOptions:
        """``columns``: the DataFrame's column names and types (Spark's simple strings)."""
        options = canonical(given, WRITE_OPTIONS, "sink")
        check_sink_columns(columns)
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
            retry_deadline=_retry_deadline(options),
        )


#: the columns the sink publishes and the types each may have (other columns are not published)
SINK_COLUMNS = {"body": ("binary", "string"), "routing_key": ("string",), "content_type": ("string",),
                "headers": ("map<string,string>",)}


def check_sink_columns(columns: Mapping[str, str]) -> None:
    """The sink's columns have types it can publish as they are: an integer ``body`` would otherwise
    go out as ``bytes(n)``, n zero bytes."""
    if "body" not in columns:
        raise OptionError(f'the sansmq sink needs a "body" column (binary or string); the '
                          f'DataFrame has {list(columns)}')
    for name, allowed in SINK_COLUMNS.items():
        kind = columns.get(name)
        if kind is not None and kind not in allowed:
            raise OptionError(f'the sansmq sink\'s column "{name}" must be {" or ".join(allowed)}, not {kind} '
                              f'(cast it, e.g. cast({name} as {allowed[-1]}))')
