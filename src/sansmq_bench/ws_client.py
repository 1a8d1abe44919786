"""STOMP over WebSocket: the STOMP bench client carried by wsframe's client role.

The handshake asks for ``v12.stomp`` on the URL's path (``/ws``, as RabbitMQ's Web-STOMP). Each
STOMP frame travels in one text message, as stomp.js sends them; received messages, text or
binary, are fed to the STOMP codec as one byte stream (a frame may span messages). No
permessage-deflate is offered: the bodies are padding, and compression would measure zlib.
"""

from __future__ import annotations

from typing import Any

import wsframe
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
from .payload import Payload
from .stats import Stats
from .stomp_client import StompClient
from .transport import BrokerError

__all__ = ["WsStompClient"]

_NEED_DATA = wsframe.NEED_DATA


class WsStompClient(StompClient):
    def __init__(self, stats: Stats, name: str, opts: Options, payload: Payload) -> None:
        super().__init__(stats, name, opts, payload)
        self.ws = wsframe.Connection(wsframe.CLIENT, permessage_deflate=None)

    async def connect_transport(self) -> None:
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
            while (ev := ws.next_event()) is not _NEED_DATA:
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

    def close_transport(self) -> None:
        # after the DISCONNECT receipt: our Close, then the server's answer ends the socket
        ws = self.ws
        if ws.state is wsframe.ConnectionState.OPEN:
            try:
                self.write(ws.send(CloseConnection(1000)))
                return
            except wsframe.LocalProtocolError:
                pass
        super().close_transport()
