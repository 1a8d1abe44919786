"""STOMP and AMQP 0-9-1 over WebSocket: the ``"ws"`` protocol.

The server hands this session the raw bytes of a socket accepted on the WebSocket listener. A
server-role ``wsframe`` connection runs the HTTP upgrade and the framing; once the upgrade is
accepted, an unchanged protocol session runs inside it with this session as its *carrier*
(``Session.carrier``): every message payload is fed to the inner session's codec, which buffers
across messages (a frame may be split over several messages, a message may hold several frames),
and every chunk the inner session writes goes out as one message. Bytes are counted after framing,
so back-pressure sees what the socket really has to carry.

The inner protocol follows the subprotocol:

- STOMP (as RabbitMQ's Web-STOMP plugin): the highest of ``v12.stomp``/``v11.stomp``/``v10.stomp``
  the client offered; none offered means plain STOMP with no ``Sec-WebSocket-Protocol`` in the
  answer. Output goes out as text messages (binary when a chunk is not UTF-8). Unknown-only offers
  are accepted without a subprotocol (the client then fails the connection itself, RFC 6455 4.1).
- AMQP 0-9-1 (as LavinMQ): subprotocol ``amqp`` offered without a STOMP one. The inner session is
  an :class:`AmqpSession`; its output goes out as binary messages.

Handshake policy: paths ``/ws`` (and ``/stomp/websocket``, the raw-WebSocket path of the SockJS
endpoint, and ``/ws/amqp``, ``/amqp`` for AMQP clients); any other path gets 404; an HTTP request
that is not an upgrade gets 426 (the codec's answer), a malformed upgrade the codec's 400/405/426.
permessage-deflate is accepted when offered only with ``[websocket] compress = true`` (off by default,
as RabbitMQ's Web-STOMP ``ws_opts.compress``). With ``[websocket] allowed_origins`` set, a request whose
``Origin`` is not listed gets 403 (a page of another site cannot use the visitor's loopback access or
browser credentials); requests without ``Origin`` (not browsers) are not affected. The handshake deadline
(``Limits.handshake_timeout``, see ``engine._session``) runs from the accept through the upgrade
into the inner session: the upgrade and the STOMP/AMQP login together must fit in it. Until the
inner session has logged in, messages are capped at ``Limits.max_frame_size_unauthenticated``.

Closing: when the inner session closes (STOMP DISCONNECT after its RECEIPT, ERROR, heart-beat
timeout; AMQP connection.close-ok) a Close 1000 goes out and the connection closes when the
client's Close answers it (or at EOF, or after ``CLOSE_TIMEOUT``): closing TCP at once would make
the client's Close meet a reset and browsers report an unclean close (RFC 6455 7.1.1: the server
should wait for the client to answer). A client Close (or EOF) is fed to the inner session as a
transport EOF (its unacked messages are requeued), then the Close is answered. A WebSocket-level
error sends the codec's Close hint (1002, 1007, 1009) and closes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wsframe import (
    AMQP_SUBPROTOCOL,
    NEED_DATA,
    SERVER,
    STOMP_SUBPROTOCOLS,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    CloseReason,
    Connection,
    ConnectionState,
    LocalProtocolError,
    PerMessageDeflate,
    Ping,
    Pong,
    RejectConnection,
    RemoteProtocolError,
    Request,
    TextMessage,
    choose_subprotocol,
)

from .. import oplog
from .._mypyc import interpreted_class
from .._session import Host, Session
from ..amqp import AmqpSession
from ..model import Consumer
from ..stomp import StompSession

__all__ = ["WsSession", "WS_PATHS"]

#: request paths (query string ignored) that upgrade to STOMP or AMQP over WebSocket
WS_PATHS = ("/ws", "/stomp/websocket", "/ws/amqp", "/amqp")
#: seconds to wait for the client's answer to our Close before closing the TCP connection anyway
CLOSE_TIMEOUT = 5.0
#: states in which the server may still send messages
_CAN_SEND = frozenset((ConnectionState.OPEN, ConnectionState.CLIENT_CLOSING))


def _origin_check(allowed: tuple[str, ...]) -> Callable[[str | None], bool] | None:
    """The handshake's Origin check for ``[websocket] allowed_origins`` (None: every origin)."""
    if not allowed:
        return None
    names = frozenset(allowed)
    return lambda origin: origin is None or origin in names



def _internal(hint: CloseConnection | RejectConnection | None) -> bool:
    """Whether wsframe's hint is its internal-error close (it re-types a bug of its own so)."""
    if isinstance(hint, CloseConnection):
        return hint.code == CloseReason.INTERNAL_ERROR
    return isinstance(hint, RejectConnection) and hint.status == 500


@interpreted_class
class WsSession(Session):
    """The carrier: a WebSocket connection around an inner STOMP or AMQP session (created on upgrade)."""

    __slots__ = ("ws", "inner", "peer_close", "close_deadline", "binary", "going_away")
    PROTOCOL = "ws"

    def __init__(self, host: Host, conn_id: int, peer: tuple[Any, ...]) -> None:
        super().__init__(host, conn_id, peer)
        # until the inner session logs in, a message may be no larger than a pre-login frame; then
        # a STOMP frame may take one message of up to max_frame_size (see carried_handshake_done)
        size = host.config.limits.max_frame_size_unauthenticated
        policy = host.config.websocket
        self.ws = Connection(SERVER, max_frame_size=size, max_message_size=size, rng=host.rng.randbytes,
                             permessage_deflate=PerMessageDeflate() if policy.compress else None,
                             origin_check=_origin_check(policy.allowed_origins))
        self.inner: Session | None = None
        #: the client's Close, once received (answered when the inner session has closed)
        self.peer_close: CloseConnection | None = None
        #: set once our Close is out: when to stop waiting for the client's answer
        self.close_deadline: float | None = None
        #: the inner protocol is binary (AMQP): its output goes out as binary messages
        self.binary = False
        #: the broker is shutting down: our Close says 1001 (going away), as RabbitMQ's Web-STOMP
        self.going_away = False

    def __repr__(self) -> str:
        return f"WsSession(conn_id={self.conn_id})"

    # -- input ------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        ws = self.ws
        try:
            ws.receive_data(data)
            while not self.closed:
                event = ws.next_event()
                if event is NEED_DATA:
                    return
                _HANDLERS[type(event)](self, event)
        except RemoteProtocolError as exc:
            if exc.__cause__ is not None and _internal(exc.hint):  # the codec met a bug of its own: log it too
                self.host.internal_error(self, exc.__cause__)
            self._fail(exc.hint)

    def _on_request(self, request: Request) -> None:
        if request.path.partition("?")[0] not in WS_PATHS:
            self._reject(404, b"no WebSocket endpoint here; STOMP and AMQP are on /ws\n")
            return
        offered = request.subprotocols
        subprotocol = choose_subprotocol(offered, STOMP_SUBPROTOCOLS)
        factory: type[Session] = StompSession
        if subprotocol is None and AMQP_SUBPROTOCOL in offered:
            subprotocol = AMQP_SUBPROTOCOL
            factory = AmqpSession
            self.binary = True
        self._send(AcceptConnection(subprotocol=subprotocol))
        inner = factory(self.host, self.conn_id, self.peer)
        inner.carrier = self
        inner.blocked = self.blocked
        # the deadline runs on inside: upgrade and login together must fit in handshake_timeout
        inner.handshake_deadline, self.handshake_deadline = self.handshake_deadline, None
        self.inner = inner
        self.host.timer_moved(self)
        self.host.timer_moved(inner)
        inner.start()

    def _on_text(self, message: TextMessage) -> None:
        self._feed_inner(message.data.encode("utf-8"))

    def _on_bytes(self, message: BytesMessage) -> None:
        self._feed_inner(bytes(message.data))

    def _feed_inner(self, payload: bytes) -> None:
        inner = self.inner
        if inner is not None and payload:  # b"" would read as EOF
            inner.data_received(payload)

    def _on_ping(self, ping: Ping) -> None:
        if self.ws.state in _CAN_SEND:  # not once our Close is out: nothing may follow it
            self._send(ping.response())

    def _on_pong(self, pong: Pong) -> None:
        pass

    def _on_close(self, close: CloseConnection) -> None:
        # a Close frame, or code 1006 for EOF without one: for the inner protocol both are the
        # transport ending
        self.peer_close = close
        self.close_reason = self.close_reason or (
            oplog.EOF_REASON if close.code == CloseReason.ABNORMAL_CLOSURE
            else f"client sent WebSocket Close {close.code}")
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.data_received(b"")  # closes through carried_closed, unless it is finishing a DISCONNECT
        elif not self.closed:
            self.carried_closed()

    # -- timers (the inner session keeps its own heart-beat timer and handshake deadline) ---------------
    def codec_timer(self) -> float | None:
        return self.close_deadline

    def handle_codec_timer(self, now: float) -> None:
        deadline = self.close_deadline
        if deadline is not None and now >= deadline:
            self.close_deadline = None
            self.close()  # no answer to our Close

    def inbound_bytes(self) -> int:
        inner = self.inner
        return self.ws.buffered_bytes + (inner.inbound_bytes() if inner is not None else 0)

    def subscription_count(self) -> int:
        inner = self.inner
        return inner.subscription_count() if inner is not None else 0

    # -- the carrier side of the inner session ---------------------------------------------------------
    def carry(self, data: bytes) -> None:
        if self.closed or self.ws.state not in _CAN_SEND:
            return  # the client's Close or EOF came first: nothing more can reach it
        if self.binary:
            self._send(BytesMessage(data))
            return
        try:
            event: TextMessage | BytesMessage = TextMessage(data.decode("utf-8"))
        except UnicodeDecodeError:  # a text message must be valid UTF-8 (RFC 6455 8.1)
            event = BytesMessage(data)
        self._send(event)

    def carried_handshake_done(self) -> None:
        size = self.host.config.limits.max_frame_size
        self.ws.set_limits(max_frame_size=size, max_message_size=size)
        self.handshaking = False

    def carried_closed(self) -> None:
        if self.closed:
            return
        if self.inner is not None:
            self.close_reason = self.close_reason or self.inner.close_reason
        state = self.ws.state
        if state is ConnectionState.OPEN:
            # the model has already released the inner session; only the socket waits for the answer
            self._send(CloseConnection(CloseReason.GOING_AWAY if self.going_away else CloseReason.NORMAL_CLOSURE))
            self.close_deadline = self.host.now + CLOSE_TIMEOUT
            self.host.timer_moved(self)
            return
        if state is ConnectionState.CLIENT_CLOSING and self.peer_close is not None:
            self._send(self.peer_close.response())
        self.close()

    # -- output and back-pressure ---------------------------------------------------------------------
    def _send(self, event: Any) -> None:
        self.write(self.ws.send(event))

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.inner is not None:
            self.inner.blocked = self.blocked  # the model asks the inner session (the consumer owner)

    def bytes_sent(self, nbytes: int) -> None:
        # Session.bytes_sent only marks the consumers' queues dirty; they dispatch after this returns
        super().bytes_sent(nbytes)
        if self.inner is not None:
            self.inner.blocked = self.blocked

    def wants_pause(self) -> bool:
        inner = self.inner
        return super().wants_pause() or (inner is not None and not inner.closed and inner.wants_pause())

    def memory_alarm(self, on: bool) -> None:
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.memory_alarm(on)  # the inner protocol tells its client; the socket pauses here

    # -- lifecycle -----------------------------------------------------------------------------------
    def consumers(self) -> list[Consumer]:
        return self.inner.consumers() if self.inner is not None else []

    def teardown(self) -> None:
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.lost()  # as on a TCP drop: released in the model, nothing written

    def _finish(self) -> None:
        super()._finish()
        if self.inner is not None:
            # the inner session points back at us: drop that edge so both go by reference counting
            self.inner.carrier = None

    def abort(self, reason: str) -> None:
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.abort(reason)  # STOMP ERROR / AMQP connection.close, then Close 1000 through carried_closed
        if not self.closed:
            if self.ws.state in _CAN_SEND:
                self._send(CloseConnection(CloseReason.INTERNAL_ERROR, reason[:100]))
            self.close()

    def shutdown(self) -> None:
        """The inner protocol's close (STOMP ERROR / AMQP connection.close 320), then Close 1001."""
        self.going_away = True
        self.close_reason = "broker shutdown"
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.shutdown()  # ends in carried_closed, which sends our Close
        elif self.ws.state is ConnectionState.OPEN:
            self.carried_closed()
        elif not self.closed:
            self.close()

    def describe(self) -> dict[str, Any]:
        inner = self.inner
        out = inner.describe() if inner is not None else super().describe()
        out["protocol"] = f"Web {out['protocol']}"
        out["peer"] = self.peer
        return out

    def force_close(self, text: str) -> None:
        """The inner protocol's forced close (closed via the management API), then Close 1000."""
        self.close_reason = self.close_reason or f"closed by an operator: {text}"
        inner = self.inner
        if inner is not None and not inner.closed:
            inner.force_close(text)  # ends in carried_closed, which sends our Close
        elif self.ws.state is ConnectionState.OPEN:
            self.carried_closed()
        elif not self.closed:
            self.close()

    def _reject(self, status: int, body: bytes) -> None:
        self._fail(RejectConnection(status, body=body))

    def _fail(self, hint: CloseConnection | RejectConnection | None) -> None:
        if isinstance(hint, RejectConnection):
            why = f"WebSocket handshake refused: {hint.status} {hint.body.decode(errors='replace').strip()}"
        else:
            why = f"WebSocket protocol error: {hint.code} {hint.reason}" if hint is not None else "WebSocket error"
        if not self.close_reason:
            oplog.connection_error(self, why)
        self.close_reason = self.close_reason or why
        if hint is not None:
            try:
                self._send(hint)
            except LocalProtocolError:
                pass
        self.close()


_HANDLERS: dict[type, Callable[[WsSession, Any], None]] = {
    Request: WsSession._on_request,
    TextMessage: WsSession._on_text,
    BytesMessage: WsSession._on_bytes,
    Ping: WsSession._on_ping,
    Pong: WsSession._on_pong,
    CloseConnection: WsSession._on_close,
}
