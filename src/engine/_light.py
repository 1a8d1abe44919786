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
subscription (``Model.light_dropped``, only for subscriptions that dropped something) and in total
(``Model.light_dropped_total``). Ready messages that expire are marked by their expiry timer and
freed once they reach the head (as in a ``Queue``).

The messages of a light subscription die with it (unsubscribe, disconnect), as the auto-delete
queue would.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Any

from ._message import READY, Entry

if TYPE_CHECKING:
    from ._model import ConsumerOwner, Exchange

__all__ = ["LightConsumer", "LightBuffer", "AUTO_ACK", "PREFIX", "FIRST_FREE_FLAG"]

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

    def __init__(self, owner: "ConsumerOwner", exchange: "Exchange", key: str, prefix: bool,
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
    def queue(self) -> "LightConsumer":
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


def binding_args(sub: LightConsumer) -> dict[str, Any] | None:
    """The binding arguments an equivalent queue binding would carry."""
    from ._routing import PREFIX_ARG

    return {PREFIX_ARG: True} if sub.flags & PREFIX else None
