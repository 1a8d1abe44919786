"""A stand-in broker serving one stream of fixed messages over AMQP 0-9-1, for measuring and testing
the reader without a broker's own work in the way.

It speaks amqpproto's server role up to basic.consume, then sends the deliveries from the offset
asked for, encoded by the codec's ``send_deliver`` (byte for byte what sansmq's servers send) and
cached per start offset, so a second read of the same range costs the server one ``sendall``.
From then on it skips what the reader sends (acks) up to basic.cancel or the consumer's
channel.close (answered: the connection serves the next consume) or connection.close (answered
with close-ok).
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
from typing import Any

import amqpproto
from amqpproto import spec

_FRAME = struct.Struct(">BHI")
_CLOSE_OK = struct.pack(">BHIHH", 1, 0, 4, 10, 51) + b"\xce"


class FakeStreamBroker:
    """``messages``: (routing key, properties, body) per offset; ``properties.headers`` gets the
    ``x-stream-offset`` of each, as a stream's deliveries carry it. Offsets below ``first`` stand
    for messages retention removed: a consumer asking for one starts at ``first``, as a broker's does;
    ``gone`` offsets are skipped in the middle (retention overtaking a slow reader). With ``stamps``
    it says it can stamp deliveries with their append time, as sansmq does (capability
    ``stream_timestamp``), and does for a consumer that asks (``x-stream-timestamp``: a made-up
    time per offset)."""

    #: the append time (ms) ``stamps`` gives offset 0; offset n is n ms later
    STAMP_BASE = 1_767_225_600_000

    def __init__(self, messages: list[tuple[str, spec.BasicProperties, bytes]], frame_max: int = 131072,
                 first: int = 0, gone: range = range(0), stamps: bool = False) -> None:
        self.messages = messages
        self.stamps = stamps
        self.first = first
        self.gone = gone
        self.frame_max = frame_max
        self._cache: dict[tuple[Any, ...], bytes] = {}
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.connections = 0
        self.cancels = 0

    def serve_forever(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with sock:
                try:
                    self._serve(sock)
                except (OSError, amqpproto.ProtocolError):
                    pass

    def start(self) -> FakeStreamBroker:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self.listener.close()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = amqpproto.Connection(amqpproto.SERVER, frame_max=self.frame_max, heartbeat=0)
        pending = b""
        while True:
            data = pending or sock.recv(1 << 16)
            pending = b""
            if not data:
                return
            conn.receive_data(data)
            while (ev := conn.next_event()) is not amqpproto.NEED_DATA:
                reply = self._answer(conn, ev)
                if reply is None:
                    continue
                sock.sendall(reply)
                if type(ev) is spec.BasicConsume:
                    sock.sendall(self._deliveries(conn, ev))
                    if "x-stream-end-offset" in (ev.arguments or {}):  # sansmq's: the range's end cancels
                        sock.sendall(conn.send(spec.BasicCancel(consumer_tag="ctag", channel=ev.channel)))
                    rest = self._skip_to_cancel_or_close(sock, conn)
                    if rest is None:
                        return
                    pending = rest  # the connection reads on (a reused connection's next range)
                    break
                if type(ev) is spec.ConnectionClose:
                    return

    def _answer(self, conn: Any, ev: Any) -> bytes | None:
        t = type(ev)
        if t is amqpproto.ProtocolHeader:
            capabilities = {"capabilities": {"stream_timestamp": True}} if self.stamps else {}
            return conn.send(spec.ConnectionStart(0, 9, {"product": "fake", **capabilities}, b"PLAIN", b"en_US"))
        if t is spec.ConnectionStartOk:
            return conn.send(spec.ConnectionTune(2047, self.frame_max, 0))
        if t is spec.ConnectionOpen:
            return conn.send(spec.ConnectionOpenOk())
        if t is spec.ChannelOpen:
            return conn.send(spec.ChannelOpenOk(channel=ev.channel))
        if t is spec.BasicQos:
            return conn.send(spec.BasicQosOk(channel=ev.channel))
        if t is spec.ConfirmSelect:  # sansmq_client puts its publishing channel in confirm mode
            return conn.send(spec.ConfirmSelectOk(channel=ev.channel))
        if t is spec.ChannelClose:
            return conn.send(spec.ChannelCloseOk(channel=ev.channel))
        if t is spec.BasicConsume:
            return conn.send(spec.BasicConsumeOk(consumer_tag="ctag", channel=ev.channel))
        if t is spec.ConnectionClose:
            return conn.send(spec.ConnectionCloseOk())
        return None

    def _deliveries(self, conn: Any, consume: spec.BasicConsume) -> bytes:
        args = consume.arguments or {}
        start = max(self.first, int(args.get("x-stream-offset", 0)))
        end = int(args.get("x-stream-end-offset", len(self.messages)))
        wanted = args.get("x-stream-filter")  # sansmq's filtered read: only messages with one of these values
        stamp = self.stamps and args.get("x-stream-timestamp") is True
        key = (start, end, tuple(wanted or ()), stamp)
        cached = self._cache.get(key)
        if cached is None:
            out = []
            kept = [offset for offset in range(start, end) if offset not in self.gone and (
                wanted is None or (self.messages[offset][1].headers or {}).get("x-stream-filter-value") in wanted)]
            for tag, offset in enumerate(kept, 1):
                key, props, body = self.messages[offset]
                headers = dict(props.headers or {})
                headers["x-stream-offset"] = offset
                if stamp:  # where sansmq puts it: after the offset
                    headers["x-stream-timestamp"] = self.STAMP_BASE + offset
                encoded = spec.encode_properties(dataclasses.replace(props, headers=headers))
                out.append(conn.send_deliver(consume.channel, "ctag", tag, False, "", key, encoded, body))
            cached = self._cache[key] = b"".join(out)
        return cached

    def _skip_to_cancel_or_close(self, sock: socket.socket, conn: Any) -> bytes | None:
        """Skip what the reader sends (acks) up to basic.cancel (answered; the bytes after it are
        returned) or connection.close (answered; None)."""
        buf = b""
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return None
            buf += data
            pos = 0
            while len(buf) - pos >= 7:
                ftype, channel, size = _FRAME.unpack_from(buf, pos)
                if len(buf) - pos < size + 8:
                    break
                method = buf[pos + 7:pos + 11]
                if ftype == 1 and channel == 0 and method == b"\x00\x0a\x00\x32":
                    sock.sendall(_CLOSE_OK)
                    return None
                if ftype == 1 and method == b"\x00\x14\x00\x28":  # channel.close: sansmq_client's cancel
                    self.cancels += 1
                    conn.receive_data(buf[pos:pos + size + 8])
                    conn.next_event()
                    sock.sendall(conn.send(spec.ChannelCloseOk(channel=channel)))
                    return buf[pos + size + 8:]
                if ftype == 1 and method == b"\x00\x3c\x00\x1e":  # basic.cancel
                    tag = buf[pos + 12:pos + 12 + buf[pos + 11]].decode()
                    self.cancels += 1
                    sock.sendall(conn.send(spec.BasicCancelOk(consumer_tag=tag, channel=channel)))
                    return buf[pos + size + 8:]
                pos += size + 8
            buf = buf[pos:]
