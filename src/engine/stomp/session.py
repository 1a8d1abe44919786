"""The STOMP session: a server-role stompproto codec glued to the protocol-neutral model.

Frames become model operations (declare/bind/publish/consume/ack); deliveries become MESSAGE frames.
Any protocol error sends an ERROR frame and closes this connection only; whatever it held in the
model (unacked messages, subscriptions, temporary queues) is released first.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from stompproto import (
    NEED_DATA,
    SERVER,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Connection,
    ConnectionClosed,
    Disconnect,
    Error,
    Frame,
    Heartbeat,
    HeartbeatDue,
    LocalProtocolError,
    Nack,
    PeerTimedOut,
    Receipt,
    RemoteProtocolError,
    Send,
    Subscribe,
    Unsubscribe,
)

from .. import oplog
from .._message import Entry, Message
from .._props import stomp_value
from .._session import SERVER_NAME, Host, Session, is_loopback
from ..model import Consumer, ModelError, Queue, VHost
from ..model.light import AUTO_ACK, FIRST_FREE_FLAG, LightConsumer
from ..model.routers import PREFIX_ARG
from ..model.security import Access, UserAccess, UserRecord, check_topic_access
from ..model.streams import parse_consumer_args
from ..store import StoreError
from .destinations import BadDestination, Destination, destination_for, is_prefix_topic, parse_destination

__all__ = ["StompSession", "StompSubscription", "StompLightSubscription", "SERVER_NAME", "message_headers"]

ACK_MODES = ("auto", "client", "client-individual")
#: SEND headers that only steer this frame and are not part of the message
_TRANSPORT_HEADERS = frozenset(("destination", "receipt", "transaction", "content-length"))
#: SEND headers that change how the broker treats the message
_STEERING = frozenset(("priority", "expires", "ttl", "expiration", "ack-timeout"))
#: MESSAGE headers only the broker sets
_RESERVED_MESSAGE_HEADERS = frozenset(
    ("subscription", "destination", "message-id", "ack", "redelivered", "x-delivery-count", "content-length")
)
#: late acks for deliveries an ack timeout took back are ignored, up to this many per connection
_TIMED_OUT_MEMORY = 1024
#: queue arguments a SEND/SUBSCRIBE may give when it declares a queue (RabbitMQ's STOMP headers)
_QUEUE_ARGS = ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-message-ttl", "x-max-length",
               "x-expires", "x-queue-type", "x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes")


class StompError(Exception):
    """Send an ERROR frame with this message and close the connection."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.receipt: str | None = None


#: StompSubscription ack modes (low bits of its flags) and its "owns the queue" bit
_ACK_MODE_BITS = {"auto": 0, "client": 1, "client-individual": 2}
_ACK_MODES_BY_BITS = ("auto", "client", "client-individual")
_OWNS_QUEUE = 4


class StompSubscription(Consumer):
    """A subscription consuming from a queue. Idle ones are small (96 bytes): the ack mode and
    "owns its queue" are bits, and a ``/queue/<its queue's name>`` destination is not kept but
    rebuilt when asked for (``_m`` is the flags, or (destination, flags) for other destinations)."""

    __slots__ = ("id", "_m", "wire")

    def __init__(self, queue: Queue, owner: StompSession, prefetch: int, sub_id: str, destination: str,
                 ack_mode: str, owns_queue: bool) -> None:
        super().__init__(queue, owner, prefetch, ack_mode == "auto")
        self.id = sub_id
        #: the queue exists for this subscription only (non-durable topic/exchange): delete it with us
        flags = _ACK_MODE_BITS[ack_mode] | (_OWNS_QUEUE if owns_queue else 0)
        derived = destination.startswith("/queue/") and destination[7:] == queue.name
        self._m: int | tuple[str, int] = flags if derived else (destination, flags)
        #: its pre-encoded MESSAGE header lines (``_Wire``), made at the first delivery
        self.wire: _Wire | None = None

    @property
    def destination(self) -> str:
        m = self._m
        return m[0] if type(m) is tuple else "/queue/" + self.queue.name

    @property
    def ack_mode(self) -> str:
        m = self._m
        return _ACK_MODES_BY_BITS[(m if type(m) is int else m[1]) & 3]

    @property
    def owns_queue(self) -> bool:
        """The queue exists for this subscription only (non-durable topic/exchange): deleted with it."""
        m = self._m
        return bool((m if type(m) is int else m[1]) & _OWNS_QUEUE)


#: StompLightSubscription flag: ack mode client-individual (else client, unless auto)
_INDIVIDUAL = FIRST_FREE_FLAG


class StompLightSubscription(LightConsumer):
    """A non-durable topic subscription without a queue of its own (see ``engine.model.light``)."""

    __slots__ = ("id", "wire")

    #: only temp-queue subscriptions need their destination back
    destination = ""
    owns_queue = False

    def __init__(self, owner: StompSession, exchange: Any, key: str, prefix: bool, prefetch: int,
                 sub_id: str, ack_mode: str) -> None:
        super().__init__(owner, exchange, key, prefix, prefetch, ack_mode == "auto",
                         _INDIVIDUAL if ack_mode == "client-individual" else 0)
        self.id = sub_id
        self.wire: _Wire | None = None

    @property
    def ack_mode(self) -> str:
        """Kept in ``flags`` (one slot less per subscription)."""
        if self.flags & AUTO_ACK:
            return "auto"
        return "client-individual" if self.flags & _INDIVIDUAL else "client"


AnySubscription = StompSubscription | StompLightSubscription

#: parsed destinations kept per connection (forgotten all at once when full)
_DESTS_MAX = 64
#: tails bigger than this are not kept (encoding them again costs little next to copying them)
_TAIL_MAX = 64 * 1024
#: at most this many tails per escaping, and this many bytes in all, are kept per broker
_TAILS_MAX = 1024
_TAIL_BYTES = 8 * 1024 * 1024


class _TailCache:
    """The encoded tails (``Connection.message_tail``: destination, the message's own headers,
    content-length, body, NUL) of the messages delivered last, one dict per header escaping, shared
    by a broker's STOMP sessions: a message fanned out to N subscribers is encoded once per escaping
    rather than N times. Only the per-delivery lines (subscription, message-id, ack, redelivered)
    are written per subscriber. A tail is only useful while its message is being dispatched, so the
    oldest go first once a bound is passed."""

    __slots__ = ("by_escape", "size")

    def __init__(self) -> None:
        # OrderedDict: popping the oldest is O(1) (a dict's first live slot moves right as it empties)
        self.by_escape: dict[str | None, OrderedDict[Message, bytes]] = {
            None: OrderedDict(), "1.1": OrderedDict(), "1.2": OrderedDict(),
        }
        self.size = 0

    def put(self, tails: OrderedDict[Message, bytes], msg: Message, tail: bytes) -> None:
        if len(tail) > _TAIL_MAX:
            return
        tails[msg] = tail
        self.size += len(tail)
        while len(tails) > _TAILS_MAX or self.size > _TAIL_BYTES:
            self.size -= len(tails.popitem(last=False)[1])
            if not tails:  # the other escapings' tails hold the bytes: start afresh
                for other in self.by_escape.values():
                    other.clear()
                self.size = 0


#: one cache per broker (the engine may run several brokers in one process, e.g. in tests)
_TAIL_CACHES: weakref.WeakKeyDictionary[Any, _TailCache] = weakref.WeakKeyDictionary()


class _Wire:
    """A subscription's MESSAGE lines, encoded once under its connection's escaping:
    ``pre`` = ``MESSAGE``, ``subscription`` and ``message-id`` up to the tag; ``ack`` = the ``ack``
    line up to the tag (None when the frame has none); ``destination`` = the subscription's own
    destination (temp-queue replies) or None when it is the message's; ``tails`` = the shared tail
    cache of that escaping."""

    __slots__ = ("pre", "ack", "destination", "tails")

    def __init__(self, pre: bytes, ack: bytes | None, destination: str | None,
                 tails: OrderedDict[Message, bytes]) -> None:
        self.pre = pre
        self.ack = ack
        self.destination = destination
        self.tails = tails


class _Tx:
    """Frames buffered by an open transaction and their size, for the per-transaction caps."""

    __slots__ = ("frames", "size")

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.size = 0


def _requested_heartbeat(value: str | None) -> tuple[int, int]:
    """The client's ``heart-beat`` header (the codec has already rejected malformed ones)."""
    if not value:
        return 0, 0
    cx, _, cy = value.partition(",")
    return int(cx), int(cy)



def _num(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        result = float(value)
    except ValueError:
        return None
    return result if result == result else None  # NaN


class StompSession(Session):
    PROTOCOL = "stomp"
    __slots__ = (
        "conn", "vhost", "user", "access", "version", "subs", "txs", "temp", "timed_out", "_disconnecting",
        "_tail_cache", "_dests", "_dest_lines",
    )

    def __init__(self, host: Host, conn_id: int, peer: tuple[Any, ...]) -> None:
        super().__init__(host, conn_id, peer)
        limits = host.config.limits
        self.conn = Connection(
            role=SERVER,
            max_frame_size=limits.max_frame_size,
            max_header_count=limits.max_header_count,
            max_header_line=limits.max_header_line,
            max_body_size=limits.max_body_size,
            heartbeat_grace=limits.heartbeat_grace,
        )
        self.vhost: VHost | None = None
        self.user: UserRecord | None = None
        self.access: UserAccess = None  # type: ignore[assignment]  # set by CONNECT
        self.version = "1.0"
        self.subs: dict[str, AnySubscription] = {}
        self.txs: dict[str, _Tx] | None = None
        #: /temp-queue/<t> -> its queue
        self.temp: dict[str, Queue] | None = None
        self.timed_out: dict[int, None] | None = None
        self._disconnecting = False
        cache = _TAIL_CACHES.get(host)
        if cache is None:
            cache = _TAIL_CACHES[host] = _TailCache()
        self._tail_cache = cache
        #: destination header -> parsed (a producer mostly sends to the same few)
        self._dests: dict[str, Destination] = {}
        #: destination -> its encoded MESSAGE header line
        self._dest_lines: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"StompSession(conn_id={self.conn_id})"

    # -- input ------------------------------------------------------------------------------------
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
        except RemoteProtocolError as exc:
            self._fail_remote(exc)
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
                except ModelError as exc:
                    raise StompError(_model_error_title(exc), exc.text) from exc
                except StoreError as exc:  # e.g. a full disk: the SEND is refused, not confirmed
                    raise StompError("store failure", str(exc)) from exc
            except StompError as exc:
                if isinstance(event, Frame):  # so the client knows which frame failed
                    exc.receipt = event.headers.get("receipt")
                raise

    def _fail_remote(self, exc: RemoteProtocolError) -> None:
        hint = exc.hint
        if hint is None:
            hint = Error({"message": str(exc)[:200] or "protocol error"})
        told = hint.headers.get("message") if isinstance(hint, Error) else None
        self.close_reason = f"protocol error: {told or exc}"
        self._send_quietly(hint)
        self.close()

    def _fail(self, message: str, detail: str = "", receipt: str | None = None) -> None:
        headers = {"message": message}
        if receipt is not None:
            headers["receipt-id"] = receipt
        body = (detail or message).encode()
        headers["content-type"] = "text/plain"
        told = message if not detail or detail == message else f"{message}: {detail}"
        self.close_reason = self.close_reason or told
        self._send_quietly(Error(headers, body))
        self.close()

    def _send_quietly(self, event: Any) -> None:
        try:
            self.write(self.conn.send(event, self.host.now))
        except (LocalProtocolError, RemoteProtocolError):
            pass

    def send(self, event: Any) -> None:
        self.write(self.conn.send(event, self.host.now))

    # -- timers -----------------------------------------------------------------------------------
    def codec_timer(self) -> float | None:
        return self.conn.get_timer()

    def handle_codec_timer(self, now: float) -> None:
        self._guard(self.conn.handle_timer, now)

    # -- lifecycle -----------------------------------------------------------------------------------
    def consumers(self) -> list[Consumer]:
        return list(self.subs.values())  # type: ignore[arg-type]

    def teardown(self) -> None:
        model = self.model
        subs = self.subs
        self.subs = {}
        for sub in subs.values():
            model.cancel(sub, requeue=True)
            if sub.owns_queue:
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

    # -- frames -----------------------------------------------------------------------------------
    def _on_connect(self, frame: Connect) -> None:
        config = self.host.config
        headers = frame.headers
        self.version = self.conn.version or "1.0"
        login = headers.get("login")
        host = headers.get("host")
        vhost_name = host if host in self.model.vhosts else config.default_vhost
        user, why, told = self._authenticate(login, headers.get("passcode", ""), vhost_name)
        if user is None:
            oplog.auth_failed(self, login, "login header" if login is not None else "anonymous", why)
            raise StompError(f"Access refused: {told}", told)
        self.user = user
        self.vhost = self.model.add_vhost(vhost_name, persist=False)
        self.access = UserAccess(self.model.security, user.name, vhost_name)
        oplog.authenticated(self)
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
        self.send(Connected(out))

    def _authenticate(self, login: str | None, passcode: str,
                      vhost_name: str) -> tuple[UserRecord | None, str, str]:
        """(the user, or None with why for the log and what to tell the client)."""
        config = self.host.config
        security = self.model.security
        if login is None:
            name = config.anonymous_user  # RabbitMQ's STOMP default_user, without its password check
            if name is None:
                why = "no login given and anonymous access is disabled"
                return None, why, why
            user = security.users.get(name)
            if user is None:
                why = f"no login given and the anonymous user '{name}' does not exist"
                return None, why, why
        else:
            user = security.users.get(login)
            if user is None:
                return None, f"no such user '{login}'", f"user '{login}' - invalid credentials"
            if not user.check(passcode):
                return None, f"wrong passcode for user '{login}'", f"user '{login}' - invalid credentials"
        if user.name in security.loopback_users and not is_loopback(self.peer):
            why = f"user '{user.name}' can only connect via localhost"
            return None, why, why
        if not security.can_access_vhost(user.name, vhost_name):
            why = f"access to vhost '{vhost_name}' refused for user '{user.name}'"
            return None, why, why
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
        receipt = frame.headers.get("receipt")

        def finish() -> None:
            if receipt is not None:
                self.send(Receipt({"receipt-id": receipt}))
            self.close()

        # the receipt promises every earlier frame took effect: wait for whatever is unsynced
        self.after_sync(True, finish)

    def _receipt(self, frame: Frame, wrote: bool, extra: dict[str, str] | None = None) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is None:
            return
        headers = {"receipt-id": receipt}
        if extra:
            headers.update(extra)
        self.after_sync(wrote, lambda: self.send(Receipt(headers)))

    def _transactional(self, frame: Frame, apply: Callable[[Frame], dict[str, str] | None]) -> None:
        """Run ``apply`` now (it may return extra receipt headers), or buffer the frame when it
        names a transaction."""
        headers = frame.headers
        tx = headers.get("transaction")
        if tx is None:
            if "receipt" not in headers:  # the common case: no receipt to hold back for the store
                apply(frame)
                return
            before = self.model.store_writes
            extra = apply(frame)
            if not self.closed:
                self._receipt(frame, self.model.store_writes != before, extra)
            return
        if self.txs is None or tx not in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is not active")
        buffered = self.txs[tx]
        limits = self.host.config.limits
        buffered.size += len(frame.body) + sum(len(k) + len(v) for k, v in frame.headers.items())
        if len(buffered.frames) >= limits.max_tx_frames or buffered.size > limits.max_tx_bytes:
            raise StompError("Transaction too large",
                             f"transaction '{tx}' exceeds {limits.max_tx_frames} frames or {limits.max_tx_bytes} bytes")
        buffered.frames.append(frame)
        self._receipt(frame, False)

    def _on_send(self, frame: Send) -> None:
        self._transactional(frame, self._apply_send)

    def _on_ack(self, frame: Ack) -> None:
        self._transactional(frame, self._apply_ack)

    def _on_nack(self, frame: Nack) -> None:
        self._transactional(frame, self._apply_ack)

    def _on_begin(self, frame: Begin) -> None:
        tx = frame.headers.get("transaction")
        if tx is None:
            raise StompError("Missing transaction", "BEGIN needs a transaction header")
        if self.txs is None:
            self.txs = {}
        if tx in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is already active")
        limit = self.host.config.limits.max_transactions
        if len(self.txs) >= limit:
            raise StompError("Too many transactions", f"at most {limit} open transactions per connection")
        self.txs[tx] = _Tx()
        self._receipt(frame, False)

    def _end_tx(self, frame: Frame) -> list[Frame]:
        tx = frame.headers.get("transaction")
        if tx is None or self.txs is None or tx not in self.txs:
            raise StompError("Bad transaction", f"transaction '{tx}' is not active")
        frames = self.txs.pop(tx).frames
        if not self.txs:
            self.txs = None
        return frames

    def _on_commit(self, frame: Commit) -> None:
        frames = self._end_tx(frame)
        before = self.model.store_writes
        for buffered in frames:
            if isinstance(buffered, Send):
                self._apply_send(buffered)
            else:
                self._apply_ack(buffered)
            if self.closed:
                return
        self._receipt(frame, self.model.store_writes != before)

    def _on_abort(self, frame: Abort) -> None:
        self._end_tx(frame)
        self._receipt(frame, False)

    # -- SEND -------------------------------------------------------------------------------------
    def _apply_send(self, frame: Frame) -> dict[str, str] | None:
        headers = frame.headers
        dest = self._parse(headers.get("destination"))
        if dest.kind == "control":
            return self._control(dest)
        model = self.model
        vhost = self.vhost
        assert vhost is not None
        now = self.host.now
        msg_headers = {k: v for k, v in headers.items() if k not in _TRANSPORT_HEADERS}
        reply_to = msg_headers.get("reply-to")
        if reply_to is not None and reply_to.startswith("/temp-queue/"):
            q = self._temp_queue(reply_to[12:])
            msg_headers["reply-to"] = f"/reply-queue/{q.name}"
        exchange, key = self._publish_target(dest, headers)
        if not self.access.allows("write", exchange or "amq.default"):
            self._permit("write", "exchange", exchange)
        check_topic_access(self.access, vhost.exchanges.get(exchange), key, "write")
        priority = 0
        expires_at = None
        ack_timeout = None
        if not _STEERING.isdisjoint(msg_headers):  # rare: skip the parsing on the common path
            prio = _num(msg_headers.get("priority"))
            if prio is not None:
                priority = max(0, min(9, int(prio)))
                msg_headers["priority"] = str(priority)
            for name, relative in (("expires", False), ("ttl", True), ("expiration", True)):
                value = _num(msg_headers.get(name))
                if value is None:
                    continue
                when = now + value / 1000.0 if relative else value / 1000.0
                expires_at = when if expires_at is None else min(expires_at, when)
            ack_timeout = _num(msg_headers.get("ack-timeout"))
            if ack_timeout is not None and ack_timeout <= 0:
                ack_timeout = None
        persistent = msg_headers.get("persistent", "").lower() == "true"
        msg = Message(model.next_message_id(), exchange, key, msg_headers, frame.body, priority,
                      expires_at, persistent, ack_timeout)
        try:
            model.publish(vhost, exchange, msg)
        except ModelError as exc:
            raise StompError(_model_error_title(exc), exc.text) from None
        return None

    def _permit(self, access: Access, kind: str, name: str) -> None:
        """The permission RabbitMQ's STOMP adapter needs for what it does on the client's behalf;
        a refusal is an ERROR frame (access_refused, RabbitMQ's text) and the connection closes."""
        text = self.access.refusal(access, kind, name)
        if text is not None:
            raise StompError("access_refused", f"ACCESS_REFUSED - {text}")

    def _publish_target(self, dest: Destination, headers: dict[str, str]) -> tuple[str, str]:
        vhost = self.vhost
        assert vhost is not None
        kind = dest.kind
        if kind == "queue":
            self._declare(dest.name, headers)
            return "", dest.name
        if kind == "amq-queue":
            if dest.name not in vhost.queues:
                raise StompError("not_found", f"no queue '{dest.name}' in vhost '{vhost.name}'")
            return "", dest.name
        if kind == "topic":
            return "amq.topic", dest.key
        if kind == "exchange":
            if dest.name not in vhost.exchanges:
                raise StompError("not_found", f"no exchange '{dest.name}' in vhost '{vhost.name}'")
            return dest.name, dest.key
        if kind == "temp-queue":
            return "", self._temp_queue(dest.name).name
        if kind == "reply-queue":
            return "", dest.name
        raise StompError("Invalid destination", f"cannot send to '{kind}' destinations")

    def _declare(self, name: str, headers: dict[str, str]) -> Queue:
        vhost = self.vhost
        assert vhost is not None
        if not self.access.allows("configure", name):  # RabbitMQ's adapter declares on every SEND
            self._permit("configure", "queue", name)
        q = vhost.queues.get(name)
        if q is not None and (q.exclusive_owner is None or q.exclusive_owner is self):
            self.model.touch(q)
            return q  # already declared: the common path of every SEND to /queue/q
        args = _queue_args(headers)
        try:
            return self.model.declare_queue(vhost, name, durable=True, args=args)
        except ModelError as exc:
            raise StompError(_model_error_title(exc), exc.text) from None

    def _temp_queue(self, suffix: str) -> Queue:
        """This connection's ``/temp-queue/<suffix>``: an exclusive auto-delete queue subscribed as
        subscription id ``/temp-queue/<suffix>``."""
        if self.temp is None:
            self.temp = {}
        q = self.temp.get(suffix)
        if q is not None:
            return q
        assert self.vhost is not None
        sub_id = f"/temp-queue/{suffix}"
        if sub_id not in self.subs:
            self._check_subscription_limit()
        model = self.model
        name = self.host.new_name("amq.gen-")
        self._permit("configure", "queue", name)
        self._permit("read", "queue", name)
        q = model.declare_queue(self.vhost, name, durable=False, auto_delete=False, exclusive_owner=self)
        self.temp[suffix] = q
        if sub_id not in self.subs:
            sub = StompSubscription(q, self, self.host.config.limits.default_prefetch, sub_id, sub_id,
                                    "auto", False)
            self.subs[sub_id] = sub
            model.consume(q, sub)
        return q

    def _control(self, dest: Destination) -> dict[str, str]:
        vhost = self.vhost
        assert vhost is not None
        model = self.model
        what, _, target = dest.name.partition("/")
        extra: dict[str, str]
        if what == "count-msgs" and target.startswith("queue/"):
            q = vhost.queues.get(target[6:])
            extra = {"num-messages": str(q.count if q else 0)}
        elif what == "count-subscribers" and target.startswith("queue/"):
            q = vhost.queues.get(target[6:])
            extra = {"num-subscribers": str(q.consumer_count() if q else 0)}
        elif what == "count-subscribers" and target.startswith("topic/"):
            topic = vhost.exchanges["amq.topic"]
            queues = model.route(vhost, topic, target[6:], None)
            extra = {"num-subscribers": str(sum(q.consumer_count() for q in queues))}
        else:
            raise StompError("Invalid destination", f"unknown control destination '/control/{dest.name}'")
        return extra

    # -- SUBSCRIBE / UNSUBSCRIBE ---------------------------------------------------------------------
    def _on_subscribe(self, frame: Subscribe) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        dest = self._parse(destination)
        assert destination is not None
        sub_id = headers.get("id", destination)
        if sub_id in self.subs:
            raise StompError("Duplicated subscription identifier", f"subscription '{sub_id}' already exists")
        self._check_subscription_limit()
        ack_mode = headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise StompError("Invalid ack mode", f"ack mode '{ack_mode}' is not one of {', '.join(ACK_MODES)}")
        prefetch = self.host.config.limits.default_prefetch
        for name in ("prefetch-count", "prefetch"):
            value = _num(headers.get(name))
            if value is not None:
                prefetch = max(0, int(value))
                break
        before = self.model.store_writes
        light = self._light_subscription(dest, sub_id, headers, prefetch, ack_mode)
        if light is not None:
            self.model.bind_light(light)
            self.subs[sub_id] = light
            self._receipt(frame, False)
            return
        q, owns = self._subscription_queue(dest, sub_id, headers)
        self._permit("read", "queue", q.name)
        sub = StompSubscription(q, self, prefetch, sub_id, destination, ack_mode, owns)
        try:
            if q.stream:
                self._consume_stream(q, sub, headers)
            else:
                self.model.consume(q, sub)
        except ModelError as exc:
            raise StompError(_model_error_title(exc), exc.text) from None
        self.subs[sub_id] = sub
        self._receipt(frame, self.model.store_writes != before)

    def _consume_stream(self, q: Queue, sub: StompSubscription, headers: dict[str, str]) -> None:
        """A stream subscription, as RabbitMQ's STOMP plugin takes it: acks (client or
        client-individual) and a prefetch are required; ``x-stream-offset`` says where it starts."""
        if sub.ack_mode == "auto":
            raise StompError("precondition_failed", f"a subscription to stream '{q.name}' needs ack:client or "
                             "ack:client-individual")
        if not sub.prefetch:
            raise StompError("precondition_failed", f"a subscription to stream '{q.name}' needs a prefetch-count")
        start, name = parse_consumer_args(headers, stomp=True)
        self.model.consume_stream(q, sub, start, name)

    def _check_subscription_limit(self) -> None:
        limit = self.host.config.limits.max_subscriptions
        if len(self.subs) >= limit:
            raise StompError("Too many subscriptions", f"at most {limit} subscriptions per connection")

    def _light_subscription(self, dest: Destination, sub_id: str, headers: dict[str, str], prefetch: int,
                            ack_mode: str) -> StompLightSubscription | None:
        """A light subscription for a non-durable topic (or topic-exchange) destination without
        queue arguments; None when it needs a real queue."""
        kind = dest.kind
        if kind not in ("topic", "exchange") or (kind == "topic" and _durable(headers)):
            return None
        if any(k in headers for k in _QUEUE_ARGS):
            return None
        assert self.vhost is not None
        exchange = self.vhost.exchanges.get(dest.name)
        if exchange is None or not self.model.supports_light(exchange):
            return None  # the queue path reports a missing exchange
        # what RabbitMQ's adapter would need for the subscription queue it declares, binds, reads
        for access in ("configure", "write", "read"):
            self._permit(access, "queue", "stomp-subscription-" + sub_id)  # type: ignore[arg-type]
        self._permit("read", "exchange", exchange.name)
        check_topic_access(self.access, exchange, dest.key, "read")
        key, prefix = dest.key, False
        if kind == "topic" and is_prefix_topic(key):
            key, prefix = key[:-1], True
        return StompLightSubscription(self, exchange, key, prefix, prefetch, sub_id, ack_mode)

    def _subscription_queue(self, dest: Destination, sub_id: str, headers: dict[str, str]) -> tuple[Queue, bool]:
        vhost = self.vhost
        assert vhost is not None
        model = self.model
        kind = dest.kind
        if kind == "queue":
            return self._declare(dest.name, headers), False
        if kind in ("amq-queue", "reply-queue"):
            q = vhost.queues.get(dest.name)
            if q is None:
                raise StompError("not_found", f"no queue '{dest.name}' in vhost '{vhost.name}'")
            return q, False
        if kind == "temp-queue":
            return self._temp_queue(dest.name), False
        if kind not in ("topic", "exchange"):
            raise StompError("Invalid destination", f"cannot subscribe to '{kind}' destinations")
        exchange = vhost.exchanges.get(dest.name)
        if exchange is None:
            raise StompError("not_found", f"no exchange '{dest.name}' in vhost '{vhost.name}'")
        key, bind_args = dest.key, None
        if kind == "topic" and is_prefix_topic(key):
            key, bind_args = key[:-1], {PREFIX_ARG: True}
        durable = kind == "topic" and _durable(headers)
        args = _queue_args(headers)
        if durable:
            if "id" not in headers:
                raise StompError("Missing id", "a durable subscription needs an id header")
            auto_delete = headers.get("auto-delete", "false").lower() == "true"
            name = _durable_queue_name(sub_id)
        else:
            name = self.host.new_name("stomp-sub-")
        # as RabbitMQ's adapter: declare (configure), bind (write on it, read on the exchange)
        self._permit("configure", "queue", name)
        self._permit("write", "queue", name)
        self._permit("read", "exchange", exchange.name)
        check_topic_access(self.access, exchange, dest.key, "read")
        if durable:
            q = model.declare_queue(vhost, name, durable=True, auto_delete=auto_delete, args=args)
            owns = False
        else:
            q = model.declare_queue(vhost, name, durable=False, auto_delete=True, exclusive_owner=self, args=args)
            owns = True
        model.bind(vhost, q, exchange, key, bind_args)
        return q, owns

    def _on_unsubscribe(self, frame: Unsubscribe) -> None:
        headers = frame.headers
        sub_id = headers.get("id", headers.get("destination"))
        if sub_id is None:
            raise StompError("Missing id", "UNSUBSCRIBE needs an id header")
        model = self.model
        before = model.store_writes
        sub = self.subs.pop(sub_id, None)
        durable = _durable(headers)
        if sub is None and not durable:
            raise StompError("Subscription not found", f"no subscription '{sub_id}'")
        if sub is not None:
            model.cancel(sub, requeue=True)
            if sub.owns_queue:
                model.delete_queue(sub.queue)
        if durable:
            assert self.vhost is not None
            q = self.vhost.queues.get(_durable_queue_name(sub_id))
            if q is not None:
                model.delete_queue(q)
        self._receipt(frame, model.store_writes != before)

    # -- ACK / NACK ---------------------------------------------------------------------------------
    def _apply_ack(self, frame: Frame) -> None:  # returns no receipt headers
        headers = frame.headers
        ack_id = headers.get("id") if self.version == "1.2" else None
        if ack_id is None:
            ack_id = headers.get("message-id", headers.get("id"))
        if ack_id is None:
            raise StompError("Missing ack id", f"{frame.command} needs an id (1.2) or message-id header")
        sub_id, sep, tag_text = ack_id.rpartition("@@")
        sub = self.subs.get(sub_id[2:]) if sep and sub_id.startswith("T_") else None
        tag = int(tag_text) if tag_text.isdigit() else -1
        model = self.model
        if sub is None or not model.has_tag(sub, tag):
            if self.timed_out is not None and tag in self.timed_out:
                return  # the ack timeout already took it back
            raise StompError("Unknown ack id", f"no unacknowledged message with id '{ack_id}'")
        multiple = sub.ack_mode == "client"
        if isinstance(frame, Ack):
            model.ack(sub, tag, multiple)
        else:
            requeue = headers.get("requeue", "true").lower() != "false"
            model.nack(sub, tag, multiple, requeue)

    # -- deliveries (ConsumerOwner) ----------------------------------------------------------------
    def deliver(self, consumer: Consumer, tag: int, entry: Entry) -> None:
        msg = entry.msg
        try:
            wire = consumer.wire  # type: ignore[attr-defined]
            if wire is None:
                wire = consumer.wire = self._wire(consumer)  # type: ignore[attr-defined]
            if wire.destination is not None:
                tail = self._tail(msg, wire.destination)
            elif not msg.exchange:  # the default exchange routes to one queue: nothing to share
                tail = self._tail(msg, "/queue/" + msg.routing_key)
            else:
                tail = wire.tails.get(msg)
                if tail is None:
                    tail = self._tail(msg, destination_for(msg.exchange, msg.routing_key))
                    self._tail_cache.put(wire.tails, msg, tail)
            t = b"%d" % tag
            if wire.ack is None:
                head = wire.pre + t + b"\n"
            else:
                head = wire.pre + t + wire.ack + t + b"\n"
            if entry.count:
                head += b"redelivered:true\nx-delivery-count:%d\n" % entry.count
            self.write(self.conn.send_message_bytes(head + tail, self.host.now))
        except Exception as exc:  # noqa: BLE001 - a delivery must never break dispatch for others
            self.host.internal_error(self, exc)
            self.abort("internal error")  # the delivery counts as unacked and is requeued by the teardown

    def _wire(self, consumer: AnySubscription) -> _Wire:
        """Encode the subscription's own MESSAGE lines (see ``_Wire``)."""
        conn = self.conn
        message_id = f"T_{consumer.id}@@"
        # each ends in "\n": cut it, the tag follows (digits never need escaping)
        pre = b"MESSAGE\n" + conn.encode_headers({"subscription": consumer.id, "message-id": message_id})[:-1]
        ack = None
        if consumer.ack_mode != "auto" and self.version == "1.2":
            ack = b"\n" + conn.encode_headers({"ack": message_id})[:-1]
        own = consumer.destination if consumer.destination.startswith("/temp-queue/") else None
        return _Wire(pre, ack, own, self._tail_cache.by_escape[conn.escape])

    def _tail(self, msg: Message, destination: str) -> bytes:
        """``destination``, the message's own headers, content-length, body and NUL, encoded."""
        if msg.headers:
            return self.conn.message_tail(message_headers(msg, destination), msg.body)
        # no headers of its own (a plain SEND): only the destination line needs encoding, once
        lines = self._dest_lines
        line = lines.get(destination)
        if line is None:
            if len(lines) >= _DESTS_MAX:
                lines.clear()
            line = lines[destination] = self.conn.encode_headers({"destination": destination})
        body = msg.body
        return b"".join((line, b"content-length:%d\n\n" % len(body), body, b"\x00"))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        assert isinstance(consumer, StompSubscription)
        if self.subs.get(consumer.id) is consumer:
            del self.subs[consumer.id]

    def delivery_timed_out(self, consumer: Consumer, tag: int) -> None:
        if self.timed_out is None:
            self.timed_out = {}
        self.timed_out[tag] = None
        if len(self.timed_out) > _TIMED_OUT_MEMORY:
            del self.timed_out[next(iter(self.timed_out))]

    # -- helpers ----------------------------------------------------------------------------------
    def _parse(self, destination: str | None) -> Destination:
        dests = self._dests
        dest = dests.get(destination)  # type: ignore[arg-type]
        if dest is not None:
            return dest
        try:
            dest = parse_destination(destination)
        except BadDestination as exc:
            raise StompError("Invalid destination", str(exc)) from None
        if len(dests) >= _DESTS_MAX:
            dests.clear()
        dests[destination] = dest  # type: ignore[index]
        return dest


def message_headers(msg: Message, destination: str) -> dict[str, str]:
    """The headers of a MESSAGE frame for ``msg`` after the per-delivery ones (subscription,
    message-id, ack, redelivered, x-delivery-count) and before ``content-length``: ``destination``,
    then the message's own headers as STOMP text (broker-set names and AMQP tables left out)."""
    headers = {"destination": destination}
    for name, value in msg.headers.items():
        if name not in _RESERVED_MESSAGE_HEADERS:
            if type(value) is not str:  # from an AMQP headers table
                value = stomp_value(value)
                if value is None:
                    continue
            headers[name] = value
    return headers


def _queue_args(headers: dict[str, str]) -> dict[str, Any] | None:
    """The queue arguments among a SEND/SUBSCRIBE's headers (integers of a stream from their text)."""
    args: dict[str, Any] = {k: headers[k] for k in _QUEUE_ARGS if k in headers}
    size = args.get("x-stream-max-segment-size-bytes")
    if size is not None and size.isascii() and size.isdigit():
        args["x-stream-max-segment-size-bytes"] = int(size)
    return args or None


def _durable(headers: dict[str, str]) -> bool:
    return headers.get("durable", "").lower() == "true" or headers.get("persistent", "").lower() == "true"


def _durable_queue_name(sub_id: str) -> str:
    return f"stomp-subscription-{sub_id}"


def _model_error_title(exc: ModelError) -> str:
    return {404: "not_found", 403: "access_refused", 405: "resource_locked", 406: "precondition_failed",
            540: "not_implemented"}.get(
        exc.code, "internal_error"
    )


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
