"""The state of a STOMP session and what its frame handlers share: sending frames and receipts,
failing the connection with an ERROR, parsing destinations, declaring the queues a SEND or
SUBSCRIBE names (``/queue/``, ``/temp-queue/``).

The handlers live in modules of their own (``sending``, ``subscribe``, ``transactions``,
``delivery``), each a subclass of :class:`StompBase`; ``session.StompSession`` puts them together.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from stompproto import SERVER, Connection, Error, Frame, LocalProtocolError, Receipt, RemoteProtocolError

from .. import oplog
from .._message import Entry
from .._mypyc import interpreted_class
from .._session import Host, Session
from ..model import Consumer, ModelError, Queue, VHost
from ..model.objects import QUORUM_FLAG, STREAM_FLAG
from ..model.queue_types import check_same_queue_type
from ..model.security import UserAccess, UserRecord
from .destinations import BadDestination, Destination, parse_destination
from .errors import StompError, model_error_title
from .permissions import permit_declare, permit_temp_queue
from .subscriptions import AnySubscription, StompSubscription
from .typed_declare import check_new_typed_queue
from .wire import tail_cache

__all__ = ["StompBase", "Tx", "QUEUE_ARGS", "DESTS_MAX", "queue_args", "num"]

#: queue arguments a SEND/SUBSCRIBE may give when it declares a queue (RabbitMQ's STOMP headers)
QUEUE_ARGS = ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-message-ttl", "x-max-length",
              "x-expires", "x-queue-type", "x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
              "x-overflow", "x-delivery-limit", "x-dead-letter-strategy", "x-quorum-initial-group-size",
              "x-stream-filter-size-bytes")
#: Queue._f bits of the queue types a SEND or SUBSCRIBE without their x-queue-type redeclares wrongly
_TYPED = STREAM_FLAG | QUORUM_FLAG
#: parsed destinations and their encoded header lines kept per connection (forgotten all at once when full)
DESTS_MAX = 64


class Tx:
    """Frames buffered by an open transaction and their size, for the per-transaction caps."""

    __slots__ = ("frames", "size")

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.size = 0


@interpreted_class
class StompBase(Session):
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
            max_connect_frame_size=limits.max_frame_size_unauthenticated,
        )
        self.vhost: VHost | None = None
        self.user: UserRecord | None = None
        self.access: UserAccess = None  # type: ignore[assignment]  # set by CONNECT
        self.version = "1.0"
        self.subs: dict[str, AnySubscription] = {}
        self.txs: dict[str, Tx] | None = None
        #: /temp-queue/<t> -> its queue
        self.temp: dict[str, Queue] | None = None
        self.timed_out: dict[int, None] | None = None
        self._disconnecting = False
        self._tail_cache = tail_cache(host)
        #: destination header -> parsed (a producer mostly sends to the same few)
        self._dests: dict[str, Destination] = {}
        #: destination -> its encoded MESSAGE header line
        self._dest_lines: dict[str, bytes] = {}

    def _fail(self, message: str, detail: str = "", receipt: str | None = None) -> None:
        headers = {"message": message}
        if receipt is not None:
            headers["receipt-id"] = receipt
        body = (detail or message).encode()
        headers["content-type"] = "text/plain"
        told = message if not detail or detail == message else f"{message}: {detail}"
        if not self.close_reason and message != "CONNECTION_FORCED":  # not already explained
            oplog.connection_error(self, f"ERROR sent: {told}")
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

    def _receipt(self, frame: Frame, wrote: bool, extra: dict[str, str] | None = None) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is None:
            return
        headers = {"receipt-id": receipt}
        if extra:
            headers.update(extra)
        # a bound partial, not a closure: mypyc cannot compile closures in a plain (mixin) class's methods
        self.after_sync(wrote, partial(self.send, Receipt(headers)))

    def _parse(self, destination: str | None) -> Destination:
        dests = self._dests
        dest = dests.get(destination)  # type: ignore[arg-type]
        if dest is not None:
            return dest
        try:
            dest = parse_destination(destination)
        except BadDestination as exc:
            raise StompError("Invalid destination", str(exc)) from None
        if len(dests) >= DESTS_MAX:
            dests.clear()
        dests[destination] = dest  # type: ignore[index]
        return dest

    def _check_subscription_limit(self) -> None:
        limit = self.host.config.limits.max_subscriptions
        if limit and len(self.subs) >= limit:
            raise StompError("Too many subscriptions", f"at most {limit} subscriptions per connection")

    def _declare(self, name: str, headers: dict[str, str]) -> Queue:
        vhost = self.vhost
        assert vhost is not None
        permit_declare(self.access, name)
        q = vhost.queues.get(name)
        try:
            if q is not None and (q.exclusive_owner is None or q.exclusive_owner is self):
                if q._f & _TYPED or "x-queue-type" in headers:  # a SEND to a classic queue pays one look-up
                    check_same_queue_type(q, headers)  # another type: RabbitMQ's redeclare 406
                self.model.touch(q)
                return q  # already declared: the common path of every SEND to /queue/q
            args = queue_args(headers)
            check_new_typed_queue(name, vhost.name, headers, args)
            return self.model.declare_queue(vhost, name, durable=True, args=args)
        except ModelError as exc:
            raise StompError(model_error_title(exc), exc.text) from None

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
        permit_temp_queue(self.access, name)
        q = model.declare_queue(self.vhost, name, durable=False, auto_delete=False, exclusive_owner=self)
        self.temp[suffix] = q
        if sub_id not in self.subs:
            sub = StompSubscription(q, self, self.host.config.limits.default_prefetch, sub_id, sub_id,
                                    "auto", False)
            self.subs[sub_id] = sub
            model.consume(q, sub)
        return q

    # -- what the handler modules provide -----------------------------------------------------
    def _apply_send(self, frame: Frame) -> dict[str, str] | None:
        raise NotImplementedError  # sending.SendMethods

    def _apply_ack(self, frame: Frame) -> None:
        raise NotImplementedError  # subscribe.SubscribeMethods

    # the model's ConsumerOwner, for the subscriptions this session makes (delivery.DeliveryMethods)
    def deliver(self, consumer: Consumer, tag: int, entry: Entry) -> None:
        raise NotImplementedError

    def consumer_cancelled(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def delivery_timed_out(self, consumer: Any, tag: int) -> None:  # a Consumer or a LightConsumer
        raise NotImplementedError


def queue_args(headers: dict[str, str]) -> dict[str, Any] | None:
    """The queue arguments among a SEND/SUBSCRIBE's headers (integers of a stream from their text)."""
    args: dict[str, Any] = {k: headers[k] for k in QUEUE_ARGS if k in headers}
    for key in ("x-stream-max-segment-size-bytes", "x-stream-filter-size-bytes"):
        size = args.get(key)
        if size is not None and size.isascii() and size.isdigit():
            args[key] = int(size)
    return args or None


def num(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        result = float(value)
    except ValueError:
        return None
    return result if result == result else None  # NaN
