"""The writing side of format "sansmq": publish rows with confirms, deduplicated by the broker.

Every row is published with headers ``x-producer`` and ``x-publishing-id``. The producer is one
per (query, Spark partition); the publishing id is ``(batch_id + 1) << 32 | row_in_partition + 1``,
strictly increasing over a query's life. A micro-batch replayed after a crash (Spark re-runs a batch
whose commit it did not record) carries the same ids, and a broker with producer deduplication
(sansmq) confirms the repeats without appending them: exactly-once end to end. A broker without it
(RabbitMQ) appends them again: at-least-once.

A task returns only after every publish is confirmed, so Spark commits a batch only once the
broker holds all of it.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from amqpproto import spec

from .client import ChannelError, Client
from .options import OptionError, WriteOptions
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


def check_target(client: Client, opts: WriteOptions) -> None:
    """The stream or exchange written to exists (StreamNotFound, or OptionError for the exchange)."""
    if opts.target_stream is not None:
        client.declare_passive(opts.target_stream)
        return
    try:
        client.exchange_exists(opts.exchange)
    except ChannelError as exc:
        if exc.reply_code != spec.NOT_FOUND:
            raise
        raise OptionError(f"option exchange: {exc}") from None


class _Publisher:
    """Publishes with confirms (at most ``confirm_window`` unconfirmed) and keeps what is not yet
    confirmed: when the broker goes away, a new connection publishes that again, with the same
    ``x-publishing-id`` headers, so sansmq's deduplication drops what had in fact been appended."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.pending: deque[tuple[int, str, bytes, bytes]] = deque()  # (sequence, routing key, properties, body)
        self.client: Client | None = None
        self.outage: Outage | None = None
        self._settle(0)  # connects

    def publish(self, key: str, props: bytes, body: bytes) -> None:
        if self.client is None:
            self._settle(0)
        client = self.client
        assert client is not None
        # mandatory: a row no queue takes comes back and fails the task (it is not lost)
        seq = client.publish(self.opts.exchange, key, props, body, mandatory=True)
        self.pending.append((seq, key, props, body))
        if seq - client.confirmed >= self.opts.confirm_window:
            self._settle(self.opts.confirm_window // 2)  # half a window stays in flight

    def finish(self) -> None:
        self._settle(0)

    def _settle(self, in_flight: int) -> None:
        """Wait until at most ``in_flight`` publishes are unconfirmed, reconnecting (and publishing
        the unconfirmed ones again) while the broker is away."""
        while True:
            try:
                if self.client is None:
                    self._reconnect()
                client = self.client
                assert client is not None
                client.wait_confirms(client.published - in_flight)
                while self.pending and self.pending[0][0] <= client.confirmed:
                    self.pending.popleft()
                self.outage = None
                return
            except Exception as exc:
                if self.client is not None:
                    self.client.close()
                    self.client = None
                self.outage = self.outage or Outage(self.opts.retry_deadline, "publishing")
                self.outage.wait(exc)

    def _reconnect(self) -> None:
        client = Client(self.opts.url, timeout=self.opts.timeout)
        try:
            check_target(client, self.opts)
        except BaseException:
            client.close()
            raise
        client.confirm_select()
        again = [(client.publish(self.opts.exchange, key, props, body, mandatory=True), key, props, body)
                 for _, key, props, body in self.pending]
        self.pending = deque(again)
        self.client = client


def publish_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch], producer: str,
                    batch_id: int) -> int:
    """Publish every row with confirms; returns the row count."""
    row = 0
    publisher = _Publisher(opts)
    try:
        for batch in batches:
            names = batch.schema.names
            bodies = batch.column(names.index("body")).to_pylist()
            n = len(bodies)
            keys = (batch.column(names.index("routing_key")).to_pylist() if opts.routing_key is None
                    else [opts.routing_key] * n)
            headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else [None] * n
            ctypes = (batch.column(names.index("content_type")).to_pylist() if "content_type" in names
                      else [None] * n)
            for i in range(n):
                # x-stream-* are the source broker's annotations (the offset read), not content
                h: dict[str, Any] = {k: v for k, v in headers[i] or () if not k.startswith("x-stream-")}
                h["x-producer"] = producer
                h["x-publishing-id"] = publishing_id(batch_id, row)
                props = spec.encode_properties(spec.BasicProperties(
                    content_type=ctypes[i], headers=h, delivery_mode=2))
                publisher.publish(keys[i] or "", props, _as_bytes(bodies[i]))
                row += 1
        publisher.finish()
    finally:
        if publisher.client is not None:
            publisher.client.close()
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
