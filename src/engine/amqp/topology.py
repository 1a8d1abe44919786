"""The channel's exchange.* and queue.* methods: declare (with RabbitMQ's equivalence checks on
redeclare), delete, bind, unbind and purge."""

from __future__ import annotations

from typing import Any

from amqpproto import spec

from .._mypyc import interpreted_class
from ..model import Exchange, Queue
from ..model.objects import inequivalent, term
from ..model.queue_types import comparison_order
from ..model.quorum import check_server_named
from ..model.security import check_target_exchange, check_topic_access
from .base import ChannelBase
from .errors import AmqpConnectionError, ChannelError
from .permissions import permit, permit_bind, permit_queue_declare
from .replies import not_default
from .stream_range import range_end

__all__ = ["TopologyMethods"]

_EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-delayed-message")
#: queue arguments compared by value on redeclare (a client may send 10 as a short or a long)
_NUMERIC_ARGS = frozenset(("x-expires", "x-message-ttl", "x-max-length", "x-max-length-bytes", "x-max-priority",
                           "x-delivery-limit", "x-consumer-timeout"))


@interpreted_class
class TopologyMethods(ChannelBase):
    __slots__ = ()

    # -- exchanges ----------------------------------------------------------------------------------
    def on_exchange_declare(self, m: spec.ExchangeDeclare) -> None:
        model = self.session.model
        name = m.exchange
        # RabbitMQ's order: the type (a hard error), the default exchange, then the rest
        if not m.passive and m.type not in _EXCHANGE_TYPES:
            raise AmqpConnectionError(spec.COMMAND_INVALID, f"unknown exchange type '{m.type}'", type(m))
        not_default(name, type(m))
        if m.passive:
            self._exchange(name, type(m))
        else:
            permit(self.session.access, "configure", "exchange", name, type(m))
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
                                   f"'{x.name}' in vhost '{self.vhost.name}': received '{term(theirs)}' but "
                                   f"current is '{term(ours)}'", type(m))
        ours_ae, theirs_ae = (x.args or {}).get("alternate-exchange"), (args or {}).get("alternate-exchange")
        if ours_ae != theirs_ae:
            raise ChannelError(spec.PRECONDITION_FAILED, inequivalent("alternate-exchange", "exchange", x.name,
                                                                       self.vhost.name, theirs_ae, ours_ae), type(m))

    def on_exchange_delete(self, m: spec.ExchangeDelete) -> None:
        name = m.exchange
        not_default(name, type(m))
        if name.startswith("amq."):
            raise ChannelError(spec.ACCESS_REFUSED, f"deletion of system exchange '{name}' in vhost "
                               f"'{self.vhost.name}' not allowed", type(m))
        permit(self.session.access, "configure", "exchange", name, type(m))
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
        not_default(m.destination, type(m))
        not_default(m.source, type(m))
        permit_bind(self.session.access, "exchange", m.destination, m.source, type(m))
        dest = self._exchange(m.destination, type(m))
        source = self._exchange(m.source, type(m))
        check_topic_access(self.session.access, source, m.routing_key, "read")
        args = dict(m.arguments) if m.arguments else None
        self.session.model.bind(self.vhost, dest, source, m.routing_key, args)
        if not m.nowait:
            self.send(spec.ExchangeBindOk())

    def on_exchange_unbind(self, m: spec.ExchangeUnbind) -> None:
        not_default(m.destination, type(m))
        not_default(m.source, type(m))
        permit_bind(self.session.access, "exchange", m.destination, m.source, type(m))
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
                check_server_named(m.arguments)
                name = session.host.new_name("amq.gen-")
            elif name.startswith("amq."):
                if name not in vhost.queues:
                    raise ChannelError(spec.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix "
                                       "'amq.*'", type(m))
            args = dict(m.arguments) if m.arguments else None
            permit_queue_declare(session.access, name, args, type(m))
            existing = vhost.queues.get(name)
            if existing is not None:
                q = existing
                self._check_exclusive(q, type(m))
                self._check_equivalent_queue(q, m, args)
                model.touch(q)
            else:
                check_target_exchange(session.access, "queue", name, args)
                owner = session if m.exclusive else None
                q = model.declare_queue(vhost, name, m.durable, m.auto_delete, owner, args)
                if m.exclusive:
                    session.own_exclusive(q)
        if not m.nowait:
            # a stream's message count is its end offset (sansmq: capability stream_end_offset)
            count = model.streams.visible_end(q, fresh=True) if q.stream else q.count
            if m.passive and (bounded := range_end(self, q, m.arguments, count, type(m))) is not None:
                count = bounded  # sansmq: capability stream_range_bytes
            self.send(spec.QueueDeclareOk(q.name, count, q.consumer_count()))

    def _check_equivalent_queue(self, q: Queue, m: spec.QueueDeclare, args: Any) -> None:
        if (q.exclusive_owner is not None) != bool(m.exclusive):  # RabbitMQ: 405, not 406
            self._locked(q, type(m))
        for field, ours, theirs in (("durable", q.durable, m.durable),
                                    ("auto_delete", q.auto_delete, m.auto_delete)):
            if ours != theirs:
                raise ChannelError(spec.PRECONDITION_FAILED, f"inequivalent arg '{field}' for queue "
                                   f"'{q.name}' in vhost '{self.vhost.name}': received '{term(theirs)}' but "
                                   f"current is '{term(ours)}'", type(m))
        ours_args = q.declared_args or {}
        for key in comparison_order(q, set(ours_args) | set(args or {})):
            if key.startswith("x-") and ours_args.get(key) != (args or {}).get(key):
                if key in _NUMERIC_ARGS and \
                        str(ours_args.get(key)) == str((args or {}).get(key)):
                    continue
                raise ChannelError(spec.PRECONDITION_FAILED, inequivalent(
                    key, "queue", q.name, self.vhost.name, (args or {}).get(key), ours_args.get(key)), type(m))

    def on_queue_bind(self, m: spec.QueueBind) -> None:
        not_default(m.exchange, type(m))
        permit_bind(self.session.access, "queue", m.queue, m.exchange, type(m))
        q = self._queue(m.queue, type(m))
        x = self._exchange(m.exchange, type(m))
        check_topic_access(self.session.access, x, m.routing_key, "read")
        args = dict(m.arguments) if m.arguments else None
        self.session.model.bind(self.vhost, q, x, m.routing_key, args)
        if not m.nowait:
            self.send(spec.QueueBindOk())

    def on_queue_unbind(self, m: spec.QueueUnbind) -> None:
        not_default(m.exchange, type(m))
        permit_bind(self.session.access, "queue", m.queue, m.exchange, type(m))
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
        permit(self.session.access, "read", "queue", m.queue, type(m))
        q = self._queue(m.queue, type(m))
        n = self.session.model.purge(q)
        if not m.nowait:
            self.send(spec.QueuePurgeOk(n))

    def on_queue_delete(self, m: spec.QueueDelete) -> None:
        permit(self.session.access, "configure", "queue", m.queue, type(m))
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
            if self.session.exclusive is not None:
                self.session.exclusive.pop(q, None)
        if not m.nowait:
            self.send(spec.QueueDeleteOk(n))
