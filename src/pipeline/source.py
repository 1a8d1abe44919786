"""The reading side of format "sansmq": batch and micro-batch readers over stream queues.

Offsets are ``{"stream": next_offset}``, as Spark's Kafka source keeps ``{"topic": {"p": n}}``.
A micro-batch [start, end) per stream is cut into pieces (``split_range``), one Spark partition
each; a task opens its own connection, consumes with ``x-stream-offset: start`` (non-destructive:
acks only grant credit) and stops at ``end``. Rows leave the task as Arrow record batches, decoded
from the socket's bytes straight into columns (``bulk``, ``columns``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .bulk import read_stream_range
from .client import Client, StreamNotFound
from .columns import ARROW_SCHEMA, flat_headers
from .offsets import cap_total, split_range, stream_end, wait_for_new
from .options import ReadOptions, check_offsets_spec

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "StreamRange", "BatchReader", "StreamReader", "read_range", "flat_headers"]

SCHEMA_DDL = ("stream string, offset long, timestamp timestamp, routing_key string, "
              "headers map<string,string>, content_type string, body binary")


@dataclass
class StreamRange(InputPartition):
    """One task's work: offsets [start, end) of one stream."""

    stream: str
    start: int
    end: int

    def __init__(self, stream: str, start: int, end: int) -> None:
        super().__init__((stream, start, end))
        self.stream, self.start, self.end = stream, start, end


def read_range(opts: ReadOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Offsets [part.start, part.end) of one stream as record batches of at most batch_rows rows."""
    if not isinstance(part, StreamRange):
        return  # nothing to read: for an empty plan Spark still runs one task, on InputPartition(None)
    if part.end <= part.start:
        return
    with Client(opts.url, timeout=opts.timeout) as client:
        client.qos(opts.prefetch)
        yield from read_stream_range(client, part.stream, part.start, part.end, opts.batch_rows, opts.timeout)


def _resolve(client: Client, opts: ReadOptions, spec: str | dict[str, int], missing: str) -> dict[str, int]:
    """An offsets option as concrete offsets per stream (earliest = 0: a consumer at 0 starts at the
    first message retention kept). The streams exist: ``resolved`` checked them."""
    out = {}
    for s in opts.streams:
        value: str | int
        if isinstance(spec, str):
            value = spec
        else:
            value = spec.get(s, -2 if missing == "earliest" else -1)
            value = {-2: "earliest", -1: "latest"}.get(value, value)
        if value == "earliest":
            out[s] = 0
        elif value == "latest":
            out[s] = stream_end(client, s, opts.probe_ms)
        else:
            out[s] = int(value)
    return out


def resolve_streams(client: Client, names: tuple[str, ...]) -> tuple[str, ...]:
    """Each name as itself if it is a queue, else as a partitioned stream's partitions NAME-0,
    NAME-1, ... (what the partitioned-stream command creates); StreamNotFound if neither."""
    out: list[str] = []
    for name in names:
        try:
            client.declare_passive(name)
            out.append(name)
            continue
        except StreamNotFound as missing:
            client.reopen_channel()
            error = missing
        parts = 0
        while True:
            try:
                client.declare_passive(f"{name}-{parts}")
            except StreamNotFound:
                client.reopen_channel()
                break
            out.append(f"{name}-{parts}")
            parts += 1
        if not parts:
            raise StreamNotFound(error.reply_code, f"{error.reply_text} (nor a partitioned stream {name}-0..)")
    return tuple(out)


def resolved(client: Client, opts: ReadOptions) -> ReadOptions:
    """``opts`` with partitioned streams expanded and the offsets options checked against them."""
    streams = resolve_streams(client, opts.streams)
    check_offsets_spec("startingOffsets", opts.starting, streams)
    check_offsets_spec("endingOffsets", opts.ending, streams)
    return replace(opts, streams=streams)


def plan(opts: ReadOptions, start: Mapping[str, int], end: Mapping[str, int]) -> list[StreamRange]:
    return [StreamRange(s, lo, hi) for s in opts.streams
            for lo, hi in split_range(start.get(s, 0), end.get(s, 0), opts.max_records_per_partition,
                                      opts.min_partitions)]


class BatchReader(DataSourceReader):
    """``spark.read.format("sansmq")``: the range startingOffsets..endingOffsets, fixed when planned."""

    def __init__(self, opts: ReadOptions) -> None:
        with Client(opts.url, timeout=opts.timeout) as client:
            self.opts = opts = resolved(client, opts)
            self.start = _resolve(client, opts, opts.starting, "earliest")
            self.end = _resolve(client, opts, opts.ending, "latest")

    def partitions(self) -> list[StreamRange]:  # type: ignore[override]
        return plan(self.opts, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("sansmq")``: micro-batches of new offsets.

    The driver keeps one connection for learning ends; it is not pickled to executors. It connects
    on the first call Spark makes, not in the constructor: PySpark 4 masks an exception raised
    while it constructs a stream reader with its own UnboundLocalError (its ``finally:
    reader.stop()``), so an unreachable broker or a missing stream would not be named.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self._given = opts
        self._resolved: ReadOptions | None = None
        self._client: Client | None = None
        self._target: dict[str, int] | None = None  # availableNow: ends fixed when the query began

    @property
    def opts(self) -> ReadOptions:
        """The options with partitioned streams expanded (on the driver's first call)."""
        if self._resolved is None:
            self._resolved = resolved(self._driver_client(), self._given)
        return self._resolved

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _driver_client(self) -> Client:
        if self._client is None:
            self._client = Client(self._given.url, timeout=self._given.timeout)
        return self._client

    def _ends(self) -> dict[str, int]:
        try:
            client = self._driver_client()
            return {s: stream_end(client, s, self.opts.probe_ms) for s in self.opts.streams}
        except BaseException:
            self._drop_client()  # the next trigger starts on a fresh connection
            raise

    def _idle_wait(self, start: dict[str, int]) -> bool:
        """Nothing new: wait (pushed, not polled) up to idleWaitMs for the next message."""
        try:
            return wait_for_new(self._driver_client(), {s: start.get(s, 0) for s in self.opts.streams},
                                self.opts.idle_wait_ms / 1000.0)
        except BaseException:
            self._drop_client()
            raise

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def initialOffset(self) -> dict[str, int]:
        client = self._driver_client()
        return _resolve(client, self.opts, self.opts.starting, "earliest")

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def getDefaultReadLimit(self) -> ReadLimit:
        mrt = self.opts.max_records_per_trigger
        return ReadAllAvailable() if mrt is None else ReadMaxRows(mrt)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if self._target is not None:  # availableNow: never past the ends seen when the query began
            end = self._target
        else:
            end = self._ends()
            if all(end[s] <= start.get(s, 0) for s in self.opts.streams) and self._idle_wait(start):
                end = self._ends()
        end = {s: max(end.get(s, 0), start.get(s, 0)) for s in self.opts.streams}
        if isinstance(limit, ReadMaxRows):
            end = cap_total(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._target

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[StreamRange]:  # type: ignore[override]
        return plan(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self._given, partition)  # on an executor: the range names its stream

    def commit(self, end: dict[str, int]) -> None:
        pass  # nothing to release: reading never removes messages from a stream

    def stop(self) -> None:
        self._drop_client()
