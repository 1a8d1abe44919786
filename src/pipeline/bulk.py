"""A stream range read off the socket in bulk: the client's connection, once its channel has its
prefetch, is handed to ``amqpproto.bulk``'s decoder, which fills record batches (module ``columns``)
from the bytes as they arrive; only acks (granting credit, removing nothing from a stream) are sent,
one per batch of bytes decoded, not one per message.

Every frame that is not a delivery (basic.consume-ok, a channel.close, a cancel) goes to the
client's codec, the general path, which reports it as usual; so does what is left when the range
is read, while the connection closes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pyarrow as pa

from amqpproto import RemoteProtocolError, spec
from amqpproto.bulk import StreamDeliveryDecoder, frame_end

from .client import CH, BrokerError, Client
from .columns import Columns

__all__ = ["read_stream_range"]

_RECV = 1 << 18


def read_stream_range(client: Client, stream: str, start: int, end: int, batch_rows: int,
                      timeout: float) -> Iterator[pa.RecordBatch]:
    """Offsets [start, end) of ``stream`` as record batches of at most ``batch_rows`` rows; the
    client's prefetch (basic.qos) is set. The connection is closed when the range is read."""
    sock = client.sock
    client._send(spec.BasicConsume(queue=stream, arguments={"x-stream-offset": start}, channel=CH))
    client.flush()
    decoder = StreamDeliveryDecoder(CH)
    buf, pos = b"", 0
    acked = 0
    cols = Columns()
    last = start - 1
    while last < end - 1:
        try:
            pos, seen, other = decoder.decode(buf, pos, cols, start, end, batch_rows)
        except RemoteProtocolError as exc:  # as the general path reports it (MissingStreamOffset propagates)
            raise BrokerError(f"protocol error from the broker: {exc}") from exc
        if seen > last:
            last = seen
        if other:  # one whole frame for the general path (consume-ok; a close or cancel raises)
            after = frame_end(buf, pos)
            _general_path(client, buf[pos:after])
            pos = after
            continue
        if decoder.last_tag != acked:  # credit for what was decoded: the broker keeps sending
            acked = decoder.last_tag
            client._send(spec.BasicAck(acked, True, channel=CH))
            client.flush()
        if len(cols) >= batch_rows:
            yield cols.batch(stream)
            cols = Columns()
            continue
        if last >= end - 1:
            break
        buf = buf[pos:] + _recv(sock, timeout, stream, last, end)
        pos = 0
    if len(cols):
        yield cols.batch(stream)
    _close(client, buf[pos:])


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
        raise BrokerError(f"connection to the broker lost: {exc}") from exc
    if not data:
        raise BrokerError("the broker closed the connection")
    return data


def _close(client: Client, rest: bytes) -> None:
    """Connection.close through the codec, which drops the deliveries still in flight (past the
    range) up to close-ok; never raises (the range is read)."""
    try:
        if rest:
            client.conn.receive_data(rest)
    finally:
        client.close()
