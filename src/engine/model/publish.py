"""Publishing: the one path by which a message enters queues, for every protocol, and the ways it
leaves a queue dead (expired, rejected, over a limit) to be dead-lettered into others.

``publish`` routes (CC/BCC, alternate exchange) and enqueues; ``enqueue`` applies the queue's
arguments (overflow refusal, x-max-priority, x-message-ttl, x-max-length drop-head), writes a
persistent message of a durable queue to the store, pages it out past the window, and arms its
expiry timer; ``remove`` forgets an entry and dead-letters it. A message's whole life in queues is
here and in ``delivery``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._message import READY, Entry, Message
from .._raw_message import RawMessage
from ..store_types import StoreError
from ..streams import RunInterrupted
from .at_least_once import AtLeastOnce
from .delayed import DelayedTarget
from .errors import NotFound
from .expiry import dead_letter, queue_expiry
from .light import LightConsumer, LightTopics
from .objects import STREAM_FLAG, Exchange, Queue, VHost, extras, over_limits, pageable
from .paging import Pager
from .quorum import at_least_once, overflow
from .routing import route, route_cc
from .state import ModelState
from .streams import Streams

store_log = logging.getLogger("sansmq.store")

__all__ = ["Publisher", "PUBLISH_ROUTED", "PUBLISH_REFUSED", "PUBLISH_WROTE"]

#: ``publish`` result bits
PUBLISH_ROUTED = 1
PUBLISH_REFUSED = 2
PUBLISH_WROTE = 4


class Publisher:
    __slots__ = ("state", "pager", "light", "streams", "at_least_once", "forward")

    def __init__(self, state: ModelState, streams: Streams) -> None:
        self.state = state
        self.streams = streams
        self.at_least_once = AtLeastOnce(state)
        self.at_least_once.enqueue = self.enqueue
        # attached by the model: both report back to this layer through callbacks, so they are
        # made after it (the pager: expired messages; light topics: a delivery's ack timeout)
        self.pager: Pager
        self.light: LightTopics
        #: a cluster node's way to a queue led by another node (set by engine.cluster)
        self.forward: Callable[[Queue, Message], bool] = _no_forward

    def publish(self, vhost: VHost, exchange: Exchange | str, msg: Message, queue_priority_only: bool = False,
                origin: tuple[str, str, int] | None = None, traced: bool = True, key: str | None = None) -> int:
        """The one publish path of every protocol: route ``msg`` from ``exchange`` (an Exchange or
        its name: NotFound when there is none) plus the keys of its ``CC``/``BCC`` headers
        (``BCC`` is removed), else through the exchange's alternate exchange, and enqueue it on
        every queue reached. Returns ``PUBLISH_*`` bits: ROUTED (some queue took or refused it;
        else a mandatory publisher gets it back), REFUSED (a full queue with ``x-overflow``
        reject-publish(-dlx) refused it: a confirm is a nack), WROTE (the store was written: a
        confirm or receipt waits for its sync). A StoreError propagates.

        ``queue_priority_only``: the message's priority counts only in queues with
        ``x-max-priority`` (AMQP, as RabbitMQ; STOMP orders every queue by priority, as ocamlmq).
        ``origin``: (user, connection, channel) of the publisher, for the firehose (``trace``);
        ``traced=False``: not traced (a delayed exchange's release: its publish was traced once).
        ``key``: route by this key, not the message's (a cluster peer relays a message it routed
        itself to its queue's name on the default exchange: engine.cluster.link)."""
        if type(exchange) is str:
            found = vhost.exchanges.get(exchange)
            if found is None:
                raise NotFound(f"no exchange '{exchange}' in vhost '{vhost.name}'")
            exchange = found
        x: Exchange = exchange  # type: ignore[assignment]
        state = self.state
        state.publishes += 1
        headers = msg.headers
        if "CC" in headers or "BCC" in headers:  # sender-selected distribution
            targets = route_cc(vhost, x, msg)
        else:
            targets = route(vhost, x, msg.routing_key if key is None else key, headers)
        if not targets:
            alt = vhost.exchanges.get(x.alternate) if x.alternate is not None else None
            if alt is not None:
                targets = route(vhost, alt, msg.routing_key, headers)
        if vhost.trace is not None and traced:  # the firehose (off: this one check)
            vhost.trace.published(vhost, x, msg, targets, origin)
        if not targets:
            return 0
        plain = msg
        if msg.priority and queue_priority_only:
            # queues without x-max-priority ignore priority (enqueue caps it for those with one),
            # so they get a priority-0 twin (same id, headers and body)
            plain = Message(msg.id, msg.exchange, msg.routing_key, headers, msg.body, 0, msg.expires_at,
                            msg.persistent, msg.ack_timeout)
        result = PUBLISH_ROUTED
        before = state.store_writes
        enqueue = self.enqueue
        for q in targets:
            if plain is not msg and (args := q.args) and "x-max-priority" in args:
                if not enqueue(q, msg):
                    result |= PUBLISH_REFUSED
            elif not enqueue(q, plain):
                result |= PUBLISH_REFUSED
        if state.store_writes != before:
            result |= PUBLISH_WROTE
        return result

    def sole_stream(self, vhost: VHost, x: Exchange, msg: Message) -> Queue | None:
        """The stream queue ``msg`` published to ``x`` reaches, when it reaches exactly that one by
        the default exchange (its key names the queue; no ``CC``/``BCC`` to route further): what
        ``append_stream`` takes instead of ``publish``. The caller rules out the firehose and a
        priority (which publish may zero per queue)."""
        q = self.stream_by_key(vhost, x, msg.routing_key)
        if q is None:
            return None
        headers = msg.headers
        return None if "CC" in headers or "BCC" in headers else q

    def stream_by_key(self, vhost: VHost, x: Exchange, routing_key: str) -> Queue | None:
        """The stream queue a publish to ``x`` with ``routing_key`` reaches when that is the
        default exchange and the stream is led here (``sole_stream`` without its ``CC``/``BCC``)."""
        if x.name:
            return None
        q = vhost.queues.get(routing_key)
        if q is None or not q._f & STREAM_FLAG or (q._x is not None and q._x.leader is not None):
            return None  # not a stream, or one led by another cluster node (enqueue forwards it)
        return q

    def append_stream(self, q: Queue, msg: Message) -> int:
        """``publish`` of a message routed to the one stream ``q`` (``sole_stream``), without the
        general path's routing and per-queue argument handling: the same counters and the same
        record (``tests/engine/test_stream_fastpath.py`` holds it to the bytes). Returns the
        ``PUBLISH_*`` bits ``publish`` would."""
        state = self.state
        state.publishes += 1
        (q._x or extras(q)).published += 1
        before = state.store_writes
        self.streams.append(q, msg)
        return PUBLISH_ROUTED | PUBLISH_WROTE if state.store_writes != before else PUBLISH_ROUTED

    def append_stream_run(self, q: Queue, msgs: list[RawMessage]) -> None:
        """``append_stream`` of each of ``msgs`` in order, in one call: the same counters (each
        counted as ``append_stream`` counts it, the one a ``RunInterrupted`` stopped at too) and
        records. Every message taken wrote (``PUBLISH_ROUTED | PUBLISH_WROTE``)."""
        state = self.state
        n = len(msgs)
        try:
            self.streams.append_run(q, msgs)
        except RunInterrupted as exc:
            n = exc.taken + 1
            raise
        finally:
            state.publishes += n
            (q._x or extras(q)).published += n

    def enqueue(self, q: Queue | LightConsumer | DelayedTarget, msg: Message, count: int = 0, persist: bool = True,
                queue_expires: float | None = None, resident: bool = False) -> bool:
        """Append ``msg`` to ``q``. ``persist=False`` is recovery: nothing is written back, and the
        queue's expiry of the message is the stored one (``queue_expires``). ``resident``: keep it in
        memory even past the window (recovery, when the store already paged the rest). False when a
        full queue with ``x-overflow`` reject-publish(-dlx) refused the message (AMQP confirms nack it)."""
        if type(q) is not Queue:
            if isinstance(q, LightConsumer):
                self.light.enqueue(q, msg)
            else:  # a delayed exchange holds it until it is due (``delayed``)
                q.hold(msg)  # type: ignore[union-attr]
            return True
        x = q._x or extras(q)  # read directly: the counters, and the arguments without the property
        if x.leader is not None:  # a cluster queue led by another node: it goes there
            return self.forward(q, msg)
        if persist:  # not recovery: a message published into the queue
            x.published += 1
        if q._f & STREAM_FLAG and persist:  # Queue.stream without the property (hot path)
            self.streams.append(q, msg)
            return True
        state = self.state
        expires = msg.expires_at
        args = x.args
        if args and persist and "x-overflow" in args and overflow(q, args) != "drop-head":
            if over_limits(q, args, 1, len(msg.body)):
                if args["x-overflow"] == "reject-publish-dlx":
                    self.dead_letter(q, Entry(msg, state.next_seq(), count), "maxlen")
                return False
        if args:
            cap = args.get("x-max-priority")
            if cap is not None and msg.priority > cap:  # RabbitMQ: above the maximum counts as it
                msg = Message(msg.id, msg.exchange, msg.routing_key, msg.headers, msg.body, cap,
                              msg.expires_at, msg.persistent, msg.ack_timeout)
            if persist:
                expires = queue_expiry(args, msg, state.now)
        if not persist and queue_expires is not None:
            expires = queue_expires  # recovered with this queue's own (x-message-ttl) expiry
        stored = q.stores(msg.persistent)
        if persist and stored:
            if expires is not None and expires != msg.expires_at:
                state.store.enqueue_expiring(q.vhost.name, q.name, msg, expires)
            else:
                state.store.enqueue(q.vhost.name, q.name, msg)
            state.store_write()
        if expires is not None and expires <= state.now:
            state.queued_bytes += len(msg.body)  # forget takes it off again
            self.expire(q, Entry(msg, state.next_seq(), count, expires))
            return True
        if q.paged or (not resident and (q.count - q.paged >= state.page_window or (
                q.count > q.paged and q.bytes + len(msg.body) > state.page_window_bytes)) and pageable(q)):
            self.pager.page_out(q, msg, count, expires, stored)
        else:
            entry = Entry(msg, state.next_seq(), count, expires)
            q.push(entry)
            state.queued_bytes += len(msg.body)  # in memory: counts towards the memory alarm
            if expires is not None:
                entry.timer = state.timers.add(expires, self.on_expiry, (q, entry))
        if args and ("x-max-length" in args or "x-max-length-bytes" in args):
            self.trim(q, args)  # drop-head (reject-publish never gets here over)
        state.dirty[q] = None
        return True

    def trim(self, q: Queue, args: dict[str, Any]) -> None:
        """Drop ``q``'s oldest ready messages (dead-lettered as ``maxlen``) while it is over its
        x-max-length / x-max-length-bytes."""
        while over_limits(q, args, 0, 0):
            head = self.pager.pop(q)
            if head is None:
                break
            self.remove(q, head, "maxlen")

    # -- leaving a queue dead ------------------------------------------------------------------------
    def remove(self, q: Queue, entry: Entry, reason: str) -> None:
        """``entry`` dies in ``q`` for ``reason``: forgotten there, dead-lettered onwards (at least
        once for the queues that say so: ``at_least_once``)."""
        if type(q) is Queue and q.quorum and at_least_once(q):
            self.at_least_once.dead(q, entry, reason)
            return
        state = self.state
        state.forget(q, entry)
        writes = state.store_writes
        self.dead_letter(q, entry, reason)
        if state.store_writes != writes:
            # at most once (RabbitMQ's default): the removal went first. It is made durable by the
            # sync that makes the copy durable, not left to ride along with a later one: else a power
            # cut after that sync brings the original back to die again, a second copy
            state.store.removals_must_sync()

    def expire(self, q: Queue, entry: Entry) -> None:
        self.remove(q, entry, "expired")

    def on_expiry(self, arg: tuple[Queue, Entry], now: float) -> None:
        """The expiry timer of a ready entry."""
        q, entry = arg
        entry.timer = None
        if entry.state == READY:
            q.count -= 1  # the entry stays in its deque, marked gone, and is skipped by pop()
            q.bytes -= len(entry.msg.body)
            self.expire(q, entry)
            q.drop_gone_heads(entry.msg.priority)

    def dead_letter(self, q: Queue, entry: Entry, reason: str) -> None:
        state = self.state
        dead = dead_letter(q, entry, reason, state.next_message_id, state.now)
        if dead is not None:
            msg, targets = dead
            for target in targets:
                try:
                    self.enqueue(target, msg)
                except StoreError as exc:
                    # dead-lettering is at most once (RabbitMQ's, for classic queues): a copy the
                    # store refuses (a full disk) is dropped, loudly. Raising here would escape an
                    # expiry timer or a trim and take the broker down with it.
                    store_log.error("dead-lettered message from queue '%s' dropped: %s", q.name, exc)


def _no_forward(q: Queue, msg: Message) -> bool:
    raise AssertionError(f"queue '{q.name}' is led by node {q.leader} but this node is not in a cluster")
