"""Stream queues in the model: a queue whose messages live in the store's stream log, appended at
the next offset and never removed by consumers (RabbitMQ's ``x-queue-type: stream``).

A component the layers above call (topology: declare, restore, delete; publish: append; delivery:
consume, dispatch, settle); it calls nothing above it and reports deliveries to the sessions
through their ``ConsumerOwner`` interface, as delivery does.

Consumers read at their own pace: each has a ``Reader`` (the next offset it reads, its optional
tracking name, the offsets it holds unacked). Dispatch reads a bounded batch from the log, only
below ``log.committed`` (nobody sees a record a crash could lose) and only as many as the
consumer's prefetch leaves room for, so a consumer far behind never makes the broker hold the
stream's history in memory. A consumer at the end waits: appends (and syncs, which move
``committed``) mark the stream dirty, and the broker's deferred dispatch serves it; nothing polls.
A sync's report looks only at the streams appended to since the one before.

Consumers of one stream mostly read the same records close together (all from ``first``, or all
at the tail): a stream with several consumers keeps the records read last (``RecordCache``, at
most ``CACHE_RECORDS`` records and ``CACHE_BYTES`` of bodies) as ``SharedMessage`` objects, so a
record is read and decoded once and its wire encoding made once, whatever the number of readers.

Acks (and nacks/rejects) only open the prefetch window; they remove nothing. A consumer with
``x-stream-consumer-name`` (a sansmq extension) stores its offset on every ack: the lowest offset
it still holds unacked, else the next it reads, so everything below the stored offset was settled
(committed-offset semantics, as Kafka's; a nacked delivery counts as settled once a later ack
passes it, and deliveries still unacked when the consumer goes are read again next time). A later
consumer with that name resumes there (its ``x-stream-offset`` only says where to start while the
name has stored nothing). Producer deduplication (the other extension): a message with headers
``x-producer`` and ``x-publishing-id`` whose id is not above the last stored one for that producer
is accepted (confirmed) but not appended.

Filtered consumers (``x-stream-filter``, ``engine.streams.filtering``) read with
``StreamLog.read_filtered``: chunks whose filter rules out a match are skipped unread, and only
matching messages are delivered (exact, not RabbitMQ's probabilistic over-delivery). They do not
share the record cache: what they read is their own selection.

A consumer with ``x-stream-end-offset: N`` (a sansmq extension, for bounded reads such as the Spark
source's filtered ranges, where the last match says nothing about how far the broker looked) reads
offsets below N only, and is cancelled by the broker (``basic.cancel`` to an AMQP client that takes
it) once it has been given everything below N: the end of a range, even when nothing matched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from operator import itemgetter
from typing import Any, NamedTuple

from .._message import READY, Entry, Message, SharedMessage
from .._raw_message import RawMessage
from ..streams import (
    STREAM_QUEUE_ARGS,
    OffsetSpec,
    RunInterrupted,
    StreamArgumentError,
    StreamLog,
    StreamRecord,
    parse_stomp_stream_offset,
    parse_stream_offset,
    resolve_offset,
    stream_settings,
)
from ..streams.args import parse_stream_filter
from ..streams.filtering import StreamFilter
from .errors import PreconditionFailed
from .objects import Consumer, Queue, extras, queue_type_of
from .queue_types import check_durable_only, queue_type, wrong_type_arg
from .state import ModelState

__all__ = ["Streams", "StreamEntry", "ConsumerArgs", "is_stream_args", "check_stream_declare", "END_OFFSET_ARG",
           "check_not_stream_consumer", "parse_consumer_args", "STREAM_OFFSET_HEADER", "STREAM_TIMESTAMP_HEADER"]

#: the delivery header carrying a message's offset
STREAM_OFFSET_HEADER = "x-stream-offset"
PRODUCER_HEADER = "x-producer"
PUBLISHING_ID_HEADER = "x-publishing-id"
#: the consumer argument naming a tracked consumer (a sansmq extension)
CONSUMER_NAME_ARG = "x-stream-consumer-name"
#: a sansmq extension: a consumer with this argument ``true`` gets, on every delivery, a header of the
#: same name holding the record's append time (milliseconds since the epoch, a long). RabbitMQ keeps
#: a chunk timestamp but shows it over AMQP 0-9-1 only as the ``x-stream-offset`` it accepts
STREAM_TIMESTAMP_HEADER = "x-stream-timestamp"
#: a sansmq extension: the consumer reads offsets below this, then the broker cancels it
END_OFFSET_ARG = "x-stream-end-offset"
#: consumer arguments only a stream's consumers take: on another queue a 406, as RabbitMQ answers
#: x-stream-offset on a classic queue
STREAM_CONSUMER_ARGS = (STREAM_OFFSET_HEADER, CONSUMER_NAME_ARG, STREAM_TIMESTAMP_HEADER, END_OFFSET_ARG)
#: most records one dispatch reads for one consumer (its prefetch bounds it further)
READ_BATCH = 256
#: records a stream keeps decoded for its consumers (and body bytes in them): readers close to each
#: other share one decoded record and its wire encoding instead of each decoding and encoding it
CACHE_RECORDS = 2048
CACHE_BYTES = 4 << 20
#: the key of a stream's cache of stored bytes, beside its caches of messages (``Streams.caches``)
RAW = "raw"
#: how often x-max-age retention runs at most (seconds); more often for short ages
RETENTION_PERIOD = 60.0


def is_stream_args(args: Mapping[str, Any] | None) -> bool:
    return bool(args) and queue_type_of(args) == "stream"


def check_stream_declare(name: str, vhost: str, durable: bool, exclusive: bool, auto_delete: bool,
                         args: Mapping[str, Any] | None) -> None:
    """Refuse what RabbitMQ refuses when declaring a queue (406): a stream that is not durable, is
    exclusive or auto-delete, or has bad retention arguments; a stream-only argument on another
    queue type."""
    if not is_stream_args(args):
        for arg in STREAM_QUEUE_ARGS:
            if args and arg in args:
                raise wrong_type_arg(arg, name, vhost, queue_type_of(args))
        return
    check_durable_only(name, vhost, durable, exclusive, auto_delete)
    try:
        stream_settings(args)
    except StreamArgumentError as exc:  # RabbitMQ's text names the queue: "invalid arg 'x' for queue ..."
        raise PreconditionFailed(str(exc).replace("'" + exc.argument + "'", f"'{exc.argument}' for queue "
                                                  f"'{name}' in vhost '{vhost}'", 1)) from None


def check_not_stream_consumer(q: Queue, args: Mapping[str, Any] | None) -> None:
    """A consumer of a queue that is no stream may not give a stream's consumer arguments (406)."""
    if args and not q.stream:
        for arg in STREAM_CONSUMER_ARGS:
            if arg in args:
                raise wrong_type_arg(arg, q.name, q.vhost.name, queue_type(q))


class StreamEntry(Entry):
    """A delivery from a stream: the entry a consumer holds unacked, with the offset it came from."""

    __slots__ = ("offset",)

    def __init__(self, msg: Message, seq: int, offset: int) -> None:
        # Entry.__init__ inlined (count 0, no expiry): one of these is made per stream delivery
        self.msg = msg
        self.seq = seq
        self.count = 0
        self.state = READY
        self.expires = None
        self.timer = None
        self.offset = offset


class ConsumerArgs(NamedTuple):
    """What a stream consumer's arguments ask for."""

    start: OffsetSpec | None  # x-stream-offset (None: next)
    name: str | None  # x-stream-consumer-name
    stamp: bool = False  # x-stream-timestamp: deliveries carry their append time
    filter: StreamFilter | None = None  # x-stream-filter, x-stream-match-unfiltered
    end: int | None = None  # x-stream-end-offset


class Reader:
    """One consumer's position in a stream."""

    __slots__ = ("offset", "name", "stamp", "filter", "end")

    def __init__(self, offset: int, name: str | None, stamp: bool = False,
                 filt: StreamFilter | None = None, end: int | None = None) -> None:
        #: the next offset this consumer reads
        self.offset = offset
        #: its tracking name (``x-stream-consumer-name``), or None
        self.name = name
        #: its deliveries carry ``x-stream-timestamp``
        self.stamp = stamp
        #: what it reads of the stream (None: everything)
        self.filter = filt
        #: it is done (cancelled) once ``offset`` reaches this (None: it reads on)
        self.end = end


def delivery_message(rec: StreamRecord, private: bool, stamp: bool) -> SharedMessage:
    """``rec`` as delivered: with its ``x-stream-offset`` (and ``x-stream-timestamp`` if ``stamp``)
    header; the headers are copied unless the log decoded them for this read alone (``private``)."""
    msg = rec.message
    headers = msg.headers
    if not (private and headers):  # an empty one may be a shared constant: copy it too
        headers = dict(headers)
    headers[STREAM_OFFSET_HEADER] = rec.offset
    if stamp:
        headers[STREAM_TIMESTAMP_HEADER] = rec.timestamp
    return SharedMessage(msg.id, msg.exchange, msg.routing_key, headers, msg.body, msg.priority, msg.persistent)


def filtered_window(log: StreamLog, reader: Reader, filt: StreamFilter, count: int,
                    end: int) -> tuple[list[tuple[int, SharedMessage]], int]:
    """Up to ``count`` (offset, message) that ``filt`` matches from ``reader``'s offset below
    ``end``, and where the reader goes on once it has delivered them all (past what was skipped)."""
    batch, after = log.read_filtered(reader.offset, filt, count, upto=end)
    private = log.private_reads
    return [(rec.offset, delivery_message(rec, private, reader.stamp)) for rec in batch], after


class RecordCache:
    """The records of one stream read last, bounded by ``CACHE_RECORDS`` and ``CACHE_BYTES``; the
    oldest read go first. As delivery messages (with their ``x-stream-offset`` header, and
    ``x-stream-timestamp`` in the cache of the consumers that asked for it), or, ``raw``, as the
    stored bytes (``StreamLog.read_raw``) for the consumers whose owner delivers from them."""

    __slots__ = ("records", "nbytes", "stamp", "raw")

    def __init__(self, stamp: bool = False, raw: bool = False) -> None:
        self.records: dict[int, Any] = {}
        self.nbytes = 0
        self.stamp = stamp
        self.raw = raw

    def window(self, log: StreamLog, offset: int, count: int, end: int, keep: bool = True) -> list[Any]:
        """Up to ``count`` records from ``offset`` (raised to the log's first) below ``end``:
        (offset, message) or, ``raw``, ``RawRecord``. Cached ones as they are, the rest read from
        the log in batches and kept if ``keep`` (a stream with one consumer has nobody to share
        them with)."""
        records = self.records
        out: list[Any] = []
        offset = max(offset, log.first)
        private = log.private_reads
        stamp = self.stamp
        raw = self.raw
        while len(out) < count and offset < end:
            m = records.get(offset)
            if m is not None:
                out.append(m)
                offset += 1
                continue
            if raw:
                batch: list[Any] = log.read_raw(offset, max_count=count - len(out), upto=end)
                if keep:  # bytes of their own: a view would keep its whole read block
                    batch = [(o, ts, bytes(p)) for o, ts, p in batch]
            else:
                batch = [(rec.offset, delivery_message(rec, private, stamp))
                         for rec in log.read(offset, max_count=count - len(out), upto=end)]
            if not batch:
                break
            out.extend(batch)
            offset = batch[-1][0] + 1
            if keep:
                self._keep(batch)
        excess = len(records) - CACHE_RECORDS
        if excess > 0 or self.nbytes > CACHE_BYTES:
            self._evict(excess)
        return out

    def _size(self, item: Any) -> int:
        return len(item[2]) if self.raw else len(item[1].body)

    def _keep(self, batch: list[Any]) -> None:
        records = self.records
        size = self._size
        for item in batch:
            old = records.pop(item[0], None)
            if old is not None:
                self.nbytes -= size(old)
            records[item[0]] = item
            self.nbytes += size(item)

    def _evict(self, excess: int) -> None:
        """Drop the ``excess`` records read first, and more if their bodies are over
        ``CACHE_BYTES``: down to half of it (so that a stream of large records does not evict at
        every read)."""
        records = self.records
        size = self._size
        gone: list[int] = []
        freed = 0
        keep_bytes = CACHE_BYTES // 2 if self.nbytes > CACHE_BYTES else self.nbytes
        for offset, item in records.items():  # the oldest read first (insertion order)
            if len(gone) >= excess and self.nbytes - freed <= keep_bytes:
                break
            gone.append(offset)
            freed += size(item)
        for offset in gone:
            del records[offset]
        self.nbytes -= freed


class Streams:
    __slots__ = ("state", "logs", "readers", "retention_timers", "uncommitted", "caches", "ended")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        self.logs: dict[Queue, StreamLog] = {}
        self.readers: dict[Consumer, Reader] = {}
        self.retention_timers: dict[Queue, Any] = {}
        #: streams appended to whose appends a completed sync may not have covered yet
        self.uncommitted: dict[Queue, None] = {}
        #: the records read last, per stream with consumers (and (stream, True): with their append
        #: times, for the consumers that asked for them; encoded apart, so the others' bytes are unchanged)
        self.caches: dict[Queue | tuple[Queue, bool | str], RecordCache] = {}
        #: cancels a consumer that read up to its ``x-stream-end-offset`` (set by the model: the
        #: delivery layer's cancel, and the owner told)
        self.ended: Callable[[Consumer], None] = lambda consumer: None

    # -- lifecycle (called by topology) ----------------------------------------------------------
    def open(self, q: Queue) -> StreamLog:
        """``q`` (declared or recovered with ``x-queue-type: stream``) becomes a stream."""
        q.stream = True
        log = self.state.store.stream(q.vhost.name, q.name, stream_settings(q.args))
        self.logs[q] = log
        if log.settings.max_age_ms is not None:
            self._arm_retention(q, log)
        return log

    def close(self, q: Queue) -> None:
        """``q`` is deleted (its consumers were cancelled already); the store's ``delete_queue``
        deletes its log."""
        self.logs.pop(q, None)
        self.uncommitted.pop(q, None)
        self._drop_caches(q)
        self.state.timers.cancel(self.retention_timers.pop(q, None))

    def _drop_caches(self, q: Queue) -> None:
        for key in (q, (q, True), (q, RAW)):
            self.caches.pop(key, None)

    def log(self, q: Queue) -> StreamLog:
        return self.logs[q]

    def visible_end(self, q: Queue, fresh: bool = False) -> int:
        """The offset after the last record consumers may see (what queue.declare-ok reports,
        ``fresh``: as the leader committed it, when another cluster node leads the stream)."""
        log = self.logs[q]
        if fresh and q.leader is not None:
            log.refresh()
        return min(log.committed, log.tail)

    def _arm_retention(self, q: Queue, log: StreamLog) -> None:
        period = min(RETENTION_PERIOD, max(1.0, (log.settings.max_age_ms or 0) / 10_000))
        self.retention_timers[q] = self.state.timers.add(self.state.now + period, self._on_retention, q)

    def _on_retention(self, q: Queue, now: float) -> None:
        log = self.logs.get(q)
        if log is None:
            return
        if q.leader is None and log.apply_retention(now):  # a cluster node leaves it to the leader
            self.state.store_write()
        self._arm_retention(q, log)

    # -- appending (called by publish) -----------------------------------------------------------
    def append(self, q: Queue, msg: Message) -> None:
        """Append ``msg`` to the stream ``q`` (deduplicated by ``x-producer``/``x-publishing-id``)."""
        producer = pid = None
        if type(msg) is RawMessage:  # read from its properties once per shape (``amqp.publish``)
            producer, pid = msg.producer, msg.publishing_id
        else:
            producer, pid = producer_of(msg.headers)
        state = self.state
        self.logs[q].append(msg, state.now, producer, pid)
        self._appended(q)

    def append_run(self, q: Queue, msgs: list[RawMessage]) -> None:
        """``append`` of each of ``msgs`` in order, in one call to the log (``StreamLog.append_run``;
        its ``RunInterrupted`` passed on after what it took is noted)."""
        state = self.state
        try:
            self.logs[q].append_run(msgs, state.now)
        except RunInterrupted as exc:
            if exc.taken:
                self._appended(q)
            raise
        self._appended(q)

    def _appended(self, q: Queue) -> None:
        self.state.store_write()  # a duplicate's confirm waits for the sync too: its original may not be durable yet
        self.uncommitted[q] = None
        if q.consumers:
            self.state.dirty[q] = None

    def committed(self) -> None:
        """A sync completed: records it covered are now visible to waiting consumers. Only the
        streams appended to since are looked at; one keeps its place while records appended
        during the sync are still uncommitted (the next sync's report covers them)."""
        dirty = self.state.dirty
        logs = self.logs
        done = []
        for q in self.uncommitted:
            if q.consumers:
                dirty[q] = None
            log = logs.get(q)
            if log is None or log.committed >= log.tail:
                done.append(q)
        for q in done:
            del self.uncommitted[q]

    # -- consuming (called by delivery) -----------------------------------------------------------
    def attach(self, q: Queue, consumer: Consumer, args: ConsumerArgs) -> None:
        """Give ``consumer`` its reader: where its ``name`` stored an offset if it did, else at
        ``start``, else at ``next`` (RabbitMQ's default)."""
        start, name = args.start, args.name
        log = self.logs[q]
        if q.leader is not None:  # led by another cluster node: its log as the leader left it
            log.refresh()
        elif name is not None and self.state.relays is not None:  # a cluster node leading it: the
            log.refresh_offset(name)  # name may have stored its offset through another node
        stored = log.stored_offset(name) if name is not None else None
        if stored is not None:
            offset = min(max(stored, log.first), log.tail)
        else:
            offset = resolve_offset(start or OffsetSpec("next"), log, self.state.now)
        self.readers[consumer] = Reader(offset, name, args.stamp, args.filter, args.end)

    def detach(self, consumer: Consumer) -> None:
        consumer.unacked = None
        self.readers.pop(consumer, None)
        q = consumer.queue
        if all(c is consumer for c in q.consumers or ()):  # the last one: nobody reads its cache
            self._drop_caches(q)

    def dispatch(self, q: Queue) -> None:
        """Deliver to every ready consumer of ``q`` what its prefetch has room for."""
        log = self.logs[q]
        state = self.state
        end = min(log.committed, log.tail)
        readers = self.readers
        trace = q.vhost.trace  # the firehose (``trace``), None when off
        caches = self.caches
        consumers = list(q.consumers or ())
        shared = len(consumers) > 1
        tags_before = state.next_tag
        done = []
        for c in consumers:
            reader = readers.get(c)
            if reader is None:
                continue
            stop = end if reader.end is None else min(end, reader.end)
            if reader.offset >= stop or not c.ready():
                if reader.end is not None and reader.offset >= reader.end:
                    done.append(c)
                continue
            room = c.prefetch - (len(c.unacked) if c.unacked else 0) if c.prefetch else READ_BATCH
            owner = c.owner
            after = -1
            deliver_raw = getattr(owner, "deliver_stream", None) if trace is None else None
            if deliver_raw is not None and reader.filter is None:
                self._deliver_raw(q, c, reader, deliver_raw, min(room, READ_BATCH), stop, shared)
                window: list[tuple[int, SharedMessage]] = []
            elif reader.filter is not None:
                window, after = filtered_window(log, reader, reader.filter, min(room, READ_BATCH), stop)
            else:
                key = (q, True) if reader.stamp else q
                cache = caches.get(key)
                if cache is None:
                    cache = caches[key] = RecordCache(reader.stamp)
                window = cache.window(log, reader.offset, min(room, READ_BATCH), stop, shared)
            for offset, msg in window:
                if not c.ready():
                    break
                entry = StreamEntry(msg, state.next_seq(), offset)
                state.next_tag += 1
                tag = state.next_tag
                if c.unacked is None:
                    c.unacked = {}
                c.unacked[tag] = entry
                reader.offset = offset + 1
                if trace is not None:
                    trace.delivered(q, entry, c.trace_origin())
                owner.deliver(c, tag, entry)
            else:  # all delivered: a filtered reader skips what its read looked at and left out
                reader.offset = max(reader.offset, after)
            if reader.end is not None and reader.offset >= reader.end:
                done.append(c)
            elif reader.offset < end and c.ready():
                state.dirty[q] = None  # more to read: the next dispatch round goes on (bounded batches)
        for c in done:
            self.ended(c)
        if state.next_tag != tags_before:  # deliver_get, as for any queue (the node's and the queue's)
            state.delivered += state.next_tag - tags_before
            (q._x or extras(q)).delivered += state.next_tag - tags_before

    def _deliver_raw(self, q: Queue, c: Consumer, reader: Reader, deliver: Callable[..., int], count: int,
                     stop: int, shared: bool) -> None:
        """Deliver up to ``count`` records to ``c`` from their stored bytes (its owner's
        ``deliver_stream``): no message or entry per record; ``c`` holds each tag's offset."""
        cache = self.caches.get((q, RAW))
        if cache is None:
            cache = self.caches[(q, RAW)] = RecordCache(raw=True)
        window = cache.window(self.logs[q], reader.offset, count, stop, shared)
        if not window:
            return
        state = self.state
        first = state.next_tag + 1
        k = deliver(c, first, window, reader.stamp)
        if not k:
            return
        state.next_tag += k
        unacked = c.unacked
        if unacked is None:
            unacked = c.unacked = {}
        unacked.update(zip(range(first, first + k), map(itemgetter(0), window[:k]), strict=True))
        reader.offset = window[k - 1][0] + 1

    def settle(self, consumer: Consumer, tag: int, multiple: bool, acked: bool) -> int:
        """``consumer`` acked (``acked``), nacked or rejected the delivery ``tag`` and, if
        ``multiple``, every earlier one: taken off what it holds by count, never tag by tag (the
        tags it holds are in delivery order); how many (0: ``tag`` unknown). Nothing goes back
        into a stream: a nack or reject only settles, like an ack (RabbitMQ's streams)."""
        unacked = consumer.unacked
        if unacked is None or tag not in unacked:
            return 0
        if not multiple:
            del unacked[tag]
            n = 1
        elif tag == next(reversed(unacked)):  # everything it holds (the usual cumulative ack)
            n = len(unacked)
            unacked.clear()
        else:
            n = list(unacked).index(tag) + 1
            rest = dict(islice(unacked.items(), n, None))
            unacked.clear()
            unacked.update(rest)
        if not unacked:
            consumer.unacked = None
        if acked:
            self.state.acked += n
        self.settled(consumer, acked)
        return n

    def settled(self, consumer: Consumer, acked: bool) -> None:
        """``consumer`` acked (``acked``) or nacked deliveries: read on; an ack stores its tracked
        offset (a nack, or the return of unacked deliveries when a channel closes, does not)."""
        reader = self.readers.get(consumer)
        if reader is None:
            return
        if acked and reader.name is not None:
            held = consumer.unacked
            # held is in delivery order, which is offset order: its first is the lowest
            # an offset (delivered from stored bytes) or a StreamEntry
            lowest: Any = next(iter(held.values())) if held else reader.offset
            offset = lowest if type(lowest) is int else lowest.offset
            log = self.logs.get(consumer.queue)
            if log is not None and log.stored_offset(reader.name) != offset:
                log.store_offset(reader.name, offset, self.state.now)
                self.state.store_write()
        self.state.dirty[consumer.queue] = None


def producer_of(headers: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The dedup producer and publishing id of a message with these headers ((None, None): none;
    ``PreconditionFailed`` for an invalid pair)."""
    if PRODUCER_HEADER in headers or PUBLISHING_ID_HEADER in headers:
        return _producer(headers)
    return None, None


def _producer(headers: Mapping[str, Any]) -> tuple[str, int]:
    producer = headers.get(PRODUCER_HEADER)
    pid = headers.get(PUBLISHING_ID_HEADER)
    if isinstance(producer, (bytes, bytearray)):
        producer = bytes(producer).decode("utf-8", "replace")
    if not isinstance(producer, str) or not producer:
        raise PreconditionFailed(f"invalid arg '{PRODUCER_HEADER}': a producer name is required with "
                                 f"'{PUBLISHING_ID_HEADER}'")
    if isinstance(pid, str) and pid.isascii() and pid.isdigit():  # STOMP headers are text
        pid = int(pid)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise PreconditionFailed(f"invalid arg '{PUBLISHING_ID_HEADER}': expected an integer >= 0, got {pid!r}")
    return producer, pid


def parse_consumer_args(args: Mapping[str, Any] | None, stomp: bool = False) -> ConsumerArgs:
    """``x-stream-offset``, ``x-stream-consumer-name`` and ``x-stream-timestamp`` of a consumer (406
    naming a bad one)."""
    if not args:
        return ConsumerArgs(None, None)
    start = None
    raw = args.get(STREAM_OFFSET_HEADER)
    try:
        if raw is not None:
            start = parse_stomp_stream_offset(raw) if stomp and isinstance(raw, str) else parse_stream_offset(raw)
    except StreamArgumentError as exc:
        raise PreconditionFailed(str(exc)) from None
    name = args.get(CONSUMER_NAME_ARG)
    if isinstance(name, (bytes, bytearray)):
        name = bytes(name).decode("utf-8", "replace")
    if name is not None and (not isinstance(name, str) or not name):
        raise PreconditionFailed(f"invalid arg '{CONSUMER_NAME_ARG}': expected a non-empty string")
    stamp = args.get(STREAM_TIMESTAMP_HEADER, False)
    if isinstance(stamp, str):  # a STOMP header (or an AMQP client sending text)
        stamp = {"true": True, "false": False}.get(stamp.lower(), stamp)
    if not isinstance(stamp, bool):
        raise PreconditionFailed(f"invalid arg '{STREAM_TIMESTAMP_HEADER}': expected true or false, got {stamp!r}")
    try:
        filt = parse_stream_filter(args, stomp)
    except StreamArgumentError as exc:
        raise PreconditionFailed(str(exc)) from None
    end = args.get(END_OFFSET_ARG)
    if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < 0):
        raise PreconditionFailed(f"invalid arg '{END_OFFSET_ARG}': expected an offset >= 0, got {end!r}")
    return ConsumerArgs(start, name, stamp, filt, end)
