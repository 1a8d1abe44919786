"""The state an AMQP channel keeps and what all its method handlers share: the session it
belongs to (``ChannelOwner``), its deliveries, prefetch, confirm and transaction state, the
lookups of queues and exchanges with RabbitMQ's errors, and the model consumers it creates.

The handlers live in modules of their own (``topology``, ``consume``, ``acks``, ``publish``), each
a subclass of :class:`ChannelBase`; ``channel.AmqpChannel`` puts them together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import amqpproto
from amqpproto import spec

from .._message import Entry, Message
from .._mypyc import interpreted_class, mypyc_attr
from .._session import Host
from ..model import Consumer, ConsumerOwner, Exchange, Model, Queue, VHost
from ..model.origin import session_origin
from ..model.security import UserAccess, UserRecord
from ..streams import RawRecord
from .errors import ChannelError

__all__ = ["ChannelBase", "ChannelOwner", "AmqpConsumer", "GetHolder", "REPLY_TO"]

#: direct reply-to: the pseudo-queue a client consumes and the reply-to property naming it
REPLY_TO = "amq.rabbitmq.reply-to"


class ChannelOwner(ConsumerOwner, Protocol):
    """What a channel uses of its connection's session (``AmqpSession``)."""

    host: Host
    model: Model
    conn: amqpproto.Connection
    peer: tuple[Any, ...]
    vhost: VHost | None
    user: UserRecord | None
    #: the user's permissions in ``vhost`` (set by connection.open)
    access: UserAccess
    #: exclusive queues of the connection (deleted with it); None until the first
    exclusive: dict[Queue, None] | None
    reply_to: str | None
    cancel_notify: bool
    #: while a read is handled or a store sync releases held confirms: channels with acks to coalesce
    batching: dict[ChannelBase, None] | None
    #: a cluster peer's link: publishes carry their original route (``relayed`` restores it)
    relay: bool

    def relayed(self, msg: Message) -> Message: ...

    @property
    def channels(self) -> Mapping[int, ChannelBase]:
        """The connection's open channels by number (a channel checks it is still one of them)."""

    def channel_closed(self, channel_id: int) -> None:
        """The channel is gone from the connection (channel.close or close-ok)."""

    def send(self, event: Any) -> None: ...

    def own_exclusive(self, q: Queue) -> None:
        """``q`` is one of the connection's exclusive queues (deleted with it)."""

    def write(self, data: bytes) -> None: ...

    def after_sync(self, wrote: bool, thunk: Callable[[], None]) -> None: ...

    def held_last(self, wrote: bool) -> Callable[[], None] | None: ...

    def channel_timed_out(self, chan: ChannelBase, timeout_ms: int) -> None: ...

    def fail_channel(self, chan: ChannelBase, exc: ChannelError) -> None:
        """Close ``chan`` with ``exc`` outside the handling of a method (a timer, a peer's answer)."""


@mypyc_attr(allow_interpreted_subclasses=True)  # the simulator extends it
class AmqpConsumer(Consumer):
    __slots__ = ("channel", "tag", "exclusive", "priority", "timeout")

    def __init__(self, queue: Queue, channel: ChannelBase, prefetch: int, auto_ack: bool, tag: str,
                 exclusive: bool = False, priority: int = 0) -> None:
        super().__init__(queue, channel.session, prefetch, auto_ack)
        self.channel = channel
        self.tag = tag
        self.exclusive = exclusive
        self.priority = priority
        #: the consumer timeout of its deliveries in seconds (0.0: none), looked up once: queue
        #: arguments and the broker's limits do not change while the consumer exists
        self.timeout = channel._timeout_ms(queue) / 1000.0

    def ready(self) -> bool:
        chan = self.channel
        if chan.global_prefetch and len(chan.unacked) >= chan.global_prefetch:
            return False
        if chan.flow_paused:
            return False
        return Consumer.ready(self)

    def trace_origin(self) -> tuple[str, str, int]:
        return self.channel.trace_origin()


class GetHolder(Consumer):
    """Holds basic.get deliveries awaiting ack (never registered on the queue)."""

    __slots__ = ("channel",)
    channel: ChannelBase

    def trace_origin(self) -> tuple[str, str, int]:
        return self.channel.trace_origin()



@interpreted_class
class ChannelBase:
    __slots__ = ("session", "id", "consumers", "unacked", "next_tag", "prefetch", "global_prefetch",
                 "confirm", "pub_seq", "tx", "getters", "flow_paused", "timeout_key", "ack_upto",
                 "ack_batch", "origin")

    def __init__(self, session: ChannelOwner, channel_id: int) -> None:
        self.session = session
        self.id = channel_id
        self.consumers: dict[str, AmqpConsumer] = {}
        #: channel delivery tag -> (model consumer, model tag, ack deadline or 0.0); tag order
        self.unacked: dict[int, tuple[Consumer, int, float]] = {}
        self.next_tag = 0
        self.prefetch = 0  # basic.qos global=false: for consumers created afterwards
        self.global_prefetch = 0  # basic.qos global=true: shared by the channel's consumers
        self.confirm = False
        self.pub_seq = 0
        #: buffered publishes/acks of an open transaction (None: not transactional)
        self.tx: list[Callable[[], None]] | None = None
        #: basic.get's holder per queue; None until the first basic.get
        self.getters: dict[Queue, GetHolder] | None = None
        self.flow_paused = False
        #: the consumer-timeout timer, armed while deliveries with a deadline are unacked
        self.timeout_key: tuple[float, int] | None = None
        #: publisher confirms released together (by one read, or one store sync): the highest
        #: sequence number and how many, sent as one basic.ack with multiple=true (as RabbitMQ)
        self.ack_upto = 0
        self.ack_batch = 0
        #: (user, connection, channel) for the firehose, once it traced this channel's work (the
        #: login and the peer are settled before any channel opens)
        self.origin: tuple[str, str, int] | None = None


    # -- plumbing -----------------------------------------------------------------------------------
    @property
    def vhost(self) -> VHost:
        vhost = self.session.vhost
        assert vhost is not None
        return vhost

    def send(self, m: Any) -> None:
        if self.ack_batch:  # coalesced confirms keep their place before the channel's next method
            self.flush_confirms()
        m.channel = self.id
        self.session.send(m)

    def _queue(self, name: str, method: type) -> Queue:
        q = self.vhost.queues.get(name)
        if q is None:
            raise ChannelError(spec.NOT_FOUND, f"no queue '{name}' in vhost '{self.vhost.name}'", method)
        self._check_exclusive(q, method)
        return q

    def _check_exclusive(self, q: Queue, method: type) -> None:
        if q.exclusive_owner is not None and q.exclusive_owner is not self.session:
            self._locked(q, method)

    def _locked(self, q: Queue, method: type) -> None:
        raise ChannelError(spec.RESOURCE_LOCKED, f"cannot obtain exclusive access to locked queue '{q.name}' "
                           f"in vhost '{self.vhost.name}'. It could be originally declared on another "
                           "connection or the exclusive property value does not match that of the original "
                           "declaration.", method)

    def _exchange(self, name: str, method: type) -> Exchange:
        x = self.vhost.exchanges.get(name)
        if x is None:
            raise ChannelError(spec.NOT_FOUND, f"no exchange '{name}' in vhost '{self.vhost.name}'", method)
        return x

    def trace_origin(self) -> tuple[str, str, int]:
        """(user, connection, channel) in the firehose's trace messages (RabbitMQ's header values)."""
        origin = self.origin
        if origin is None:
            origin = self.origin = session_origin(self.session, self.id)
        return origin

    def _timeout_ms(self, q: Queue) -> int:
        """x-consumer-timeout of the queue, else Limits.consumer_timeout (ms; 0 = none)."""
        if q.args is not None and "x-consumer-timeout" in q.args:
            return int(q.args["x-consumer-timeout"])
        return self.session.host.config.limits.consumer_timeout

    # -- what the handler classes provide (consume.ConsumeMethods, publish.PublishMethods) ----
    def deliver(self, consumer: AmqpConsumer, tag: int, entry: Entry) -> None:
        raise NotImplementedError

    def deliver_stream(self, consumer: AmqpConsumer, first_tag: int, records: list[RawRecord], stamp: bool) -> int:
        raise NotImplementedError

    def consumer_cancelled(self, consumer: AmqpConsumer) -> None:
        raise NotImplementedError

    def flush_confirms(self) -> None:
        raise NotImplementedError
