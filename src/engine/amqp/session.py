"""The AMQP 0-9-1 session: a server-role amqpproto codec glued to the protocol-neutral model.

This module owns the connection: protocol header, start/start-ok (SASL PLAIN and AMQPLAIN),
tune, open, close, heartbeats, and errors by RabbitMQ's scope (soft errors close one channel,
hard errors the connection). Channel methods live in ``channel``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import amqpproto as A
from amqpproto import AWAIT_HEADER, AWAIT_START, spec

from .. import oplog
from .._message import Entry, Message
from .._mypyc import interpreted_class
from .._session import SERVER_NAME, Host, Session, is_loopback
from ..model import Consumer, Queue, VHost
from ..model.security import UserAccess, UserRecord, client_id_of
from ..store import StoreError
from ..streams import RawRecord
from .base import ChannelBase
from .channel import AmqpChannel, AmqpConnectionError, AmqpConsumer, ChannelError
from .publish import Confirm
from .stream_shapes import VARYING_HEADER

__all__ = ["AmqpSession", "SERVER_PROPERTIES"]

#: what RabbitMQ 3.x advertises in connection.start; clients switch features on these
CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
    # sansmq: queue.declare-ok's message_count on a stream is its end offset
    "stream_end_offset": True,
    # sansmq: a stream consumer with argument x-stream-timestamp=true gets each record's append time
    "stream_timestamp": True,
    # sansmq: a stream consumer with argument x-stream-end-offset=N is cancelled (basic.cancel) once
    # it has been given everything below N (a bounded, possibly filtered, read knows its end)
    "stream_range_end": True,
    # sansmq: a passive queue.declare of a stream with arguments x-stream-range-start=S and
    # x-stream-range-bytes=B answers, as message_count, the end of a read from S whose records fit B
    # bytes (amqp.stream_range)
    "stream_range_bytes": True,
}
SERVER_PROPERTIES: dict[str, Any] = {
    "product": "sansmq",
    "version": SERVER_NAME.partition("/")[2],
    "platform": "Python",
    "cluster_name": "sansmq",
    "copyright": "sansmq contributors",
    "information": "a sans-IO broker speaking STOMP and AMQP 0-9-1",
    "capabilities": CAPABILITIES,
}
MECHANISMS = b"PLAIN AMQPLAIN"
#: RabbitMQ's defaults
FRAME_MAX = 131072
CHANNEL_MAX = 2047
HEARTBEAT = 60
#: seconds we wait for the peer's close-ok after our connection.close before dropping the socket
CLOSE_OK_WAIT = 5.0


def reply_text(code: int, text: str) -> str:
    """RabbitMQ's reply-text style: ``NOT_FOUND - no queue 'q' in vhost '/'``."""
    name = _CODE_NAMES.get(code, "INTERNAL_ERROR")
    out = f"{name} - {text}"
    return out.encode()[:255].decode("utf-8", "ignore")


_CODE_NAMES = {
    311: "CONTENT_TOO_LARGE", 312: "NO_ROUTE", 313: "NO_CONSUMERS", 320: "CONNECTION_FORCED",
    402: "INVALID_PATH", 403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED", 501: "FRAME_ERROR", 502: "SYNTAX_ERROR", 503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR", 505: "UNEXPECTED_FRAME", 506: "RESOURCE_ERROR", 530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED", 541: "INTERNAL_ERROR",
}


@interpreted_class
class AmqpSession(Session):
    PROTOCOL = "amqp"
    __slots__ = ("conn", "vhost", "user", "access", "channels", "client_properties", "closing", "exclusive",
                 "cancel_notify", "blocked_notify", "mechanism", "reply_to", "close_deadline", "batching")

    #: a cluster peer's link (engine.cluster.link): publishes carry the route the peer gave them
    relay = False

    def relayed(self, msg: Message) -> Message:
        return msg

    def __init__(self, host: Host, conn_id: int, peer: tuple[Any, ...]) -> None:
        super().__init__(host, conn_id, peer)
        self.conn = A.Connection(A.SERVER, frame_max=FRAME_MAX, channel_max=CHANNEL_MAX,
                                 heartbeat=HEARTBEAT,
                                 max_body_size=host.config.limits.max_message_size,
                                 initial_frame_max=max(spec.FRAME_MIN_SIZE,
                                                       host.config.limits.max_frame_size_unauthenticated),
                                 # publishes keep their properties' bytes: a stream stores them as they came
                                 raw_properties=True, varying_header=VARYING_HEADER, publish_runs=True)
        self.vhost: VHost | None = None
        self.user: UserRecord | None = None
        self.access: UserAccess = None  # type: ignore[assignment]  # set by connection.open
        self.channels: dict[int, AmqpChannel] = {}
        self.client_properties: dict[str, Any] = {}
        #: we sent connection.close and wait for close-ok (everything else is dropped)
        self.closing = False
        #: exclusive queues this connection declared (deleted with it); None until the first
        self.exclusive: dict[Queue, None] | None = None
        self.cancel_notify = False
        #: the client advertised capability ``connection.blocked``
        self.blocked_notify = False
        self.mechanism = ""
        #: the direct reply-to pseudo-queue of this connection (amq.rabbitmq.reply-to.*), if any
        self.reply_to: str | None = None
        #: after our connection.close, when we stop waiting for the peer's close-ok
        self.close_deadline: float | None = None
        #: while a read is handled or a store sync releases held confirms: channels with acks to coalesce
        self.batching: dict[ChannelBase, None] | None = None

    def __repr__(self) -> str:
        return f"AmqpSession(conn_id={self.conn_id})"

    # -- input ----------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.conn.receive_data(data, self.host.now)
        except A.LocalProtocolError:
            self.close()
            return
        if self.batching is not None:  # fed from inside a batch (AMQP over WebSocket): it flushes
            self._pump()
        else:
            self._pump_coalescing()
        self.host.timer_moved(self)

    def _pump_coalescing(self) -> None:
        """Handle one read's frames, sending the publisher confirms they release as one basic.ack
        multiple=true per channel at the end (RabbitMQ coalesces likewise; a client pipelining
        transient publishes gets one ack per read, not one per message)."""
        batching: dict[ChannelBase, None] = {}
        self.batching = batching
        try:
            self._pump()
        finally:
            self.batching = None
        self._flush_confirms(batching)

    def _flush_confirms(self, batching: dict[ChannelBase, None]) -> None:
        for chan in batching:
            chan.flush_confirms()
        batching.clear()

    def _pump(self) -> None:
        conn = self.conn
        while not self.closed:
            try:
                event = conn.next_event()
            except A.RemoteProtocolError as exc:
                self._remote_error(exc)
                if exc.fatal:
                    return
                continue  # a soft error, or a hard one awaiting close-ok: keep parsing
            if event is A.NEED_DATA:
                return
            self._handle(event)

    def _handle(self, event: Any) -> None:
        cls = type(event)
        try:
            if getattr(event, "channel", 0):  # a method on a channel (>= 1)
                if self.closing:
                    return
                chan = self.channels.get(event.channel)
                if chan is None:
                    if cls is spec.ChannelOpen:
                        self._channel_open(event)
                    return  # the codec vouched for the state: a close-ok of a channel we dropped
                chan.handle(event)
                return
            handler = _CONN_HANDLERS.get(cls)
            if handler is None:
                raise AmqpConnectionError(spec.COMMAND_INVALID, f"unexpected {getattr(cls, 'NAME', cls.__name__)}",
                                       cls)
            handler(self, event)
        # one name per except clause: mypyc gives a reused name the first clause's type
        except ChannelError as chan_exc:
            self._channel_error(event.channel, chan_exc)
        except AmqpConnectionError as conn_exc:
            self.close_with(conn_exc.code, conn_exc.text, conn_exc.method)
        except StoreError as store_exc:
            self.close_with(spec.INTERNAL_ERROR, f"store failure: {store_exc}")

    # -- errors -----------------------------------------------------------------------------------
    def _remote_error(self, exc: A.RemoteProtocolError) -> None:
        hint = exc.hint
        if exc.reply_code == spec.INTERNAL_ERROR:  # the codec met a bug of its own: log it too
            self.host.internal_error(self, exc.__cause__ or exc)
        if isinstance(hint, spec.ChannelClose):
            if hint.reply_code == spec.CONTENT_TOO_LARGE:  # RabbitMQ answers an oversized body so
                hint.reply_code = spec.PRECONDITION_FAILED
            chan = self.channels.pop(hint.channel, None)
            if chan is not None:
                chan.teardown()
            hint.reply_text = reply_text(hint.reply_code, hint.reply_text)
            oplog.channel_error(self, hint.channel, hint.reply_code, hint.reply_text)
            self._send_quietly(hint)
            return
        if isinstance(hint, A.ProtocolHeader):
            self._send_quietly(hint)
            self.close()
            return
        if isinstance(hint, spec.ConnectionClose) and not self.closing:
            self.teardown_channels()  # no deliveries may follow our connection.close
            hint.reply_text = reply_text(hint.reply_code, hint.reply_text)
            self.close_reason = f"{hint.reply_code} {hint.reply_text}"
            oplog.connection_error(self, self.close_reason)
            self._send_quietly(hint)
            self._start_closing()
        if exc.fatal or hint is None:
            self.close()

    def channel_closed(self, channel_id: int) -> None:
        self.channels.pop(channel_id, None)

    def _channel_error(self, channel: int, exc: ChannelError) -> None:
        chan = self.channels.get(channel)
        if chan is not None:
            chan.flush_confirms()  # publishes confirmed before the error are still owed their ack
            del self.channels[channel]
            chan.teardown()
        m = exc.method
        text = reply_text(exc.code, exc.text)
        oplog.channel_error(self, channel, exc.code, text)
        self._send_quietly(spec.ChannelClose(exc.code, text, m.CLASS_ID if m else 0, m.METHOD_ID if m else 0,
                                             channel=channel))

    def close_with(self, code: int, text: str, method: Any = None) -> None:
        """Start the close handshake with a hard error (or a clean 320 shutdown)."""
        if self.closing or self.closed:
            return
        if not self.close_reason and code != spec.CONNECTION_FORCED:  # not already explained
            oplog.connection_error(self, f"{code} {reply_text(code, text)}")
        self.close_reason = f"{code} {reply_text(code, text)}"
        self.teardown_channels()
        self._start_closing()
        self._send_quietly(spec.ConnectionClose(code, reply_text(code, text),
                                                method.CLASS_ID if method else 0,
                                                method.METHOD_ID if method else 0))
        if self.conn.state in (AWAIT_START, AWAIT_HEADER):  # no handshake to wait for
            self.close()

    def _send_quietly(self, event: Any) -> None:
        try:
            self.write(self.conn.send(event, self.host.now))
        except A.LocalProtocolError:
            pass

    def send(self, event: Any) -> None:
        self.write(self.conn.send(event, self.host.now))

    # -- timers and lifecycle --------------------------------------------------------------------
    def inbound_bytes(self) -> int:
        return self.conn.buffered_bytes

    def subscription_count(self) -> int:
        return sum(len(chan.consumers) for chan in self.channels.values())

    def codec_timer(self) -> float | None:
        t = self.conn.get_timer()
        d = self.close_deadline
        return d if t is None or (d is not None and d < t) else t

    def handle_codec_timer(self, now: float) -> None:
        if self.close_deadline is not None and now >= self.close_deadline:
            self.close()
            return
        self.conn.handle_timer(now)
        self._pump()

    def _start_closing(self) -> None:
        self.closing = True
        self.close_deadline = self.host.now + CLOSE_OK_WAIT
        self.host.timer_moved(self)

    def consumers(self) -> list[Consumer]:
        out: list[Consumer] = []
        for chan in self.channels.values():
            out.extend(chan.consumers.values())
        return out

    def teardown_channels(self) -> None:
        channels = self.channels
        self.channels = {}
        for chan in channels.values():
            chan.teardown()

    def own_exclusive(self, q: Queue) -> None:
        if self.exclusive is None:
            self.exclusive = {}
        self.exclusive[q] = None

    def teardown(self) -> None:
        self.teardown_channels()
        exclusive = self.exclusive
        self.exclusive = None
        for q in exclusive or ():
            self.model.delete_queue(q)

    def shutdown(self) -> None:
        """RabbitMQ's answer to a node shutdown; the socket closes on close-ok (or CLOSE_OK_WAIT)."""
        self.close_with(spec.CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'")

    def describe(self) -> dict[str, Any]:
        return {"protocol": "AMQP 0-9-1", "peer": self.peer, "user": self.user.name if self.user else None,
                "vhost": self.vhost.name if self.vhost else None, "channels": len(self.channels),
                "client_properties": self.client_properties or {}}

    def force_close(self, text: str) -> None:
        """connection.close 320 (a node shutdown, or closed via the management API); the socket
        closes on close-ok (or CLOSE_OK_WAIT)."""
        self.close_with(spec.CONNECTION_FORCED, text)

    def abort(self, reason: str) -> None:
        self.close_reason = self.close_reason or f"internal error: {reason}"
        if not self.closing:
            self.teardown_channels()
            self.closing = True
            self._send_quietly(spec.ConnectionClose(spec.INTERNAL_ERROR,
                                                    reply_text(spec.INTERNAL_ERROR, reason), 0, 0))
        self.close()

    def release_held(self, synced: int) -> None:
        """Confirms one sync releases go out as one basic.ack multiple=true per channel."""
        if self.batching is not None:  # released while a read is handled: that batch flushes
            super().release_held(synced)
            return
        batching: dict[ChannelBase, None] = {}
        self.batching = batching
        try:
            super().release_held(synced)
        finally:
            self.batching = None
        self._flush_confirms(batching)

    def fail_held(self, token: int) -> None:
        """The sync covering ``token`` failed: held publisher confirms become nacks (RabbitMQ's
        answer when it cannot persist); anything else held (tx.commit-ok) cannot be honestly
        answered, so the connection is closed with 541."""
        held = self.held
        if not held or held[0][0] > token:
            return
        if any(not isinstance(thunk, Confirm) for tok, thunk in held if tok <= token):
            self.close_with(spec.INTERNAL_ERROR, "the message store could not persist a message")
            self.close()
            return
        while held and held[0][0] <= token:
            held.popleft()[1].fail()  # type: ignore[attr-defined]
        self.release_held(-1)  # releases nothing more: drops the empty queue, resumes reading

    # -- ConsumerOwner ------------------------------------------------------------------------------
    def deliver(self, consumer: Consumer, tag: int, entry: Entry) -> None:
        assert isinstance(consumer, AmqpConsumer)
        try:
            consumer.channel.deliver(consumer, tag, entry)
        except Exception as exc:  # noqa: BLE001 - a delivery must never break dispatch for others
            self.host.internal_error(self, exc)
            self.abort("internal error")

    def deliver_stream(self, consumer: Consumer, first_tag: int, records: list[RawRecord], stamp: bool) -> int:
        """Deliver a stream's read window from the records' stored bytes (``ConsumerOwner``'s
        optional fast path); returns how many were delivered."""
        assert isinstance(consumer, AmqpConsumer)
        try:
            return consumer.channel.deliver_stream(consumer, first_tag, records, stamp)
        except Exception as exc:  # noqa: BLE001 - as deliver's
            self.host.internal_error(self, exc)
            self.abort("internal error")
            return 0

    def consumer_cancelled(self, consumer: Consumer) -> None:
        assert isinstance(consumer, AmqpConsumer)
        consumer.channel.consumer_cancelled(consumer)

    def delivery_timed_out(self, consumer: Consumer, tag: int) -> None:
        pass  # a message's own (STOMP ack-timeout) timeout: the channel keeps the tag, a late ack is ignored

    # -- memory alarm ---------------------------------------------------------------------------------
    def notify_blocked(self, on: bool) -> None:
        """RabbitMQ's connection.blocked / connection.unblocked, to clients that asked for them."""
        if not on:
            self.conn.peer_alive(self.host.now)  # a full heartbeat grace from now on
            self.host.timer_moved(self)
        if self.blocked_notify and not self.closing and self.conn.state == A.OPEN:
            self._send_quietly(spec.ConnectionBlocked(self.host.alarm_reason()) if on else spec.ConnectionUnblocked())

    def channel_timed_out(self, chan: ChannelBase, timeout_ms: int) -> None:
        """An unacked delivery outlived the consumer timeout: close its channel with 406 (its
        deliveries are requeued), as RabbitMQ's consumer_timeout does."""
        self.fail_channel(chan, ChannelError(
            spec.PRECONDITION_FAILED, f"delivery acknowledgement on channel {chan.id} timed out. Timeout "
            f"value used: {timeout_ms} ms. This timeout value can be configured, see consumers doc guide "
            "to learn more"))

    def fail_channel(self, chan: ChannelBase, exc: ChannelError) -> None:
        if self.channels.get(chan.id) is chan and not self.closing:
            self._channel_error(chan.id, exc)

    # -- connection methods -----------------------------------------------------------------------
    def _on_header(self, event: A.ProtocolHeader) -> None:
        extra = self.host.advertised
        props = {**SERVER_PROPERTIES, **extra} if extra else SERVER_PROPERTIES
        self.send(spec.ConnectionStart(0, 9, props, MECHANISMS, b"en_US"))

    def _on_start_ok(self, m: spec.ConnectionStartOk) -> None:
        self.client_properties = m.client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        mechanism = m.mechanism
        self.mechanism = mechanism
        if mechanism not in ("PLAIN", "AMQPLAIN"):
            self._refuse(None, f"unsupported authentication mechanism '{mechanism}'")
        try:
            login, password = A.parse_sasl_response(mechanism, m.response)
        except ValueError:
            self._refuse(None, f"malformed {mechanism} response")
        security = self.model.security
        user = security.users.get(login)
        if user is None or not user.check(password):
            why = f"no such user '{login}'" if user is None else f"wrong password for user '{login}'"
            oplog.auth_failed(self, login, mechanism, why)
            self.model.events.authentication(self, "AMQP 0-9-1", login, mechanism, why)
            self.close_reason = f"access refused: {why}"  # the auth.failed line explains it
            raise AmqpConnectionError(spec.ACCESS_REFUSED, f"Login was refused using authentication mechanism "
                                   f"{mechanism}. For details see the broker logfile.")
        if login in security.loopback_users and not is_loopback(self.peer):
            self._refuse(login, f"user '{login}' can only connect via localhost")
        self.user = user
        self.model.events.authentication(self, "AMQP 0-9-1", login, mechanism)
        self.send(self.conn.tune())

    def _refuse(self, login: str | None, why: str) -> NoReturn:
        """An authentication failure the client may be told about as it is (logged the same)."""
        oplog.auth_failed(self, login, self.mechanism, why)
        self.model.events.authentication(self, "AMQP 0-9-1", login, self.mechanism, why)
        self.close_reason = f"access refused: {why}"  # the auth.failed line explains it
        raise AmqpConnectionError(spec.ACCESS_REFUSED, why)

    def _on_tune_ok(self, m: spec.ConnectionTuneOk) -> None:
        pass  # the codec applied the negotiated limits (and refused out-of-range ones)

    def _on_open(self, m: spec.ConnectionOpen) -> None:
        config = self.host.config
        name = m.virtual_host or config.default_vhost
        user = self.user
        assert user is not None
        if name not in self.model.vhosts:
            raise AmqpConnectionError(spec.NOT_ALLOWED, f"vhost {name} not found", type(m))
        if not self.model.security.can_access_vhost(user.name, name):
            why = f"access to vhost '{name}' refused for user '{user.name}'"
            oplog.auth_failed(self, user.name, self.mechanism, why)
            self.close_reason = f"access refused: {why}"  # the auth.failed line explains it
            raise AmqpConnectionError(spec.NOT_ALLOWED, why, type(m))
        refusal = self.model.limits.connection_refusal(user.name, name)
        if refusal is not None:
            raise AmqpConnectionError(spec.NOT_ALLOWED, refusal[1], type(m))
        self.model.limits.opened(self, user.name, name)
        self.vhost = self.model.vhosts[name]
        self.access = UserAccess(self.model.security, user.name, name, client_id_of(self.client_properties))
        self.send(spec.ConnectionOpenOk())
        self.handshake_done()
        oplog.authenticated(self)
        self.model.events.connection_created(self, "AMQP 0-9-1")

    def _on_update_secret(self, m: spec.ConnectionUpdateSecret) -> None:
        """connection.update-secret: the new secret is checked against the user's credentials
        (RabbitMQ hands it to its auth backends) and a refused one closes the connection with
        RabbitMQ's 530 and text."""
        user = self.user
        assert user is not None
        current = self.model.security.authenticate(user.name, bytes(m.new_secret).decode("utf-8", "replace"))
        if current is None:
            raise AmqpConnectionError(spec.NOT_ALLOWED, "New secret was refused by one of the backends", type(m))
        self.user = current
        self.send(spec.ConnectionUpdateSecretOk())

    def _on_close(self, m: spec.ConnectionClose) -> None:
        self.close_reason = self.close_reason or "client closed the connection"
        self.teardown_channels()
        self._send_quietly(spec.ConnectionCloseOk())
        self.close()

    def _on_close_ok(self, m: spec.ConnectionCloseOk) -> None:
        self.close()

    def _on_closed(self, event: Any) -> None:
        self.close_reason = self.close_reason or oplog.EOF_REASON
        self.close()

    def _on_peer_timed_out(self, event: Any) -> None:
        if self.reading_held():
            # we stopped reading its heartbeats ourselves (RabbitMQ pauses the monitor too); ours
            # keep going out, and the grace period restarts when it is unblocked
            self.conn.peer_alive(self.host.now)
            return
        self.close_reason = "missed heartbeats from client"
        self.close()

    def _on_heartbeat(self, event: Any) -> None:
        pass

    def _on_heartbeat_due(self, event: Any) -> None:
        self._send_quietly(A.Heartbeat())

    def _on_ignored(self, event: Any) -> None:
        pass

    def _channel_open(self, m: spec.ChannelOpen) -> None:
        if self.user is not None:
            refusal = self.model.limits.channel_refusal(self.user.name)
            if refusal is not None:  # RabbitMQ closes the connection (530), not the channel
                raise AmqpConnectionError(spec.NOT_ALLOWED, refusal, type(m))
        self.channels[m.channel] = chan = AmqpChannel(self, m.channel)
        self.send(spec.ChannelOpenOk(channel=m.channel))
        self.model.events.channel("created", chan)


_CONN_HANDLERS: dict[type, Callable[[AmqpSession, Any], None]] = {
    A.ProtocolHeader: AmqpSession._on_header,
    # log-in and vhost: looked up on the instance, so a session type may authenticate its own
    # way (the cluster link, engine.cluster.link)
    spec.ConnectionStartOk: lambda s, m: s._on_start_ok(m),
    spec.ConnectionTuneOk: AmqpSession._on_tune_ok,
    spec.ConnectionOpen: lambda s, m: s._on_open(m),
    spec.ConnectionClose: AmqpSession._on_close,
    spec.ConnectionUpdateSecret: AmqpSession._on_update_secret,
    spec.ConnectionCloseOk: AmqpSession._on_close_ok,
    A.ConnectionClosed: AmqpSession._on_closed,
    A.PeerTimedOut: AmqpSession._on_peer_timed_out,
    A.Heartbeat: AmqpSession._on_heartbeat,
    A.HeartbeatDue: AmqpSession._on_heartbeat_due,
    spec.ConnectionBlocked: AmqpSession._on_ignored,
    spec.ConnectionUnblocked: AmqpSession._on_ignored,
}
