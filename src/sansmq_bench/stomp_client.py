"""The STOMP 1.2 bench client over TCP, built on stompproto's client role.

Destinations follow RabbitMQ's STOMP plugin: ``/queue/NAME`` (a durable queue shared by the
consumers) or ``/topic/NAME`` (fanout: every subscriber gets every message). Acks: ``auto``,
``client-individual`` (one ACK per MESSAGE) or, with ``--multi-ack N``, ``client`` with a
cumulative ACK every Nth MESSAGE. With ``--receipt-every N`` every Nth SEND asks for a RECEIPT;
STOMP handles a connection's frames in order, so a receipt covers every earlier SEND too.
"""

from __future__ import annotations

from typing import Any

import stompproto
from stompproto import Ack, Connect, Connected, Disconnect, Error, Message, Receipt, Send, Subscribe

from .options import Options
from .payload import Payload, now_us
from .stats import Stats
from .transport import BenchConnection, BrokerError

__all__ = ["StompClient"]

_NEED_DATA = stompproto.NEED_DATA
_MASK = 0xFFFFFFFF


class StompClient(BenchConnection):
    """A producer or a consumer on its own STOMP connection."""

    def __init__(self, stats: Stats, name: str, opts: Options, payload: Payload) -> None:
        super().__init__(stats, name, opts.send_buffer)
        self.opts = opts
        self.payload = payload
        self.conn = stompproto.Connection(stompproto.CLIENT)
        self.destination = ""
        self.send_headers: dict[str, str] = {}
        self.receipt_every = opts.receipt_every
        self.receipted = 0  # our SENDs covered by a receipt
        self.receipt_times: dict[str, tuple[int, int]] = {}  # receipt id -> (seq, stamp)
        self.ack_header = "auto"
        self.multi = opts.multi_ack
        self.unacked = 0
        self.last_ack_id = ""
        self._now = 0
        self._handlers: dict[type, Any] = {
            Message: self._on_message,
            Receipt: self._on_receipt,
            Error: self._on_error,
            stompproto.ConnectionClosed: self._on_eof,
            stompproto.Heartbeat: _ignore,
        }

    # -- the byte carrier (WebSocket overrides these) --------------------------------------
    def send_frame(self, frame: Any) -> None:
        self.write(self.conn.send(frame))

    async def connect_transport(self) -> None:
        await self.loop.create_connection(lambda: self, self.opts.host, self.opts.port)

    def feed(self, data: bytes) -> None:
        self.feed_stomp(data)

    def eof(self) -> None:
        self.feed_stomp(b"")

    # -- receiving ---------------------------------------------------------------------------
    def feed_stomp(self, data: bytes) -> None:
        conn = self.conn
        conn.receive_data(data)
        self._now = now_us()
        handlers = self._handlers
        try:
            while (ev := conn.next_event()) is not _NEED_DATA:
                handler = handlers.get(type(ev))
                if handler is not None:
                    handler(ev)
                else:
                    self.deliver_expected(ev)
                if self.failure is not None:
                    return
        except stompproto.RemoteProtocolError as exc:
            raise BrokerError(f"protocol error from the broker: {exc}") from None

    def _on_eof(self, ev: Any) -> None:
        if not self.closing:
            raise BrokerError("the broker closed the connection")

    def _on_error(self, ev: Error) -> None:
        message = ev.headers.get("message", "")
        body = ev.body.decode("utf-8", "replace").strip()
        detail = f"{message}: {body}" if body and body != message else message
        raise BrokerError(f"ERROR frame from the broker: {detail[:300]}")

    def _on_message(self, ev: Message) -> None:
        if self.closing and self.ack_header != "auto":
            return  # after our DISCONNECT: not acked, so the broker requeues it
        stats = self.stats
        lat = self.payload.latency_us(ev.body, self._now)
        if lat < 0:
            stats.stale += 1
        else:
            stats.received += 1
            stats.window.record(lat)
        if self.ack_header != "auto":
            ack_id = ev.headers.get("ack") or ev.headers.get("message-id", "")
            self.unacked += 1
            if self.unacked >= self.multi:
                self.unacked = 0
                self.send_frame(Ack({"id": ack_id}))
            else:
                self.last_ack_id = ack_id

    def _on_receipt(self, ev: Receipt) -> None:
        rid = ev.headers.get("receipt-id", "")
        got = self.receipt_times.pop(rid, None)
        if got is None:
            self.deliver_expected(ev)
            return
        seq, stamp = got
        if seq > self.receipted:
            n = seq - self.receipted
            self.receipted = seq
            self.stats.confirmed += n
            self.stats.confirm_window.record((self._now - stamp) & _MASK)
            self.progress.set()

    # -- set-up ------------------------------------------------------------------------------
    async def open(self) -> None:
        o = self.opts
        await self.connect_transport()
        self.send_frame(Connect({"accept-version": "1.2", "host": o.vhost, "login": o.user,
                                 "passcode": o.password, "heart-beat": "0,0"}))
        await self.expect(Connected)

    def _destination(self, queue: str) -> str:
        topic = self.opts.topic
        return f"/topic/{topic}" if topic is not None else f"/queue/{queue}"

    async def setup_producer(self, queue: str) -> None:
        self.destination = self._destination(queue)
        self.send_headers = {"destination": self.destination}
        if self.opts.persistent:
            self.send_headers["persistent"] = "true"

    async def setup_consumer(self, queue: str) -> None:
        o = self.opts
        if o.ack == "auto":
            self.ack_header = "auto"
        else:
            self.ack_header = "client" if o.multi_ack > 1 else "client-individual"
        headers = {"id": "1", "destination": self._destination(queue), "ack": self.ack_header,
                   "receipt": "subscribed"}
        if o.prefetch:
            headers["prefetch-count"] = str(o.prefetch)
        self.send_frame(Subscribe(headers))
        # the receipt says the subscription exists before any producer starts
        await self.expect(Receipt)

    # -- publishing --------------------------------------------------------------------------
    @property
    def unconfirmed(self) -> int:
        return self.sent - self.receipted if self.receipt_every else 0

    def publish(self, n: int) -> None:
        body, send_frame, headers = self.payload.body, self.send_frame, self.send_headers
        every = self.receipt_every
        seq = self.sent
        for _ in range(n):
            b = body()
            seq += 1
            if every and seq % every == 0:
                rid = f"s{seq}"
                self.receipt_times[rid] = (seq, int(b[:8], 16))
                send_frame(Send({**headers, "receipt": rid}, b))
            else:
                send_frame(Send(headers, b))
        self.sent = seq
        self.stats.sent += n

    # -- closing -----------------------------------------------------------------------------
    async def close(self, timeout: float = 5.0) -> None:
        if self.failure is not None or self.transport is None:
            return
        self.closing = True
        try:
            if self.unacked and self.ack_header == "client":
                self.send_frame(Ack({"id": self.last_ack_id}))  # cumulative: covers the rest
                self.unacked = 0
            self.send_frame(Disconnect({"receipt": "bye"}))
            await self.expect(Receipt, timeout)
        except (stompproto.LocalProtocolError, BrokerError):
            pass
        self.close_transport()
        await self.finish(timeout)

    def close_transport(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _ignore(ev: Any) -> None:
    pass
