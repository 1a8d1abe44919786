"""A stream range read off the socket in bulk: the client's connection, once its channel has its
prefetch, is handed to ``amqpproto.bulk``'s decoder, which fills record batches (module ``columns``)
from the bytes as they arrive; only acks (granting credit, removing nothing from a stream) are sent,
one per batch of bytes decoded, not one per message.

Every frame that is not a delivery (basic.consume-ok, a channel.close, a cancel) goes to the
client's codec, the general path, which reports it as usual; so does what is left when the range
is read, while the connection closes."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pyarrow as pa

from amqpproto import RemoteProtocolError, spec
from amqpproto.bulk import StreamDeliveryDecoder, frame_end

from .client import CH, BrokerError, Client, ConnectionLost, ConsumerCancelled
from .columns import Columns
from .dataloss import LossPolicy
from .offsets import stamp_arguments

__all__ = ["read_stream_range"]

_RECV = 1 << 18


#: the reader's consumer tag: one range at a time per channel, cancelled before the next
RANGE_TAG = "sansmq-range"


def filter_arguments(client: Client, values: tuple[str, ...] | None, end: int) -> dict[str, object] | None:
    """The consumer arguments of a range read that only wants messages whose stream filter value is
    one of ``values`` (``x-stream-filter``, and ``x-stream-end-offset`` so that the broker cancels
    the consumer at the range's end: a filtered read cannot tell its end from the offsets it gets);
    None when there is no filter or the broker cannot end a range (RabbitMQ: everything is read, and
    Spark's own predicate does the filtering)."""
    if values is None or client.capabilities.get("stream_range_end") is not True:
        return None
    return {"x-stream-filter": list(values), "x-stream-end-offset": end}


def read_stream_range(client: Client, stream: str, start: int, end: int, batch_rows: int,
                      timeout: float, policy: LossPolicy,
                      values: tuple[str, ...] | None = None) -> Iterator[pa.RecordBatch]:
    """Offsets [start, end) of ``stream`` as record batches of at most ``batch_rows`` rows; the
    client's prefetch (basic.qos) is set. When the range is read, the consumer is cancelled and
    every delivery acked, so the connection can read the next range.

    A stream's offsets are contiguous, so rows missing from the range were removed before they
    were read (a consumer asking for an offset retention removed starts at the first one kept):
    ``policy`` fails the task or counts them. The first batch is checked before it leaves, the
    count of the whole range at its end (retention can overtake a slow reader).

    With ``values`` (``filter_arguments``) the broker sends only the matching messages and cancels
    the consumer at ``end``: the range is read when that cancel arrives; rows are not counted then
    (the offsets in between were skipped by the filter, not removed)."""
    sock = client.sock
    filtered = filter_arguments(client, values, end)
    client._send(spec.BasicConsume(queue=stream, consumer_tag=RANGE_TAG, arguments={
        "x-stream-offset": start, **stamp_arguments(client), **(filtered or {})}, channel=CH))
    client.flush()
    decoder = StreamDeliveryDecoder(CH)
    buf, pos = b"", 0
    acked = 0
    cols = Columns()
    last = start - 1
    rows = 0
    while filtered or last < end - 1:
        try:
            pos, seen, other = decoder.decode(buf, pos, cols, start, end, batch_rows)
        except RemoteProtocolError as exc:  # as the general path reports it (MissingStreamOffset propagates)
            raise BrokerError(f"protocol error from the broker: {exc}") from exc
        if seen > last:
            last = seen
        if other:  # one whole frame for the general path (consume-ok; a close or cancel raises)
            after = frame_end(buf, pos)
            frame, pos = buf[pos:after], after
            try:
                _general_path(client, frame)
            except ConsumerCancelled as cancel:
                if not (filtered and cancel.consumer_tag == RANGE_TAG):
                    raise
                break  # the broker gave every match below ``end``
            continue
        if decoder.last_tag != acked:  # credit for what was decoded: the broker keeps sending
            acked = decoder.last_tag
            client._send(spec.BasicAck(acked, True, channel=CH))
            client.flush()
        if len(cols) >= batch_rows:
            rows += len(cols) if filtered else _checked(cols, rows, stream, start, policy)
            yield cols.batch(stream)
            cols = Columns()
            continue
        if last >= end - 1 and not filtered:
            break
        buf = buf[pos:] + _recv(sock, timeout, stream, last, end)
        pos = 0
    if len(cols):
        rows += len(cols) if filtered else _checked(cols, rows, stream, start, policy)
        yield cols.batch(stream)
    _release(client, buf[pos:], decoder.last_tag, acked, timeout)
    if rows < end - start and not filtered:
        policy.lost(stream, f"{end - start - rows} offsets of [{start}, {end}) were removed (retention) while "
                            f"the range was read", end - start - rows)


def _checked(cols: Columns, before: int, stream: str, start: int, policy: LossPolicy) -> int:
    """The offsets ``cols`` accounts for, after checking that the range's first batch begins at
    ``start`` (offsets skipped there are accounted for, so the count at the end does not report them
    twice)."""
    if not before and cols.offset[0] > start:
        policy.removed(stream, start, cols.offset[0])
        return len(cols) + cols.offset[0] - start
    return len(cols)


def _general_path(client: Client, frame: bytes) -> None:
    client.conn.receive_data(frame)
    client._pump(None, None)
    if client.deliveries:  # one the bulk decoder could not read: never drop a row silently
        raise BrokerError("a delivery the stream reader could not decode (not AMQP 0-9-1's basic properties?)")


def _recv(sock: socket.socket, timeout: float, stream: str, last: int, end: int) -> bytes:
    sock.settimeout(timeout)
    try:
        data = sock.recv(_RECV)
    except TimeoutError:
        raise TimeoutError(f"stream {stream!r}: no message after offset {last} within {timeout:g}s while "
                           f"reading up to {end} (stream truncated?)") from None
    except OSError as exc:
        raise ConnectionLost(f"connection to the broker lost: {exc}") from exc
    if not data:
        raise ConnectionLost("the broker closed the connection")
    return data


def _release(client: Client, rest: bytes, last_tag: int, acked: int, timeout: float) -> None:
    """Cancel the range's consumer and ack everything delivered (past the range too: the deliveries
    in flight until cancel-ok, through the codec's general path), so the channel holds nothing."""
    if rest:
        client.conn.receive_data(rest)
    client._send(spec.BasicCancel(consumer_tag=RANGE_TAG, channel=CH))
    client._pump(spec.BasicCancelOk, time.monotonic() + timeout)
    highest = max([last_tag, *(d.delivery_tag for d in client.deliveries)])
    client.deliveries.clear()
    if highest > acked:
        client.ack(highest)
    client.flush()
