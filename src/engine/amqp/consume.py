"""The channel's consuming side: basic.qos, basic.consume (direct reply-to included), basic.cancel,
basic.get, the deliveries to its consumers and RabbitMQ's consumer timeout (one timer per channel,
re-armed at the earliest deadline when it fires, so a delivery costs no timer of its own)."""

from __future__ import annotations

from functools import partial
from itertools import repeat
from typing import Any

from amqpproto import spec
from amqpproto.spec import encode_properties

from .._message import Entry
from .._mypyc import interpreted_class
from ..model import Queue
from ..model.streams import check_not_stream_consumer
from ..streams import RawRecord
from .base import REPLY_TO, AmqpConsumer, ChannelBase, GetHolder
from .errors import AmqpConnectionError, ChannelError
from .permissions import permit
from .properties import counted_props, message_props, props_bytes
from .stream_consume import refuse_get, stream_start
from .stream_wire import delivery_items

__all__ = ["ConsumeMethods"]


@interpreted_class
class ConsumeMethods(ChannelBase):
    __slots__ = ()

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
            permit(self.session.access, "read", "queue", name, type(m))
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
            args = stream_start(self, q, m)
            self.consumers[tag] = consumer
            if not m.nowait:
                self.send(spec.BasicConsumeOk(tag))
            model.consume_stream(q, consumer, args, priority)
            return
        check_not_stream_consumer(q, m.arguments)
        if q.quorum and self.global_prefetch:  # RabbitMQ 3.10: a hard error
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, f"queue '{q.name}' in vhost '{self.vhost.name}' does "
                                      "not support global qos", type(m))
        self.consumers[tag] = consumer
        if not m.nowait:
            self.send(spec.BasicConsumeOk(tag))
        model.consume(q, consumer, priority)

    def _reply_queue(self, m: spec.BasicConsume) -> Queue:
        """Direct reply-to: a pseudo-queue only this consumer reads, named for the reply-to
        property the client's requests will carry (``amq.rabbitmq.reply-to.<token>``)."""
        if not m.no_ack:
            raise ChannelError(spec.PRECONDITION_FAILED, "reply consumer cannot acknowledge", type(m))
        session = self.session
        name = session.host.new_name(REPLY_TO + ".")
        q = session.model.declare_queue(self.vhost, name, False, True, session, None)
        session.own_exclusive(q)
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
        count = entry.count
        # a quorum queue's redeliveries say how often the message came back (RabbitMQ 3.10: only
        # redeliveries carry x-delivery-count; basic.get always does)
        props = encode_properties(counted_props(msg, count)) if count and consumer.queue.quorum else props_bytes(msg)
        session.write(session.conn.send_deliver(self.id, consumer.tag, dtag, count > 0, msg.exchange,
                                                msg.routing_key, props, msg.body, session.host.now))

    def deliver_stream(self, consumer: AmqpConsumer, first_tag: int, records: list[RawRecord], stamp: bool) -> int:
        """``deliver`` of a stream's read window from its stored bytes (model tags from
        ``first_tag`` up), as one write: how many were delivered (the channel's global prefetch
        may leave room for fewer)."""
        k = len(records)
        limit = self.global_prefetch
        if limit:
            k = min(k, max(0, limit - len(self.unacked)))
            records = records[:k]
        if not k:
            return 0
        items = delivery_items(records, stamp)
        first = self.next_tag + 1
        self.next_tag += k
        session = self.session
        deadline = 0.0
        if consumer.timeout:  # as deliver: one deadline for the window, all delivered now
            deadline = session.host.now + consumer.timeout
            key = self.timeout_key
            if key is None or deadline < key[0]:
                session.host.cancel_timer(key)
                self._arm(deadline)
        self.unacked.update(zip(range(first, first + k),
                                zip(repeat(consumer), range(first_tag, first_tag + k), repeat(deadline)), strict=False))
        session.write(session.conn.send_deliveries(self.id, consumer.tag, first, items, session.host.now))
        return k

    def on_get(self, m: spec.BasicGet) -> None:
        permit(self.session.access, "read", "queue", m.queue, type(m))
        q = self._queue(m.queue, type(m))
        if q.stream:
            refuse_get(self, q, m)
        getters = self.getters
        if getters is None:
            getters = self.getters = {}
        holder = getters.get(q)
        if holder is None:
            holder = getters[q] = GetHolder(q, self.session, 0, m.no_ack)
            holder.channel = self
        holder.auto_ack = m.no_ack
        model = self.session.model
        got = model.get(q, holder)
        if got is not None:
            self._get_ok(q, holder, *got, q.count)
        elif q.leader is not None and model.relays is not None and not self.session.relay:  # led by another
            # node: ask it (not for a peer's get: the leases moved and both would ask each other)
            model.relays.get(q, m.no_ack, partial(self._got_remote, q, holder, m.no_ack))
        else:
            self.send(spec.BasicGetEmpty())

    def _get_ok(self, q: Queue, holder: GetHolder, tag: int, entry: Entry, message_count: int) -> None:
        self.next_tag += 1
        dtag = self.next_tag
        if not holder.auto_ack:
            self.unacked[dtag] = (holder, tag, self._deadline(q))
        msg = entry.msg
        props = counted_props(msg, entry.count) if q.quorum else message_props(msg)
        self.send(spec.BasicGetOk(dtag, entry.count > 0, msg.exchange, msg.routing_key, message_count, props,
                                  msg.body))

    def _got_remote(self, q: Queue, holder: GetHolder, no_ack: bool, fetched: Any, failure: str | None) -> None:
        """The leader's answer to a basic.get of ``q`` (the loop thread, later): passed on to the
        client, or given back when this channel or the queue went away meanwhile. ``fetched``: an
        ``engine.cluster.relay.Fetched`` or None (typed loosely: sessions never import the cluster)."""
        session = self.session
        model = session.model
        entry = None if fetched is None else model.relays.got(fetched, no_ack)
        if session.channels.get(self.id) is not self or q.vhost.queues.get(q.name) is not q:
            if entry is not None and not model.relays.returned(q, entry, True):  # no_ack: settled there already
                model.forget(q, entry)
            return
        if failure is not None:  # RabbitMQ's answer when a durable queue's node is unreachable
            session.fail_channel(self, ChannelError(spec.NOT_FOUND, f"leader node '{q.leader}' of durable queue "
                                 f"'{q.name}' in vhost '{q.vhost.name}' is down or inaccessible ({failure})",
                                 spec.BasicGet))
            return
        if fetched is None or entry is None:
            self.send(spec.BasicGetEmpty())
            return
        holder.auto_ack = no_ack
        tag = model.give(q, entry, holder)
        if tag is None:  # expired (a fetched entry has no expiry of its own here: the leader's TTL ran)
            self.send(spec.BasicGetEmpty())
            return
        self._get_ok(q, holder, tag, entry, fetched.message_count)

    # -- consumer timeout -------------------------------------------------------------------------------
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
        self.timeout_key = self.session.host.arm_timer(deadline, self._timeouts_due, self.session)

    def _timeouts_due(self, session: object, now: float) -> None:
        self._check_timeouts(now)

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
