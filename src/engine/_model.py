"""The protocol-neutral broker model (RabbitMQ's): vhosts, exchanges, queues, bindings, consumers.

Sessions (STOMP now, AMQP later) drive it through a handful of operations — declare, bind, publish,
consume, ack/nack, cancel — and receive deliveries through their ``ConsumerOwner`` interface. The
model never formats a frame. Dispatch is deferred: operations mark queues dirty and the broker calls
``dispatch()`` once per driver call, so delivery order depends only on the order of inputs.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from operator import attrgetter
from typing import Any, Iterable, Protocol

from ._light import AUTO_ACK, LightBuffer, LightConsumer
from ._message import GONE, READY, UNACKED, Entry, Message
from ._routing import ROUTER_TYPES, Router, TopicRouter
from ._timers import TimerQueue
from .store import BindingDef, ExchangeDef, QueueDef, Recovered, Store

__all__ = [
    "Model",
    "VHost",
    "Exchange",
    "Queue",
    "Consumer",
    "ConsumerOwner",
    "ModelError",
    "NotFound",
    "AccessRefused",
    "PreconditionFailed",
    "ResourceLocked",
    "STANDARD_EXCHANGES",
]


class ModelError(Exception):
    """A refused operation; ``code`` follows AMQP reply codes so every protocol can map it."""

    code = 541

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class NotFound(ModelError):
    code = 404


class AccessRefused(ModelError):
    code = 403


class ResourceLocked(ModelError):
    code = 405


class PreconditionFailed(ModelError):
    code = 406


STANDARD_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)


class ConsumerOwner(Protocol):
    """What a session implements to receive deliveries."""

    #: True while the owner's outbound buffer is over its limit: no deliveries then.
    blocked: bool

    def deliver(self, consumer: "Consumer", tag: int, entry: Entry) -> None: ...

    def consumer_cancelled(self, consumer: "Consumer") -> None:
        """The queue went away under the consumer (deleted)."""

    def delivery_timed_out(self, consumer: "Consumer", tag: int) -> None:
        """An ack timeout took ``tag`` back; a late ack for it should be tolerated."""


class Exchange:
    __slots__ = ("vhost", "name", "type", "durable", "auto_delete", "internal", "args", "router")

    def __init__(self, vhost: "VHost", name: str, type: str, durable: bool, auto_delete: bool,
                 internal: bool, args: dict[str, Any] | None) -> None:
        self.vhost = vhost
        self.name = name
        self.type = type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.args = args
        self.router: Router = ROUTER_TYPES[type]()

    def __repr__(self) -> str:
        return f"Exchange({self.name!r}, {self.type})"


class Consumer:
    """One consumer on one queue. Sessions subclass it to add their own fields (keep ``__slots__``)."""

    __slots__ = ("queue", "owner", "prefetch", "auto_ack", "unacked")

    def __init__(self, queue: "Queue", owner: ConsumerOwner, prefetch: int = 0, auto_ack: bool = False) -> None:
        self.queue = queue
        self.owner = owner
        self.prefetch = prefetch  # 0 = unlimited
        self.auto_ack = auto_ack
        #: delivery tag -> entry, in delivery order; None until the first unacked delivery
        self.unacked: dict[int, Entry] | None = None

    def ready(self) -> bool:
        if self.owner.blocked:
            return False
        return not self.prefetch or self.unacked is None or len(self.unacked) < self.prefetch


class _QueueExtras:
    """A queue's rarely used fields, created on first non-default write (idle queues have none)."""

    __slots__ = ("exclusive_owner", "args", "hi", "bindings", "paged_bytes")

    def __init__(self) -> None:
        self.exclusive_owner: Any = None
        self.args: dict[str, Any] | None = None
        self.hi: dict[int, deque[Entry]] | None = None
        self.bindings: list[tuple[Exchange, str, dict[str, Any] | None]] | None = None
        self.paged_bytes = 0


def _extra(name: str, default: Any) -> property:
    """A Queue attribute kept in its ``_QueueExtras`` (read as ``default`` while there is none)."""

    def get(q: "Queue") -> Any:
        x = q._x
        return default if x is None else getattr(x, name)

    def set_(q: "Queue", value: Any) -> None:
        x = q._x
        if x is None:
            if value is None or value == default:
                return
            x = q._x = _QueueExtras()
        setattr(x, name, value)

    return property(get, set_)


_entry_seq = attrgetter("seq")

#: Queue._f bits
_DURABLE = 1
_AUTO_DELETE = 2


class Queue:
    """A queue. Idle queues are small: containers are created on first use and dropped when empty,
    and the rarely used fields (exclusive owner, arguments, priority levels, bindings, paged bytes)
    live in one ``_QueueExtras`` created on first use (an idle queue is 112 bytes).

    Ready messages beyond the model's ``page_window`` live in the store's page for this queue
    (``Store.page_out``/``page_in``); the queue only counts them in ``paged``."""

    __slots__ = ("vhost", "name", "_f", "_q0", "count", "bytes", "consumers", "paged", "_rr", "_x")

    def __init__(self, vhost: "VHost", name: str, durable: bool = False, auto_delete: bool = False,
                 exclusive_owner: Any = None, args: dict[str, Any] | None = None) -> None:
        self.vhost = vhost
        self.name = name
        self._f = (_DURABLE if durable else 0) | (_AUTO_DELETE if auto_delete else 0)
        self._x: _QueueExtras | None = None
        if exclusive_owner is not None or args:
            self._x = _QueueExtras()
            self._x.exclusive_owner = exclusive_owner
            self._x.args = args or None
        self._q0: deque[Entry] | None = None  # priority 0
        #: ready (not unacked, not expired) messages, including the paged ones
        self.count = 0
        #: body bytes of the in-memory ready messages (x-max-length-bytes adds ``paged_bytes``)
        self.bytes = 0
        #: ready messages in the store's page (after every in-memory one of their level)
        self.paged = 0
        self.consumers: list[Consumer] | None = None
        self._rr = 0

    @property
    def durable(self) -> bool:
        return bool(self._f & _DURABLE)

    @durable.setter
    def durable(self, value: bool) -> None:
        self._f = self._f | _DURABLE if value else self._f & ~_DURABLE

    @property
    def auto_delete(self) -> bool:
        return bool(self._f & _AUTO_DELETE)

    @auto_delete.setter
    def auto_delete(self, value: bool) -> None:
        self._f = self._f | _AUTO_DELETE if value else self._f & ~_AUTO_DELETE

    exclusive_owner = _extra("exclusive_owner", None)
    args = _extra("args", None)
    #: priorities 1..9, a deque per used level
    _hi = _extra("hi", None)
    #: bindings to this queue: (exchange, key, args); needed to unbind on delete
    bindings = _extra("bindings", None)
    #: body bytes of the paged ready messages
    paged_bytes = _extra("paged_bytes", 0)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, ready={self.count})"

    # -- ready list ---------------------------------------------------------------------------
    def _level(self, priority: int) -> deque[Entry]:
        if priority <= 0:
            if self._q0 is None:
                self._q0 = deque()
            return self._q0
        if self._hi is None:
            self._hi = {}
        level = self._hi.get(priority)
        if level is None:
            level = self._hi[priority] = deque()
        return level

    def push(self, entry: Entry) -> None:
        self._level(entry.msg.priority).append(entry)
        self.count += 1
        self.bytes += len(entry.msg.body)

    def requeue(self, entry: Entry) -> None:
        """Put a returned entry back at its original position within its priority level (by
        ``seq``): at the head when nothing older is ready (the common case, O(1)), else found by
        bisection. Paged messages all came later than any returned one, so it stays in memory."""
        level = self._level(entry.msg.priority)
        seq = entry.seq
        if not level or level[0].seq > seq:
            level.appendleft(entry)
        elif level[-1].seq < seq:
            level.append(entry)
        else:
            level.insert(bisect_left(level, seq, key=_entry_seq), entry)
        self.count += 1
        self.bytes += len(entry.msg.body)

    def pop(self) -> Entry | None:
        """The next in-memory ready entry (highest priority first, FIFO within a level), skipping gone
        ones. The model refills the window from the page before calling this (``Model._pop``)."""
        while self.count > self.paged:
            level = None
            x = self._x  # the priority levels, read without the property (hot path)
            hi = x.hi if x is not None else None
            if hi:
                for prio in sorted(hi, reverse=True):
                    level = hi[prio]
                    if level:
                        break
                    del hi[prio]
                    level = None
                if not hi:
                    x.hi = None  # type: ignore[union-attr]
            if level is None:
                level = self._q0
            assert level
            entry = level.popleft()
            if entry.state != READY:
                continue  # removed in place (expired) and skipped lazily
            self.count -= 1
            self.bytes -= len(entry.msg.body)
            self._trim()
            return entry
        self._trim()
        return None

    def _trim(self) -> None:
        if self._q0 is not None and not self._q0:
            self._q0 = None
        x = self._x
        if x is not None and x.hi is not None and not any(x.hi.values()):
            x.hi = None

    def drop_gone_heads(self, priority: int) -> None:
        """Free entries removed in place (expired) once they reach the head of their level."""
        if self.count == self.paged:
            self._q0 = self._hi = None
            return
        level = self._q0 if priority <= 0 else (self._hi or {}).get(priority)
        while level and level[0].state != READY:
            level.popleft()
        self._trim()

    def ready_entries(self) -> list[Entry]:
        """The in-memory ready entries in delivery order (the paged ones follow them)."""
        out: list[Entry] = []
        if self._hi:
            for prio in sorted(self._hi, reverse=True):
                out.extend(e for e in self._hi[prio] if e.state == READY)
        if self._q0:
            out.extend(e for e in self._q0 if e.state == READY)
        return out

    def consumer_count(self) -> int:
        return len(self.consumers) if self.consumers else 0

    def unacked_count(self) -> int:
        return sum(len(c.unacked) for c in self.consumers or () if c.unacked)


#: queue arguments holding a non-negative integer (milliseconds, a count or bytes)
_INT_QUEUE_ARGS = ("x-message-ttl", "x-max-length", "x-max-length-bytes", "x-expires", "x-delivery-limit",
                   "x-max-priority", "x-consumer-timeout")
#: RabbitMQ's ceiling for x-max-priority
MAX_PRIORITY = 255
#: x-overflow values (RabbitMQ's): what a full x-max-length queue does with a new message
_OVERFLOW = ("drop-head", "reject-publish", "reject-publish-dlx")


def _check_queue_args(args: dict[str, Any] | None, queue: str = "", vhost: str = "/") -> dict[str, Any] | None:
    """Validate and normalise queue arguments (STOMP hands them over as strings); refusals carry
    RabbitMQ's texts ("invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}")."""
    if not args:
        return None
    out = dict(args)

    def invalid(name: str, reason: str) -> PreconditionFailed:
        return PreconditionFailed(f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {reason}")

    for name in _INT_QUEUE_ARGS:
        if name in out:
            try:
                value = int(out[name])
                if isinstance(out[name], (bool, float)):
                    raise TypeError
            except (TypeError, ValueError):
                raise invalid(name, f'"expected integer, got {amqp_type_name(out[name])}"') from None
            if value < 0:
                raise invalid(name, f"{{value_negative,{value}}}")
            if name == "x-expires" and value == 0:
                raise invalid(name, f"{{value_zero,{value}}}")
            if name == "x-max-priority" and value > MAX_PRIORITY:
                raise invalid(name, f"{{max_value_exceeded,{value}}}")
            out[name] = value
    for name in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        if name in out:
            out[name] = str(out[name])
    if "x-overflow" in out and out["x-overflow"] not in _OVERFLOW:
        raise invalid("x-overflow", "invalid_overflow")
    return out


def amqp_type_name(value: Any) -> str:
    """The AMQP field-table type RabbitMQ names for a decoded value (in its reply texts)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(1 << 31) <= value < (1 << 31) else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _over_limits(q: Queue, args: dict[str, Any], more: int, more_bytes: int) -> bool:
    """Whether ``q`` holding ``more`` further ready messages of ``more_bytes`` would pass its
    x-max-length / x-max-length-bytes (RabbitMQ counts ready messages and their body bytes)."""
    max_len = args.get("x-max-length")
    if max_len is not None and q.count + more > max_len:
        return True
    max_bytes = args.get("x-max-length-bytes")
    return max_bytes is not None and q.bytes + q.paged_bytes + more_bytes > max_bytes


def _pageable(q: Queue) -> bool:
    """Priority queues (``x-max-priority``) keep every ready message in memory: their levels are
    served highest first, which one FIFO page cannot do. Other queues page FIFO; a priority on a
    message in them orders it only within the in-memory window (RabbitMQ ignores it there)."""
    return not (q.args and "x-max-priority" in q.args)


def _consumer_priority(c: Any) -> int:
    return getattr(c, "priority", 0)


def _x_death(previous: Any, queue: str, reason: str, msg: Message, expiration: Any,
             now: float) -> list[dict[str, Any]]:
    """The ``x-death`` header as RabbitMQ writes it: one table per (queue, reason), most recent
    first, each with a count of how often the message died that way."""
    deaths = [d for d in previous if isinstance(d, dict)] if isinstance(previous, list) else []
    count = 1
    for i, d in enumerate(deaths):
        if d.get("queue") == queue and d.get("reason") == reason:
            count = int(d.get("count", 0)) + 1
            del deaths[i]
            break
    keys = [msg.routing_key]
    cc = msg.headers.get("CC")
    if isinstance(cc, list):
        keys.extend(str(k) for k in cc)
    death: dict[str, Any] = {"count": count, "reason": reason, "queue": queue,
                             "time": int(now),  # seconds; AMQP sessions send it as a timestamp
                             "exchange": msg.exchange, "routing-keys": keys}
    if expiration is not None:
        death["original-expiration"] = expiration
    return [death, *deaths]


class VHost:
    __slots__ = ("name", "exchanges", "queues")

    def __init__(self, name: str) -> None:
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}


class Model:
    """All broker state. ``now`` is set by the broker before every operation."""

    def __init__(self, store: Store, timers: TimerQueue) -> None:
        self.store = store
        self.timers = timers
        self.now = 0.0
        self.vhosts: dict[str, VHost] = {}
        self._dirty: dict[Queue, None] = {}
        self._next_tag = 0
        self._next_msg_id = 0
        #: queues with an ``x-expires`` argument and no consumer -> their expiry timer (kept here so
        #: a Queue needs no slot for it)
        self._unused_timers: dict[Queue, tuple[float, int]] = {}
        #: queues with consumers of different priorities (AMQP x-priority); their consumers are
        #: kept sorted, highest first, and dispatch serves the highest ready level first
        self._prio_queues: dict[Queue, None] = {}
        #: writes to a store that needs sync (the broker turns new ones into a sync token)
        self.store_writes = 0
        #: body bytes of every message held in a queue (ready or unacked; light subscriptions
        #: excluded), once per queue: what the broker's memory watermark compares against
        self.queued_bytes = 0
        #: publish operations so far (the broker notes which connections publish)
        self.publishes = 0
        #: most messages a light subscription holds (ready + unacked) before dropping (see _light)
        self.light_limit = 10_000
        #: light subscriptions that dropped messages -> how many; and the total over all of them
        self.light_dropped: dict[LightConsumer, int] = {}
        self.light_dropped_total = 0
        #: ready messages a queue keeps in memory; later arrivals go to the store's page
        #: (``Limits.queue_window``); the window is refilled when it drains below half
        self.page_window = 2048
        #: body bytes of ready messages a queue keeps in memory (at least one message): large
        #: bodies are paged by size, not only by count (``Limits.queue_window_bytes``)
        self.page_window_bytes = 64 * 1024 * 1024

    # -- ids --------------------------------------------------------------------------------------
    def next_message_id(self) -> int:
        self._next_msg_id += 1
        return self._next_msg_id

    def _store_write(self) -> None:
        if self.store.needs_sync:
            self.store_writes += 1

    # -- vhosts and exchanges ------------------------------------------------------------------------
    def add_vhost(self, name: str, persist: bool = True) -> VHost:
        vhost = self.vhosts.get(name)
        if vhost is not None:
            return vhost
        vhost = self.vhosts[name] = VHost(name)
        if persist:
            self.store.add_vhost(name)
            self._store_write()
        vhost.exchanges[""] = Exchange(vhost, "", "direct", True, False, False, None)
        for xname, xtype in STANDARD_EXCHANGES:
            vhost.exchanges[xname] = Exchange(vhost, xname, xtype, True, False, False, None)
        return vhost

    def declare_exchange(self, vhost: VHost, name: str, type: str, durable: bool = True,
                         auto_delete: bool = False, internal: bool = False,
                         args: dict[str, Any] | None = None, passive: bool = False) -> Exchange:
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
            raise PreconditionFailed(f"invalid exchange type '{type}'")
        if durable:
            self.store.add_exchange(ExchangeDef(vhost.name, name, type, durable, auto_delete, internal, args))
            self._store_write()
        x = vhost.exchanges[name] = Exchange(vhost, name, type, durable, auto_delete, internal, args)
        return x

    def delete_exchange(self, vhost: VHost, name: str) -> None:
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
            self.store.delete_exchange(vhost.name, name)
            self._store_write()

    # -- queues ----------------------------------------------------------------------------------
    def declare_queue(self, vhost: VHost, name: str, durable: bool = False, auto_delete: bool = False,
                      exclusive_owner: Any = None, args: dict[str, Any] | None = None,
                      passive: bool = False) -> Queue:
        q = vhost.queues.get(name)
        if q is not None:
            if q.exclusive_owner is not None and q.exclusive_owner is not exclusive_owner:
                raise ResourceLocked(f"cannot obtain exclusive access to locked queue '{name}'")
            self.touch(q)
            return q
        if passive:
            raise NotFound(f"no queue '{name}' in vhost '{vhost.name}'")
        args = _check_queue_args(args, name, vhost.name)
        if durable:  # store first: a failing store leaves no half-declared queue behind
            self.store.add_queue(QueueDef(vhost.name, name, durable, auto_delete, args or None))
            self._store_write()
        q = vhost.queues[name] = Queue(vhost, name, durable, auto_delete, exclusive_owner, args or None)
        if args and "x-expires" in args:
            self._arm_unused(q)
        return q

    def touch(self, q: Queue) -> None:
        """A redeclare counts as use: restart an ``x-expires`` countdown."""
        if q in self._unused_timers:
            self._arm_unused(q)

    def _arm_unused(self, q: Queue) -> None:
        """(Re)start the ``x-expires`` countdown of a queue nobody consumes from."""
        self.timers.cancel(self._unused_timers.pop(q, None))
        if q.consumers is None and q.args and "x-expires" in q.args:
            ms = q.args["x-expires"]
            self._unused_timers[q] = self.timers.add(self.now + ms / 1000.0, self._on_unused, q)

    def _on_unused(self, q: Queue, now: float) -> None:
        self._unused_timers.pop(q, None)
        if q.consumers is None:
            self.delete_queue(q)

    def delete_queue(self, q: Queue) -> int:
        """Delete ``q``: its consumers are cancelled, its messages dropped. Returns messages dropped."""
        vhost = q.vhost
        if vhost.queues.get(q.name) is not q:
            return 0
        del vhost.queues[q.name]
        self.timers.cancel(self._unused_timers.pop(q, None))
        bound = list(q.bindings or ())
        for exchange, key, args in bound:
            exchange.router.remove(q, key, args)
        q.bindings = None
        for exchange, _, _ in bound:
            self._auto_delete(exchange)
        for consumer in list(q.consumers or ()):
            for entry in (consumer.unacked or {}).values():
                self._forget(q, entry)
            consumer.unacked = None
            consumer.owner.consumer_cancelled(consumer)
        q.consumers = None
        self._prio_queues.pop(q, None)
        dropped = self._drop_page(q, False)
        while (entry := q.pop()) is not None:
            dropped += 1
            self._forget(q, entry)
        if q.durable:
            self.store.delete_queue(vhost.name, q.name)
            self._store_write()
        self._dirty.pop(q, None)
        return dropped

    def purge(self, q: Queue) -> int:
        n = self._drop_page(q, True)
        while (entry := q.pop()) is not None:
            n += 1
            self._forget(q, entry)
        return n

    # -- bindings ----------------------------------------------------------------------------------
    def bind(self, vhost: VHost, dest: Queue | Exchange, source: Exchange, key: str,
             args: dict[str, Any] | None = None) -> None:
        if source.name == "":
            raise AccessRefused("operation not permitted on the default exchange")
        if source.router.has(dest, key, args):
            return
        if source.durable and dest.durable:
            self.store.add_binding(BindingDef(vhost.name, source.name, dest.name, isinstance(dest, Exchange), key, args))
            self._store_write()
        source.router.add(dest, key, args)
        if isinstance(dest, Queue):
            if dest.bindings is None:
                dest.bindings = []
            dest.bindings.append((source, key, args))

    def unbind(self, vhost: VHost, dest: Queue | Exchange, source: Exchange, key: str,
               args: dict[str, Any] | None = None) -> None:
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
            self.store.delete_binding(BindingDef(vhost.name, source.name, dest.name, isinstance(dest, Exchange), key, args))
            self._store_write()
        self._auto_delete(source)

    def _auto_delete(self, x: Exchange) -> None:
        """An auto-delete exchange goes when its last binding (as a source) does."""
        if x.auto_delete and x.vhost.exchanges.get(x.name) is x and next(iter(x.router.bindings()), None) is None:
            self.delete_exchange(x.vhost, x.name)

    # -- publishing ----------------------------------------------------------------------------------
    def route(self, vhost: VHost, exchange: Exchange, key: str,
              headers: dict[str, Any] | None) -> list[Queue | LightConsumer]:
        """Queues (and light subscriptions) a message published to ``exchange`` with ``key``
        reaches (exchange-to-exchange bindings followed, each exchange visited once so binding
        cycles terminate)."""
        if exchange.name == "":
            q = vhost.queues.get(key)
            return [q] if q is not None else []
        found: dict[Any, None] = {}
        exchange.router.route(key, headers, found)
        for dest in found:
            if type(dest) is Exchange:
                break
        else:  # no exchange-to-exchange binding reached (the common case): nothing to follow
            return list(found)
        queues: dict[Queue | LightConsumer, None] = {}
        visited = {exchange.name}
        pending = list(found)
        while pending:
            dest = pending.pop(0)
            if isinstance(dest, (Queue, LightConsumer)):
                queues[dest] = None
            elif dest.name not in visited:
                visited.add(dest.name)
                more: dict[Any, None] = {}
                dest.router.route(key, headers, more)
                pending.extend(more)
        return list(queues)

    def publish(self, vhost: VHost, exchange_name: str, msg: Message) -> int:
        """Route and enqueue ``msg``; returns how many queues took it. Raises NotFound."""
        exchange = vhost.exchanges.get(exchange_name)
        if exchange is None:
            raise NotFound(f"no exchange '{exchange_name}' in vhost '{vhost.name}'")
        self.publishes += 1
        queues = self.route(vhost, exchange, msg.routing_key, msg.headers)
        for q in queues:
            self.enqueue(q, msg)
        return len(queues)

    def enqueue(self, q: Queue | LightConsumer, msg: Message, count: int = 0, persist: bool = True,
                queue_expires: float | None = None, resident: bool = False) -> bool:
        """Append ``msg`` to ``q``. ``persist=False`` is recovery: nothing is written back, and the
        queue's expiry of the message is the stored one (``queue_expires``). ``resident``: keep it in
        memory even past the window (recovery, when the store already paged the rest). False when a
        full queue with ``x-overflow`` reject-publish(-dlx) refused the message (AMQP confirms nack it)."""
        if isinstance(q, LightConsumer):
            self._light_enqueue(q, msg)
            return True
        expires = msg.expires_at
        args = q.args
        if args and persist and "x-overflow" in args and args["x-overflow"] != "drop-head":
            if _over_limits(q, args, 1, len(msg.body)):
                if args["x-overflow"] == "reject-publish-dlx":
                    self._dead_letter(q, Entry(msg, count), "maxlen")
                return False
        if args:
            cap = args.get("x-max-priority")
            if cap is not None and msg.priority > cap:  # RabbitMQ: above the maximum counts as it
                msg = Message(msg.id, msg.exchange, msg.routing_key, msg.headers, msg.body, cap,
                              msg.expires_at, msg.persistent, msg.ack_timeout)
            if persist:
                ttl = args.get("x-message-ttl")
                if ttl is not None:
                    qexp = self.now + ttl / 1000.0
                    expires = qexp if expires is None else min(expires, qexp)
        if not persist and queue_expires is not None:
            expires = queue_expires  # recovered with this queue's own (x-message-ttl) expiry
        stored = msg.persistent and q.durable
        if persist and stored:
            if expires is not None and expires != msg.expires_at:
                self.store.enqueue_expiring(q.vhost.name, q.name, msg, expires)
            else:
                self.store.enqueue(q.vhost.name, q.name, msg)
            self._store_write()
        if expires is not None and expires <= self.now:
            self.queued_bytes += len(msg.body)  # _forget takes it off again
            self._expire(q, Entry(msg, count, expires))
            return True
        if q.paged or (not resident and (q.count - q.paged >= self.page_window or (
                q.count > q.paged and q.bytes + len(msg.body) > self.page_window_bytes)) and _pageable(q)):
            self.store.page_out(q.vhost.name, q.name, msg, count, expires, stored)
            q.paged += 1
            q.count += 1
            q.paged_bytes += len(msg.body)
        else:
            entry = Entry(msg, count, expires)
            q.push(entry)
            self.queued_bytes += len(msg.body)  # in memory: counts towards the memory alarm
            if expires is not None:
                entry.timer = self.timers.add(expires, self._on_expiry, (q, entry))
        if args and ("x-max-length" in args or "x-max-length-bytes" in args):
            while _over_limits(q, args, 0, 0):  # drop-head (reject-publish never gets here over)
                head = self._pop(q)
                if head is None:
                    break
                self._remove_ready(q, head, "maxlen")
        self._dirty[q] = None
        return True

    # -- consuming ---------------------------------------------------------------------------------
    def consume(self, q: Queue, consumer: Consumer, priority: int = 0) -> Consumer:
        """Add ``consumer``; a non-zero ``priority`` (kept in the consumer's ``priority``
        attribute) makes the queue serve higher-priority ready consumers first."""
        if q.exclusive_owner is not None and q.exclusive_owner is not consumer.owner:
            raise ResourceLocked(f"queue '{q.name}' is exclusive to another connection")
        if q.consumers is None:
            q.consumers = [consumer]  # sized exactly: most queues have one consumer
            self.timers.cancel(self._unused_timers.pop(q, None))
        else:
            q.consumers.append(consumer)
        if priority or q in self._prio_queues:
            self._prio_queues[q] = None
            q.consumers.sort(key=_consumer_priority, reverse=True)  # stable: arrival order kept
        self._dirty[q] = None
        return consumer

    def get(self, q: Queue, holder: Consumer) -> tuple[int, Entry] | None:
        """Take the next ready message of ``q`` for a one-off fetch (AMQP basic.get). ``holder`` is
        a consumer not registered on the queue: the delivery is unacked in it unless it auto-acks.
        Returns ``(tag, entry)`` or None when nothing is ready."""
        now = self.now
        while (entry := self._pop(q)) is not None:
            tag = self._hand_out(q, entry, holder, now, arm_ack_timeout=False)
            if tag is not None:
                return tag, entry
        return None

    def _hand_out(self, q: Queue, entry: Entry, holder: Consumer, now: float, arm_ack_timeout: bool) -> int | None:
        """Give an entry just popped from ``q`` to ``holder``: its delivery tag, or None when it had
        expired (then it is dead-lettered here). Unacked in ``holder`` unless that auto-acks; the
        message's own ack timeout is armed for consumers (``dispatch``), not for ``get``."""
        if entry.timer is not None:
            self.timers.cancel(entry.timer)
            entry.timer = None
        if entry.expires is not None and entry.expires <= now:
            self._expire(q, entry)
            return None
        self._next_tag += 1
        tag = self._next_tag
        if holder.auto_ack:
            self._forget(q, entry)
        else:
            entry.state = UNACKED
            if holder.unacked is None:
                holder.unacked = {}
            holder.unacked[tag] = entry
            if arm_ack_timeout and entry.msg.ack_timeout is not None:
                entry.timer = self.timers.add(now + entry.msg.ack_timeout, self._on_ack_timeout, (holder, tag))
        return tag

    def cancel(self, consumer: Consumer | LightConsumer, requeue: bool = True,
               keep_unacked: bool = False) -> None:
        """Remove the consumer; its unacked messages go back in delivery order (``keep_unacked``:
        they stay with it, to be acked or returned later, as AMQP's basic.cancel leaves them). An
        auto-delete queue whose last consumer this was is deleted. A light subscription is unbound
        and its messages dropped (its queue would be auto-deleted)."""
        if isinstance(consumer, LightConsumer):
            self._light_cancel(consumer)
            return
        q = consumer.queue
        if q.consumers and consumer in q.consumers:
            q.consumers.remove(consumer)
            if not q.consumers:
                q.consumers = None
                q._rr = 0
                self._prio_queues.pop(q, None)
        if not keep_unacked:
            self.return_unacked(consumer, requeue)
        if q.consumers is None:
            if q.auto_delete:
                self.delete_queue(q)
            elif q.args and "x-expires" in q.args:
                self._arm_unused(q)

    def return_unacked(self, consumer: Consumer, requeue: bool = True) -> None:
        unacked = consumer.unacked
        consumer.unacked = None
        if not unacked:
            return
        q = consumer.queue
        for entry in reversed(list(unacked.values())):  # newest first: each goes back at the head
            self._return(q, entry, requeue)

    def ack(self, consumer: Consumer, tag: int, multiple: bool = False) -> bool:
        """Ack ``tag`` (and every earlier one of this consumer if ``multiple``). False if unknown."""
        taken = self._take(consumer, tag, multiple)
        if taken is None:
            return False
        for entry in taken:
            self._forget(consumer.queue, entry)
        return True

    def nack(self, consumer: Consumer, tag: int, multiple: bool = False, requeue: bool = True) -> bool:
        taken = self._take(consumer, tag, multiple)
        if taken is None:
            return False
        q = consumer.queue
        for entry in reversed(taken):
            self._return(q, entry, requeue)
        return True

    def has_tag(self, consumer: Consumer, tag: int) -> bool:
        return consumer.unacked is not None and tag in consumer.unacked

    def _take(self, consumer: Consumer, tag: int, multiple: bool) -> list[Entry] | None:
        unacked = consumer.unacked
        if unacked is None or tag not in unacked:
            return None
        if not multiple:
            taken = [unacked.pop(tag)]
        else:
            taken = []
            for t in list(unacked):
                taken.append(unacked.pop(t))
                if t == tag:
                    break
        if not unacked:
            consumer.unacked = None
        for entry in taken:
            if entry.timer is not None:
                self.timers.cancel(entry.timer)
                entry.timer = None
        self._dirty[consumer.queue] = None  # prefetch window opened
        return taken

    def _return(self, q: Queue, entry: Entry, requeue: bool) -> None:
        if entry.timer is not None:
            self.timers.cancel(entry.timer)
            entry.timer = None
        if not requeue:
            self._remove_unacked(q, entry, "rejected")
            return
        if isinstance(q, LightConsumer):
            self._light_return(q, entry)
            return
        if q.vhost.queues.get(q.name) is not q:  # queue deleted meanwhile
            if entry.state != GONE:
                self.queued_bytes -= len(entry.msg.body)
                entry.state = GONE
            return
        entry.count += 1
        limit = q.args.get("x-delivery-limit") if q.args else None
        if limit is not None and entry.count > limit:
            self._remove_unacked(q, entry, "delivery_limit")
            return
        entry.state = READY
        if entry.msg.persistent and q.durable:
            self.store.update_delivery(q.vhost.name, q.name, entry.msg.id, entry.count)
            self._store_write()
        if entry.expires is not None:
            if entry.expires <= self.now:
                self._expire(q, entry)
                return
            entry.timer = self.timers.add(entry.expires, self._on_expiry, (q, entry))
        q.requeue(entry)
        self._dirty[q] = None

    # -- paging -----------------------------------------------------------------------------------
    def _pop(self, q: Queue) -> Entry | None:
        """``q.pop()`` after refilling the in-memory window from the page when it ran low."""
        if q.paged and (q.count == q.paged or (q.count - q.paged < self.page_window // 2
                                               and q.bytes < self.page_window_bytes // 2)):
            self._page_in(q)
            while q.paged and q.count == q.paged:  # everything paged in had expired: next batch
                self._page_in(q)
        return q.pop()

    def _page_in(self, q: Queue) -> None:
        """Bring the next paged messages into memory, in order, up to the window. Expiry of paged
        messages is checked here (RabbitMQ, too, only expires messages at the head)."""
        want = self.page_window - (q.count - q.paged)
        if q.paged_bytes:  # as many as fit the byte window at the paged messages' average size
            want = min(want, (self.page_window_bytes - q.bytes) * q.paged // q.paged_bytes)
        want = max(1, want)
        items, consumed = self.store.page_in(q.vhost.name, q.name, want)
        if not consumed:  # the store has nothing left: do not count phantoms
            consumed = q.paged
        consumed = min(consumed, q.paged)
        q.paged -= consumed
        q.count -= consumed  # the live ones are counted again by push()
        q.paged_bytes = max(0, q.paged_bytes - sum(len(m.body) for m, _, _ in items)) if q.paged else 0
        now = self.now
        for msg, count, expires in items:
            entry = Entry(msg, count, expires)
            self.queued_bytes += len(msg.body)  # in memory now; _forget takes it off
            if expires is not None and expires <= now:
                self._expire(q, entry)
                continue
            q.push(entry)
            if expires is not None:
                entry.timer = self.timers.add(expires, self._on_expiry, (q, entry))

    def _drop_page(self, q: Queue, forget_stored: bool) -> int:
        """Forget every paged message of ``q`` (purge, delete); returns how many."""
        n = q.paged
        if n:
            self.store.page_drop(q.vhost.name, q.name, forget_stored)
            if forget_stored and q.durable:
                self._store_write()
            q.paged = 0
            q.paged_bytes = 0
            q.count -= n
        return n

    def paged_messages(self, q: Queue) -> list[Message]:
        """The paged messages of ``q`` in order (reads them all back: for inspection and tests)."""
        return [m for m, _, _ in self.store.paged(q.vhost.name, q.name)]

    # -- dispatch ---------------------------------------------------------------------------------
    def mark_dirty(self, q: Queue) -> None:
        self._dirty[q] = None

    def owner_unblocked(self, consumers: Iterable[Consumer]) -> None:
        for c in consumers:
            self._dirty[c.queue] = None

    def dispatch(self) -> None:
        """Deliver what can be delivered on every queue touched since the last call."""
        while self._dirty:
            q = next(iter(self._dirty))
            del self._dirty[q]
            if isinstance(q, LightConsumer):
                self._light_dispatch(q)
            else:
                self._dispatch_queue(q)

    def _dispatch_queue(self, q: Queue) -> None:
        now = self.now
        # x-single-active-consumer: only the first registered consumer gets messages
        single = q.args is not None and q.args.get("x-single-active-consumer") is True
        prioritised = q in self._prio_queues
        while q.count and q.consumers:
            consumers = q.consumers
            n = 1 if single else len(consumers)
            chosen = None
            if prioritised and not single:
                chosen = self._pick_prioritised(q, consumers)
            else:
                start = 0 if single else q._rr
                for i in range(n):
                    idx = (start + i) % n
                    c = consumers[idx]
                    if c.ready():
                        chosen = c
                        q._rr = idx + 1  # not reduced mod n: a consumer added later is next in line
                        break
            if chosen is None:
                return
            entry = self._pop(q)
            if entry is None:
                return
            tag = self._hand_out(q, entry, chosen, now, arm_ack_timeout=True)
            if tag is not None:
                chosen.owner.deliver(chosen, tag, entry)

    @staticmethod
    def _pick_prioritised(q: Queue, consumers: list[Consumer]) -> Consumer | None:
        """Round-robin among the ready consumers of the highest priority that has one."""
        i, n = 0, len(consumers)
        while i < n:
            level = _consumer_priority(consumers[i])
            j = i
            while j < n and _consumer_priority(consumers[j]) == level:
                j += 1
            size = j - i
            for k in range(size):
                c = consumers[i + (q._rr + k) % size]
                if c.ready():
                    q._rr += k + 1
                    return c
            i = j
        return None

    # -- light subscriptions (see _light) ----------------------------------------------------------
    @staticmethod
    def supports_light(exchange: Exchange) -> bool:
        """Whether light subscriptions can bind to ``exchange`` (topic routers index them)."""
        return isinstance(exchange.router, TopicRouter)

    def bind_light(self, sub: LightConsumer) -> None:
        router = sub.exchange.router
        assert isinstance(router, TopicRouter)
        router.add_light(sub, sub.key, sub.prefix)

    def _light_cancel(self, sub: LightConsumer) -> None:
        router = sub.exchange.router
        if isinstance(router, TopicRouter):  # the exchange may have been deleted meanwhile
            router.remove_light(sub, sub.key, sub.prefix)
        buf = sub.buf
        sub.buf = None
        self._dirty.pop(sub, None)  # type: ignore[call-overload]
        self.light_dropped.pop(sub, None)
        if buf is None:
            return
        for entry in buf.ready:
            self._light_discard(entry)
        for entry in (buf.unacked or {}).values():
            self._light_discard(entry)

    def _light_discard(self, entry: Entry) -> None:
        entry.state = GONE
        if entry.timer is not None:
            self.timers.cancel(entry.timer)
            entry.timer = None

    def _light_enqueue(self, sub: LightConsumer, msg: Message) -> None:
        expires = msg.expires_at
        if expires is not None and expires <= self.now:
            return
        buf = sub.buf
        if buf is None:
            buf = sub.buf = LightBuffer()
        elif buf.held() >= self.light_limit:
            self.light_dropped[sub] = self.light_dropped.get(sub, 0) + 1
            self.light_dropped_total += 1
            if not buf.ready:
                return  # everything held is an unacked delivery: drop the newcomer
            self._light_discard(buf.ready.popleft())  # drop-head
        entry = Entry(msg, 0, expires)
        buf.push(entry)
        if expires is not None:
            entry.timer = self.timers.add(expires, self._on_light_expiry, (sub, entry))
        self._dirty[sub] = None  # type: ignore[index]

    def _on_light_expiry(self, arg: tuple[LightConsumer, Entry], now: float) -> None:
        sub, entry = arg
        entry.timer = None
        if entry.state != READY or sub.buf is None:
            return
        entry.state = GONE  # left in place; skipped by dispatch, freed once it reaches the head
        ready = sub.buf.ready
        while ready and ready[0].state != READY:
            ready.popleft()
        sub.trim()

    def _light_return(self, sub: LightConsumer, entry: Entry) -> None:
        """A nacked or timed-out delivery goes back to its original position (it was taken out
        of ``unacked`` already)."""
        entry.count += 1
        if entry.expires is not None and entry.expires <= self.now:
            entry.state = GONE
            sub.trim()
            return
        entry.state = READY
        if sub.buf is None:
            sub.buf = LightBuffer()
        sub.buf.requeue(entry)
        if entry.expires is not None:
            entry.timer = self.timers.add(entry.expires, self._on_light_expiry, (sub, entry))
        self._dirty[sub] = None  # type: ignore[index]

    def _light_dispatch(self, sub: LightConsumer) -> None:
        now = self.now
        buf = sub.buf
        while buf is not None and buf.ready and sub.ready():
            entry = buf.ready.popleft()
            if entry.state != READY:
                continue  # expired in place
            if entry.timer is not None:
                self.timers.cancel(entry.timer)
                entry.timer = None
            if entry.expires is not None and entry.expires <= now:
                entry.state = GONE
                continue
            self._next_tag += 1
            tag = self._next_tag
            if sub.flags & AUTO_ACK:
                entry.state = GONE
            else:
                entry.state = UNACKED
                if buf.unacked is None:
                    buf.unacked = {}
                buf.unacked[tag] = entry
                if entry.msg.ack_timeout is not None:
                    entry.timer = self.timers.add(now + entry.msg.ack_timeout, self._on_ack_timeout, (sub, tag))
            sub.owner.deliver(sub, tag, entry)  # type: ignore[arg-type]
            buf = sub.buf  # the owner may have gone (and cancelled us) while delivering
        sub.trim()

    # -- leaving a queue ---------------------------------------------------------------------------
    def _forget(self, q: Queue, entry: Entry) -> None:
        if entry.state != GONE and not isinstance(q, LightConsumer):
            self.queued_bytes -= len(entry.msg.body)
        entry.state = GONE
        if entry.timer is not None:
            self.timers.cancel(entry.timer)
            entry.timer = None
        if entry.msg.persistent and q.durable:
            self.store.remove(q.vhost.name, q.name, entry.msg.id)
            self._store_write()

    def _remove_ready(self, q: Queue, entry: Entry, reason: str) -> None:
        self._forget(q, entry)
        self._dead_letter(q, entry, reason)

    def _remove_unacked(self, q: Queue, entry: Entry, reason: str) -> None:
        self._forget(q, entry)
        self._dead_letter(q, entry, reason)

    def _expire(self, q: Queue, entry: Entry) -> None:
        self._forget(q, entry)
        self._dead_letter(q, entry, "expired")

    def _on_expiry(self, arg: tuple[Queue, Entry], now: float) -> None:
        q, entry = arg
        entry.timer = None
        if entry.state == READY:
            q.count -= 1  # the entry stays in its deque, marked gone, and is skipped by pop()
            q.bytes -= len(entry.msg.body)
            self._expire(q, entry)
            q.drop_gone_heads(entry.msg.priority)

    def _on_ack_timeout(self, arg: tuple[Consumer, int], now: float) -> None:
        consumer, tag = arg
        unacked = consumer.unacked
        if unacked is None or tag not in unacked:
            return
        entry = unacked.pop(tag)
        entry.timer = None
        if not unacked:
            consumer.unacked = None
        consumer.owner.delivery_timed_out(consumer, tag)
        self._return(consumer.queue, entry, True)

    def _dead_letter(self, q: Queue, entry: Entry, reason: str) -> None:
        args = q.args
        if not args or "x-dead-letter-exchange" not in args:
            return
        vhost = q.vhost
        dlx = vhost.exchanges.get(str(args["x-dead-letter-exchange"]))
        if dlx is None:
            return
        msg = entry.msg
        headers = dict(msg.headers)
        if "x-first-death-reason" not in headers:
            headers["x-first-death-reason"] = reason
            headers["x-first-death-queue"] = q.name
            headers["x-first-death-exchange"] = msg.exchange
        headers["x-last-death-reason"] = reason
        headers["x-last-death-queue"] = q.name
        headers["x-last-death-exchange"] = msg.exchange
        key = str(args.get("x-dead-letter-routing-key", msg.routing_key))
        # per-message expiry does not survive dead-lettering (RabbitMQ removes the expiration)
        expiration = headers.pop("expiration", None)
        headers["x-death"] = _x_death(headers.get("x-death"), q.name, reason, msg, expiration, self.now)
        dead = Message(self.next_message_id(), dlx.name, key, headers, msg.body, msg.priority,
                       None, msg.persistent, msg.ack_timeout)
        for target in self.route(vhost, dlx, key, headers):
            if target is q and reason == "expired":
                continue  # a cycle that would expire the message forever
            self.enqueue(target, dead)

    # -- recovery -------------------------------------------------------------------------------
    def restore(self, rec: Recovered) -> None:
        """Rebuild durable state read back from the store (without writing it again)."""
        for name in rec.vhosts:
            self.add_vhost(name, persist=False)
        for xd in rec.exchanges:
            vhost = self.add_vhost(xd.vhost, persist=False)
            if xd.name not in vhost.exchanges:
                vhost.exchanges[xd.name] = Exchange(vhost, xd.name, xd.type, xd.durable, xd.auto_delete, xd.internal, xd.args)
        for qd in rec.queues:
            vhost = self.add_vhost(qd.vhost, persist=False)
            if qd.name not in vhost.queues:
                vhost.queues[qd.name] = Queue(vhost, qd.name, qd.durable, qd.auto_delete, None, qd.args)
        for bd in rec.bindings:
            vhost = self.vhosts.get(bd.vhost)
            if vhost is None:
                continue
            source = vhost.exchanges.get(bd.source)
            dest = vhost.exchanges.get(bd.dest) if bd.dest_is_exchange else vhost.queues.get(bd.dest)
            if source is None or dest is None:
                continue
            if source.router.add(dest, bd.key, bd.args) and isinstance(dest, Queue):
                if dest.bindings is None:
                    dest.bindings = []
                dest.bindings.append((source, bd.key, bd.args))
        max_id = self._next_msg_id
        for (vname, qname), stored in rec.messages.items():
            vhost = self.vhosts.get(vname)
            q = vhost.queues.get(qname) if vhost else None
            if q is None:
                continue
            paged = rec.paged.get((vname, qname), 0)
            for sm in stored:
                max_id = max(max_id, sm.message.id)
                self.enqueue(q, sm.message, sm.delivery_count, persist=False, queue_expires=sm.expires,
                             resident=bool(paged))
            q.paged += paged  # already in the store's page, after the messages materialised above
            q.count += paged
        for (vname, qname), paged in rec.paged.items():
            if (vname, qname) not in rec.messages:
                vhost = self.vhosts.get(vname)
                q = vhost.queues.get(qname) if vhost else None
                if q is not None:
                    q.paged += paged
                    q.count += paged
        max_id = max(max_id, rec.max_message_id)
        self._next_msg_id = max_id
