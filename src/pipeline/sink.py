"""The writing side of format "sansmq": publish rows with confirms, deduplicated by the broker.

Every row is published with headers ``x-producer`` and ``x-publishing-id``. The producer is one
per (query, Spark partition); the publishing id is ``(batch_id + 1) << 32 | row_in_partition + 1``,
strictly increasing over a query's life. A micro-batch replayed after a crash (Spark re-runs a batch
whose commit it did not record) carries the same ids, and a broker with producer deduplication
(sansmq) confirms the repeats without appending them: exactly-once end to end. A broker without it
(RabbitMQ) appends them again: at-least-once.

A task returns only after every publish is confirmed, so Spark commits a batch only once the
broker holds all of it. Tasks publish through ``sansmq_client`` (``bulk.publish_batch``) on the
executor's pooled connection (``pool``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from amqpproto import spec
from sansmq_client import ChannelClosed, sync
from sansmq_client.bulk import publish_batch

from .driver import StreamNotFound
from .options import OptionError, WriteOptions
from .pool import EXECUTOR_POOL
from .retry import Outage

__all__ = ["BatchWriter", "StreamWriter", "Published", "publish_batches", "publishing_id", "check_target"]

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # what Spark's micro-batch execution sets per batch
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # the query id, kept in the checkpoint across restarts


@dataclass
class Published(WriterCommitMessage):
    partition: int
    rows: int


def publishing_id(batch_id: int, row: int) -> int:
    return ((batch_id + 1) << 32) | (row + 1)


def _as_bytes(value: Any) -> bytes:
    """A body as the driver checked it (binary or string)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if value is None:
        raise ValueError("the sansmq sink cannot publish a row whose body is null")
    raise TypeError(f"the sansmq sink publishes binary or string bodies, not {type(value).__name__}")


def check_target(conn: sync.Connection, opts: WriteOptions) -> None:
    """The stream or exchange written to exists (StreamNotFound, or OptionError for the exchange)."""
    try:
        if opts.target_stream is not None:
            conn.declare_queue(opts.target_stream, passive=True)
        elif opts.exchange:  # the default exchange always exists (and cannot be declared)
            conn.declare_exchange(opts.exchange, passive=True)
    except ChannelClosed as exc:
        if exc.reply_code != spec.NOT_FOUND:
            raise
        if opts.target_stream is not None:
            raise StreamNotFound.of(exc) from None
        raise OptionError(f"option exchange: {exc.reply_code} {exc.reply_text}") from None


_ID = struct.Struct(">q")  # x-publishing-id, a signed 64-bit field value ("l") in the headers table


def _template(producer: str, content_type: str | None, headers: tuple[tuple[str, str], ...]) -> tuple[bytes, bytes]:
    """A row's encoded properties around its publishing id: the bytes before and after the id's 8, the
    same for every row with this content type and these headers (encoded once, not once a row)."""
    # x-stream-* are the source broker's annotations (the offset read), not content
    h: dict[str, Any] = {k: v for k, v in headers if not k.startswith("x-stream-")}
    h["x-producer"] = producer
    # two ids that differ in each of their 8 bytes (ids are >= 2**32: always "l") show where the id sits
    one, two = (spec.encode_properties(spec.BasicProperties(content_type=content_type, delivery_mode=2,
                                                            headers={**h, "x-publishing-id": v}))
                for v in (0x0101010101010101, 0x0202020202020202))
    at = next(i for i, (x, y) in enumerate(zip(one, two, strict=True)) if x != y)
    return one[:at], one[at + _ID.size:]


def _publish(opts: WriteOptions, messages: list[tuple[str, bytes, bytes]], checked: list[bool]) -> None:
    """Publish ``messages`` with confirms (``sansmq_client.bulk.publish_batch``: mandatory, so a row no
    queue takes fails the task instead of vanishing). While the broker is away, what was not confirmed
    is published again on a new connection, with the same ``x-publishing-id`` headers, so sansmq's
    deduplication drops what had in fact been appended."""
    done = 0
    outage: Outage | None = None
    while True:
        try:
            with EXECUTOR_POOL.client(opts.url, opts.timeout) as conn:
                if not checked:  # once per task: the target may have been deleted since the driver looked
                    check_target(conn, opts)
                    checked.append(True)
                publish_batch(conn, opts.exchange, messages[done:], window=opts.confirm_window, timeout=opts.timeout)
            return
        except Exception as exc:
            done += getattr(exc, "confirmed", 0)
            outage = outage or Outage(opts.retry_deadline, "publishing")
            outage.wait(exc)


def publish_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch], producer: str,
                    batch_id: int) -> int:
    """Publish every row with confirms; returns the row count."""
    row = 0
    checked: list[bool] = []
    for batch in batches:
        names = batch.schema.names
        bodies = batch.column(names.index("body")).to_pylist()
        n = len(bodies)
        keys = (batch.column(names.index("routing_key")).to_pylist() if opts.routing_key is None
                else [opts.routing_key] * n)
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else [None] * n
        ctypes = (batch.column(names.index("content_type")).to_pylist() if "content_type" in names
                  else [None] * n)
        templates: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
        first = publishing_id(batch_id, row)
        messages = []
        for i in range(n):
            shape = (ctypes[i], tuple(headers[i] or ()))
            if (template := templates.get(shape)) is None:
                template = templates[shape] = _template(producer, *shape)
            pre, post = template
            messages.append((keys[i] or "", pre + _ID.pack(first + i) + post, _as_bytes(bodies[i])))
        _publish(opts, messages, checked)
        row += n
    if not checked:  # no rows: the target is still checked, as a write of rows would
        with EXECUTOR_POOL.client(opts.url, opts.timeout) as conn:
            check_target(conn, opts)
    return row


def _task() -> tuple[int, TaskContext | None]:
    ctx = TaskContext.get()
    return (ctx.partitionId() if ctx is not None else 0), ctx


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("sansmq")``: one producer per (job, partition), so a retried task's rows
    are deduplicated too. The job's id is always in the producer, also after a ``producerId``
    prefix: two jobs with one producer would have the second's rows (the same publishing ids)
    taken for repeats and dropped."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.job = f"{opts.producer or 'spark-write'}-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:  # type: ignore[override]
        partition, _ = _task()
        rows = publish_batches(self.opts, iterator, f"{self.job}-{partition}", 0)
        return Published(partition, rows)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sansmq")``: ids from the query id, batch id and row."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:  # type: ignore[override]
        partition, ctx = _task()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        if batch_id is None or query_id is None:
            raise RuntimeError("the sansmq stream sink runs only inside a streaming query "
                               f"(no {BATCH_ID_PROPERTY}/{QUERY_ID_PROPERTY} task properties)")
        # the query id, always: another query's rows under one producer would be dropped as repeats
        prefix = f"{self.opts.producer or 'spark'}-{query_id}"
        rows = publish_batches(self.opts, iterator, f"{prefix}-{partition}", int(batch_id))
        return Published(partition, rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        pass  # every row was confirmed before its task returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        pass  # confirmed rows stay; the replay of this batch is deduplicated by the broker
