"""A stream range read off the socket in bulk: the client's connection, once its channel has its
prefetch, is handed to ``DeliveryDecoder`` (module ``columns``), which fills record batches from the
bytes as they arrive. Acks (granting credit, removing nothing from a stream) and the closing
handshake are written as raw frames: no codec event per message in either direction.

The codec is used up to basic.consume only; from then on this module owns the socket, so the
connection is closed here too (connection.close, then frames are skipped up to close-ok)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pyarrow as pa

from amqpproto import spec

from .client import CH, BrokerError, ChannelError, Client, ConnectionLost, StreamNotFound
from .columns import Columns, DeliveryDecoder
from .dataloss import LossPolicy

__all__ = ["read_stream_range"]

_RECV = 1 << 18
_FRAME = struct.Struct(">BHI")
_METHOD = struct.Struct(">HH")
_ACK = struct.Struct(">BHIHHQBB")  # frame header, basic.ack (class 60, method 80), tag, multiple, frame end
_CONSUME_OK = (60, 21)
_CLOSE_OK = (10, 51)


def _ack_frame(tag: int) -> bytes:
    return _ACK.pack(1, CH, 13, 60, 80, tag, 1, 0xCE)


def _method_error(buf: bytes, pos: int) -> BrokerError:
    """What a method other than a delivery means for a reader: the broker closed or cancelled."""
    ftype, channel, size = _FRAME.unpack_from(buf, pos)
    if ftype != 1:
        return BrokerError(f"unexpected frame type {ftype} on channel {channel} while reading a stream")
    cls, method = _METHOD.unpack_from(buf, pos + 7)
    if (cls, method) in ((20, 40), (10, 50)):  # channel.close / connection.close: code, text
        code = struct.unpack_from(">H", buf, pos + 11)[0]
        text = buf[pos + 14:pos + 14 + buf[pos + 13]].decode("utf-8", "replace")
        error = StreamNotFound if code == spec.NOT_FOUND else ChannelError
        return error(code, text, "connection closed by the broker" if cls == 10 else "")
    if (cls, method) == (60, 30):
        return BrokerError("the broker cancelled the stream's consumer (stream deleted?)")
    return BrokerError(f"unexpected method {cls}.{method} while reading a stream")


def read_stream_range(client: Client, stream: str, start: int, end: int, batch_rows: int,
                      timeout: float, policy: LossPolicy) -> Iterator[pa.RecordBatch]:
    """Offsets [start, end) of ``stream`` as record batches of at most ``batch_rows`` rows; the
    client's prefetch (basic.qos) is set. The connection is closed when the range is read.

    A stream's offsets are contiguous, so rows missing from the range were removed before they
    were read (a consumer asking for an offset retention removed starts at the first one kept):
    ``policy`` fails the task or counts them. The first batch is checked before it leaves, the
    count of the whole range at its end (retention can overtake a slow reader)."""
    sock = client.sock
    client._send(spec.BasicConsume(queue=stream, arguments={"x-stream-offset": start}, channel=CH))
    client.flush()
    decoder = DeliveryDecoder()
    buf, pos = b"", 0
    acked = 0
    cols = Columns()
    last = start - 1
    consuming = False
    rows = 0
    while last < end - 1:
        pos, seen, other = decoder.decode(buf, pos, cols, start, end, batch_rows)
        if seen > last:
            last = seen
        if other:
            cls_method = _METHOD.unpack_from(buf, pos + 7) if buf[pos] == 1 else None
            if cls_method == _CONSUME_OK and not consuming:
                consuming = True
                pos += _FRAME.unpack_from(buf, pos)[2] + 8
                continue
            raise _method_error(buf, pos)
        if decoder.last_tag != acked:  # credit for what was decoded: the broker keeps sending
            acked = decoder.last_tag
            try:
                sock.sendall(_ack_frame(acked))
            except OSError as exc:
                raise ConnectionLost(f"connection to the broker lost: {exc}") from exc
        if len(cols) >= batch_rows:
            rows += _checked(cols, rows, stream, start, policy)
            yield cols.batch(stream)
            cols = Columns()
            continue
        if last >= end - 1:
            break
        buf = buf[pos:] + _recv(sock, timeout, stream, last, end)
        pos = 0
    if len(cols):
        rows += _checked(cols, rows, stream, start, policy)
        yield cols.batch(stream)
    _close(client)
    if rows < end - start:
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


def _close(client: Client) -> None:
    """connection.close, then skip what is still in flight (deliveries past the range) up to
    close-ok; never raises (the range is read)."""
    sock = client.sock
    try:
        client._send(spec.ConnectionClose(200, "closed by the pipeline"))
        client.flush()
        deadline = time.monotonic() + 5.0
        buf, pos = b"", 0
        while time.monotonic() < deadline:
            while len(buf) - pos >= 7:
                ftype, _, size = _FRAME.unpack_from(buf, pos)
                if len(buf) - pos < size + 8:
                    break
                if ftype == 1 and _METHOD.unpack_from(buf, pos + 7) == _CLOSE_OK:
                    return
                pos += size + 8
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = sock.recv(_RECV)
            if not data:
                return
            buf = buf[pos:] + data
            pos = 0
    except (OSError, BrokerError):
        pass
    finally:
        sock.close()
