"""The STOMP 1.2 over WebSocket bench client: stompproto's client role carried by wsframe's.

sansmq_client has no WebSocket transport, so this one connection of the bench stays its own (AMQP and
STOMP over TCP run on sansmq_client: ``client_load``). A client is an ``asyncio.Protocol`` (see
``transport``) that writes a burst of frames per loop turn and stamps arrival once per read.

The handshake asks for ``v12.stomp`` on the URL's path (``/ws``, as RabbitMQ's Web-STOMP). Each
STOMP frame travels in one text message, as stomp.js sends them; received messages, text or
binary, are fed to the STOMP codec as one byte stream (a frame may span messages). No
permessage-deflate is offered: the bodies are padding, and compression would measure zlib.

Destinations follow RabbitMQ's STOMP plugin: ``/queue/NAME`` (a durable queue shared by the
consumers) or ``/topic/NAME`` (fanout: every subscriber gets every message). Acks: ``auto``,
``client-individual`` (one ACK per MESSAGE) or, with ``--multi-ack N``, ``client`` with a
cumulative ACK every Nth MESSAGE. With ``--receipt-every N`` every Nth SEND asks for a RECEIPT;
STOMP handles a connection's frames in order, so a receipt covers every earlier SEND too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import stompproto
import wsframe
from stompproto import Ack, Connect, Connected, Disconnect, Error, Message, Receipt, Send, Subscribe
from wsframe import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from .options import Options
from .payload import Payload, now_us
from .stats import Stats
from .transport import BenchConnection, BrokerError

__all__ = ["WsStompClient"]

_NEED_DATA = stompproto.NEED_DATA
_WS_NEED_DATA = wsframe.NEED_DATA
_MASK = 0xFFFFFFFF


class WsStompClient(BenchConnection):
    """A producer or a consumer on its own STOMP-over-WebSocket connection."""

    def __init__(self, stats: Stats, name: str, opts: Options, payload: Payload) -> None:
        super().__init__(stats, name, opts.send_buffer)
        self.opts = opts
        self.payload = payload
        self.conn = stompproto.Connection(stompproto.CLIENT)
        self.ws = wsframe.Connection(wsframe.CLIENT, permessage_deflate=None)
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
        await self._connect_ws()
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

    async def publish(self, n: int) -> None:
        """Publish ``n`` messages: written with the loop's next flush, after waiting for a full socket."""
        if not self.writable:
            await self.wait_writable()
            if self.failure is not None:
                return
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
        await asyncio.sleep(0)  # the flush, and the deliveries and receipts it lets in

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
        self._close_ws()
        await self.finish(timeout)

    # -- the WebSocket carrier ------------------------------------------------------------------
    async def _connect_ws(self) -> None:
        o = self.opts
        await self.loop.create_connection(lambda: self, o.host, o.port)
        self.write(self.ws.send(Request(host=f"{o.host}:{o.port}", path=o.ws_path,
                                        subprotocols=list(wsframe.STOMP_SUBPROTOCOLS))))
        await self.expect(AcceptConnection)

    def send_frame(self, frame: Any) -> None:
        data = self.conn.send(frame)
        self.write(self.ws.send(TextMessage(data.decode("utf-8"))))

    def feed(self, data: bytes) -> None:
        ws = self.ws
        ws.receive_data(data)
        try:
            while (ev := ws.next_event()) is not _WS_NEED_DATA:
                if isinstance(ev, TextMessage):
                    if ev.data:
                        self.feed_stomp(ev.data.encode("utf-8"))
                elif isinstance(ev, BytesMessage):
                    if ev.data:
                        self.feed_stomp(bytes(ev.data))
                elif isinstance(ev, Ping):
                    self.write(ws.send(ev.response()))
                elif isinstance(ev, CloseConnection):
                    self._on_ws_close(ev)
                    return
                elif isinstance(ev, RejectConnection):
                    raise BrokerError(f"WebSocket handshake refused: HTTP {ev.status} "
                                      f"{bytes(ev.body)[:200]!r}")
                elif isinstance(ev, AcceptConnection):
                    if ev.subprotocol not in wsframe.STOMP_SUBPROTOCOLS:
                        raise BrokerError(f"the server chose subprotocol {ev.subprotocol!r}")
                    self.deliver_expected(ev)
                if self.failure is not None:
                    return
        except wsframe.RemoteProtocolError as exc:
            if exc.hint is not None and self.transport is not None:
                try:
                    self.write(ws.send(exc.hint))
                except wsframe.LocalProtocolError:
                    pass
            raise BrokerError(f"WebSocket protocol error from the server: {exc}") from None

    def eof(self) -> None:
        self.feed(b"")

    def _on_ws_close(self, ev: CloseConnection) -> None:
        if ev.code != 1006:  # a real Close frame: answer it unless it answered ours
            try:
                self.write(self.ws.send(ev.response()))
            except wsframe.LocalProtocolError:
                pass
        if not self.closing:
            raise BrokerError(f"WebSocket closed by the server: {ev.code} {ev.reason}".strip())
        if self.transport is not None:
            self.transport.close()

    def _close_ws(self) -> None:
        # after the DISCONNECT receipt: our Close, then the server's answer ends the socket
        ws = self.ws
        if ws.state is wsframe.ConnectionState.OPEN:
            try:
                self.write(ws.send(CloseConnection(1000)))
                return
            except wsframe.LocalProtocolError:
                pass
        if self.transport is not None:
            self.transport.close()


def _ignore(ev: Any) -> None:
    pass
