"""Delivery: consumers on queues, basic.get, dispatch (round-robin, consumer priorities, single
active consumer, prefetch), acks, nacks and returns, and the ack timeout of a message. Dispatch is
deferred: operations mark queues dirty and the broker calls ``dispatch()`` once per driver call,
so delivery order depends only on the order of inputs. Deliveries reach the sessions through
their ``ConsumerOwner`` interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._message import GONE, READY, UNACKED, Entry
from .errors import ResourceLocked
from .light import LightConsumer, LightTopics
from .objects import Consumer, Queue, consumer_priority, extras
from .paging import Pager
from .publish import Publisher
from .quorum import delivery_limit
from .retry import Retries
from .state import ModelState
from .streams import ConsumerArgs, Streams
from .topology import Topology

__all__ = ["Delivery"]


#: whose deliveries are settled: a Consumer, or a LightConsumer standing in for one (duck-typed, which
#: the type checker cannot follow; Any also keeps the compiled build from checking for a Consumer)
Settled = Any

class Delivery:
    __slots__ = ("state", "pager", "light", "topology", "publisher", "retries", "streams")

    def __init__(self, state: ModelState, pager: Pager, topology: Topology, publisher: Publisher,
                 retries: Retries, streams: Streams) -> None:
        self.state = state
        self.retries = retries
        self.streams = streams
        self.pager = pager
        #: attached by the model (made after this layer: it calls back on ack timeouts)
        self.light: LightTopics
        self.topology = topology
        self.publisher = publisher

    # -- consuming ---------------------------------------------------------------------------------
    def consume(self, q: Queue, consumer: Consumer, priority: int = 0) -> Consumer:
        """Add ``consumer``; a non-zero ``priority`` (kept in the consumer's ``priority``
        attribute) makes the queue serve higher-priority ready consumers first."""
        state = self.state
        if q.exclusive_owner is not None and q.exclusive_owner is not consumer.owner:
            raise ResourceLocked(f"queue '{q.name}' is exclusive to another connection")
        consumers = q.consumers
        if consumers is None:
            # most queues have one consumer: a 1-tuple is 32 bytes less than a list (with its
            # item array); the second consumer makes it a list
            consumers = q.consumers = (consumer,)
            self.topology.in_use(q)
        elif isinstance(consumers, tuple):
            consumers = q.consumers = [*consumers, consumer]
        else:
            consumers.append(consumer)
        if priority or q in state.prio_queues:
            state.prio_queues[q] = None
            if isinstance(consumers, list):
                consumers.sort(key=consumer_priority, reverse=True)  # stable: arrival order kept
        state.dirty[q] = None
        state.events.consumer("created", consumer)
        if state.relays is not None and q._x is not None and q._x.leader is not None:
            state.relays.consumed(q)  # a queue led elsewhere: served through its leader
        return consumer

    def consume_stream(self, q: Queue, consumer: Consumer, args: ConsumerArgs, priority: int = 0) -> Consumer:
        """Add ``consumer`` to the stream ``q``, reading from ``args.start`` (or where ``args.name``'s
        stored offset says, else new messages only)."""
        self.streams.attach(q, consumer, args)
        return self.consume(q, consumer, priority)

    def get(self, q: Queue, holder: Consumer) -> tuple[int, Entry] | None:
        """Take the next ready message of ``q`` for a one-off fetch (AMQP basic.get). ``holder`` is
        a consumer not registered on the queue: the delivery is unacked in it unless it auto-acks.
        Returns ``(tag, entry)`` or None when nothing is ready."""
        while (entry := self.pager.pop(q)) is not None:
            tag = self.give(q, entry, holder)
            if tag is not None:
                return tag, entry
        return None

    def give(self, q: Queue, entry: Entry, holder: Consumer) -> int | None:
        """Hand ``entry``, taken off ``q`` (or fetched from ``q``'s leader for ``holder`` alone), to
        the one-off fetch ``holder``: its tag, or None when it had expired."""
        tag = self._hand_out(q, entry, holder, self.state.now, arm_ack_timeout=False)
        if tag is not None:
            (q._x or extras(q)).delivered += 1
        return tag

    def _hand_out(self, q: Queue, entry: Entry, holder: Consumer, now: float, arm_ack_timeout: bool) -> int | None:
        """Give an entry just popped from ``q`` to ``holder``: its delivery tag, or None when it had
        expired (then it is dead-lettered here). Unacked in ``holder`` unless that auto-acks; the
        message's own ack timeout is armed for consumers (``dispatch``), not for ``get``."""
        state = self.state
        if entry.timer is not None:
            state.timers.cancel(entry.timer)
            entry.timer = None
        if entry.expires is not None and entry.expires <= now:
            self.publisher.expire(q, entry)
            return None
        state.next_tag += 1
        tag = state.next_tag
        state.delivered += 1  # the queue's own count: its callers, in bulk (``_dispatch_queue``)
        if entry.count:
            state.redelivered += 1
            (q._x or extras(q)).redelivered += 1
        if holder.auto_ack:
            state.forget(q, entry)
        else:
            entry.state = UNACKED
            if holder.unacked is None:
                holder.unacked = {}
            holder.unacked[tag] = entry
            if arm_ack_timeout and entry.msg.ack_timeout is not None:
                entry.timer = state.timers.add(now + entry.msg.ack_timeout, self.on_ack_timeout, (holder, tag))
        if q.vhost.trace is not None:  # the firehose (off: this one check)
            q.vhost.trace.delivered(q, entry, holder.trace_origin())
        return tag

    def cancel(self, consumer: Settled, requeue: bool = True,
               keep_unacked: bool = False) -> None:
        """Remove the consumer; its unacked messages go back in delivery order (``keep_unacked``:
        they stay with it, to be acked or returned later, as AMQP's basic.cancel leaves them). An
        auto-delete queue whose last consumer this was is deleted. A light subscription is unbound
        and its messages dropped (its queue would be auto-deleted)."""
        state = self.state
        if isinstance(consumer, LightConsumer):
            self.light.cancel(consumer)
            return
        q = consumer.queue
        consumers = q.consumers
        if consumers and consumer in consumers:
            state.events.consumer("deleted", consumer)
            if isinstance(consumers, list) and len(consumers) > 1:
                consumers.remove(consumer)
            else:  # its only consumer (a 1-tuple, or a list down to one)
                q.consumers = None
                q._rr = 0
                state.prio_queues.pop(q, None)
        if q.stream:
            if not keep_unacked:
                self.streams.detach(consumer)
            self._unrelay(q)  # a stream led elsewhere: its leader's feed stops
            return
        if not keep_unacked:
            self.return_unacked(consumer, requeue)
        if q.consumers is None:
            self._unrelay(q)  # what it relayed here goes back to the leader now
            if q.auto_delete:
                self.topology.delete_queue(q)
            elif q.args and "x-expires" in q.args:
                self.topology.arm_unused(q)

    def _unrelay(self, q: Queue) -> None:
        """``q`` may have lost its last consumer here: if another cluster node leads it, the relay
        (a stream's feed) from that leader is told."""
        relays = self.state.relays
        if q.consumers is None and relays is not None and q._x is not None and q._x.leader is not None:
            relays.unconsumed(q)

    def return_unacked(self, consumer: Settled, requeue: bool = True) -> None:
        if consumer.queue.stream:  # nothing goes back into a stream
            self.streams.detach(consumer)
            return
        unacked: dict[int, Entry] | None = consumer.unacked
        consumer.unacked = None
        if not unacked:
            return
        q = consumer.queue
        for entry in reversed(list(unacked.values())):  # newest first: each goes back at the head
            self._return(q, entry, requeue)

    def ack(self, consumer: Settled, tag: int, multiple: bool = False) -> bool:
        """Ack ``tag`` (and every earlier one of this consumer if ``multiple``). False if unknown."""
        q = consumer.queue
        if q.stream:
            n = self.streams.settle(consumer, tag, multiple, True)
            if n:
                (q._x or extras(q)).acked += n
            return n > 0
        state = self.state
        taken = self._take(consumer, tag, multiple)
        if taken is None:
            return False
        n = len(taken)
        state.acked += n
        if type(q) is Queue:  # not a light subscription (its own queue)
            (q._x or extras(q)).acked += n
        for entry in taken:
            state.forget(q, entry)
        return True

    def nack(self, consumer: Settled, tag: int, multiple: bool = False, requeue: bool = True) -> bool:
        """A consumer rejects ``tag`` (and every earlier one if ``multiple``): requeued, or dead
        (``requeue=False``); a queue with ``x-retry-delays`` retries it later either way."""
        q = consumer.queue
        if q.stream:  # as RabbitMQ's streams: a nack or reject only settles, like an ack
            return self.streams.settle(consumer, tag, multiple, False) > 0
        taken = self._take(consumer, tag, multiple)
        if taken is None:
            return False
        retries = self.retries
        if retries.delays and retries.handles(q):
            for entry in taken:  # in delivery order: they come back in it when due together
                retries.reject(q, entry)  # type: ignore[arg-type]
            return True
        for entry in reversed(taken):
            self._return(q, entry, requeue)
        return True

    def has_tag(self, consumer: Settled, tag: int) -> bool:
        return consumer.unacked is not None and tag in consumer.unacked

    def _take(self, consumer: Settled, tag: int, multiple: bool) -> list[Entry] | None:
        state = self.state
        unacked: dict[int, Entry] | None = consumer.unacked
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
                state.timers.cancel(entry.timer)
                entry.timer = None
        self.state.dirty[consumer.queue] = None  # prefetch window opened
        return taken

    def _return(self, q: Queue, entry: Entry, requeue: bool) -> None:
        state = self.state
        if entry.timer is not None:
            state.timers.cancel(entry.timer)
            entry.timer = None
        if state.relays is not None and state.relays.returned(q, entry, requeue):
            return  # relayed or fetched from its leader: returned there, which counts it and requeues it
        if not requeue:
            self.publisher.remove(q, entry, "rejected")
            return
        if isinstance(q, LightConsumer):
            self.light.requeue(q, entry)
            return
        if q.vhost.queues.get(q.name) is not q:  # queue deleted meanwhile
            if entry.state != GONE:
                state.queued_bytes -= len(entry.msg.body)
                entry.state = GONE
            return
        entry.count += 1
        limit = delivery_limit(q)
        if limit is not None and entry.count > limit:
            self.publisher.remove(q, entry, "delivery_limit")
            return
        entry.state = READY
        if q.stores(entry.msg.persistent):
            state.store.update_delivery(q.vhost.name, q.name, entry.msg.id, entry.count)
            state.store_write()
        if entry.expires is not None:
            if entry.expires <= state.now:
                self.publisher.expire(q, entry)
                return
            entry.timer = state.timers.add(entry.expires, self.publisher.on_expiry, (q, entry))
        q.requeue(entry)
        state.dirty[q] = None

    # -- dispatch ---------------------------------------------------------------------------------
    def dispatch(self) -> None:
        """Deliver what can be delivered on every queue touched since the last call."""
        dirty = self.state.dirty
        while dirty:
            q = next(iter(dirty))
            del dirty[q]
            if isinstance(q, LightConsumer):
                self.light.dispatch(q)
            elif q.stream:
                self.streams.dispatch(q)
            else:
                self._dispatch_queue(q)

    def _dispatch_queue(self, q: Queue) -> None:
        state = self.state
        now = state.now
        # x-single-active-consumer: only the first registered consumer gets messages
        x = q._x  # the arguments without the property (once per dispatch)
        single = x is not None and x.args is not None and x.args.get("x-single-active-consumer") is True
        prioritised = q in state.prio_queues
        tags_before = state.next_tag  # every delivery takes the next tag: their count, added once
        try:
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
                entry = self.pager.pop(q)
                if entry is None:
                    return
                tag = self._hand_out(q, entry, chosen, now, arm_ack_timeout=True)
                if tag is not None:
                    chosen.owner.deliver(chosen, tag, entry)
        finally:
            if state.next_tag != tags_before:
                (q._x or extras(q)).delivered += state.next_tag - tags_before

    @staticmethod
    def _pick_prioritised(q: Queue, consumers: Sequence[Consumer]) -> Consumer | None:
        """Round-robin among the ready consumers of the highest priority that has one."""
        i, n = 0, len(consumers)
        while i < n:
            level = consumer_priority(consumers[i])
            j = i
            while j < n and consumer_priority(consumers[j]) == level:
                j += 1
            size = j - i
            for k in range(size):
                c = consumers[i + (q._rr + k) % size]
                if c.ready():
                    q._rr += k + 1
                    return c
            i = j
        return None

    def on_ack_timeout(self, arg: tuple[Settled, int], now: float) -> None:
        consumer, tag = arg
        unacked: dict[int, Entry] | None = consumer.unacked
        if unacked is None or tag not in unacked:
            return
        entry = unacked.pop(tag)
        entry.timer = None
        if not unacked:
            consumer.unacked = None
        consumer.owner.delivery_timed_out(consumer, tag)
        self._return(consumer.queue, entry, True)
