"""The model's objects, at the bottom of its layers: vhosts, exchanges, queues, consumers and the
queue arguments they obey. Nothing here calls upward: operations on them live in the layers above
(``topology``, ``publish``, ``delivery``)."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Mapping
from decimal import Decimal
from operator import attrgetter
from typing import Any, Protocol

from .._message import READY, Entry
from .._mypyc import interpreted_class, mypyc_attr
from .errors import PreconditionFailed
from .origin import session_origin
from .routers import Router, router_for

__all__ = [
    "VHost",
    "Exchange",
    "Queue",
    "Consumer",
    "ConsumerOwner",
    "STANDARD_EXCHANGES",
    "MAX_PRIORITY",
    "check_queue_args",
    "queue_type_of",
    "DEAD_LETTER_STRATEGIES",
    "amqp_type_name",
    "inequivalent",
    "term",
    "over_limits",
    "pageable",
    "consumer_priority",
    "STREAM_FLAG",
    "QUORUM_FLAG",
]


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

    def deliver(self, consumer: Consumer, tag: int, entry: Entry) -> None: ...

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue went away under the consumer (deleted)."""

    def delivery_timed_out(self, consumer: Consumer, tag: int) -> None:
        """An ack timeout took ``tag`` back; a late ack for it should be tolerated."""


class Exchange:
    __slots__ = ("vhost", "name", "type", "durable", "auto_delete", "internal", "args", "router", "policy",
                 "alternate")

    def __init__(self, vhost: VHost, name: str, type: str, durable: bool, auto_delete: bool,
                 internal: bool, args: dict[str, Any] | None) -> None:
        self.vhost = vhost
        self.name = name
        self.type = type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.args = args
        self.router: Router = router_for(type, args)
        #: the name of the policy that applies (engine.model.policies), None when none does
        self.policy: str | None = None
        #: where unroutable messages go: the alternate-exchange argument, else the policy's
        self.alternate: str | None = str(args["alternate-exchange"]) if args and "alternate-exchange" in args else None

    def __repr__(self) -> str:
        return f"Exchange({self.name!r}, {self.type})"


@mypyc_attr(allow_interpreted_subclasses=True)  # sessions, the simulator and tests extend it
class Consumer:
    """One consumer on one queue. Sessions subclass it to add their own fields (keep ``__slots__``)."""

    __slots__ = ("queue", "owner", "prefetch", "auto_ack", "unacked")

    def __init__(self, queue: Queue, owner: ConsumerOwner, prefetch: int = 0, auto_ack: bool = False) -> None:
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

    def trace_origin(self) -> tuple[str, str, int]:
        """(user, connection, channel) for the firehose's deliver trace: the owning session's user
        and address (a STOMP subscription's; AMQP consumers override it with their channel)."""
        return session_origin(self.owner)


class _QueueExtras:
    """A queue's rarely used fields, created on first non-default write (idle queues have none)."""

    __slots__ = ("exclusive_owner", "args", "hi", "bindings", "paged_bytes", "declared", "policy",
                 "published", "delivered", "redelivered", "acked", "leader")

    def __init__(self) -> None:
        self.exclusive_owner: Any = None
        #: the effective arguments: the declared ones combined with the policy that applies
        self.args: dict[str, Any] | None = None
        #: the declared arguments while a policy applies (``args`` are the declared ones otherwise)
        self.declared: dict[str, Any] | None = None
        #: the name of the policy that applies
        self.policy: str | None = None
        self.hi: dict[int, deque[Entry]] | None = None
        self.bindings: list[tuple[Exchange, str, dict[str, Any] | None]] | None = None
        self.paged_bytes = 0
        # the queue's message counters (management's per-queue rates sample them): plain integers,
        # here so that an idle queue stays as small as it was
        self.published = 0
        self.delivered = 0
        self.redelivered = 0
        self.acked = 0
        #: in a cluster, the node leading this queue when it is not this one (engine.cluster)
        self.leader: str | None = None


def extras(q: Queue) -> _QueueExtras:
    """``q``'s extras, created on first use (hot paths write ``(q._x or extras(q)).field``)."""
    x = q._x
    if x is None:
        x = q._x = _QueueExtras()
    return x


def _extra(name: str, default: Any) -> property:
    """A Queue attribute kept in its ``_QueueExtras`` (read as ``default`` while there is none)."""

    def get(q: Queue) -> Any:
        x = q._x
        return default if x is None else getattr(x, name)

    def set_(q: Queue, value: Any) -> None:
        x = q._x
        if x is None:
            if value is None or value == default:
                return
            x = q._x = _QueueExtras()
        setattr(x, name, value)

    return property(get, set_)


_entry_seq = attrgetter("seq")


def _flag(bit: int, doc: str) -> property:
    """A Queue attribute kept as one bit of its ``_f``."""

    def get(q: Queue) -> bool:
        return bool(q._f & bit)

    def set_(q: Queue, value: bool) -> None:
        q._f = q._f | bit if value else q._f & ~bit

    return property(get, set_, doc=doc)


#: Queue._f bits
_DURABLE = 1
_AUTO_DELETE = 2
#: a stream queue (read on the publish path without the property)
STREAM_FLAG = 4
#: a quorum queue (``x-queue-type: quorum``; model.quorum): read where persistence is decided
QUORUM_FLAG = 8


# plain Python: its flags and extras are properties made by _flag/_extra (class-level descriptors)
@interpreted_class
class Queue:
    """A queue. Idle queues are small: containers are created on first use and dropped when empty,
    and the rarely used fields (exclusive owner, arguments, priority levels, bindings, paged bytes)
    live in one ``_QueueExtras`` created on first use (an idle queue is 112 bytes).

    Ready messages beyond the model's ``page_window`` live in the store's page for this queue
    (``Store.page_out``/``page_in``); the queue only counts them in ``paged``."""

    __slots__ = ("vhost", "name", "_f", "_q0", "count", "bytes", "consumers", "paged", "_rr", "_x")

    def __init__(self, vhost: VHost, name: str, durable: bool = False, auto_delete: bool = False,
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
        #: None, a 1-tuple (most queues: 32 bytes less than a list), or a list from the second on
        self.consumers: tuple[Consumer] | list[Consumer] | None = None
        self._rr = 0

    durable = _flag(_DURABLE, "A durable queue: its definition and persistent messages are stored.")
    auto_delete = _flag(_AUTO_DELETE, "Deleted when its last consumer goes.")
    stream = _flag(STREAM_FLAG, "A stream queue (``x-queue-type: stream``): its messages live in a stream log "
                   "(model.streams).")
    quorum = _flag(QUORUM_FLAG, "A quorum queue (``x-queue-type: quorum``; model.quorum): durable, every message "
                   "stored, a delivery limit.")

    def stores(self, persistent: bool) -> bool:
        """Whether a message (persistent or not) in this queue is kept in the store: a persistent
        one in a durable queue, and every one in a quorum queue (RabbitMQ's quorum queues log all
        messages, whatever their delivery mode)."""
        return (persistent and bool(self._f & _DURABLE)) or bool(self._f & QUORUM_FLAG)

    exclusive_owner = _extra("exclusive_owner", None)
    #: effective arguments (declared ones combined with the policy's); every layer reads these
    args = _extra("args", None)
    #: the name of the policy that applies (engine.model.policies), None when none does
    policy = _extra("policy", None)
    _declared = _extra("declared", None)
    #: priorities 1..9, a deque per used level
    _hi = _extra("hi", None)
    #: bindings to this queue: (exchange, key, args); needed to unbind on delete
    bindings = _extra("bindings", None)
    #: body bytes of the paged ready messages
    paged_bytes = _extra("paged_bytes", 0)
    #: the cluster node leading this queue when another node does (None: this one)
    leader = _extra("leader", None)

    @property
    def declared_args(self) -> dict[str, Any] | None:
        """The arguments the queue was declared with (what equivalence checks and the store see)."""
        return self._declared if self.policy is not None else self.args

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
                   "x-max-priority", "x-consumer-timeout", "x-quorum-initial-group-size")
#: integer arguments RabbitMQ refuses at 0 too
_POSITIVE_QUEUE_ARGS = ("x-expires", "x-quorum-initial-group-size")
#: x-dead-letter-strategy values (quorum queues)
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
#: RabbitMQ's ceiling for x-max-priority
MAX_PRIORITY = 255
#: x-overflow values (RabbitMQ's): what a full x-max-length queue does with a new message
_OVERFLOW = ("drop-head", "reject-publish", "reject-publish-dlx")


def check_queue_args(args: dict[str, Any] | None, queue: str = "", vhost: str = "/") -> dict[str, Any] | None:
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
                if isinstance(out[name], (bool, float, Decimal)):  # RabbitMQ: "expected integer, got decimal"
                    raise TypeError
            except (TypeError, ValueError):
                raise invalid(name, f'"expected integer, got {amqp_type_name(out[name])}"') from None
            # a quorum queue's negative x-delivery-limit means none (RabbitMQ 4's -1)
            if value < 0 and not (name == "x-delivery-limit" and queue_type_of(out) == "quorum"):
                raise invalid(name, f"{{value_negative,{value}}}")
            if name in _POSITIVE_QUEUE_ARGS and value == 0:
                raise invalid(name, f"{{value_zero,{value}}}")
            if name == "x-max-priority" and value > MAX_PRIORITY:
                raise invalid(name, f"{{max_value_exceeded,{value}}}")
            out[name] = value
    for name in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        if name in out:
            out[name] = str(out[name])
    if "x-overflow" in out and out["x-overflow"] not in _OVERFLOW:
        raise invalid("x-overflow", "invalid_overflow")
    if "x-dead-letter-strategy" in out and out["x-dead-letter-strategy"] not in DEAD_LETTER_STRATEGIES:
        raise invalid("x-dead-letter-strategy", "invalid_dlx_strategy")
    for name, known in LOCATORS.items():  # where a cluster places the queue's leader
        if name in out and out[name] not in known:
            raise invalid(name, f'{{unknown_locator,"{out[name]}"}}')
    return out


#: queue leader locators (RabbitMQ's; the legacy master ones: min-masters and random mean balanced)
LOCATORS = {"x-queue-leader-locator": ("client-local", "balanced"),
            "x-queue-master-locator": ("client-local", "min-masters", "random")}


def queue_type_of(args: Mapping[str, Any] | None) -> str:
    """The queue type (``classic``, ``quorum``, ``stream``) that declare arguments ask for."""
    kind = args.get("x-queue-type") if args else None
    if kind is None:
        return "classic"
    if isinstance(kind, (bytes, bytearray)):
        kind = bytes(kind).decode("utf-8", "replace")
    return str(kind)


def amqp_type_name(value: Any) -> str:
    """The AMQP field-table type RabbitMQ names for a decoded value (in its reply texts)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(1 << 31) <= value < (1 << 31) else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def inequivalent(key: str, kind: str, name: str, vhost: str, theirs: Any, ours: Any) -> str:
    """RabbitMQ's text for a redeclare whose argument ``key`` differs."""
    def val(v: Any) -> str:
        return "none" if v is None else f"the value '{term(v)}' of type '{amqp_type_name(v)}'"

    head = f"inequivalent arg '{key}' for {kind} '{name}' in vhost '{vhost}': received "
    if theirs is None or ours is None:
        return f"{head}{val(theirs)} but current is {val(ours)}"
    return f"{head}'{term(theirs)}' but current is '{term(ours)}'"


def term(value: Any) -> str:
    """A value as RabbitMQ prints it in a reply text (booleans as Erlang atoms)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def over_limits(q: Queue, args: dict[str, Any], more: int, more_bytes: int) -> bool:
    """Whether ``q`` holding ``more`` further ready messages of ``more_bytes`` would pass its
    x-max-length / x-max-length-bytes (RabbitMQ counts ready messages and their body bytes)."""
    max_len = args.get("x-max-length")
    if max_len is not None and q.count + more > max_len:
        return True
    max_bytes = args.get("x-max-length-bytes")
    return max_bytes is not None and q.bytes + q.paged_bytes + more_bytes > max_bytes


def pageable(q: Queue) -> bool:
    """Priority queues (``x-max-priority``) keep every ready message in memory: their levels are
    served highest first, which one FIFO page cannot do. Other queues page FIFO; a priority on a
    message in them orders it only within the in-memory window (RabbitMQ ignores it there)."""
    return not (q.args and "x-max-priority" in q.args)


def consumer_priority(c: Any) -> int:
    return getattr(c, "priority", 0)


class VHost:
    __slots__ = ("name", "exchanges", "queues", "trace")

    def __init__(self, name: str) -> None:
        self.name = name
        #: the firehose tracer while this vhost is traced (``trace``), else None
        self.trace: Any = None
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
