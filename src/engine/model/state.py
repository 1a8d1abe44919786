"""What every layer of the model shares: the store, the timers, the clock, the vhosts, the queues
waiting for dispatch, the id counters and the broker-wide figures (store writes, queued bytes,
publishes, light-subscription drops). ``Model`` is a ``ModelState``; the layers hold it as such."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import count
from typing import Any

from .._message import GONE, Entry, Message
from .._timers import TimerQueue
from ..store import Store
from .limits import ResourceLimits
from .objects import Consumer, Queue, VHost

__all__ = ["ModelState"]


class ModelState:
    # slots: the layers read these on every message (a slot is the fastest attribute to load)
    __slots__ = ("store", "timers", "now", "vhosts", "dirty", "next_tag", "_next_msg_id", "prio_queues",
                 "store_writes", "eager_writes", "queued_bytes", "publishes", "delivered", "redelivered", "acked",
                 "confirmed", "light_limit", "light_dropped", "next_seq",
                 "light_dropped_total", "page_window", "page_window_bytes", "events", "limits", "relays",
                 "after_durable")

    def __init__(self, store: Store, timers: TimerQueue) -> None:
        self.store = store
        self.timers = timers
        #: per-vhost and per-user limits (RabbitMQ's vhost and user limits) and what they count
        self.limits = ResourceLimits(store)
        #: set by the broker before every operation
        self.now = 0.0
        #: the event exchange (``events.Events``), set by the model
        self.events: Any = None
        #: a cluster node's consumers of queues led elsewhere (``engine.cluster.relay.Relays``);
        #: told when such a queue gets a consumer and when one of its entries leaves for good
        self.relays: Any = None
        self.vhosts: dict[str, VHost] = {}
        #: queues (and light subscriptions) touched since the last dispatch, in order
        self.dirty: dict[Any, None] = {}
        self.next_tag = 0
        self._next_msg_id = 0
        #: the next ``Entry.seq``: each model numbers its own entries, so brokers sharing a
        #: process stay independent and deterministic (a bound builtin: the cheapest call)
        self.next_seq = count(1).__next__
        #: queues with consumers of different priorities (AMQP x-priority); their consumers are
        #: kept sorted, highest first, and dispatch serves the highest ready level first
        self.prio_queues: dict[Queue, None] = {}
        #: writes to a store that needs sync; a receipt or confirm that depends on any of them
        #: waits for a sync token covering them
        self.store_writes = 0
        #: the writes among those that make the broker open a sync token by itself: all but the
        #: lazy ones (removals of acked or dropped messages: nothing waits on them, and one lost
        #: in a crash only means a redelivery), which ride along with the next sync
        self.eager_writes = 0
        #: what must wait until every store write made so far is durable (the broker runs each once
        #: a sync covering them completed): removing a moved message's source before its copy is
        #: durable would let a power cut lose both
        self.after_durable: list[Callable[[], None]] = []
        #: body bytes of every message held in a queue (ready or unacked; light subscriptions
        #: excluded), once per queue, and of every message a delayed exchange or a retry back-off
        #: holds until due (``holding``): what the broker's memory watermark compares against
        self.queued_bytes = 0
        #: publish operations so far (the broker notes which connections publish)
        self.publishes = 0
        #: broker-wide message counters read by the statistics sampler (engine.stats): queue
        #: deliveries (consume and get), those of them redelivered, acks, publisher confirms sent
        self.delivered = 0
        self.redelivered = 0
        self.acked = 0
        self.confirmed = 0
        #: most messages a light subscription holds (ready + unacked) before dropping (see light)
        self.light_limit = 10_000
        #: light subscriptions that dropped messages -> how many; and the total over all of them
        self.light_dropped: dict[Any, int] = {}
        self.light_dropped_total = 0
        #: ready messages a queue keeps in memory; later arrivals go to the store's page
        #: (``Limits.queue_window``); the window is refilled when it drains below half
        self.page_window = 2048
        #: body bytes of ready messages a queue keeps in memory (at least one message): large
        #: bodies are paged by size, not only by count (``Limits.queue_window_bytes``)
        self.page_window_bytes = 64 * 1024 * 1024

    def next_message_id(self) -> int:
        self._next_msg_id += 1
        return self._next_msg_id

    def store_write(self, lazy: bool = False) -> None:
        if self.store.needs_sync:
            self.store_writes += 1
            if not lazy:
                self.eager_writes += 1

    def when_durable(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the store writes made so far are durable (at once for a store without syncs)."""
        if self.store.needs_sync:
            self.after_durable.append(fn)
        else:
            fn()

    def mark_dirty(self, q: Any) -> None:
        self.dirty[q] = None

    def owner_unblocked(self, consumers: Iterable[Consumer]) -> None:
        for c in consumers:
            self.dirty[c.queue] = None

    def forget(self, q: Any, entry: Entry, keep_stored: bool = False) -> None:
        """``entry`` leaves ``q`` (a queue or a light subscription) for good (acked, expired,
        dropped): its memory (light subscriptions do not count theirs), timer and stored copy
        (unless ``keep_stored``: ``unstore`` removes it later)."""
        queue = isinstance(q, Queue)
        if queue:
            if entry.state != GONE:
                self.queued_bytes -= len(entry.msg.body)
            relays = self.relays
            if relays is not None and (q._x is not None and q._x.leader is not None or relays.orphans):
                relays.forgotten(q, entry)  # relayed from its leader: acked there
        entry.state = GONE
        if entry.timer is not None:
            self.timers.cancel(entry.timer)
            entry.timer = None
        if keep_stored:
            return
        if q.stores(entry.msg.persistent) if queue else entry.msg.persistent and q.durable:
            self.store.remove(q.vhost.name, q.name, entry.msg.id)
            self.store_write(lazy=True)

    def unstore(self, q: Queue, msg: Message) -> None:
        """Remove ``msg``'s stored copy from ``q`` (forgotten earlier with ``keep_stored``)."""
        if q.stores(msg.persistent):
            self.store.remove(q.vhost.name, q.name, msg.id)
            self.store_write(lazy=True)
