"""Consumers of a queue led by another node, served through its leader (the model side).

When a queue led elsewhere gets its first consumer here, ``Relays`` asks the I/O side
(``servers.cluster.relay``) to consume it on the leader over the link. Each delivery the leader
sends becomes an entry of the local queue (in memory only: the leader holds the message), which
this node's consumers take with their own prefetch and acks as from any queue. When such an entry
leaves for good here (acked, rejected, expired, dropped) its delivery is acked on the leader;
requeued here, it stays here for the next local consumer. When the queue has no consumer left, or
the link breaks, or this node becomes the leader, the entries still ready here are dropped without
an ack and the link consumer is closed, so the leader requeues them (redelivered, as RabbitMQ does
for a consumer's connection that went away).

A stream is not relayed message by message: its log is in the database every node reads, so a
stream's consumers here read it as on its leader (``engine.model.streams``), and its relay is a
*feed*: the link consumer reads the stream on the leader from this node's committed end and only
says how far the leader has committed (``followed``), which wakes the consumers here. Nothing polls
the database: a new append reaches this node as the leader's delivery of it.

Deterministic: no I/O, no clock. The I/O side reads ``Relay.acks`` and ``Relay.active`` from its
thread (a deque and a flag: atomic under the GIL).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .._message import GONE, READY, UNACKED, Entry, Message
from ..model.objects import Queue
from ..model.state import ModelState
from ..streams import StreamLog

__all__ = ["Relays", "Relay"]


class Relay:
    """One queue consumed through its leader over one link consumer."""

    __slots__ = ("queue", "leader", "tags", "acks", "active", "start")

    def __init__(self, queue: Queue, leader: str, start: int | None = None) -> None:
        self.queue = queue
        self.leader = leader
        #: a stream's feed: the offset it reads the leader's stream from (None: a queue's relay)
        self.start = start
        #: entries here -> the leader's delivery tag of their message
        self.tags: dict[Entry, int] = {}
        #: delivery tags to ack on the leader (filled here, sent by the I/O side)
        self.acks: deque[int] = deque()
        #: False once stopped: the I/O side closes its link consumer
        self.active = True


class Relays:
    """The relays of one node's model; ``open(relay)`` starts the I/O side of a new one."""

    def __init__(self, state: ModelState, open: Callable[[Relay], None],
                 logs: Callable[[Queue], StreamLog] | None = None) -> None:
        self.state = state
        self.open = open
        #: a stream queue's log (``Streams.log``)
        self.logs = logs
        self.by_queue: dict[Queue, Relay] = {}

    # -- called by the model --------------------------------------------------------------------------
    def consumed(self, q: Queue) -> None:
        if q not in self.by_queue:
            start = self.logs(q).committed if q.stream and self.logs is not None else None
            relay = self.by_queue[q] = Relay(q, q.leader or "", start)
            self.open(relay)

    def forgotten(self, q: Queue, entry: Entry) -> None:
        relay = self.by_queue.get(q)
        if relay is not None:
            tag = relay.tags.pop(entry, None)
            if tag is not None:
                relay.acks.append(tag)

    # -- called with what the link brings (loop thread) -----------------------------------------------
    def delivered(self, relay: Relay, tag: int, redelivered: bool, exchange: str, routing_key: str,
                  headers: dict[str, Any], body: bytes, persistent: bool, priority: int) -> None:
        """The leader delivered a message to ``relay``'s link consumer: it joins the local queue."""
        if not relay.active or self.by_queue.get(relay.queue) is not relay:
            return  # stopped meanwhile: the leader requeues it when the link consumer closes
        state = self.state
        q = relay.queue
        msg = Message(state.next_message_id(), exchange, routing_key, headers, body, priority, None, persistent)
        entry = Entry(msg, state.next_seq(), 1 if redelivered else 0)
        q.push(entry)
        state.queued_bytes += len(body)
        relay.tags[entry] = tag
        state.dirty[q] = None

    def followed(self, relay: Relay, tail: int) -> None:
        """A stream's leader committed every offset below ``tail`` (its feed said so): the
        consumers here read on."""
        if relay.active and self.logs is not None and self.logs(relay.queue).followed_to(tail):
            self.state.dirty[relay.queue] = None

    def unconsumed(self, q: Queue) -> None:
        """``q``'s last consumer here went away."""
        relay = self.by_queue.get(q)
        if relay is not None:
            self.idle(relay)

    def idle(self, relay: Relay) -> bool:
        """Stop ``relay`` once its queue has no consumer here and none of its deliveries is still
        unacked here (a consumer cancelled with basic.cancel may ack them still). True: stopped."""
        if relay.active and not relay.queue.consumers and not any(e.state == UNACKED for e in relay.tags):
            self.stop(relay)
        return not relay.active

    def stop(self, relay: Relay) -> None:
        """No more through this link consumer: the entries still ready here go back to the leader
        (dropped here unacked; the leader requeues them once the link consumer closes)."""
        relay.active = False
        if self.by_queue.get(relay.queue) is relay:
            del self.by_queue[relay.queue]
        q = relay.queue
        state = self.state
        for entry in relay.tags:
            if entry.state == READY:  # marked gone in place: the queue's pop skips it
                q.count -= 1
                q.bytes -= len(entry.msg.body)
                state.queued_bytes -= len(entry.msg.body)
                entry.state = GONE
        relay.tags.clear()  # unacked ones' late acks go nowhere: the leader redelivers them
        state.dirty[q] = None

    def stop_queue(self, q: Queue) -> None:
        """``q`` is led here now, or deleted: its relay (if any) stops."""
        relay = self.by_queue.get(q)
        if relay is not None:
            self.stop(relay)

