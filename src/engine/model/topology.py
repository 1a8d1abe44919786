"""Topology: vhosts, exchanges, queues and bindings: declare, delete, bind, unbind, purge, and the
automatic deletions (auto-delete exchanges with their last binding, ``x-expires`` queues nobody
uses). Deleting a queue cancels its consumers through their owners and drops its page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..store import BindingDef, ExchangeDef, QueueDef
from .delayed import DELAYED_TYPE, DelayedExchanges, check_delayed_args
from .errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked, Unsupported
from .holding import HOLDER_PREFIX
from .objects import STANDARD_EXCHANGES, Exchange, Queue, VHost, check_queue_args
from .paging import Pager
from .quorum import check_quorum_declare, is_quorum_args
from .retry import RETRY_ARG, Retries, parse_retry_delays
from .routers import ROUTER_TYPES
from .state import ModelState
from .streams import Streams, check_stream_declare, is_stream_args
from .trace import TRACE_EXCHANGE

__all__ = ["Topology"]


class Topology:
    __slots__ = ("state", "pager", "delayed", "retries", "streams", "unused_timers", "on_declared")

    def __init__(self, state: ModelState, pager: Pager, delayed: DelayedExchanges, retries: Retries,
                 streams: Streams) -> None:
        self.state = state
        self.pager = pager
        self.delayed = delayed
        self.retries = retries
        #: told of every new queue or exchange (the model applies policies to it)
        self.on_declared: Callable[[Queue | Exchange], None] | None = None
        self.streams = streams
        #: queues with an ``x-expires`` argument and no consumer -> their expiry timer (kept here so
        #: a Queue needs no slot for it)
        self.unused_timers: dict[Queue, tuple[float, int]] = {}

    def exchange(self, vhost: VHost, name: str) -> Exchange:
        x = vhost.exchanges.get(name)
        if x is None:
            raise NotFound(f"no exchange '{name}' in vhost '{vhost.name}'")
        return x

    def in_use(self, q: Queue) -> None:
        """``q`` got its first consumer: its ``x-expires`` countdown stops."""
        self.state.timers.cancel(self.unused_timers.pop(q, None))

    # -- vhosts and exchanges ------------------------------------------------------------------------
    def add_vhost(self, name: str, persist: bool = True) -> VHost:
        state = self.state
        vhost = state.vhosts.get(name)
        if vhost is not None:
            return vhost
        vhost = state.vhosts[name] = VHost(name)
        if persist:
            state.store.add_vhost(name)
            state.store_write()
        vhost.exchanges[""] = Exchange(vhost, "", "direct", True, False, False, None)
        for xname, xtype in STANDARD_EXCHANGES:
            vhost.exchanges[xname] = Exchange(vhost, xname, xtype, True, False, False, None)
        # the firehose's exchange is in every vhost, as RabbitMQ's; only traced vhosts publish to it
        vhost.exchanges[TRACE_EXCHANGE] = Exchange(vhost, TRACE_EXCHANGE, "topic", True, False, True, None)
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Delete vhost ``name`` with its queues (their consumers cancelled), exchanges and bindings."""
        state = self.state
        vhost = state.vhosts.get(name)
        if vhost is None:
            raise NotFound(f"no vhost '{name}'")
        for q in list(vhost.queues.values()):
            self.delete_queue(q)
        for xname in list(vhost.exchanges):
            if xname and not xname.startswith("amq.") and xname in vhost.exchanges:
                self.delete_exchange(vhost, xname)
        del state.vhosts[name]
        state.store.delete_vhost(name)
        state.store_write()

    def declare_exchange(self, vhost: VHost, name: str, type: str, durable: bool = True,
                         auto_delete: bool = False, internal: bool = False,
                         args: dict[str, Any] | None = None, passive: bool = False) -> Exchange:
        state = self.state
        x = vhost.exchanges.get(name)
        if x is not None:
            if not passive and x.type != type:
                raise PreconditionFailed(f"inequivalent arg 'type' for exchange '{name}'")
            return x
        if passive:
            raise NotFound(f"no exchange '{name}' in vhost '{vhost.name}'")
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if type not in ROUTER_TYPES:
            if type != DELAYED_TYPE:
                raise PreconditionFailed(f"invalid exchange type '{type}'")
            check_delayed_args(args)
        if durable:
            state.store.add_exchange(ExchangeDef(vhost.name, name, type, durable, auto_delete, internal, args))
            state.store_write()
        x = vhost.exchanges[name] = Exchange(vhost, name, type, durable, auto_delete, internal, args)
        if type == DELAYED_TYPE:
            self.delayed.attach(x)
        if self.on_declared is not None:
            self.on_declared(x)
        state.events.exchange_created(x)
        return x

    def delete_exchange(self, vhost: VHost, name: str) -> None:
        state = self.state
        x = vhost.exchanges.get(name)
        if x is None:
            raise NotFound(f"no exchange '{name}' in vhost '{vhost.name}'")
        if name == "" or name.startswith("amq."):
            raise AccessRefused(f"cannot delete exchange '{name}'")
        # out of the vhost first: unbinding its last binding must not auto-delete it a second
        # time, and the cascades below (auto-delete sources) change ``vhost.exchanges``
        del vhost.exchanges[name]
        for dest, key, args in list(x.router.bindings()):
            self.unbind(vhost, dest, x, key, args)
        for other in list(vhost.exchanges.values()):  # bindings where x is the destination
            for dest, key, args in list(other.router.bindings()):
                if dest is x:
                    self.unbind(vhost, x, other, key, args)  # may auto-delete ``other``
        if x.durable:
            state.store.delete_exchange(vhost.name, name)
            state.store_write()
        self.delayed.detach(x)
        state.events.exchange_deleted(x)

    # -- queues ----------------------------------------------------------------------------------
    def declare_queue(self, vhost: VHost, name: str, durable: bool = False, auto_delete: bool = False,
                      exclusive_owner: Any = None, args: dict[str, Any] | None = None,
                      passive: bool = False) -> Queue:
        state = self.state
        q = vhost.queues.get(name)
        if q is not None:
            if q.exclusive_owner is not None and q.exclusive_owner is not exclusive_owner:
                raise ResourceLocked(f"cannot obtain exclusive access to locked queue '{name}'")
            self.touch(q)
            return q
        if passive:
            raise NotFound(f"no queue '{name}' in vhost '{vhost.name}'")
        if name.startswith(HOLDER_PREFIX):  # the store's name for held messages (``holding``)
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        args = check_queue_args(args, name, vhost.name)
        state.limits.queue_refusal(vhost.name, len(vhost.queues), name)
        check_stream_declare(name, vhost.name, durable, exclusive_owner is not None, auto_delete, args)
        check_quorum_declare(name, vhost.name, durable, exclusive_owner is not None, auto_delete, args)
        if args and RETRY_ARG in args:
            parse_retry_delays(args[RETRY_ARG], name, vhost.name)
        if durable:  # store first: a failing store leaves no half-declared queue behind
            state.store.add_queue(QueueDef(vhost.name, name, durable, auto_delete, args or None))
            state.store_write()
        q = vhost.queues[name] = Queue(vhost, name, durable, auto_delete, exclusive_owner, args or None)
        q.quorum = is_quorum_args(args)
        if self.on_declared is not None:
            self.on_declared(q)
        if q.args and "x-expires" in q.args:
            self.arm_unused(q)
        if is_stream_args(args):
            self.streams.open(q)
        if args and RETRY_ARG in args:
            self.retries.attach(q)
        state.events.queue_created(q)
        return q

    def touch(self, q: Queue) -> None:
        """A redeclare counts as use: restart an ``x-expires`` countdown."""
        if q in self.unused_timers:
            self.arm_unused(q)

    def arm_unused(self, q: Queue) -> None:
        """(Re)start the ``x-expires`` countdown of a queue nobody consumes from."""
        self.state.timers.cancel(self.unused_timers.pop(q, None))
        if q.consumers is None and q.args and "x-expires" in q.args:
            ms = q.args["x-expires"]
            self.unused_timers[q] = self.state.timers.add(self.state.now + ms / 1000.0, self._on_unused, q)

    def _on_unused(self, q: Queue, now: float) -> None:
        self.unused_timers.pop(q, None)
        if q.consumers is None:
            self.delete_queue(q)

    def delete_queue(self, q: Queue) -> int:
        """Delete ``q``: its consumers are cancelled, its messages dropped. Returns messages dropped."""
        state = self.state
        vhost = q.vhost
        if vhost.queues.get(q.name) is not q:
            return 0
        del vhost.queues[q.name]
        self.state.timers.cancel(self.unused_timers.pop(q, None))
        bound = list(q.bindings or ())
        for exchange, key, args in bound:
            exchange.router.remove(q, key, args)
        q.bindings = None
        for exchange, _, _ in bound:
            self._auto_delete(exchange)
        for consumer in list(q.consumers or ()):
            for held in (consumer.unacked or {}).values() if not q.stream else ():  # streams hold nothing
                state.forget(q, held)
            consumer.unacked = None
            consumer.owner.consumer_cancelled(consumer)
        q.consumers = None
        state.prio_queues.pop(q, None)
        if q.stream:
            self.streams.close(q)
            for consumer in list(self.streams.readers):
                if consumer.queue is q:
                    self.streams.detach(consumer)
        dropped = self.pager.drop(q, False)
        while (entry := q.pop()) is not None:
            dropped += 1
            state.forget(q, entry)
        if q.durable:
            state.store.delete_queue(vhost.name, q.name)
            state.store_write()
        if self.retries.handles(q):
            self.retries.detach(q)
        state.dirty.pop(q, None)
        state.events.queue_deleted(q)
        return dropped

    def purge(self, q: Queue) -> int:
        state = self.state
        if q.stream:
            raise Unsupported(f"queue.purge not supported by stream queues queue '{q.name}' in vhost "
                              f"'{q.vhost.name}'")
        n = self.pager.drop(q, True)
        while (entry := q.pop()) is not None:
            n += 1
            state.forget(q, entry)
        return n

    # -- bindings ----------------------------------------------------------------------------------
    def bind(self, vhost: VHost, dest: Queue | Exchange, source: Exchange, key: str,
             args: dict[str, Any] | None = None) -> None:
        state = self.state
        if source.name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        if source.router.has(dest, key, args):
            return
        if source.durable and dest.durable:
            state.store.add_binding(BindingDef(vhost.name, source.name, dest.name, isinstance(dest, Exchange), key,
                                               args))
            state.store_write()
        source.router.add(dest, key, args)
        if isinstance(dest, Queue):
            if dest.bindings is None:
                dest.bindings = []
            dest.bindings.append((source, key, args))
        state.events.binding("created", source, dest, key, args)

    def unbind(self, vhost: VHost, dest: Queue | Exchange, source: Exchange, key: str,
               args: dict[str, Any] | None = None) -> None:
        state = self.state
        if not source.router.remove(dest, key, args):
            return
        if isinstance(dest, Queue) and dest.bindings:
            for i, (x, k, a) in enumerate(dest.bindings):
                if x is source and k == key and a == args:
                    del dest.bindings[i]
                    break
            if not dest.bindings:
                dest.bindings = None
        if source.durable and dest.durable:
            state.store.delete_binding(BindingDef(vhost.name, source.name, dest.name, isinstance(dest, Exchange),
                                                  key, args))
            state.store_write()
        state.events.binding("deleted", source, dest, key, args)
        self._auto_delete(source)

    def _auto_delete(self, x: Exchange) -> None:
        """An auto-delete exchange goes when its last binding (as a source) does."""
        if x.auto_delete and x.vhost.exchanges.get(x.name) is x and next(iter(x.router.bindings()), None) is None:
            self.delete_exchange(x.vhost, x.name)
