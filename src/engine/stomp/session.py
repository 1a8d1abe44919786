"""The STOMP session: a server-role stompproto codec glued to the protocol-neutral model.

Frames become model operations (declare/bind/publish/consume/ack); deliveries become MESSAGE frames.
Any protocol error sends an ERROR frame and closes this connection only; whatever it held in the
model (unacked messages, subscriptions, temporary queues) is released first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from stompproto import (
    NEED_DATA,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    ConnectionClosed,
    Disconnect,
    Error,
    Frame,
    Heartbeat,
    HeartbeatDue,
    Nack,
    PeerTimedOut,
    Receipt,
    RemoteProtocolError,
    Send,
    Subscribe,
    Unsubscribe,
)

from .. import oplog
from .._mypyc import interpreted_class
from .._session import SERVER_NAME, is_loopback
from ..model import Consumer, ModelError
from ..model.security import UserAccess, UserRecord
from ..store import StoreError
from .delivery import DeliveryMethods
from .errors import StompError, model_error_title
from .sending import SendMethods
from .subscribe import SubscribeMethods
from .subscriptions import StompLightSubscription, StompSubscription
from .transactions import TxMethods
from .wire import message_headers

__all__ = ["StompSession", "StompSubscription", "StompLightSubscription", "SERVER_NAME", "message_headers"]


def _requested_heartbeat(value: str | None) -> tuple[int, int]:
    """The client's ``heart-beat`` header (the codec has already rejected malformed ones)."""
    if not value:
        return 0, 0
    cx, _, cy = value.partition(",")
    return int(cx), int(cy)


@interpreted_class
class StompSession(SendMethods, SubscribeMethods, TxMethods, DeliveryMethods):
    """One STOMP connection: the codec's input, CONNECT and its authentication, heart-beats,
    DISCONNECT and the connection's end; the frame handlers come from the classes it is made of."""

    PROTOCOL = "stomp"
    __slots__ = ()

    def __repr__(self) -> str:
        return f"StompSession(conn_id={self.conn_id})"

    def data_received(self, data: bytes) -> None:
        if self.closed or self._disconnecting:
            return
        self._guard(self.conn.receive_data, data, self.host.now)
        self.host.timer_moved(self)

    def _guard(self, feed: Callable[..., None], *args: Any) -> None:
        """Feed the codec, handle every event it yields; turn failures into ERROR + close."""
        try:
            feed(*args)
            self._pump()
        # one name per except clause: mypyc gives a reused name the first clause's type
        except RemoteProtocolError as remote:
            self._fail_remote(remote)
        except StompError as exc:
            self._fail(exc.message, exc.detail, exc.receipt)

    def _pump(self) -> None:
        conn = self.conn
        while not self.closed and not self._disconnecting:
            event = conn.next_event()
            if event is NEED_DATA:
                return
            handler = _HANDLERS.get(type(event))
            if handler is None:
                raise StompError(f"unexpected frame {getattr(event, 'command', type(event).__name__)}")
            if self.vhost is None and not isinstance(
                    event, (Connect, ConnectionClosed, Heartbeat, PeerTimedOut, HeartbeatDue)):
                raise StompError("not connected", "send CONNECT first")
            try:
                try:
                    handler(self, event)
                except ModelError as refused:
                    raise StompError(model_error_title(refused), refused.text) from refused
                except StoreError as failed:  # e.g. a full disk: the SEND is refused, not confirmed
                    raise StompError("store failure", str(failed)) from failed
            except StompError as exc:
                if isinstance(event, Frame):  # so the client knows which frame failed
                    exc.receipt = event.headers.get("receipt")
                raise

    def _fail_remote(self, exc: RemoteProtocolError) -> None:
        hint = exc.hint
        if exc.__cause__ is not None and isinstance(hint, Error) and hint.headers.get("message") == "internal error":
            self.host.internal_error(self, exc.__cause__)  # the codec met a bug of its own: log it too
        if hint is None:
            hint = Error({"message": str(exc)[:200] or "protocol error"})
        told = hint.headers.get("message") if isinstance(hint, Error) else None
        self.close_reason = f"protocol error: {told or exc}"
        oplog.connection_error(self, self.close_reason)
        self._send_quietly(hint)
        self.close()

    def codec_timer(self) -> float | None:
        return self.conn.get_timer()

    def inbound_bytes(self) -> int:
        return self.conn.buffered_bytes

    def subscription_count(self) -> int:
        return len(self.subs)

    def handshake_timed_out(self) -> None:
        self._fail("Handshake timeout", "no CONNECT frame within the handshake timeout")

    def handle_codec_timer(self, now: float) -> None:
        self._guard(self.conn.handle_timer, now)

    def consumers(self) -> list[Consumer]:
        return list(self.subs.values())  # type: ignore[arg-type]

    def teardown(self) -> None:
        model = self.model
        subs = self.subs
        self.subs = {}
        for sub in subs.values():
            model.cancel(sub, requeue=True)
            if isinstance(sub, StompSubscription) and sub.owns_queue:
                model.delete_queue(sub.queue)
        for q in (self.temp or {}).values():
            model.delete_queue(q)
        self.temp = None
        self.txs = None

    def abort(self, reason: str) -> None:
        self._fail(reason)

    def force_close(self, text: str) -> None:
        """An ERROR frame naming the reason, then close (RabbitMQ's AMQP wording)."""
        self._fail("CONNECTION_FORCED", text)

    def shutdown(self) -> None:
        """An ERROR frame naming the reason, then close (RabbitMQ's AMQP wording for a shutdown)."""
        self.close_reason = "broker shutdown"
        self._fail("CONNECTION_FORCED", "broker forced connection closure with reason 'shutdown'")

    def describe(self) -> dict[str, Any]:
        return {"protocol": f"STOMP {self.version}", "peer": self.peer,
                "user": self.user.name if self.user else None,
                "vhost": self.vhost.name if self.vhost else None, "channels": 1, "client_properties": {}}

    def fail_held(self, token: int) -> None:
        if self.held and self.held[0][0] <= token:
            self._fail("store failure", "the message store could not persist this connection's data")

    def _on_connect(self, frame: Connect) -> None:
        config = self.host.config
        headers = frame.headers
        self.version = self.conn.version or "1.0"
        login = headers.get("login")
        # as RabbitMQ's STOMP adapter: the host header names the vhost; no header, the default one
        vhost_name = headers.get("host", config.default_vhost)
        user, why, told = self._authenticate(login, headers.get("passcode", ""), vhost_name)
        if user is None:
            mechanism = "login header" if login is not None else "anonymous"
            oplog.auth_failed(self, login or config.anonymous_user, mechanism, why)
            self.model.events.authentication(self, "STOMP", login, "PLAIN", why)
            self.close_reason = f"Access refused: {told}"  # the auth.failed line above explains it
            raise StompError(f"Access refused: {told}", told)
        self.user = user
        self.model.events.authentication(self, "STOMP", user.name, "PLAIN")
        self.vhost = self.model.vhosts[vhost_name]
        self.model.limits.opened(self, user.name, vhost_name)
        self.access = UserAccess(self.model.security, user.name, vhost_name)
        oplog.authenticated(self)
        self.model.events.connection_created(self, "STOMP")
        out = {"version": self.version}
        if self.version != "1.0":
            # As RabbitMQ: grant the periods the client asks for, but never faster than our floor.
            client_send, client_want = _requested_heartbeat(headers.get("heart-beat"))
            floor_send, floor_want = config.limits.heartbeat
            send_ms = max(client_want, floor_send) if client_want else 0
            want_ms = max(client_send, floor_want) if client_send else 0
            out["heart-beat"] = f"{send_ms},{want_ms}"
        out["server"] = SERVER_NAME
        out["session"] = f"session-{self.conn_id}"
        self.send(Connected(out))  # the codec takes full-size frames from now on
        self.handshake_done()

    def _authenticate(self, login: str | None, passcode: str,
                      vhost_name: str) -> tuple[UserRecord | None, str, str]:
        """(the user, or None with why for the log and what to tell the client)."""
        config = self.host.config
        security = self.model.security
        if login is None:
            # RabbitMQ's STOMP default_user/default_pass: configured credentials that go through
            # the same login (a changed password breaks it; guest stays loopback-only)
            if config.anonymous_user is None:
                why = "no login given and anonymous access is disabled"
                return None, why, why
            login, passcode = config.anonymous_user, config.anonymous_password
        user = security.users.get(login)
        if user is None:
            return None, f"no such user '{login}'", f"user '{login}' - invalid credentials"
        if not user.check(passcode):
            return None, f"wrong passcode for user '{login}'", f"user '{login}' - invalid credentials"
        if user.name in security.loopback_users and not is_loopback(self.peer):
            why = f"user '{user.name}' can only connect via localhost"
            return None, why, why
        if vhost_name not in self.model.vhosts:
            why = f"Virtual host '{vhost_name}' access denied"  # RabbitMQ's words (no such vhost)
            return None, f"{why}: no such vhost", why
        if not security.can_access_vhost(user.name, vhost_name):
            why = f"access to vhost '{vhost_name}' refused for user '{user.name}'"
            return None, why, why
        refusal = self.model.limits.connection_refusal(user.name, vhost_name)
        if refusal is not None:  # RabbitMQ's STOMP words, the limit's own text in the log
            return None, refusal[1], f"Connection refused: {refusal[0]} connection limit reached"
        return user, "", ""

    def _on_closed(self, event: ConnectionClosed) -> None:
        self.close_reason = self.close_reason or oplog.EOF_REASON
        self.close()

    def _on_timed_out(self, event: PeerTimedOut) -> None:
        if self.reading_held():
            return  # the memory alarm stopped us reading its heart-beats: not the client's fault
        self.close_reason = "missed heart-beats from client"
        self.close()

    def _on_heartbeat(self, event: Heartbeat) -> None:
        pass

    def _on_heartbeat_due(self, event: HeartbeatDue) -> None:
        self.send(Heartbeat())

    def _on_disconnect(self, frame: Disconnect) -> None:
        self._disconnecting = True
        self.close_reason = "client sent DISCONNECT"
        self.teardown()
        # the receipt promises every earlier frame took effect: wait for whatever is unsynced
        self.after_sync(True, partial(self._disconnected, frame.headers.get("receipt")))

    def _disconnected(self, receipt: str | None) -> None:
        if receipt is not None:
            self.send(Receipt({"receipt-id": receipt}))
        self.close()


_HANDLERS: dict[type, Callable[[StompSession, Any], None]] = {
    Connect: StompSession._on_connect,
    Send: StompSession._on_send,
    Subscribe: StompSession._on_subscribe,
    Unsubscribe: StompSession._on_unsubscribe,
    Ack: StompSession._on_ack,
    Nack: StompSession._on_nack,
    Begin: StompSession._on_begin,
    Commit: StompSession._on_commit,
    Abort: StompSession._on_abort,
    Disconnect: StompSession._on_disconnect,
    ConnectionClosed: StompSession._on_closed,
    PeerTimedOut: StompSession._on_timed_out,
    Heartbeat: StompSession._on_heartbeat,
    HeartbeatDue: StompSession._on_heartbeat_due,
}
