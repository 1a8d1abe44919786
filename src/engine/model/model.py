"""The protocol-neutral broker model (RabbitMQ's): vhosts, exchanges, queues, bindings, consumers.

Sessions drive it through a handful of operations (declare, bind, publish, consume, ack/nack,
cancel) and receive deliveries through their ``ConsumerOwner`` interface; the model never formats a
frame. ``Model`` is the model's state (``ModelState``) wired to its layers, bottom up:

    objects, routers, message   vhosts, exchanges, queues, consumers; exchange routers; messages
    state                       what every layer shares: store, timers, clock, counters
    light                       light topic subscriptions (buffers, drop policy, their delivery)
    routing                     where a message goes (exchange-to-exchange, CC/BCC)
    holding                     messages held until a due time, kept in the store as they wait
    delayed, retry              delayed exchanges (x-delay), retry back-off (x-retry-delays)
    expiry                      when a message expires, what dying makes of it (dead-lettering)
    paging                      the in-memory window of a queue and the store's page behind it
    streams                     stream queues: their logs, readers and bounded-batch delivery
    trace                       the firehose (amq.rabbitmq.trace) of traced vhosts
    events                      the event exchange (amq.rabbitmq.event): the broker's life as messages
    topology                    declare/delete/bind/unbind, auto-delete, x-expires
    publish                     the one publish path; enqueue; a message dying in a queue
    delivery                    consume, get, dispatch, ack/nack/return, ack timeouts
    policies                    policies matched to queues and exchanges, applied at once
    security                    users, password hashes, per-vhost permissions (no layer uses it)

A layer calls only those below it; where a lower one must report back (paging meets an expired
message, a light delivery's ack timeout passes) it calls a callback the model gave it. The
operations are the layers' own bound methods, set on the model (no forwarding call on hot paths).
"""

from __future__ import annotations

from typing import Any

from .._timers import TimerQueue
from ..store import Recovered, Store
from .delayed import DELAYED_TYPE, DelayedExchanges
from .delivery import Delivery
from .events import Events
from .holding import HOLDER_ARG, Holder
from .light import LightTopics
from .objects import Consumer, Exchange, Queue
from .paging import Pager
from .policies import Policies
from .publish import Publisher
from .quorum import is_quorum_args
from .retry import RETRY_ARG, Retries
from .routing import route
from .security import Security
from .state import ModelState
from .streams import Streams, is_stream_args
from .topology import Topology
from .trace import Tracer

__all__ = ["Model"]


class Model(ModelState):
    """All broker state and its operations. ``now`` is set by the broker before every operation."""

    __slots__ = ("streams", "consume_stream", "delayed", "retries", "tracer", "publisher", "pager", "topology",
                 "delivery", "light", "route", "exchange", "add_vhost",
                 "declare_exchange", "delete_exchange", "declare_queue", "touch", "delete_queue", "purge",
                 "bind", "unbind", "publish", "sole_stream", "stream_by_key", "append_stream", "append_stream_run",
                 "enqueue", "consume",
                 "get", "give", "cancel", "return_unacked", "ack", "nack", "has_tag", "dispatch", "supports_light",
                 "bind_light", "paged_messages", "policies", "security", "delete_vhost")

    def __init__(self, store: Store, timers: TimerQueue) -> None:
        super().__init__(store, timers)
        # the pager and light topics report back through callbacks, so they are made after the
        # layers they call back, and attached to them
        self.streams = streams = Streams(self)
        self.delayed = delayed = DelayedExchanges(self)
        self.retries = retries = Retries(self)
        self.publisher = publisher = Publisher(self, streams)
        self.pager = pager = Pager(self, publisher.expire, publisher.on_expiry)
        self.topology = topology = Topology(self, pager, delayed, retries, streams)
        self.delivery = delivery = Delivery(self, pager, topology, publisher, retries, streams)
        self.light = light = LightTopics(self, delivery.on_ack_timeout)
        publisher.pager = pager
        streams.ended = self._stream_consumer_ended
        # held messages report back when due: routed from their delayed exchange (priority as
        # AMQP publishes have it), or back into their retry queue (or dead there)
        delayed.publish = lambda x, msg: publisher.publish(x.vhost, x, msg, True, traced=False)
        retries.requeue = publisher.enqueue
        retries.dead = publisher.remove
        publisher.light = delivery.light = light
        self.policies = Policies(store, self.vhosts, self._queue_args_changed)
        topology.on_declared = self._declared
        self.security = Security(store)
        self.tracer = tracer = Tracer(self)
        tracer.enqueue = publisher.enqueue
        self.events = Events(self)
        self.events.enqueue = publisher.enqueue
        # the operations, bound once
        self.route = route
        self.exchange = topology.exchange
        self.add_vhost = topology.add_vhost
        self.delete_vhost = topology.delete_vhost
        self.declare_exchange = topology.declare_exchange
        self.delete_exchange = topology.delete_exchange
        self.declare_queue = topology.declare_queue
        self.touch = topology.touch
        self.delete_queue = topology.delete_queue
        self.purge = topology.purge
        self.bind = topology.bind
        self.unbind = topology.unbind
        self.publish = publisher.publish
        self.sole_stream = publisher.sole_stream
        self.stream_by_key = publisher.stream_by_key
        self.append_stream = publisher.append_stream
        self.append_stream_run = publisher.append_stream_run
        self.enqueue = publisher.enqueue
        self.consume = delivery.consume
        self.consume_stream = delivery.consume_stream
        self.get = delivery.get
        self.give = delivery.give
        self.cancel = delivery.cancel
        self.return_unacked = delivery.return_unacked
        self.ack = delivery.ack
        self.nack = delivery.nack
        self.has_tag = delivery.has_tag
        self.dispatch = delivery.dispatch
        self.supports_light = light.supports
        self.bind_light = light.bind
        self.paged_messages = pager.paged_messages

    def _stream_consumer_ended(self, consumer: Consumer) -> None:
        """A stream consumer read up to its ``x-stream-end-offset``: cancelled as if its queue went
        away (its unacked deliveries stay with the channel, as after a client's basic.cancel)."""
        self.delivery.cancel(consumer, keep_unacked=True)
        consumer.owner.consumer_cancelled(consumer)

    # -- policies ---------------------------------------------------------------------------------
    def _declared(self, obj: Queue | Exchange) -> None:
        if isinstance(obj, Queue):
            self.policies.apply_queue(obj)
        else:
            self.policies.apply_exchange(obj)

    def _queue_args_changed(self, q: Queue, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """A policy changed ``q``'s effective arguments: a lower max-length trims it at once (with
        drop-head overflow, as RabbitMQ), a changed expires restarts its countdown."""
        before, after = before or {}, after or {}
        if ("x-max-length" in after or "x-max-length-bytes" in after) and \
                after.get("x-overflow", "drop-head") == "drop-head":
            self.publisher.trim(q, after)
            self.dirty[q] = None
        if before.get("x-expires") != after.get("x-expires"):
            self.topology.arm_unused(q)

    def set_trace(self, vhost: str, on: bool = True) -> None:
        """Turn the firehose of ``vhost`` on or off (RabbitMQ's ``rabbitmqctl trace_on``)."""
        self.tracer.enable(self.topology.add_vhost(vhost, persist=False), on)

    def set_events(self, vhost: str) -> None:
        """Turn the event exchange on in ``vhost`` (RabbitMQ's rabbitmq_event_exchange.vhost)."""
        self.events.enable(self.topology.add_vhost(vhost, persist=False))

    # -- recovery -------------------------------------------------------------------------------
    def restore(self, rec: Recovered) -> None:
        """Rebuild durable state read back from the store (without writing it again)."""
        for name in rec.vhosts:
            self.topology.add_vhost(name, persist=False)
        for xd in rec.exchanges:
            vhost = self.topology.add_vhost(xd.vhost, persist=False)
            if xd.name not in vhost.exchanges:
                x = vhost.exchanges[xd.name] = Exchange(vhost, xd.name, xd.type, xd.durable, xd.auto_delete,
                                                        xd.internal, xd.args)
                if xd.type == DELAYED_TYPE:
                    self.delayed.attach(x, persist=False)
        holders: list[tuple[str, str]] = []
        for qd in rec.queues:
            if qd.args and HOLDER_ARG in qd.args:  # a delayed exchange's or retry queue's held messages
                holders.append((qd.vhost, qd.name))
                continue
            vhost = self.topology.add_vhost(qd.vhost, persist=False)
            if qd.name not in vhost.queues:
                queue = vhost.queues[qd.name] = Queue(vhost, qd.name, qd.durable, qd.auto_delete, None, qd.args)
                if qd.args and RETRY_ARG in qd.args:
                    self.retries.attach(queue, persist=False)
                if is_stream_args(qd.args):
                    self.streams.open(queue)
                queue.quorum = is_quorum_args(qd.args)
        for bd in rec.bindings:
            bound = self.vhosts.get(bd.vhost)
            if bound is None:
                continue
            source = bound.exchanges.get(bd.source)
            dest = bound.exchanges.get(bd.dest) if bd.dest_is_exchange else bound.queues.get(bd.dest)
            if source is None or dest is None:
                continue
            if source.router.add(dest, bd.key, bd.args) and isinstance(dest, Queue):
                if dest.bindings is None:
                    dest.bindings = []
                dest.bindings.append((source, bd.key, bd.args))
        max_id = self._next_msg_id
        for (vname, qname), stored in rec.messages.items():
            holder = self.vhosts.get(vname)
            q = holder.queues.get(qname) if holder else None
            if q is None:
                continue
            paged = rec.paged.get((vname, qname), 0)
            for sm in stored:
                max_id = max(max_id, sm.message.id)
                self.publisher.enqueue(q, sm.message, sm.delivery_count, persist=False, queue_expires=sm.expires,
                             resident=bool(paged))
            q.paged += paged  # already in the store's page, after the messages materialised above
            q.count += paged
        for (vname, qname), paged in rec.paged.items():
            if (vname, qname) not in rec.messages:
                holder = self.vhosts.get(vname)
                q = holder.queues.get(qname) if holder else None
                if q is not None:
                    q.paged += paged
                    q.count += paged
        max_id = max(max_id, rec.max_message_id)
        self._next_msg_id = max_id
        self.security.restore(rec.docs)
        self.limits.restore(rec.docs)
        self.policies.restore(rec.docs)
        self.policies.apply_all()
        self._restore_held(rec, holders)

    def _restore_held(self, rec: Recovered, stored: list[tuple[str, str]]) -> None:
        """Arm the held messages read back again; a holder whose owner is gone is deleted."""
        by_name: dict[tuple[str, str], Holder] = {}
        for target in self.delayed.targets.values():
            by_name[(target.holder.vhost, target.holder.name)] = target.holder
        for retrying in self.retries.holders.values():
            by_name[(retrying.vhost, retrying.name)] = retrying
        for key in stored:
            holder = by_name.get(key)
            if holder is None:
                self.store.delete_queue(*key)
                continue
            for sm in rec.messages.get(key, ()):
                self._next_msg_id = max(self._next_msg_id, sm.message.id)
                holder.restore(sm.message, sm.delivery_count)
            paged = rec.paged.get(key, 0)
            while paged > 0:  # a backlog the store did not materialise: held messages live in memory
                page, used = self.store.page_in(key[0], key[1], paged)
                if not used:
                    break
                paged -= used
                for msg, count, _ in page:
                    self._next_msg_id = max(self._next_msg_id, msg.id)
                    holder.restore(msg, count)
