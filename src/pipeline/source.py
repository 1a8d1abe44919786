"""The reading side of format "sansmq": batch and micro-batch readers over stream queues.

Offsets are ``{"stream": next_offset}``, as Spark's Kafka source keeps ``{"topic": {"p": n}}``.
A micro-batch [start, end) per stream is one Spark partition, cut into pieces only as options
maxRecordsPerPartition and minPartitions ask (``plan_ranges``, Kafka's rules); a task consumes
with ``x-stream-offset: start`` (non-destructive: acks only grant credit) and stops at ``end``.
Rows leave the task as Arrow record batches, decoded from the socket's bytes straight into
columns (``bulk``, ``columns``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    In,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import identity
from .admission import cap_bytes, require_byte_ranges
from .bulk import read_stream_range
from .columns import ARROW_SCHEMA, COLUMNS, SCHEMA_DDL, flat_headers
from .dataloss import LossPolicy
from .driver import Driver, StreamNotFound, endpoint
from .leaders import leader_urls
from .listing import matching_streams
from .metrics import SKIPPED_KEY, log_lag
from .offsets import (
    cap_total,
    default_min_partitions,
    group_ranges,
    offset_at_time,
    plan_ranges,
    stream_end,
    stream_first,
    wait_for_new,
)
from .options import OffsetsSpec, OptionError, ReadOptions, check_offsets_spec
from .pool import EXECUTOR_POOL
from .retry import Outage, with_retries

log = logging.getLogger("pipeline.source")

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "StreamRange", "StreamRanges", "BatchReader", "PushdownBatchReader",
           "StreamReader", "read_range", "flat_headers", "pushed_values"]

@dataclass
class StreamRange(InputPartition):
    """One task's work: offsets [start, end) of one stream, read through ``url`` when given (the
    hosts with the stream's leader first: ``leaders``)."""

    stream: str
    start: int
    end: int
    url: str | None = None

    def __init__(self, stream: str, start: int, end: int, url: str | None = None) -> None:
        super().__init__((stream, start, end))
        self.stream, self.start, self.end, self.url = stream, start, end, url


class StreamRanges(InputPartition):
    """One task's work when a read has more stream ranges than the session has cores (a partitioned
    stream): several ``StreamRange`` read in turn."""

    def __init__(self, ranges: list[StreamRange]) -> None:
        super().__init__(tuple(r.value for r in ranges))
        self.ranges = ranges


def read_range(opts: ReadOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Offsets [part.start, part.end) of one stream as record batches of at most batch_rows rows
    (of each of its ranges in turn for ``StreamRanges``)."""
    if isinstance(part, StreamRanges):
        for one in part.ranges:
            yield from read_range(opts, one)
        return
    if not isinstance(part, StreamRange):
        return  # nothing to read: for an empty plan Spark still runs one task, on InputPartition(None)
    start = part.start
    names = opts.columns or tuple(COLUMNS)
    outage: Outage | None = None
    while start < part.end:
        try:
            with EXECUTOR_POOL.client(part.url or opts.url, opts.timeout) as conn:  # the leader's node first
                for cols in read_stream_range(conn, part.stream, start, part.end, opts.prefetch, opts.batch_rows,
                                              opts.timeout, LossPolicy(opts.fail_on_data_loss), opts.filter,
                                              headers="headers" in names):
                    start = cols.offset[-1] + 1  # go on after it
                    yield cols.batch(part.stream, names, opts.filter)
                    outage = None
            return
        except Exception as exc:  # the broker went away: read on from the next offset on a new connection
            outage = outage or Outage(opts.retry_deadline, f"reading {part.stream!r} from offset {start}")
            outage.wait(exc)


def pushed_values(filters: list[Filter]) -> set[str] | None:
    """The filter values that predicates on column ``filter`` allow (= and IN, several: all of
    them hold), None when none constrains it."""
    allowed: set[str] | None = None
    for f in filters:
        if isinstance(f, (EqualTo, EqualNullSafe)):
            values: tuple[Any, ...] = (f.value,)
        elif isinstance(f, In):
            values = tuple(f.value)
        else:
            continue
        if f.attribute != ("filter",) or not all(isinstance(v, str) for v in values):
            continue
        allowed = set(values) if allowed is None else allowed & set(values)
    return allowed


@dataclass(frozen=True)
class Bounds:
    """A stream's first retained offset and its end, as the driver saw them."""

    first: int
    end: int


def bounds(client: Driver, opts: ReadOptions) -> dict[str, Bounds]:
    out = {}
    for s in opts.streams:
        end = stream_end(client, s, opts.probe_ms)
        out[s] = Bounds(stream_first(client, s, end), end)
    return out


def _resolve(spec: OffsetsSpec, streams: tuple[str, ...], missing: int, seen: Mapping[str, Bounds]) -> dict[str, int]:
    """An offsets option as concrete offsets per stream: earliest is the first offset retention
    kept, latest the end; ``missing`` (-2 or -1) for a stream the JSON does not name."""
    out = {}
    for s in streams:
        value = {"earliest": -2, "latest": -1}[spec] if isinstance(spec, str) else spec.get(s, missing)
        out[s] = seen[s].first if value == -2 else seen[s].end if value == -1 else value
    return out


def partitions_from(client: Driver, name: str, first: int) -> list[str]:
    """The partitions ``NAME-<first>``, ``NAME-<first + 1>``, ... of a partitioned stream that exist."""
    out: list[str] = []
    while True:
        try:
            client.status(f"{name}-{first + len(out)}")
        except StreamNotFound:
            return out
        out.append(f"{name}-{first + len(out)}")


def resolve_streams(client: Driver, names: tuple[str, ...]) -> tuple[str, ...]:
    """Each name as itself if it is a queue, else as a partitioned stream's partitions NAME-0,
    NAME-1, ... (what the partitioned-stream command creates); StreamNotFound if neither."""
    out: list[str] = []
    for name in names:
        try:
            client.status(name)
            out.append(name)
            continue
        except StreamNotFound as missing:
            error = missing
        parts = len(found := partitions_from(client, name, 0))
        out.extend(found)
        if not parts:
            raise StreamNotFound(error.reply_code, f"{error.reply_text} (nor a partitioned stream {name}-0..)",
                                 error.method, error.channel)
    return tuple(out)


def starting_offsets(client: Driver, opts: ReadOptions, seen: Mapping[str, Bounds]) -> dict[str, int]:
    """Where a query starts: startingOffsets, or for the streams a starting time names, the first
    offset appended at or after it (none: an error, as Kafka's default strategy)."""
    start = _resolve(opts.starting, opts.streams, -2, seen)
    times = opts.starting_times
    for s in opts.streams:
        ms = times if isinstance(times, int) else None if times is None else times.get(s)
        if ms is None:
            continue
        found = offset_at_time(client, s, ms, seen[s].end, opts.probe_ms / 1000.0)
        if found is None:
            when = datetime.fromtimestamp(ms / 1000, UTC).isoformat()
            raise OptionError(f"option startingTimestamp/startingOffsetsByTimestamp: stream {s!r} has no record "
                              f"appended at or after {ms} ({when}); its end is offset {seen[s].end}")
        start[s] = max(found, seen[s].first)
    return start


def resolved(client: Driver, opts: ReadOptions) -> ReadOptions:
    """``opts`` with partitioned streams expanded (or the streams subscribePattern matches found)
    and the offsets options checked against them."""
    streams = matching(opts, opts.pattern) if opts.pattern is not None else resolve_streams(client, opts.streams)
    check_offsets_spec("startingOffsets", opts.starting, streams)
    if isinstance(opts.starting_times, dict):
        check_offsets_spec("startingOffsetsByTimestamp", opts.starting_times, streams)
    check_offsets_spec("endingOffsets", opts.ending, streams)
    return replace(opts, streams=streams)


def matching(opts: ReadOptions, pattern: str) -> tuple[str, ...]:
    return matching_streams(opts.management_url, endpoint(opts.url), pattern, opts.timeout)


def plan(opts: ReadOptions, start: Mapping[str, int], end: Mapping[str, int]) -> list[InputPartition]:
    """The tasks of a batch; each reads its stream on the cluster node that leads it, if known.
    Without minPartitions and maxRecordsPerPartition, a read of more stream ranges than it is worth
    tasks (the session's cores, each task at least ``MIN_ROWS_PER_TASK`` rows) reads several ranges
    per task: several partitions cost no more task start-ups than one stream of the same rows."""
    urls = leader_urls(opts.url, opts.streams, opts.timeout)
    ranges = {s: (start.get(s, 0), end.get(s, 0)) for s in opts.streams}
    least = opts.min_partitions
    if least is None:  # the session's cores, without cutting below a task's worth
        least = default_min_partitions(sum(max(0, hi - lo) for lo, hi in ranges.values()), opts.parallelism)
    cut = plan_ranges(ranges, opts.max_records_per_partition, least)
    if opts.min_partitions is None and opts.max_records_per_partition is None:
        groups = group_ranges(cut, least)
    else:
        groups = [[t] for t in cut]  # as asked: Kafka's rules
    parts = [[StreamRange(s, lo, hi, urls.get(s)) for s, lo, hi in g] for g in groups]
    return [p[0] if len(p) == 1 else StreamRanges(p) for p in parts]


def batch_range(opts: ReadOptions, seen: Mapping[str, Bounds],
                start: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """A batch read's [start, end) per stream, checked against the streams as they are: an end past
    a stream's end or before the start is refused; a start below the first retained offset is data
    loss (fails, or starts at the first offset with failOnDataLoss=false)."""
    end = _resolve(opts.ending, opts.streams, -1, seen)
    policy = LossPolicy(opts.fail_on_data_loss)
    for s in opts.streams:
        if end[s] > seen[s].end:
            raise OptionError(f"option endingOffsets: {end[s]} for stream {s!r} is past its end {seen[s].end}")
        if start[s] > end[s]:
            raise OptionError(f"option startingOffsets: {start[s]} for stream {s!r} is after its ending "
                              f"offset {end[s]}")
        cut = min(seen[s].first, end[s])
        if start[s] < cut:
            policy.removed(s, start[s], cut)
            start[s] = cut
    return start, end


class BatchReader(DataSourceReader):
    """``spark.read.format("sansmq")``: the range startingOffsets..endingOffsets, fixed when planned."""

    def __init__(self, opts: ReadOptions) -> None:
        def plan_range() -> tuple[ReadOptions, dict[str, int], dict[str, int]]:
            with Driver(opts.url, opts.timeout) as client:
                full = resolved(client, opts)
                seen = bounds(client, full)
                return (full, *batch_range(full, seen, starting_offsets(client, full, seen)))
        self.opts, self.start, self.end = with_retries(plan_range, opts.retry_deadline, "planning the batch read")

    def partitions(self) -> list[InputPartition]:  # type: ignore[override]
        return plan(self.opts, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self.opts, partition)


class PushdownBatchReader(BatchReader):
    """A batch reader that takes predicates on column ``filter`` (``=``, ``IN``; PySpark's
    pushFilters, which needs ``spark.sql.python.filterPushdown.enabled``): only the chunks holding
    those values are read from the broker. Spark still evaluates every predicate (none is reported
    handled), so results are exact whatever the broker sends."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # type: ignore[override]
        values = pushed_values(filters)
        if values is not None:
            if self.opts.filter is not None:
                values &= set(self.opts.filter)
            self.opts = replace(self.opts, filter=tuple(sorted(values)))
        return filters


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("sansmq")``: micro-batches of new offsets.

    The driver keeps one connection for learning ends; it is not pickled to executors. It connects
    on the first call Spark makes, not in the constructor: PySpark 4 masks an exception raised
    while it constructs a stream reader with its own UnboundLocalError (its ``finally:
    reader.stop()``), so an unreachable broker or a missing stream would not be named.

    Offsets that are gone are found on the driver when a micro-batch is planned (``partitions``):
    a start below the stream's first retained offset, a start past the stream's end, a deleted
    stream; each task checks its own range again (retention may run in between).
    """

    def __init__(self, opts: ReadOptions) -> None:
        self._given = opts
        self._resolved: ReadOptions | None = None
        self._client: Driver | None = None
        self._target: dict[str, int] | None = None  # availableNow: ends fixed when the query began
        self._latest_seen: dict[str, int] | None = None  # each stream's end, as the last trigger saw it
        self._last_batch: float | None = None  # when the last batch was let through (minOffsetsPerTrigger)
        self._policy = LossPolicy(opts.fail_on_data_loss)
        self._gone: set[str] = set()  # deleted streams left out (failOnDataLoss=false)

    @property
    def opts(self) -> ReadOptions:
        """The options with partitioned streams expanded (on the driver's first call)."""
        if self._resolved is None:
            given = self._given.for_stream()  # before connecting: a bad option is named first
            self._resolved = self._on_driver(lambda client: resolved(client, self._checked(client, given)))
        return self._resolved

    @staticmethod
    def _checked(client: Driver, opts: ReadOptions) -> ReadOptions:
        """``opts``, once the broker is known to serve them (maxBytesPerTrigger needs sansmq)."""
        if opts.max_bytes_per_trigger is not None:
            require_byte_ranges(client)
        return opts

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _driver_client(self) -> Driver:
        if self._client is None:
            self._client = Driver(self._given.url, self._given.timeout)
        return self._client

    def _on_driver(self, work: Any) -> Any:
        """``work(client)`` on the driver's connection, retried on a new one while the broker is
        away (up to retryDeadlineMs); after any failure the next call starts on a fresh connection."""
        def attempt() -> Any:
            try:
                return work(self._driver_client())
            except BaseException:
                self._drop_client()
                raise
        return with_retries(attempt, self._given.retry_deadline, "the stream source on the driver")

    def _ends(self, start: Mapping[str, int]) -> dict[str, int]:
        """Each stream's end; a deleted stream is data loss (with failOnDataLoss=false: skipped, its
        end taken as ``start``)."""
        def ends(client: Driver) -> dict[str, int]:
            out = {}
            for s in self.opts.streams:
                try:
                    out[s] = start.get(s, 0) if s in self._gone else stream_end(client, s, self.opts.probe_ms)
                except StreamNotFound as gone:
                    self._policy.deleted(s, str(gone))
                    self._gone.add(s)
                    out[s] = start.get(s, 0)
            return out
        result: dict[str, int] = self._on_driver(ends)
        return result

    def _discover(self, client: Driver) -> None:
        """Partitions added to a partitioned stream while the query runs join it, and so do new
        streams subscribePattern matches; they are read from their first offset, as Kafka's source
        reads new partitions from earliest."""
        streams = self.opts.streams
        added: list[str] = []
        if self.opts.pattern is not None:  # streams created since that match
            added += [s for s in matching(self.opts, self.opts.pattern) if s not in streams]
        for name in self._given.streams:
            if name in streams:
                continue  # a stream, not a partitioned one
            have = sum(1 for s in streams if s.startswith(f"{name}-") and s[len(name) + 1:].isdigit())
            added += partitions_from(client, name, have)
        if added:
            log.info("new partitions %s: read from their first offsets", added)
            self._resolved = replace(self.opts, streams=streams + tuple(added))

    def _idle_wait(self, start: dict[str, int]) -> bool:
        """Nothing new: wait (pushed, not polled) up to idleWaitMs for the next message."""
        found: bool = self._on_driver(lambda client: wait_for_new(
            client, {s: start.get(s, 0) for s in self.opts.streams if s not in self._gone},
            self.opts.idle_wait_ms / 1000.0))
        return found

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def initialOffset(self) -> dict[str, int]:
        opts = self.opts
        def initial(client: Driver) -> dict[str, Any]:
            start = starting_offsets(client, opts, bounds(client, opts))
            return identity.join(start, identity.stamps_for(client, start, ({}, {})))
        offsets: dict[str, Any] = self._on_driver(initial)
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends({})

    def getDefaultReadLimit(self) -> ReadLimit:
        """PySpark 4.3 takes one limit (no composite as Kafka's): the bytes maximum if given, else
        the rows maximum, else the minimum. Whatever the limit, both maximums are applied here
        (``_capped``: the smaller wins), and the minimum with its maxTriggerDelay."""
        high, low = self.opts.max_records_per_trigger, self.opts.min_records_per_trigger
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        if high is not None:
            return ReadMaxRows(high)
        return ReadAllAvailable() if low is None else ReadMinRows(low)

    def _delay_batch(self, start: Mapping[str, int], end: Mapping[str, int], limit: ReadLimit) -> bool:
        """Kafka's minOffsetsPerTrigger: hold the batch back while fewer records than the minimum
        are new and maxTriggerDelay has not passed since the last batch (the first batch is never
        held; availableNow and Trigger.Once, which read all available, are not held either)."""
        low = self.opts.min_records_per_trigger
        if low is None or isinstance(limit, ReadAllAvailable):
            return False
        now = time.monotonic()
        new = sum(max(0, end[s] - start.get(s, 0)) for s in end)
        if self._last_batch is not None and now - self._last_batch < self.opts.max_trigger_delay and new < low:
            return True
        self._last_batch = now
        return False

    def latestOffset(self, start_offsets: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start, stamps = identity.split(start_offsets)
        end = self._latest(start, limit)
        times = self._on_driver(lambda client: identity.stamps_for(client, end, (start, stamps)))
        return identity.join(end, times)

    def _latest(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if self._target is not None:  # availableNow: never past the ends seen when the query began
            end = dict(self._target)
        else:
            self._on_driver(self._discover)
            end = self._ends(start)
            if all(end[s] == start.get(s, 0) for s in self.opts.streams) and self._idle_wait(start):
                end = self._ends(start)
        self._latest_seen = dict(end)
        if self._delay_batch(start, end, limit):
            self._idle_wait(end)  # no spinning: the next trigger looks again once more arrived (or idleWaitMs)
            return dict(start)
        # an end below the start is not hidden: partitions() reports it as data loss
        ahead = {s: e for s, e in end.items() if e >= start.get(s, 0)}
        if isinstance(limit, ReadMaxRows | ReadMaxBytes):
            ahead = self._capped(start, ahead)
        batch_end = {**end, **ahead}
        log_lag(batch_end, end, self._policy.skipped)
        return batch_end

    def _capped(self, start: Mapping[str, int], ahead: dict[str, int]) -> dict[str, int]:
        """``ahead`` within maxRecordsPerTrigger and then maxBytesPerTrigger (the broker cuts
        each stream's rows-capped range by bytes: both limits hold)."""
        rows, nbytes = self.opts.max_records_per_trigger, self.opts.max_bytes_per_trigger
        if rows is not None:
            ahead = cap_total(start, ahead, rows)
        if nbytes is not None:
            capped = ahead
            ahead = self._on_driver(lambda client: cap_bytes(client, start, capped, nbytes))
        return ahead

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Each stream's end as last seen (Spark's progress ``latestOffset``; availableNow: the ends
        when the query began) and the offsets skipped so far (see ``pipeline.metrics``)."""
        if self._latest_seen is None:
            return None
        skipped = {SKIPPED_KEY: dict(self._policy.skipped)} if self._policy.skipped else {}
        return {**self._latest_seen, **skipped}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:  # type: ignore[override]
        begin, stamps = identity.split(start)
        stop = identity.split(end)[0]
        return plan(self.opts, self._on_driver(lambda client: self._readable(client, begin, stop, stamps)), stop)

    def _readable(self, client: Driver, start: Mapping[str, int], end: Mapping[str, int],
                  stamps: Mapping[str, int]) -> dict[str, int]:
        """Where each stream's range really begins: its start, unless the offsets there are gone
        or belong to another stream (then DataLossError, or with failOnDataLoss=false the stream's
        first offset)."""
        begin = {}
        for s in self.opts.streams:
            lo, hi = start.get(s, 0), end.get(s, 0)
            try:
                if s not in start:  # a partition discovered since: from its first offset, nothing skipped
                    lo = stream_first(client, s, hi)
                elif hi < lo:
                    self._policy.past_end(s, lo, hi)
                    lo = stream_first(client, s, hi)  # the stream there now, read from its beginning
                elif (now := identity.moved_on(client, s, lo, stamps.get(s))) is not None:
                    self._policy.recreated(s, lo, stamps[s], now)
                    lo = stream_first(client, s, hi)
                elif lo < hi:
                    first = stream_first(client, s, hi)
                    if first > lo:
                        self._policy.removed(s, lo, first)
                        lo = first
            except StreamNotFound as gone:  # deleted since its end was probed
                self._policy.deleted(s, str(gone))
                self._gone.add(s)
                lo = hi
            begin[s] = lo
        return begin

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self._given, partition)  # on an executor: the range names its stream

    def commit(self, end: dict[str, int]) -> None:
        pass  # nothing to release: reading never removes messages from a stream

    def stop(self) -> None:
        self._drop_client()
