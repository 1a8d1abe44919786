"""Consumers of a queue led by another node, served through its leader (the model side).

When a queue led elsewhere gets its first consumer here, ``Relays`` asks the I/O side
(``servers.cluster.relay``) to consume it on the leader over the link. Each delivery the leader
sends becomes an entry of the local queue (in memory only: the leader holds the message), which
this node's consumers take with their own prefetch and acks as from any queue. When such an entry
leaves for good here (acked, expired, dropped) its delivery is acked on the leader; rejected or
returned here (nack, reject, its consumer gone) it is rejected on the leader, with the same requeue
flag, so the leader counts the return (a quorum queue's ``x-delivery-count`` and delivery limit)
and requeues or dead-letters it there, as its own store says. The count the leader sends in
``x-delivery-count`` is the local entry's. When the queue has no consumer left, or
the link breaks, or this node becomes the leader, the entries still ready here are dropped without
an ack and the link consumer is closed, so the leader requeues them (redelivered, as RabbitMQ does
for a consumer's connection that went away).

A stream is not relayed message by message: its log is in the database every node reads, so a
stream's consumers here read it as on its leader (``engine.model.streams``), and its relay is a
*feed*: the link consumer reads the stream on the leader from this node's committed end and only
says how far the leader has committed (``followed``), which wakes the consumers here. Nothing polls
the database: a new append reaches this node as the leader's delivery of it.

A basic.get of such a queue that finds nothing relayed here asks the leader (``get``): the I/O
side does the basic.get there on a link of its own and hands back a ``Fetched`` message, which is
given to the getter alone (never queued here). Settling it here settles it on the leader through
the link that got it: an ack acks it there, a reject or nack rejects it there (with its requeue
flag), so the leader counts the return, requeues or dead-letters it, as for a relayed delivery.

Deterministic: no I/O, no clock. The I/O side reads ``Relay.acks`` and ``Relay.active`` from its
thread (a deque and a flag: atomic under the GIL).

A delivery still unacked here when its relay stops (the leader went away, or this node leads the
queue now) is an orphan: the leader requeued it when the link closed, so its consumer's ack or
return here settles nothing but the local entry (never requeued here: that would duplicate it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .._message import GONE, READY, UNACKED, Entry, Message
from ..model.objects import Queue
from ..model.quorum import DELIVERY_COUNT
from ..model.state import ModelState
from ..streams import StreamLog

__all__ = ["Relays", "Relay", "Fetched", "Settler", "GetReply", "ACK", "REQUEUE", "REJECT"]

#: how a relayed delivery is settled on its leader (``Relay.acks``)
ACK, REQUEUE, REJECT = 0, 1, 2


class Settler(Protocol):
    """The link a fetched message came through: settles it on the leader (from the loop thread)."""

    def settle(self, tag: int, requeue: bool | None) -> None:
        """None: ack; True: reject with requeue; False: reject without."""


@dataclass(slots=True)
class Fetched:
    """A message a leader's basic.get-ok brought over ``link`` (its ``tag`` is the link's)."""

    link: Settler
    tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    headers: dict[str, Any]
    body: bytes
    persistent: bool
    priority: int
    #: the leader's message count after the get (basic.get-ok's)
    message_count: int


#: the answer to a get: (the message or None when the leader had none, None or why it failed)
GetReply = Callable[[Fetched | None, str | None], None]
#: the I/O side of a get: basic.get on ``queue``'s leader (``no_ack``), answer on the loop thread
Fetch = Callable[[Queue, bool, GetReply], None]


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
        #: (delivery tag, ACK/REQUEUE/REJECT) to settle on the leader (filled here, sent by the I/O side)
        self.acks: deque[tuple[int, int]] = deque()
        #: False once stopped: the I/O side closes its link consumer
        self.active = True


class Relays:
    """The relays of one node's model; ``open(relay)`` starts the I/O side of a new one."""

    def __init__(self, state: ModelState, open: Callable[[Relay], None],
                 logs: Callable[[Queue], StreamLog] | None = None, fetch: Fetch | None = None) -> None:
        self.state = state
        self.open = open
        #: a stream queue's log (``Streams.log``)
        self.logs = logs
        self.fetch = fetch
        self.by_queue: dict[Queue, Relay] = {}
        #: entries fetched by basic.get here and not settled yet -> the link and tag to settle them by
        self.fetched: dict[Entry, tuple[Settler, int]] = {}
        #: deliveries unacked here whose relay stopped (the leader requeued them already)
        self.orphans: dict[Entry, None] = {}

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
                relay.acks.append((tag, ACK))
                return
        held = self.fetched.pop(entry, None)
        if held is not None:
            held[0].settle(held[1], None)
        self.orphans.pop(entry, None)

    def returned(self, q: Queue, entry: Entry, requeue: bool) -> bool:
        """A delivery made here comes back (nack/reject, its consumer gone): if it was relayed, or
        fetched by a basic.get, it is rejected on its leader (which counts it, then requeues or
        dead-letters it) and leaves this node; True then. False: not the leader's (the model
        returns it itself)."""
        held = self.fetched.pop(entry, None)
        relay = self.by_queue.get(q) if held is None else None
        tag = relay.tags.pop(entry, None) if relay is not None else None
        if held is not None:
            held[0].settle(held[1], requeue)
        elif tag is not None:
            relay.acks.append((tag, REQUEUE if requeue else REJECT))  # type: ignore[union-attr]
        elif entry in self.orphans:
            del self.orphans[entry]
        else:
            return False
        if entry.state != GONE:
            self.state.queued_bytes -= len(entry.msg.body)
            entry.state = GONE
        return True

    # -- basic.get through the leader -----------------------------------------------------------------
    def get(self, q: Queue, no_ack: bool, reply: GetReply) -> None:
        """Ask ``q``'s leader for one message; ``reply`` is called on the loop thread."""
        if self.fetch is None:
            reply(None, "this node has no link to fetch from other nodes")
            return
        self.fetch(q, no_ack, reply)

    def got(self, fetched: Fetched, no_ack: bool) -> Entry:
        """The entry of a fetched message, counted in the broker's bytes until it is settled; unless
        ``no_ack`` (settled on the leader already) its settling here settles it there."""
        state = self.state
        msg = Message(state.next_message_id(), fetched.exchange, fetched.routing_key, fetched.headers,
                      fetched.body, fetched.priority, None, fetched.persistent)
        entry = Entry(msg, state.next_seq(), 1 if fetched.redelivered else 0)
        state.queued_bytes += len(fetched.body)
        if not no_ack:
            self.fetched[entry] = (fetched.link, fetched.tag)
        return entry

    # -- called with what the link brings (loop thread) -----------------------------------------------
    def delivered(self, relay: Relay, tag: int, redelivered: bool, exchange: str, routing_key: str,
                  headers: dict[str, Any], body: bytes, persistent: bool, priority: int) -> None:
        """The leader delivered a message to ``relay``'s link consumer: it joins the local queue."""
        if not relay.active or self.by_queue.get(relay.queue) is not relay:
            return  # stopped meanwhile: the leader requeues it when the link consumer closes
        state = self.state
        q = relay.queue
        # the leader's count of returns (a quorum queue's redeliveries carry it), else the flag
        count = headers.pop(DELIVERY_COUNT, None) if redelivered and q.quorum else None
        if not isinstance(count, int) or count < 1:
            count = 1 if redelivered else 0
        msg = Message(state.next_message_id(), exchange, routing_key, headers, body, priority, None, persistent)
        entry = Entry(msg, state.next_seq(), count)
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
            elif entry.state == UNACKED:  # its late ack or return settles it here only
                self.orphans[entry] = None
        relay.tags.clear()
        state.dirty[q] = None

    def stop_queue(self, q: Queue) -> None:
        """``q`` is led here now, or deleted: its relay (if any) stops."""
        relay = self.by_queue.get(q)
        if relay is not None:
            self.stop(relay)

