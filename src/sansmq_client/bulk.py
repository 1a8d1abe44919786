"""Bulk operations of the sync AMQP client, for data pipelines: read a stream range into columns, publish
many messages with confirms.

``read_stream(conn, stream, start, end)`` consumes offsets [start, end) of a stream queue and yields
``amqpproto.bulk.DeliveryColumns`` (offsets, timestamps, routing keys, headers, content types, bodies as
column lists): the calling thread reads the socket itself and hands the bytes to
``amqpproto.bulk.StreamDeliveryDecoder``, so no event, ``Delivery`` or properties object is built per
message; every other frame (consume-ok, a channel close, a heart-beat) goes through the connection's
general path as usual. One ``basic.ack`` (multiple) per read grants the stream more credit. When the
range is read the consumer's channel is closed; the deliveries in flight until its close-ok are decoded
and dropped.

``publish_batch(conn, exchange, messages)`` publishes ``(routing_key, encoded properties, body)``
messages with publisher confirms, a window of them in one write, at most ``window`` unconfirmed, and
returns once every one is confirmed; it raises ``PublishNacked``, ``Unroutable`` (a mandatory publish
no queue took) or ``ConnectionLost``, each with ``confirmed``: how many leading messages were confirmed
before it failed, so a caller can publish the rest again on a new connection.

Both run in the caller's thread, which holds the connection's reader role meanwhile (the I/O thread
keeps the heart-beats and timers); other threads' calls on the same connection wait until it is over.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

from amqpproto import RemoteProtocolError, spec
from amqpproto.bulk import DeliveryColumns, StreamDeliveryDecoder, frame_end

from ._amqp import PUBLISH, AmqpSession
from ._errors import ClientError, ConnectionLost, ConsumerCancelled
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from .sync import AGAIN, Connection, recv_ready

__all__ = ["read_stream", "publish_batch"]

C = TypeVar("C", bound=DeliveryColumns)
_PAST_ALL = 1 << 63  # a start offset no delivery reaches: decode and drop (after the range)
_FRAME = struct.Struct(">BHI")  # frame type, channel, payload size
_CONTENT = struct.Struct(">HHQ")  # a content header's class, weight and body size (the properties follow)


class _Reading:
    """The caller's hold on the socket while it reads in bulk (the connection's reader role)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.core = conn._core

    def __enter__(self) -> _Reading:
        conn = self.conn
        conn._reader.acquire()
        with conn._lock:
            sock, poll, session = conn._sock, conn._poll, self.core.session
            if sock is None or poll is None or not self.core.ready or not isinstance(session, AmqpSession):
                conn._reader.release()
                raise self.core.final_error or ConnectionLost("not connected (reconnecting)")
            self.sock, self.poll, self.session = sock, poll, session
            conn._caller_reads = True
            conn._register()
        return self

    def __exit__(self, *exc: object) -> None:
        self._leave()

    def _leave(self) -> None:
        with self.conn._lock:
            self.conn._caller_reads = False
            self.conn._register()
        self.conn._reader.release()

    def locked(self, fn: Callable[[AmqpSession], Any]) -> Any:
        """``fn(session)`` under the connection's lock, its output written."""
        with self.conn._lock:
            self._check()
            result = fn(self.session)
            self.conn._after()
        return result

    def _check(self) -> None:
        if self.session.error is not None or self.core.session is not self.session:
            raise self.session.error or ConnectionLost("connection lost")

    def general(self, data: bytes) -> None:
        """Bytes for the connection's general path (whole frames, or what is left after a bulk read)."""
        with self.conn._lock:
            self.core.receive_data(data)
            self.conn._after()
            self._check()

    def recv(self, timeout: float) -> bytes | None:
        """Bytes from the socket, or None if none came within ``timeout`` seconds."""
        if not self.poll.poll(timeout * 1000):
            return None
        with self.conn._lock:  # a TLS socket must not read while another thread writes
            self._check()
            why: OSError | None = None
            try:
                data = recv_ready(self.sock)
            except AGAIN:
                return b""
            except OSError as exc:
                data, why = b"", exc
            if not data:  # the socket ended: the session and the I/O thread learn it as from their own read
                self.core.receive_data(b"")
                self.conn._after()
                raise ConnectionLost(f"connection to the broker lost: {why or 'closed by the broker'}")
            self.session.conn.peer_alive(self.core.clock())  # the codec does not see these bytes
        return data

    def at_frame_boundary(self, timeout: float) -> None:
        """Read through the general path until the codec holds no partial frame, so the bulk decoder
        starts on a frame's first byte."""
        while self.session.conn.buffered_bytes:
            data = self.recv(timeout)
            if data is None:
                raise TimeoutError(f"no frame from the broker within {timeout:g}s")
            self.general(data)


def read_stream(conn: Connection, stream: str, start: int, end: int, *, prefetch: int = 2000,
                batch_rows: int = 10_000, timeout: float = 30.0, arguments: dict[str, Any] | None = None,
                columns: Callable[[], C] = DeliveryColumns) -> Iterator[C]:  # type: ignore[assignment]
    """Offsets [start, end) of stream queue ``stream`` as column batches of at most ``batch_rows`` rows,
    in offset order (``columns()`` makes each batch: a ``DeliveryColumns`` subclass may add methods).
    Offsets retention removed are missing: the first batch then begins after ``start``.

    ``prefetch`` is the consumer's credit, ``arguments`` extra basic.consume arguments (``x-stream-offset``
    is ``start``). With sansmq's ``x-stream-end-offset`` among them (a filtered read, ``x-stream-filter``,
    cannot tell its end from the offsets it gets) the broker cancels the consumer at that offset, and that
    cancel ends the read. Raises ``TimeoutError`` when no delivery comes for ``timeout`` seconds before
    ``end`` (the stream ends earlier), ``ConnectionLost``, ``ChannelClosed`` (e.g. 404: no such stream),
    ``ConsumerCancelled`` (the stream was deleted)."""
    ended_by_broker = "x-stream-end-offset" in (arguments or {})
    ended: list[BaseException | None] = []
    odd: list[Delivery] = []
    consumer = ConsumerRecord(f"sansmq-bulk-{next(conn._core.names)}", stream, prefetch, False, start,
                              {**(arguments or {}), "x-stream-offset": start}, odd.append, ended.append)
    with _Reading(conn) as io:
        io.at_frame_boundary(timeout)
        started = io.locked(lambda s: _subscribe(io, s, consumer))
        try:
            channel = io.locked(lambda s: s.channel_of(consumer))
            decoder = StreamDeliveryDecoder(channel)
            buf, pos = b"", 0
            acked = 0
            cols = columns()
            last = start - 1
            stopping: Pending[None] | None = None  # the consumer's cancel, once the range is read
            while stopping is None or not stopping.done:
                if ended_by_broker and ended and isinstance(ended[0], ConsumerCancelled):
                    break  # the broker sent every message up to its end offset (its channel closes by itself)
                if stopping is None and (last >= end - 1 or len(cols) >= batch_rows):
                    if len(cols):
                        yield cols
                        cols = columns()
                    if last >= end - 1:
                        stopping = io.locked(lambda s: io.core.cancel(consumer))
                    continue
                try:
                    pos, seen, other = decoder.decode(buf, pos, cols, start if stopping is None else _PAST_ALL, end,
                                                      batch_rows)
                except RemoteProtocolError as exc:
                    raise ConnectionLost(f"protocol error from the broker: {exc}") from exc
                last = max(last, seen)
                if other:  # one whole frame for the general path
                    after = frame_end(buf, pos)
                    io.general(buf[pos:after])
                    pos = after
                    _raise_if_over(started, ended, odd, ended_by_broker)
                    continue
                if stopping is None and decoder.last_tag != acked:  # credit for what was decoded
                    acked = decoder.last_tag
                    io.locked(partial(AmqpSession.ack_upto, consumer=consumer, tag=acked, now=io.core.clock()))
                if stopping is None and (last >= end - 1 or len(cols) >= batch_rows):
                    continue
                data = io.recv(timeout)
                if data is None:
                    if stopping is not None:
                        raise TimeoutError(f"stream {stream!r}: no close-ok for the consumer within {timeout:g}s")
                    raise TimeoutError(f"stream {stream!r}: no message after offset {last} within {timeout:g}s while "
                                       f"reading up to {end} (stream truncated?)")
                buf = buf[pos:] + data if pos < len(buf) else data
                pos = 0
            if len(cols):
                yield cols
            if pos < len(buf):
                io.general(buf[pos:])
        except BaseException:  # an error, or the caller stopped early: the consumer must not live on
            _abandon(io, consumer)
            raise


def _abandon(io: _Reading, consumer: ConsumerRecord) -> None:
    """Cancel a range's consumer that did not finish (not waiting for the broker): its channel's
    deliveries are dropped from then on instead of piling up for a consumer no one reads."""
    with io.conn._lock:
        if consumer.tag in io.core.consumers and io.core.ready:
            io.core.cancel(consumer)
            io.conn._after()


def _subscribe(io: _Reading, session: AmqpSession, consumer: ConsumerRecord) -> Pending[None]:
    io.core.consumers[consumer.tag] = consumer  # as Core.subscribe: cancel() forgets it again
    return session.subscribe(consumer, io.core.clock())


def _raise_if_over(started: Pending[None], ended: list[BaseException | None], odd: list[Delivery],
                   ended_by_broker: bool) -> None:
    if started.error is not None:
        raise started.error
    if ended and ended[0] is not None and not (ended_by_broker and isinstance(ended[0], ConsumerCancelled)):
        raise ended[0]
    if odd:  # one the bulk decoder could not read: never drop a row silently
        raise ClientError("a delivery the bulk reader could not decode (not AMQP 0-9-1's basic properties?)")


class _Outcome(Pending[None]):
    """The confirms of a batch: resolved when each of its ``count`` publishes is acked, failed by the
    first nack or return."""

    __slots__ = ("count", "acked")

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count, self.acked = count, 0

    def resolve(self, value: None) -> None:
        self.acked += 1
        if self.acked >= self.count:
            super().resolve(None)


def publish_batch(conn: Connection, exchange: str, messages: Sequence[tuple[str, bytes, bytes]], *,
                  mandatory: bool = True, window: int = 1000, timeout: float = 30.0) -> None:
    """Publish ``messages`` (routing key, properties encoded with ``spec.encode_properties``, body) to
    ``exchange`` with publisher confirms and return once the broker confirmed every one. At most
    ``window`` are unconfirmed; half a window is written at a time. ``mandatory``: a message no queue
    takes fails the batch (``Unroutable``) instead of vanishing.

    Raises ``PublishNacked``, ``Unroutable``, ``ConnectionLost`` or ``TimeoutError`` (no confirm for
    ``timeout`` seconds); the error's ``confirmed`` attribute counts the leading messages confirmed."""
    if not messages:
        return
    step = max(1, window // 2)
    outcomes: list[tuple[int, _Outcome]] = []  # (messages up to here, their outcome), one per write
    confirmed = 0
    with _Reading(conn) as io:
        io.at_frame_boundary(timeout)
        methods: dict[str, bytes] = {}
        try:
            for at in range(0, len(messages), step):
                chunk = messages[at:at + step]
                frames = _frames(io.session, methods, exchange, chunk, mandatory)
                outcome = _Outcome(len(chunk))
                io.locked(lambda s: s.publish_encoded(frames, outcome))  # noqa: B023 (called at once)
                outcomes.append((at + len(chunk), outcome))
                while outcomes and (outcomes[0][1].done or at + len(chunk) - confirmed > window - step):
                    confirmed = _settled(io, outcomes, timeout, confirmed)
            while outcomes:
                confirmed = _settled(io, outcomes, timeout, confirmed)
        except (ClientError, TimeoutError) as exc:
            setattr(exc, "confirmed", confirmed)  # noqa: B010 (an attribute these exception classes do not declare)
            raise


def _settled(io: _Reading, outcomes: list[tuple[int, _Outcome]], timeout: float, confirmed: int) -> int:
    """Wait for the oldest write's confirms; the count of messages confirmed after it."""
    upto, outcome = outcomes[0]
    while not outcome.done:
        data = io.recv(timeout)
        if data is None:
            raise TimeoutError(f"publisher confirms did not arrive within {timeout:g}s ({confirmed} settled)")
        io.general(data)
    outcomes.pop(0)
    if outcome.error is not None:
        raise outcome.error
    return upto


def _frames(session: AmqpSession, methods: dict[str, bytes], exchange: str,
            chunk: Sequence[tuple[str, bytes, bytes]], mandatory: bool) -> bytes:
    """The frames of ``chunk``'s publishes on the publish channel: each routing key's basic.publish frame
    encoded once (by the codec, which checks the channel), content header and body frames packed here."""
    max_body = session.conn.frame_max - 8
    frame, content = _FRAME.pack, _CONTENT.pack
    out: list[bytes] = []
    for key, props, body in chunk:
        method = methods.get(key)
        if method is None:
            encoded = session.conn.send(spec.BasicPublish(0, exchange, key, mandatory, False, props, b"", PUBLISH))
            method = methods[key] = encoded[:_FRAME.unpack_from(encoded)[2] + 8]
        n = len(body)
        out += (method, frame(2, PUBLISH, 12 + len(props)), content(60, 0, n), props, b"\xce")
        for at in range(0, n, max_body):
            part = body[at:at + max_body]
            out += (frame(3, PUBLISH, len(part)), part, b"\xce")
    return b"".join(out)
