"""Light subscriptions: a non-durable topic subscription bound straight into a topic router.

RabbitMQ gives every non-durable STOMP topic subscription its own auto-delete queue. A
``LightConsumer`` is that queue and its one consumer folded into a single slotted object with no
name: an idle one holds only its owner, exchange, binding key, prefetch and flags. Its
``LightBuffer`` (ready messages + unacked deliveries) exists only while it holds a message and is
dropped again as soon as it is empty.

Policy for a subscription that cannot keep up (blocked owner, prefetch full or acks not coming):
it holds at most ``limit`` messages not yet acknowledged (ready + unacked). A message arriving when
it is full pushes out the oldest *ready* one (drop-head, as ``x-max-length``); when every held
message is an unacked delivery, the new message is dropped instead. Both are counted per
subscription (``ModelState.light_dropped``, only for subscriptions that dropped something) and in total
(``ModelState.light_dropped_total``). Ready messages that expire are marked by their expiry timer and
freed once they reach the head (as in a ``Queue``).

The messages of a light subscription die with it (unsubscribe, disconnect), as the auto-delete
queue would.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from typing import Any

from .._message import GONE, READY, UNACKED, Entry, Message
from .objects import ConsumerOwner, Exchange
from .routers import PREFIX_ARG, TopicRouter
from .state import ModelState

__all__ = ["LightConsumer", "LightBuffer", "LightTopics", "AUTO_ACK", "PREFIX", "FIRST_FREE_FLAG", "binding_args"]

#: ``flags`` bits (one int slot instead of one slot per boolean)
AUTO_ACK = 1
PREFIX = 2
#: the lowest bit subclasses may use for their own flags
FIRST_FREE_FLAG = 4


class LightBuffer:
    """What a light subscription holds while it has messages."""

    __slots__ = ("ready", "unacked")

    def __init__(self) -> None:
        #: ready entries, highest priority first, FIFO within a priority
        self.ready: deque[Entry] = deque()
        #: delivery tag -> entry, in delivery order; None while nothing is unacked
        self.unacked: dict[int, Entry] | None = None

    def held(self) -> int:
        return len(self.ready) + (len(self.unacked) if self.unacked else 0)

    def push(self, entry: Entry) -> None:
        """Append behind every entry of the same or a higher priority."""
        ready = self.ready
        prio = entry.msg.priority
        if not ready or prio <= ready[-1].msg.priority:
            ready.append(entry)
            return
        i = len(ready) - 1
        while i > 0 and ready[i - 1].msg.priority < prio:
            i -= 1
        ready.insert(i, entry)

    def requeue(self, entry: Entry) -> None:
        """Put a returned entry back at its original position: ``ready`` is ordered by priority,
        then arrival (``Entry.seq``); at the head in O(1) when nothing older is ready."""
        ready = self.ready
        key = _order(entry)
        if not ready or key < _order(ready[0]):
            ready.appendleft(entry)
            return
        ready.insert(bisect_left(ready, key, key=_order), entry)


def _order(entry: Entry) -> tuple[int, int]:
    return -entry.msg.priority, entry.seq


class LightConsumer:
    """A subscription that is its own (unnamed, non-durable, exclusive, auto-delete) queue.

    It quacks like both a ``Queue`` and a ``Consumer`` where the model needs it to (``queue`` is
    itself, ``unacked``, ``ready()``, ``consumer_count()``). Sessions subclass it (keep ``__slots__``).
    """

    __slots__ = ("owner", "exchange", "key", "prefetch", "flags", "buf")

    durable = False
    auto_delete = True
    args = None
    stream = False

    def __init__(self, owner: ConsumerOwner, exchange: Exchange, key: str, prefix: bool,
                 prefetch: int, auto_ack: bool, flags: int = 0) -> None:
        self.owner = owner
        self.exchange = exchange
        #: binding key (the prefix itself for a prefix subscription)
        self.key = key
        self.prefetch = prefetch  # 0 = unlimited
        self.flags = flags | (AUTO_ACK if auto_ack else 0) | (PREFIX if prefix else 0)
        self.buf: LightBuffer | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exchange.name!r}, {self.key!r})"

    @property
    def queue(self) -> LightConsumer:
        return self

    @property
    def auto_ack(self) -> bool:
        return bool(self.flags & AUTO_ACK)

    @property
    def prefix(self) -> bool:
        return bool(self.flags & PREFIX)

    @property
    def unacked(self) -> dict[int, Entry] | None:
        buf = self.buf
        return None if buf is None else buf.unacked

    @unacked.setter
    def unacked(self, value: dict[int, Entry] | None) -> None:
        buf = self.buf
        if buf is None:
            if not value:
                return
            buf = self.buf = LightBuffer()
        buf.unacked = value or None
        self.trim()

    @property
    def count(self) -> int:
        """Ready messages (as ``Queue.count``)."""
        return sum(1 for e in self.buf.ready if e.state == READY) if self.buf is not None else 0

    def trim(self) -> None:
        """Forget the buffer once it holds nothing (the subscription is idle again)."""
        buf = self.buf
        if buf is not None and not buf.ready and not buf.unacked:
            self.buf = None

    def ready(self) -> bool:
        if self.owner.blocked:
            return False
        return not self.prefetch or self.buf is None or not self.buf.unacked or len(self.buf.unacked) < self.prefetch

    def consumer_count(self) -> int:
        return 1

    def unacked_count(self) -> int:
        unacked = self.unacked
        return len(unacked) if unacked else 0


class LightTopics:
    """The operations on light subscriptions: bind into a topic router, buffer what arrives (with
    the drop policy above), deliver, take back, expire, cancel. ``on_ack_timeout`` is the
    delivery layer's callback for a delivery whose ack timeout passed."""

    __slots__ = ("state", "on_ack_timeout")

    def __init__(self, state: ModelState, on_ack_timeout: Callable[[Any, float], None]) -> None:
        self.state = state
        self.on_ack_timeout = on_ack_timeout

    @staticmethod
    def supports(exchange: Exchange) -> bool:
        """Whether light subscriptions can bind to ``exchange`` (topic routers index them)."""
        return isinstance(exchange.router, TopicRouter)

    def bind(self, sub: LightConsumer) -> None:
        router = sub.exchange.router
        assert isinstance(router, TopicRouter)
        router.add_light(sub, sub.key, sub.prefix)

    def cancel(self, sub: LightConsumer) -> None:
        router = sub.exchange.router
        if isinstance(router, TopicRouter):  # the exchange may have been deleted meanwhile
            router.remove_light(sub, sub.key, sub.prefix)
        buf = sub.buf
        sub.buf = None
        state = self.state
        state.dirty.pop(sub, None)
        state.light_dropped.pop(sub, None)
        if buf is None:
            return
        for entry in buf.ready:
            self.discard(entry)
        for entry in (buf.unacked or {}).values():
            self.discard(entry)

    def discard(self, entry: Entry) -> None:
        entry.state = GONE
        if entry.timer is not None:
            self.state.timers.cancel(entry.timer)
            entry.timer = None

    def enqueue(self, sub: LightConsumer, msg: Message) -> None:
        state = self.state
        expires = msg.expires_at
        if expires is not None and expires <= state.now:
            return
        buf = sub.buf
        if buf is None:
            buf = sub.buf = LightBuffer()
        elif buf.held() >= state.light_limit:
            state.light_dropped[sub] = state.light_dropped.get(sub, 0) + 1
            state.light_dropped_total += 1
            if not buf.ready:
                return  # everything held is an unacked delivery: drop the newcomer
            self.discard(buf.ready.popleft())  # drop-head
        entry = Entry(msg, state.next_seq(), 0, expires)
        buf.push(entry)
        if expires is not None:
            entry.timer = state.timers.add(expires, self._on_expiry, (sub, entry))
        state.dirty[sub] = None

    def _on_expiry(self, arg: tuple[LightConsumer, Entry], now: float) -> None:
        sub, entry = arg
        entry.timer = None
        if entry.state != READY or sub.buf is None:
            return
        entry.state = GONE  # left in place; skipped by dispatch, freed once it reaches the head
        ready = sub.buf.ready
        while ready and ready[0].state != READY:
            ready.popleft()
        sub.trim()

    def requeue(self, sub: LightConsumer, entry: Entry) -> None:
        """A nacked or timed-out delivery goes back to its original position (it was taken out
        of ``unacked`` already)."""
        entry.count += 1
        if entry.expires is not None and entry.expires <= self.state.now:
            entry.state = GONE
            sub.trim()
            return
        entry.state = READY
        if sub.buf is None:
            sub.buf = LightBuffer()
        sub.buf.requeue(entry)
        if entry.expires is not None:
            entry.timer = self.state.timers.add(entry.expires, self._on_expiry, (sub, entry))
        self.state.dirty[sub] = None

    def dispatch(self, sub: LightConsumer) -> None:
        state = self.state
        now = state.now
        buf = sub.buf
        while buf is not None and buf.ready and sub.ready():
            entry = buf.ready.popleft()
            if entry.state != READY:
                continue  # expired in place
            if entry.timer is not None:
                state.timers.cancel(entry.timer)
                entry.timer = None
            if entry.expires is not None and entry.expires <= now:
                entry.state = GONE
                continue
            state.next_tag += 1
            tag = state.next_tag
            if sub.flags & AUTO_ACK:
                entry.state = GONE
            else:
                entry.state = UNACKED
                if buf.unacked is None:
                    buf.unacked = {}
                buf.unacked[tag] = entry
                if entry.msg.ack_timeout is not None:
                    entry.timer = state.timers.add(now + entry.msg.ack_timeout, self.on_ack_timeout, (sub, tag))
            sub.owner.deliver(sub, tag, entry)  # type: ignore[arg-type]
            buf = sub.buf  # the owner may have gone (and cancelled us) while delivering
        sub.trim()


def binding_args(sub: LightConsumer) -> dict[str, Any] | None:
    """The binding arguments an equivalent queue binding would carry."""
    return {PREFIX_ARG: True} if sub.flags & PREFIX else None
