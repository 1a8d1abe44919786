"""A STOMP subscription as the model sees it: a consumer of a queue (``StompSubscription``) or,
for a non-durable topic, a light consumer without a queue of its own (``StompLightSubscription``)."""

from __future__ import annotations

from typing import Any

from ..model import Consumer, ConsumerOwner, Queue
from ..model.light import AUTO_ACK, FIRST_FREE_FLAG, LightConsumer
from .wire import Wire

__all__ = ["StompSubscription", "StompLightSubscription", "AnySubscription", "ACK_MODES"]

ACK_MODES = ("auto", "client", "client-individual")
#: StompSubscription ack modes (low bits of its flags) and its "owns the queue" bit
_ACK_MODE_BITS = {"auto": 0, "client": 1, "client-individual": 2}
_ACK_MODES_BY_BITS = ("auto", "client", "client-individual")
_OWNS_QUEUE = 4


class StompSubscription(Consumer):
    """A subscription consuming from a queue. Idle ones are small (96 bytes): the ack mode and
    "owns its queue" are bits, and a ``/queue/<its queue's name>`` destination is not kept but
    rebuilt when asked for (``_m`` is the flags, or (destination, flags) for other destinations)."""

    __slots__ = ("id", "_m", "wire")

    def __init__(self, queue: Queue, owner: ConsumerOwner, prefetch: int, sub_id: str, destination: str,
                 ack_mode: str, owns_queue: bool) -> None:
        super().__init__(queue, owner, prefetch, ack_mode == "auto")
        self.id = sub_id
        #: the queue exists for this subscription only (non-durable topic/exchange): delete it with us
        flags = _ACK_MODE_BITS[ack_mode] | (_OWNS_QUEUE if owns_queue else 0)
        derived = destination.startswith("/queue/") and destination[7:] == queue.name
        self._m: int | tuple[str, int] = flags if derived else (destination, flags)
        #: its pre-encoded MESSAGE header lines (``Wire``), made at the first delivery
        self.wire: Wire | None = None

    @property
    def destination(self) -> str:
        m = self._m
        return m[0] if isinstance(m, tuple) else "/queue/" + self.queue.name

    @property
    def ack_mode(self) -> str:
        m = self._m
        return _ACK_MODES_BY_BITS[(m if isinstance(m, int) else m[1]) & 3]

    @property
    def owns_queue(self) -> bool:
        """The queue exists for this subscription only (non-durable topic/exchange): deleted with it."""
        m = self._m
        return bool((m if isinstance(m, int) else m[1]) & _OWNS_QUEUE)


#: StompLightSubscription flag: ack mode client-individual (else client, unless auto)
_INDIVIDUAL = FIRST_FREE_FLAG


class StompLightSubscription(LightConsumer):
    """A non-durable topic subscription without a queue of its own (see ``engine.model.light``)."""

    __slots__ = ("id", "wire")

    #: only temp-queue subscriptions need their destination back
    destination = ""
    owns_queue = False

    def __init__(self, owner: ConsumerOwner, exchange: Any, key: str, prefix: bool, prefetch: int,
                 sub_id: str, ack_mode: str) -> None:
        super().__init__(owner, exchange, key, prefix, prefetch, ack_mode == "auto",
                         _INDIVIDUAL if ack_mode == "client-individual" else 0)
        self.id = sub_id
        self.wire: Wire | None = None

    @property
    def ack_mode(self) -> str:
        """Kept in ``flags`` (one slot less per subscription)."""
        if self.flags & AUTO_ACK:
            return "auto"
        return "client-individual" if self.flags & _INDIVIDUAL else "client"


AnySubscription = StompSubscription | StompLightSubscription
