"""One AMQP channel: exchange/queue/basic/confirm/tx methods mapped onto the model.

A channel numbers its deliveries (delivery tags 1, 2, ... per channel) and keeps each one's model
consumer, model tag and ack deadline, so ack/nack/reject (``multiple`` included) map back to the
model and RabbitMQ's consumer timeout can close the channel (one timer per channel, re-armed at
the earliest deadline when it fires, so a delivery costs no timer of its own). Errors
are raised as :class:`ChannelError` (the session closes this channel only) or the session's
``ConnectionError_`` (hard errors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import amqpproto
from amqpproto import BasicProperties, spec
from amqpproto.spec import encode_properties

from .._message import Entry, Message
from .._props import headers_to_props, props_to_headers
from .._session import Host
from ..model import (
    PUBLISH_REFUSED,
    PUBLISH_ROUTED,
    PUBLISH_WROTE,
    Consumer,
    ConsumerOwner,
    Exchange,
    Model,
    ModelError,
    Queue,
    VHost,
)
from ..model.objects import amqp_type_name
from ..model.security import Access, UserAccess, UserRecord, check_target_exchange, check_topic_access
from ..model.streams import parse_consumer_args
from ..store import StoreError

__all__ = ["AmqpChannel", "AmqpConsumer", "ChannelError", "AmqpConnectionError", "REPLY_TO", "ChannelOwner"]

REPLY_TO = "amq.rabbitmq.reply-to"
_EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-delayed-message")
#: queue arguments compared by value on redeclare (a client may send 10 as a short or a long)
_NUMERIC_ARGS = frozenset(("x-expires", "x-message-ttl", "x-max-length", "x-max-length-bytes", "x-max-priority",
                           "x-delivery-limit", "x-consumer-timeout"))


class ChannelError(Exception):
    """A soft error: channel.close with ``code``; the connection lives on."""

    def __init__(self, code: int, text: str, method: Any = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.method = method


class ChannelOwner(ConsumerOwner, Protocol):
    """What a channel uses of its connection's session (``AmqpSession``)."""

    host: Host
    model: Model
    conn: amqpproto.Connection
    peer: tuple[Any, ...]
    vhost: VHost | None
    user: UserRecord | None
    #: the user's permissions in ``vhost`` (set by connection.open)
    access: UserAccess
    channels: dict[int, AmqpChannel]
    #: exclusive queues of the connection (deleted with it)
    exclusive: dict[Queue, None]
    reply_to: str | None
    cancel_notify: bool
    #: while a store sync releases held confirms: channels with acks to coalesce
    batching: dict[AmqpChannel, None] | None

    def send(self, event: Any) -> None: ...

    def write(self, data: bytes) -> None: ...

    def after_sync(self, wrote: bool, thunk: Callable[[], None]) -> None: ...

    def channel_timed_out(self, chan: AmqpChannel, timeout_ms: int) -> None: ...


class AmqpConsumer(Consumer):
    __slots__ = ("channel", "tag", "exclusive", "priority", "timeout")

    def __init__(self, queue: Queue, channel: AmqpChannel, prefetch: int, auto_ack: bool, tag: str,
                 exclusive: bool = False, priority: int = 0) -> None:
        super().__init__(queue, channel.session, prefetch, auto_ack)
        self.channel = channel
        self.tag = tag
        self.exclusive = exclusive
        self.priority = priority
        #: the consumer timeout of its deliveries in seconds (0.0: none), looked up once: queue
        #: arguments and the broker's limits do not change while the consumer exists
        self.timeout = channel._timeout_ms(queue) / 1000.0

    def ready(self) -> bool:
        chan = self.channel
        if chan.global_prefetch and len(chan.unacked) >= chan.global_prefetch:
            return False
        if chan.flow_paused:
            return False
        return Consumer.ready(self)


    def trace_origin(self) -> tuple[str, str, int]:
        return self.channel.trace_origin()


class _GetHolder(Consumer):
    """Holds basic.get deliveries awaiting ack (never registered on the queue)."""

    __slots__ = ("channel",)

    def trace_origin(self) -> tuple[str, str, int]:
        return self.channel.trace_origin()


def _bool_arg(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true") or value == 1


class _Confirm:
    """A publisher confirm held until the store's sync: an ack then (coalesced when one sync
    releases many), a nack when the message was refused or the sync failed."""

    __slots__ = ("chan", "seq", "refused")

    def __init__(self, chan: AmqpChannel, seq: int, refused: bool) -> None:
        self.chan = chan
        self.seq = seq
        self.refused = refused

    def __call__(self) -> None:
        chan = self.chan
        session = chan.session
        if session.channels.get(chan.id) is not chan:
            return
        if self.refused:
            chan.nack(self.seq)
            return
        session.model.confirmed += 1
        if session.batching is not None:  # released by a sync: coalesce
            chan.ack_upto = self.seq
            chan.ack_batch += 1
            session.batching[chan] = None
        else:
            chan.send(spec.BasicAck(self.seq, False))

    def fail(self) -> None:
        chan = self.chan
        if chan.session.channels.get(chan.id) is chan:
            chan.nack(self.seq)


class _TxSettle:
    """An ack/nack/reject held by an open transaction: run on commit; ``taken`` (channel tag ->
    delivery) is what a rollback puts back into the channel's unacked deliveries."""

    __slots__ = ("chan", "items", "requeue", "taken")

    def __init__(self, chan: AmqpChannel, items: list[tuple[Consumer, int, float]], requeue: bool | None,
                 taken: dict[int, tuple[Consumer, int, float]]) -> None:
        self.chan = chan
        self.items = items
        self.requeue = requeue
        self.taken = taken

    def __call__(self) -> None:
        self.chan._settle(self.items, self.requeue)


class AmqpChannel:
    __slots__ = ("session", "id", "consumers", "unacked", "next_tag", "prefetch", "global_prefetch",
                 "confirm", "pub_seq", "tx", "getters", "flow_paused", "timeout_key", "ack_upto",
                 "ack_batch")

    def __init__(self, session: ChannelOwner, channel_id: int) -> None:
        self.session = session
        self.id = channel_id
        self.consumers: dict[str, AmqpConsumer] = {}
        #: channel delivery tag -> (model consumer, model tag, ack deadline or 0.0); tag order
        self.unacked: dict[int, tuple[Consumer, int, float]] = {}
        self.next_tag = 0
        self.prefetch = 0  # basic.qos global=false: for consumers created afterwards
        self.global_prefetch = 0  # basic.qos global=true: shared by the channel's consumers
        self.confirm = False
        self.pub_seq = 0
        #: buffered publishes/acks of an open transaction (None: not transactional)
        self.tx: list[Callable[[], None]] | None = None
        self.getters: dict[Queue, _GetHolder] = {}
        self.flow_paused = False
        #: the consumer-timeout timer, armed while deliveries with a deadline are unacked
        self.timeout_key: tuple[float, int] | None = None
        #: publisher confirms released together by one store sync: the highest sequence number
        #: and how many, sent as one basic.ack with multiple=true (as RabbitMQ coalesces them)
        self.ack_upto = 0
        self.ack_batch = 0

    # -- plumbing -----------------------------------------------------------------------------------
    @property
    def vhost(self) -> VHost:
        vhost = self.session.vhost
        assert vhost is not None
        return vhost

    def send(self, m: Any) -> None:
        m.channel = self.id
        self.session.send(m)

    def handle(self, m: Any) -> None:
        handler = _HANDLERS.get(type(m))
        if handler is None:
            raise ChannelError(spec.NOT_IMPLEMENTED, f"{m.NAME} is not implemented", type(m))
        try:
            handler(self, m)
        except ModelError as exc:
            if exc.code == spec.NOT_IMPLEMENTED:  # a hard error, as RabbitMQ's
                raise AmqpConnectionError(exc.code, exc.text, type(m)) from None
            raise ChannelError(exc.code, exc.text, type(m)) from None

    def teardown(self) -> None:
        """The channel is gone: cancel its consumers and requeue every unacked delivery."""
        model = self.session.model
        consumers = self.consumers
        self.consumers = {}
        self._restore_tx_settles()  # an uncommitted ack settles nothing: requeued below
        for c in consumers.values():
            model.cancel(c, requeue=True)
        # cancelled consumers and basic.get holders may still hold deliveries of this channel
        holders = {c: None for c, _, _ in self.unacked.values() if c.unacked}
        for holder in holders:
            model.return_unacked(holder, requeue=True)
        self.getters = {}
        self.unacked = {}
        self.tx = None
        self.session.host.cancel_timer(self.timeout_key)
        self.timeout_key = None

    def _queue(self, name: str, method: type) -> Queue:
        q = self.vhost.queues.get(name)
        if q is None:
            raise ChannelError(spec.NOT_FOUND, f"no queue '{name}' in vhost '{self.vhost.name}'", method)
        self._check_exclusive(q, method)
        return q

    def _check_exclusive(self, q: Queue, method: type) -> None:
        if q.exclusive_owner is not None and q.exclusive_owner is not self.session:
            self._locked(q, method)

    def _locked(self, q: Queue, method: type) -> None:
        raise ChannelError(spec.RESOURCE_LOCKED, f"cannot obtain exclusive access to locked queue '{q.name}' "
                           f"in vhost '{self.vhost.name}'. It could be originally declared on another "
                           "connection or the exclusive property value does not match that of the original "
                           "declaration.", method)

    def _permit(self, access: Access, kind: str, name: str, method: type) -> None:
        """RabbitMQ's permission check: 403 ACCESS_REFUSED with its text unless the user may."""
        text = self.session.access.refusal(access, kind, name)
        if text is not None:
            raise ChannelError(spec.ACCESS_REFUSED, text, method)

    def _exchange(self, name: str, method: type) -> Exchange:
        x = self.vhost.exchanges.get(name)
        if x is None:
            raise ChannelError(spec.NOT_FOUND, f"no exchange '{name}' in vhost '{self.vhost.name}'", method)
        return x

    # -- channel ------------------------------------------------------------------------------------
    def on_close(self, m: spec.ChannelClose) -> None:
        self.session.channels.pop(self.id, None)
        self.teardown()
        self.send(spec.ChannelCloseOk())

    def on_close_ok(self, m: spec.ChannelCloseOk) -> None:
        self.session.channels.pop(self.id, None)

    def on_flow(self, m: spec.ChannelFlow) -> None:
        self.flow_paused = not m.active
        if m.active:
            for c in self.consumers.values():
                self.session.model.mark_dirty(c.queue)
        self.send(spec.ChannelFlowOk(m.active))

    # -- exchanges ----------------------------------------------------------------------------------
    def on_exchange_declare(self, m: spec.ExchangeDeclare) -> None:
        model = self.session.model
        name = m.exchange
        # RabbitMQ's order: the type (a hard error), the default exchange, then the rest
        if not m.passive and m.type not in _EXCHANGE_TYPES:
            raise AmqpConnectionError(spec.COMMAND_INVALID, f"unknown exchange type '{m.type}'", type(m))
        _not_default(name, type(m))
        if m.passive:
            self._exchange(name, type(m))
        else:
            self._permit("configure", "exchange", name, type(m))
            args = dict(m.arguments) if m.arguments else None
            x = self.vhost.exchanges.get(name)
            if x is not None:
                self._check_equivalent_exchange(x, m, args)
            elif name.startswith("amq."):
                raise ChannelError(spec.ACCESS_REFUSED, f"exchange name '{name}' contains reserved "
                                   "prefix 'amq.*'", type(m))
            else:
                check_target_exchange(self.session.access, "exchange", name, args)
                model.declare_exchange(self.vhost, name, m.type, m.durable, m.auto_delete, m.internal, args)
        if not m.nowait:
            self.send(spec.ExchangeDeclareOk())

    def _check_equivalent_exchange(self, x: Exchange, m: spec.ExchangeDeclare, args: Any) -> None:
        for field, ours, theirs in (("type", x.type, m.type), ("durable", x.durable, m.durable),
                                    ("auto_delete", x.auto_delete, m.auto_delete),
                                    ("internal", x.internal, m.internal)):
            if ours != theirs:
                raise ChannelError(spec.PRECONDITION_FAILED, f"inequivalent arg '{field}' for exchange "
                                   f"'{x.name}' in vhost '{self.vhost.name}': received '{_term(theirs)}' but "
                                   f"current is '{_term(ours)}'", type(m))
        ours, theirs = (x.args or {}).get("alternate-exchange"), (args or {}).get("alternate-exchange")
        if ours != theirs:
            raise ChannelError(spec.PRECONDITION_FAILED, _inequivalent("alternate-exchange", "exchange", x.name,
                                                                       self.vhost.name, theirs, ours), type(m))

    def on_exchange_delete(self, m: spec.ExchangeDelete) -> None:
        name = m.exchange
        _not_default(name, type(m))
        if name.startswith("amq."):
            raise ChannelError(spec.ACCESS_REFUSED, f"deletion of system exchange '{name}' in vhost "
                               f"'{self.vhost.name}' not allowed", type(m))
        self._permit("configure", "exchange", name, type(m))
        x = self.vhost.exchanges.get(name)
        if x is not None:  # RabbitMQ: deleting a missing exchange is not an error
            if m.if_unused and (any(True for _ in x.router.bindings()) or self._is_destination(x)):
                raise ChannelError(spec.PRECONDITION_FAILED, f"exchange '{name}' in vhost "
                                   f"'{self.vhost.name}' in use", type(m))
            self.session.model.delete_exchange(self.vhost, name)
        if not m.nowait:
            self.send(spec.ExchangeDeleteOk())

    def _is_destination(self, x: Exchange) -> bool:
        return any(dest is x for other in self.vhost.exchanges.values() for dest, _, _ in other.router.bindings())

    def on_exchange_bind(self, m: spec.ExchangeBind) -> None:
        _not_default(m.destination, type(m))
        _not_default(m.source, type(m))
        self._permit("write", "exchange", m.destination, type(m))
        self._permit("read", "exchange", m.source, type(m))
        dest = self._exchange(m.destination, type(m))
        source = self._exchange(m.source, type(m))
        check_topic_access(self.session.access, source, m.routing_key, "read")
        args = dict(m.arguments) if m.arguments else None
        self.session.model.bind(self.vhost, dest, source, m.routing_key, args)
        if not m.nowait:
            self.send(spec.ExchangeBindOk())

    def on_exchange_unbind(self, m: spec.ExchangeUnbind) -> None:
        _not_default(m.destination, type(m))
        _not_default(m.source, type(m))
        self._permit("write", "exchange", m.destination, type(m))
        self._permit("read", "exchange", m.source, type(m))
        exchanges = self.vhost.exchanges
        dest = exchanges.get(m.destination)
        source = exchanges.get(m.source)
        check_topic_access(self.session.access, source, m.routing_key, "read")
        if dest is not None and source is not None:  # RabbitMQ: unbinding what is gone is a no-op
            args = dict(m.arguments) if m.arguments else None
            self.session.model.unbind(self.vhost, dest, source, m.routing_key, args)
        if not m.nowait:
            self.send(spec.ExchangeUnbindOk())

    # -- queues -------------------------------------------------------------------------------------
    def on_queue_declare(self, m: spec.QueueDeclare) -> None:
        session = self.session
        model = session.model
        name = m.queue
        vhost = self.vhost
        if m.passive:
            q = self._queue(name, type(m))
        else:
            if not name:
                name = session.host.new_name("amq.gen-")
            elif name.startswith("amq."):
                if name not in vhost.queues:
                    raise ChannelError(spec.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix "
                                       "'amq.*'", type(m))
            self._permit("configure", "queue", name, type(m))
            args = dict(m.arguments) if m.arguments else None
            q = vhost.queues.get(name)
            if q is not None:
                self._check_exclusive(q, type(m))
                self._check_equivalent_queue(q, m, args)
                model.touch(q)
            else:
                check_target_exchange(session.access, "queue", name, args)
                owner = session if m.exclusive else None
                q = model.declare_queue(vhost, name, m.durable, m.auto_delete, owner, args)
                if m.exclusive:
                    session.exclusive[q] = None
        if not m.nowait:
            # a stream's message count is its end offset (sansmq: capability stream_end_offset)
            count = model.streams.visible_end(q) if q.stream else q.count
            self.send(spec.QueueDeclareOk(q.name, count, q.consumer_count()))

    def _check_equivalent_queue(self, q: Queue, m: spec.QueueDeclare, args: Any) -> None:
        if (q.exclusive_owner is not None) != bool(m.exclusive):  # RabbitMQ: 405, not 406
            self._locked(q, type(m))
        for field, ours, theirs in (("durable", q.durable, m.durable),
                                    ("auto_delete", q.auto_delete, m.auto_delete)):
            if ours != theirs:
                raise ChannelError(spec.PRECONDITION_FAILED, f"inequivalent arg '{field}' for queue "
                                   f"'{q.name}' in vhost '{self.vhost.name}': received '{_term(theirs)}' but "
                                   f"current is '{_term(ours)}'", type(m))
        ours_args = q.declared_args or {}
        for key in set(ours_args) | set(args or {}):
            if key.startswith("x-") and ours_args.get(key) != (args or {}).get(key):
                if key in _NUMERIC_ARGS and \
                        str(ours_args.get(key)) == str((args or {}).get(key)):
                    continue
                raise ChannelError(spec.PRECONDITION_FAILED, _inequivalent(
                    key, "queue", q.name, self.vhost.name, (args or {}).get(key), ours_args.get(key)), type(m))

    def on_queue_bind(self, m: spec.QueueBind) -> None:
        _not_default(m.exchange, type(m))
        self._permit("write", "queue", m.queue, type(m))
        self._permit("read", "exchange", m.exchange, type(m))
        q = self._queue(m.queue, type(m))
        x = self._exchange(m.exchange, type(m))
        check_topic_access(self.session.access, x, m.routing_key, "read")
        args = dict(m.arguments) if m.arguments else None
        self.session.model.bind(self.vhost, q, x, m.routing_key, args)
        if not m.nowait:
            self.send(spec.QueueBindOk())

    def on_queue_unbind(self, m: spec.QueueUnbind) -> None:
        _not_default(m.exchange, type(m))
        self._permit("write", "queue", m.queue, type(m))
        self._permit("read", "exchange", m.exchange, type(m))
        q = self.vhost.queues.get(m.queue)
        x = self.vhost.exchanges.get(m.exchange)
        check_topic_access(self.session.access, x, m.routing_key, "read")
        args = dict(m.arguments) if m.arguments else None
        # RabbitMQ: unbinding a missing queue, exchange or binding is a no-op (unbind-ok); the
        # exclusive check applies only to a binding that exists
        if q is not None and x is not None and x.router.has(q, m.routing_key, args):
            self._check_exclusive(q, type(m))
            self.session.model.unbind(self.vhost, q, x, m.routing_key, args)
        self.send(spec.QueueUnbindOk())

    def on_queue_purge(self, m: spec.QueuePurge) -> None:
        self._permit("read", "queue", m.queue, type(m))
        q = self._queue(m.queue, type(m))
        n = self.session.model.purge(q)
        if not m.nowait:
            self.send(spec.QueuePurgeOk(n))

    def on_queue_delete(self, m: spec.QueueDelete) -> None:
        self._permit("configure", "queue", m.queue, type(m))
        q = self.vhost.queues.get(m.queue)
        n = 0
        if q is not None:  # RabbitMQ: deleting a missing queue is not an error
            self._check_exclusive(q, type(m))
            if m.if_unused and q.consumers:
                raise ChannelError(spec.PRECONDITION_FAILED, f"queue '{q.name}' in vhost "
                                   f"'{self.vhost.name}' in use", type(m))
            if m.if_empty and q.count:
                raise ChannelError(spec.PRECONDITION_FAILED, f"queue '{q.name}' in vhost "
                                   f"'{self.vhost.name}' not empty", type(m))
            n = q.count
            self.session.model.delete_queue(q)
            self.session.exclusive.pop(q, None)
        if not m.nowait:
            self.send(spec.QueueDeleteOk(n))

    # -- basic: consuming ---------------------------------------------------------------------------
    def on_qos(self, m: spec.BasicQos) -> None:
        if m.prefetch_size:  # RabbitMQ: not implemented, a hard error (540)
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})", type(m))
        if m.global_:
            self.global_prefetch = m.prefetch_count
            for c in self.consumers.values():
                self.session.model.mark_dirty(c.queue)
        else:
            self.prefetch = m.prefetch_count
        self.send(spec.BasicQosOk())

    def on_consume(self, m: spec.BasicConsume) -> None:
        session = self.session
        model = session.model
        name = m.queue
        if name == REPLY_TO:
            q = self._reply_queue(m)
        else:
            self._permit("read", "queue", name, type(m))
            q = self._queue(name, type(m))
        tag = m.consumer_tag
        if not tag:
            tag = session.host.new_name("amq.ctag-")
        if tag in self.consumers:
            raise AmqpConnectionError(spec.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", type(m))
        if q.consumers and any(getattr(c, "exclusive", False) for c in q.consumers):
            raise ChannelError(spec.ACCESS_REFUSED, f"queue '{q.name}' in vhost '{self.vhost.name}' in "
                               "exclusive use", type(m))
        if m.exclusive and q.consumers:
            raise ChannelError(spec.ACCESS_REFUSED, f"queue '{q.name}' in vhost '{self.vhost.name}' in "
                               "exclusive use", type(m))
        priority = 0
        if m.arguments and "x-priority" in m.arguments:
            try:
                priority = int(m.arguments["x-priority"])
            except (TypeError, ValueError):
                raise ChannelError(spec.PRECONDITION_FAILED, "invalid x-priority", type(m)) from None
        # no_local is ignored, as RabbitMQ ignores it: a consumer gets its own connection's messages
        consumer = AmqpConsumer(q, self, self.prefetch, m.no_ack, tag, m.exclusive, priority)
        if q.stream:
            start, name = self._stream_consumer(q, m)
            self.consumers[tag] = consumer
            if not m.nowait:
                self.send(spec.BasicConsumeOk(tag))
            model.consume_stream(q, consumer, start, name, priority)
            return
        self.consumers[tag] = consumer
        if not m.nowait:
            self.send(spec.BasicConsumeOk(tag))
        model.consume(q, consumer, priority)

    def _stream_consumer(self, q: Queue, m: spec.BasicConsume) -> tuple[Any, str | None]:
        """A stream consumer needs manual acks and a (per-consumer) prefetch, as RabbitMQ's."""
        where = f"queue '{q.name}' in vhost '{self.vhost.name}'"
        if m.no_ack:
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "automatic acknowledgement not supported by stream "
                                      f"queues {where}", type(m))
        if not self.prefetch or self.global_prefetch:
            raise ChannelError(spec.PRECONDITION_FAILED, f"consumer prefetch count is not set for '{where}'",
                               type(m))
        return parse_consumer_args(m.arguments)

    def _reply_queue(self, m: spec.BasicConsume) -> Queue:
        """Direct reply-to: a pseudo-queue only this consumer reads, named for the reply-to
        property the client's requests will carry (``amq.rabbitmq.reply-to.<token>``)."""
        if not m.no_ack:
            raise ChannelError(spec.PRECONDITION_FAILED, "reply consumer cannot acknowledge", type(m))
        session = self.session
        name = session.host.new_name(REPLY_TO + ".")
        q = session.model.declare_queue(self.vhost, name, False, True, session, None)
        session.exclusive[q] = None
        session.reply_to = name
        return q

    def on_cancel(self, m: spec.BasicCancel) -> None:
        consumer = self.consumers.pop(m.consumer_tag, None)
        if consumer is not None:
            # as RabbitMQ: its unacked deliveries stay on the channel, to be acked or rejected
            self.session.model.cancel(consumer, keep_unacked=True)
        if not m.nowait:
            self.send(spec.BasicCancelOk(m.consumer_tag))

    def consumer_cancelled(self, consumer: AmqpConsumer) -> None:
        """Its queue was deleted: tell the client if it understands basic.cancel from the server."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            if self.session.cancel_notify and self.session.channels.get(self.id) is self:
                self.send(spec.BasicCancel(consumer.tag, True))

    def deliver(self, consumer: AmqpConsumer, tag: int, entry: Entry) -> None:
        self.next_tag += 1
        dtag = self.next_tag
        session = self.session
        if not consumer.auto_ack:
            timeout = consumer.timeout
            if timeout:  # _deadline() inlined, with the queue's timeout cached on the consumer
                host = session.host
                deadline = host.now + timeout
                key = self.timeout_key
                if key is None or deadline < key[0]:
                    host.cancel_timer(key)
                    self._arm(deadline)
                self.unacked[dtag] = (consumer, tag, deadline)
            else:
                self.unacked[dtag] = (consumer, tag, 0.0)
        msg = entry.msg
        session.write(session.conn.send_deliver(self.id, consumer.tag, dtag, entry.count > 0, msg.exchange,
                                                msg.routing_key, props_bytes(msg), msg.body, session.host.now))

    def on_get(self, m: spec.BasicGet) -> None:
        self._permit("read", "queue", m.queue, type(m))
        q = self._queue(m.queue, type(m))
        if q.stream:
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, f"basic.get not supported by stream queues queue "
                                      f"'{q.name}' in vhost '{self.vhost.name}'", type(m))
        holder = self.getters.get(q)
        if holder is None:
            holder = self.getters[q] = _GetHolder(q, self.session, 0, m.no_ack)
            holder.channel = self
        holder.auto_ack = m.no_ack
        got = self.session.model.get(q, holder)
        if got is None:
            self.send(spec.BasicGetEmpty())
            return
        tag, entry = got
        self.next_tag += 1
        dtag = self.next_tag
        if not m.no_ack:
            self.unacked[dtag] = (holder, tag, self._deadline(q))
        msg = entry.msg
        self.send(spec.BasicGetOk(dtag, entry.count > 0, msg.exchange, msg.routing_key, q.count,
                                  _props(msg), msg.body))

    # -- consumer timeout -------------------------------------------------------------------------------
    def _timeout_ms(self, q: Queue) -> int:
        """x-consumer-timeout of the queue, else Limits.consumer_timeout (ms; 0 = none)."""
        if q.args is not None and "x-consumer-timeout" in q.args:
            return int(q.args["x-consumer-timeout"])
        return self.session.host.config.limits.consumer_timeout

    def _deadline(self, q: Queue) -> float:
        """When a delivery from ``q`` made now times out (0.0: never); arms the channel's timer."""
        ms = self._timeout_ms(q)
        if not ms:
            return 0.0
        host = self.session.host
        deadline = host.now + ms / 1000.0
        key = self.timeout_key
        if key is None or deadline < key[0]:  # earlier only with a shorter x-consumer-timeout
            host.cancel_timer(key)
            self._arm(deadline)
        return deadline

    def _arm(self, deadline: float) -> None:
        # the timer's argument is the session, so the broker guards the call as a session's
        self.timeout_key = self.session.host.arm_timer(
            deadline, lambda session, now: self._check_timeouts(now), self.session)

    def _check_timeouts(self, now: float) -> None:
        self.timeout_key = None
        earliest = 0.0
        for _, _, deadline in self.unacked.values():
            if deadline and (not earliest or deadline < earliest):
                earliest = deadline
        if not earliest:
            return
        if earliest <= now:
            q = next(c.queue for c, _, d in self.unacked.values() if d == earliest)
            self.session.channel_timed_out(self, self._timeout_ms(q))
            return
        self._arm(earliest)

    # -- basic: acknowledgements --------------------------------------------------------------------
    def _take(self, tag: int, multiple: bool, method: type) -> list[tuple[Consumer, int, float]]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                taken = list(unacked.values())
                unacked.clear()
                return taken
            if tag not in unacked and (not unacked or tag < next(iter(unacked))):
                raise ChannelError(spec.PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
            if tag >= self.next_tag:  # everything delivered so far (the usual cumulative ack)
                taken = list(unacked.values())
                unacked.clear()
                return taken
            taken = []
            keys = []
            for t, item in unacked.items():  # tag order: stop at the first later tag
                if t > tag:
                    break
                keys.append(t)
                taken.append(item)
            for t in keys:
                del unacked[t]
            return taken
        item = unacked.pop(tag, None)
        if item is None:
            raise ChannelError(spec.PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
        return [item]

    def _settle(self, items: list[tuple[Consumer, int, float]], requeue: bool | None) -> None:
        model = self.session.model
        # nacks go back in reverse so requeued messages keep their order at the head
        for consumer, mtag, _ in (items if requeue is None else reversed(items)):
            if requeue is None:
                model.ack(consumer, mtag)
            else:
                model.nack(consumer, mtag, False, requeue)
        if self.global_prefetch:
            for c in self.consumers.values():
                model.mark_dirty(c.queue)

    def on_ack(self, m: spec.BasicAck) -> None:
        self._settle_tags(m.delivery_tag, m.multiple, None, type(m))

    def on_nack(self, m: spec.BasicNack) -> None:
        self._settle_tags(m.delivery_tag, m.multiple, m.requeue, type(m))

    def on_reject(self, m: spec.BasicReject) -> None:
        self._settle_tags(m.delivery_tag, False, m.requeue, type(m))

    def _settle_tags(self, tag: int, multiple: bool, requeue: bool | None, method: type) -> None:
        if self.tx is None:
            self._settle(self._take(tag, multiple, method), requeue)
            return
        # in a transaction the settle waits for tx.commit; the deliveries leave ``unacked`` now (a
        # second ack of them is an unknown tag, as RabbitMQ's) but come back on rollback
        before = self.unacked.copy()
        items = self._take(tag, multiple, method)
        taken = {t: before[t] for t in before.keys() - self.unacked.keys()}
        self.tx.append(_TxSettle(self, items, requeue, taken))

    def _restore_tx_settles(self) -> None:
        """Rollback (or close) of a transaction: its acks, nacks and rejects are discarded and their
        deliveries are unacked on the channel again, in tag order (RabbitMQ's tx.rollback); a
        channel close then requeues them."""
        restored: dict[int, tuple[Consumer, int, float]] = {}
        for fn in self.tx or ():
            if isinstance(fn, _TxSettle):
                restored.update(fn.taken)
        if restored:
            restored.update(self.unacked)
            self.unacked = dict(sorted(restored.items()))

    def on_recover(self, m: Any) -> None:
        if not m.requeue:  # RabbitMQ: a hard error
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "requeue=false", type(m))
        items = list(self.unacked.values())
        self.unacked.clear()
        self._settle(items, True)  # RabbitMQ requeues whatever ``requeue`` says
        if type(m) is spec.BasicRecover:
            self.send(spec.BasicRecoverOk())

    # -- basic: publishing --------------------------------------------------------------------------
    def trace_origin(self) -> tuple[str, str, int]:
        """(user, connection, channel) in the firehose's trace messages (RabbitMQ's header values)."""
        session = self.session
        user = session.user
        peer = session.peer
        connection = f"{peer[0]}:{peer[1]}" if len(peer) >= 2 else str(peer)  # the client's address
        return (user.name if user is not None else "", connection, self.id)

    def on_publish(self, m: spec.BasicPublish) -> None:
        if m.immediate:  # dropped from RabbitMQ 3.0: a hard error there too
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "immediate=true", type(m))
        if not self.session.access.allows("write", m.exchange or "amq.default"):
            self._permit("write", "exchange", m.exchange, type(m))
        x = self._exchange(m.exchange, type(m))
        if x.internal:
            raise ChannelError(spec.ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}' in "
                               f"vhost '{self.vhost.name}'", type(m))
        if x.type == "topic":  # the test here: a publish to any other exchange pays nothing more
            check_topic_access(self.session.access, x, m.routing_key, "write")
        session = self.session
        now = session.host.now
        props = m.properties
        headers = props_to_headers(props)
        priority = 0
        expires_at = None
        persistent = False
        if props is not None:
            if props.priority is not None:
                priority = props.priority  # an octet; only queues with x-max-priority use it
            if props.expiration is not None:
                ms = _expiration_ms(props.expiration, type(m))
                expires_at = now + ms / 1000.0
            persistent = props.delivery_mode == 2
            if props.user_id is not None and session.user is not None and props.user_id != session.user.name:
                raise ChannelError(spec.PRECONDITION_FAILED, f"user_id property set to '{props.user_id}' but "
                                   f"authenticated user was '{session.user.name}'", type(m))
            reply_to = props.reply_to
            if reply_to == REPLY_TO:
                name = getattr(session, "reply_to", None)
                if name is None:
                    raise ChannelError(spec.PRECONDITION_FAILED, "fast reply consumer does not exist", type(m))
                headers["reply-to"] = name
        msg = Message(session.model.next_message_id(), x.name, m.routing_key, headers, m.body, priority,
                      expires_at, persistent)
        mandatory = m.mandatory
        if self.confirm:
            self.pub_seq += 1
        seq = self.pub_seq if self.confirm else 0
        if self.tx is None:  # the common case, without a closure per message
            self._route(x, msg, mandatory, seq)
        else:
            self.tx.append(lambda: self._route(x, msg, mandatory, seq))

    def _route(self, x: Exchange, msg: Message, mandatory: bool, seq: int) -> None:
        session = self.session
        model = session.model
        before = model.store_writes
        try:
            result = model.publish(self.vhost, x, msg, True,
                                   self.trace_origin() if self.vhost.trace is not None else None)
        except StoreError:
            if not seq:
                raise  # nobody to nack: the session closes the connection with 541
            # disk full / I/O error: a confirm-mode publisher gets a nack, as RabbitMQ's
            result = PUBLISH_ROUTED | PUBLISH_REFUSED | (PUBLISH_WROTE if model.store_writes != before else 0)
        if mandatory and not result:
            self.send(spec.BasicReturn(spec.NO_ROUTE, "NO_ROUTE", x.name, msg.routing_key, _props(msg), msg.body))
        if seq:
            session.after_sync(bool(result & PUBLISH_WROTE), _Confirm(self, seq, bool(result & PUBLISH_REFUSED)))

    def nack(self, seq: int) -> None:
        self.flush_confirms()  # acks released before it keep their place in the sequence
        self.send(spec.BasicNack(seq, False, False))

    def flush_confirms(self) -> None:
        """Send the coalesced acks: every sequence number up to ``ack_upto`` not yet confirmed
        (confirms are released in publish order, so none of them is missing)."""
        if self.ack_batch:
            n, self.ack_batch = self.ack_batch, 0
            if self.session.channels.get(self.id) is self:
                self.send(spec.BasicAck(self.ack_upto, n > 1))

    def on_confirm_select(self, m: spec.ConfirmSelect) -> None:
        if self.tx is not None:
            raise ChannelError(spec.PRECONDITION_FAILED, "cannot switch from tx to confirm mode", type(m))
        self.confirm = True
        if not m.nowait:
            self.send(spec.ConfirmSelectOk())

    # -- transactions -------------------------------------------------------------------------------
    def on_tx_select(self, m: spec.TxSelect) -> None:
        if self.confirm:
            raise ChannelError(spec.PRECONDITION_FAILED, "cannot switch from confirm to tx mode", type(m))
        if self.tx is None:
            self.tx = []
        self.send(spec.TxSelectOk())

    def on_tx_commit(self, m: spec.TxCommit) -> None:
        if self.tx is None:
            raise ChannelError(spec.PRECONDITION_FAILED, "channel is not transactional", type(m))
        work, self.tx = self.tx, []
        model = self.session.model
        before = model.store_writes
        for fn in work:
            fn()
        self.session.after_sync(model.store_writes != before, lambda: self._commit_ok())

    def _commit_ok(self) -> None:
        if self.session.channels.get(self.id) is self:
            self.send(spec.TxCommitOk())

    def on_tx_rollback(self, m: spec.TxRollback) -> None:
        if self.tx is None:
            raise ChannelError(spec.PRECONDITION_FAILED, "channel is not transactional", type(m))
        self._restore_tx_settles()
        self.tx = []
        self.send(spec.TxRollbackOk())

    def on_access_request(self, m: spec.AccessRequest) -> None:
        self.send(spec.AccessRequestOk(1))


def _not_default(exchange: str, method: type) -> None:
    """RabbitMQ refuses every declare, delete and (un)bind naming the default exchange."""
    if exchange == "":
        raise ChannelError(spec.ACCESS_REFUSED, "operation not permitted on the default exchange", method)


def _expiration_ms(text: str, method: type) -> int:
    """The expiration property in milliseconds; refused with RabbitMQ's reasons."""
    digits = text.lstrip("+-")
    sign_len = len(text) - len(digits)
    n = 0
    while n < len(digits) and digits[n].isdigit():
        n += 1
    if not n or sign_len > 1:
        reason = "no_integer"
    elif n < len(digits):
        reason = f'{{leftover_string,"{digits[n:]}"}}'
    else:
        ms = int(text)
        if ms >= 0:
            return ms
        reason = f"{{value_negative,{ms}}}"
    raise ChannelError(spec.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}", method)


def _inequivalent(key: str, kind: str, name: str, vhost: str, theirs: Any, ours: Any) -> str:
    """RabbitMQ's text for a redeclare whose argument ``key`` differs."""
    def val(v: Any) -> str:
        return "none" if v is None else f"the value '{_term(v)}' of type '{amqp_type_name(v)}'"

    head = f"inequivalent arg '{key}' for {kind} '{name}' in vhost '{vhost}': received "
    if theirs is None or ours is None:
        return f"{head}{val(theirs)} but current is {val(ours)}"
    return f"{head}'{_term(theirs)}' but current is '{_term(ours)}'"


def _term(value: Any) -> str:
    """A value as RabbitMQ prints it in a reply text (booleans as Erlang atoms)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _props(msg: Message) -> BasicProperties:
    return headers_to_props(msg.headers, msg.persistent, msg.priority)


_PLAIN_PROPS = encode_properties(headers_to_props({}, False, 0))
_PERSISTENT_PROPS = encode_properties(headers_to_props({}, True, 0))


def props_bytes(msg: Message) -> bytes:
    """The encoded AMQP properties of ``msg``: constants for a message whose headers are empty or
    only the ``persistent`` marker (the common case: ``headers_to_props`` then only looks at
    ``msg.persistent``), else encoded."""
    headers = msg.headers
    if not headers or (len(headers) == 1 and "persistent" in headers):
        return _PERSISTENT_PROPS if msg.persistent else _PLAIN_PROPS
    return encode_properties(headers_to_props(msg.headers, msg.persistent, msg.priority))


class AmqpConnectionError(Exception):
    """A hard error: connection.close with ``code``; the whole connection goes."""

    def __init__(self, code: int, text: str, method: Any = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.method = method


_HANDLERS: dict[type, Callable[[AmqpChannel, Any], None]] = {
    spec.ChannelClose: AmqpChannel.on_close,
    spec.ChannelCloseOk: AmqpChannel.on_close_ok,
    spec.ChannelFlow: AmqpChannel.on_flow,
    spec.AccessRequest: AmqpChannel.on_access_request,
    spec.ExchangeDeclare: AmqpChannel.on_exchange_declare,
    spec.ExchangeDelete: AmqpChannel.on_exchange_delete,
    spec.ExchangeBind: AmqpChannel.on_exchange_bind,
    spec.ExchangeUnbind: AmqpChannel.on_exchange_unbind,
    spec.QueueDeclare: AmqpChannel.on_queue_declare,
    spec.QueueBind: AmqpChannel.on_queue_bind,
    spec.QueueUnbind: AmqpChannel.on_queue_unbind,
    spec.QueuePurge: AmqpChannel.on_queue_purge,
    spec.QueueDelete: AmqpChannel.on_queue_delete,
    spec.BasicQos: AmqpChannel.on_qos,
    spec.BasicConsume: AmqpChannel.on_consume,
    spec.BasicCancel: AmqpChannel.on_cancel,
    spec.BasicGet: AmqpChannel.on_get,
    spec.BasicPublish: AmqpChannel.on_publish,
    spec.BasicAck: AmqpChannel.on_ack,
    spec.BasicNack: AmqpChannel.on_nack,
    spec.BasicReject: AmqpChannel.on_reject,
    spec.BasicRecover: AmqpChannel.on_recover,
    spec.BasicRecoverAsync: AmqpChannel.on_recover,
    spec.ConfirmSelect: AmqpChannel.on_confirm_select,
    spec.TxSelect: AmqpChannel.on_tx_select,
    spec.TxCommit: AmqpChannel.on_tx_commit,
    spec.TxRollback: AmqpChannel.on_tx_rollback,
}
