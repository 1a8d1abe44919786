"""Stream offsets: learning a stream's end over AMQP 0-9-1, capping ranges, splitting them.

A stream's *end* is the offset the next appended message will get. AMQP 0-9-1 has no method that
reports it, and RabbitMQ's queue.declare-ok says message_count 0 for streams, so the end is learned
the way any AMQP client can: a consumer at ``x-stream-offset: last`` (the start of the last chunk)
receives the stream's newest messages at once; the highest ``x-stream-offset`` seen before the
deliveries pause for ``probe_ms`` is the last message (or, while producers keep appending, the
highest seen within ``PROBE_SPAN`` pauses). The pause is not a poll: the consumer is told by the
broker, and an empty stream costs one wait of ``probe_ms``.

A broker that knows better says so: if its connection.start capabilities hold
``stream_end_offset: true``, queue.declare-ok's message_count on a stream *is* the end offset, and
one round trip replaces the probe (a sansmq extension).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from sansmq_client import ConsumerCancelled, Delivery, sync

from .driver import Driver, StreamNotFound

__all__ = ["stream_end", "stream_first", "wait_for_new", "cap_total", "split_range", "plan_ranges",
           "default_min_partitions", "MIN_ROWS_PER_TASK", "offset_of",
           "offset_at_time", "record_time", "stamp_arguments", "STAMP_HEADER"]

#: sansmq's delivery header with the record's append time (ms), asked for with the consumer
#: argument of the same name where the broker's capabilities say ``stream_timestamp``
STAMP_HEADER = "x-stream-timestamp"


def stamp_arguments(client: Driver | sync.Connection) -> dict[str, object]:
    """The consumer arguments that make the broker stamp deliveries with their append time, if it can."""
    return {STAMP_HEADER: True} if client.capabilities.get("stream_timestamp") is True else {}

PROBE_SPAN = 10  # a probe lasts at most this many pauses


def offset_of(headers: Mapping[str, object] | None) -> int:
    value = headers.get("x-stream-offset") if headers else None
    if not isinstance(value, int):
        raise ValueError("a delivery from a stream lacks the x-stream-offset header: is it a stream queue?")
    return value


def stream_end(client: Driver, stream: str, probe_ms: int) -> int:
    """The offset the next message appended to ``stream`` will get (0 for a never-written stream)."""
    status = client.status(stream)  # StreamNotFound if it does not exist
    if client.capabilities.get("stream_end_offset") is True:
        return status.message_count
    sub = client.subscribe(stream, "last", 2000)
    last = -1
    pause = probe_ms / 1000.0
    # while producers keep appending, deliveries never pause: stop after a few pauses' worth of time;
    # any offset reached is a true (if not the newest) end
    deadline = time.monotonic() + PROBE_SPAN * pause
    while (left := deadline - time.monotonic()) > 0 and (d := sub.get(min(pause, left))) is not None:
        last = max(last, offset_of(d.headers))
        client.conn.ack(d)
    sub.cancel()  # any deliveries that raced it are requeued with its channel
    return last + 1


def stream_first(client: Driver, stream: str, end: int) -> int:
    """The first offset retention kept in ``stream`` whose end is ``end`` (``end`` if it holds
    nothing). AMQP 0-9-1 reports no such thing either; a consumer at ``x-stream-offset: first`` is
    handed the first retained message at once (retention never removes the segment being written,
    so a stream that was ever written holds at least one message; if none comes within the
    client's timeout, the stream counts as empty)."""
    if end <= 0:
        return 0
    sub = client.subscribe(stream, "first", 1)
    try:
        d = sub.get(client.timeout)
    finally:
        sub.cancel()
    return min(end if d is None else offset_of(d.headers), end)


def record_time(client: Driver, stream: str, offset: int) -> int | None:
    """The append time (ms) of the record at ``offset``: None if the broker does not stamp
    deliveries or the record is not there (removed by retention, past the end)."""
    stamps = stamp_arguments(client)
    if not stamps:
        return None
    sub = client.subscribe(stream, offset, 1, stamps)
    try:
        d = sub.get(client.timeout)
    finally:
        sub.cancel()
    if d is None or offset_of(d.headers) != offset:
        return None
    stamp = d.headers.get(STAMP_HEADER)
    return stamp if isinstance(stamp, int) else None


def offset_at_time(client: Driver, stream: str, ms: int, end: int, wait: float) -> int | None:
    """The first offset of ``stream`` (whose end is ``end``) appended at or after ``ms`` (ms since
    the epoch), None if none is. The broker seeks with ``x-stream-offset`` as an AMQP timestamp
    (whole seconds, RabbitMQ's form); with append times on the deliveries (sansmq) the records of
    that second before ``ms`` are read past; without them the broker's answer stands (RabbitMQ:
    the chunk holding that second), and ``wait`` seconds without a delivery mean none."""
    if end <= 0:
        return None
    stamps = stamp_arguments(client)
    if stamps:
        last = record_time(client, stream, end - 1)
        if last is None or last < ms:
            return None
    sub = client.subscribe(stream, datetime.fromtimestamp(ms // 1000, UTC), 2000, stamps)
    found = None
    try:
        # with stamps the record at end - 1 is known to be there: a delivery is due (the timeout: a bug)
        while (d := sub.get(client.timeout if stamps else wait)) is not None:
            offset = offset_of(d.headers)
            client.conn.ack(d)
            stamp = d.headers.get(STAMP_HEADER)
            if not stamps or (isinstance(stamp, int) and stamp >= ms):
                found = offset
                break
            if offset >= end - 1:
                break
    finally:
        sub.cancel()
    return found


def wait_for_new(client: Driver, start: Mapping[str, int], timeout: float) -> bool:
    """Block until any stream has a message at or after its ``start`` offset (True), or ``timeout``
    seconds pass (False). The broker pushes to a consumer parked at the end of each stream, so an
    idle query sleeps here instead of probing again and again."""
    news: queue.SimpleQueue[Delivery | BaseException] = queue.SimpleQueue()
    subs: dict[str, sync.Subscription] = {}
    try:
        for s, off in start.items():
            subs[s] = client.subscribe(s, off, 1)
    except StreamNotFound:  # deleted before its consumer started: news too (the next probe says what)
        _cancel(subs.values())
        return True
    for sub in subs.values():  # one thread each hands its deliveries (or its end) to this one
        threading.Thread(target=_forward, args=(sub, news), daemon=True, name="pipeline wait_for_new").start()
    found = False
    deadline = time.monotonic() + timeout
    try:
        while not found and (left := deadline - time.monotonic()) > 0:
            try:
                item = news.get(timeout=left)
            except queue.Empty:
                break
            if isinstance(item, BaseException):
                if isinstance(item, ConsumerCancelled):  # a stream was deleted: news too
                    return True
                raise item
            # a chunk may start before the offset asked for: only a message at or after it counts
            found = offset_of(item.headers) >= start.get(item.consumer.source, 0)
            client.conn.ack(item)
    finally:
        _cancel(subs.values())
    return found


def _forward(sub: sync.Subscription, to: queue.SimpleQueue[Delivery | BaseException]) -> None:
    try:
        for d in sub:
            to.put(d)
    except Exception as exc:  # the broker ended the consumer: the waiter decides
        to.put(exc)


def _cancel(subs: Iterable[sync.Subscription]) -> None:
    for sub in subs:
        sub.cancel()  # one the broker cancelled already is a no-op


def cap_total(start: Mapping[str, int], end: Mapping[str, int], limit: int) -> dict[str, int]:
    """Move each stream's end back so that at most ``limit`` records are taken in all, shared in
    proportion to what each stream has (Kafka's maxOffsetsPerTrigger does the same)."""
    avail = {s: max(0, end[s] - start.get(s, 0)) for s in end}
    total = sum(avail.values())
    if total <= limit:
        return dict(end)
    capped: dict[str, int] = {}
    given = 0
    for s in sorted(avail):
        take = min(avail[s], (avail[s] * limit) // total)
        capped[s] = start.get(s, 0) + take
        given += take
    for s in sorted(avail):  # the rounding remainder, in name order: deterministic
        if given >= limit:
            break
        extra = min(limit - given, end[s] - capped[s])
        capped[s] += extra
        given += extra
    return capped


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) as ``parts`` contiguous pieces of near-equal length (fewer if it is shorter)."""
    n = end - start
    if n <= 0:
        return []
    parts = min(n, parts)
    step, rest = divmod(n, parts)
    pieces, lo = [], start
    for i in range(parts):
        hi = lo + step + (1 if i < rest else 0)
        pieces.append((lo, hi))
        lo = hi
    return pieces


#: a range is cut for parallelism (no minPartitions given) only into pieces of at least this many
#: rows: a task costs Spark a start-up, worth it only for that much work
MIN_ROWS_PER_TASK = 100_000


def default_min_partitions(rows: int, parallelism: int) -> int:
    """The tasks to aim for when the user gives no minPartitions: one per core the session has
    (Spark's default parallelism), but none of fewer than ``MIN_ROWS_PER_TASK`` rows."""
    return max(1, min(parallelism, rows // MIN_ROWS_PER_TASK))


def group_ranges(tasks: list[tuple[str, int, int]], groups: int) -> list[list[tuple[str, int, int]]]:
    """``tasks`` (ranges of several streams) as at most ``groups`` lists of near-equal rows, each read
    by one task in turn: a partitioned stream of more partitions than the session's cores is read by
    as many tasks as one stream would be, so its partitions cost no extra task start-ups. Greedy,
    longest range first into the lightest list; each list keeps the ranges' order in ``tasks``."""
    if len(tasks) <= groups:
        return [[t] for t in tasks]
    load = [0] * groups
    members: list[list[int]] = [[] for _ in range(groups)]
    for i in sorted(range(len(tasks)), key=lambda i: (tasks[i][1] - tasks[i][2], i)):
        g = min(range(groups), key=load.__getitem__)
        load[g] += tasks[i][2] - tasks[i][1]
        members[g].append(i)
    return [[tasks[i] for i in sorted(m)] for m in members if m]


def plan_ranges(ranges: Mapping[str, tuple[int, int]], max_per_partition: int | None,
                min_partitions: int | None) -> list[tuple[str, int, int]]:
    """The tasks reading ``ranges`` ({stream: (start, end)}), as Spark's Kafka source plans them
    (KafkaOffsetRangeCalculator): one task per stream's range, a range longer than
    ``max_per_partition`` cut into pieces no longer than that, and only when that gives fewer tasks
    than ``min_partitions`` are the ranges cut further, each into a share of ``min_partitions``
    proportional to its length (at least one). A task costs Spark a start-up, so ranges are never
    cut below what these two options ask for."""
    def pieces(start: int, end: int) -> int:
        return 1 if max_per_partition is None else math.ceil((end - start) / max_per_partition)
    tasks = [(s, lo, hi) for s, (start, end) in ranges.items()
             for lo, hi in split_range(start, end, pieces(start, end))]
    if min_partitions is None or len(tasks) >= min_partitions:
        return tasks
    total = sum(hi - lo for _, lo, hi in tasks)
    return [(s, a, b) for s, lo, hi in tasks
            for a, b in split_range(lo, hi, max(math.floor((hi - lo) / total * min_partitions + 0.5), 1))]
