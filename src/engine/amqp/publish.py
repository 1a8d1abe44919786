"""The channel's publishing side: basic.publish (properties checked as RabbitMQ checks them),
routing through the model, basic.return for unroutable mandatory messages, and publisher confirms
(held until the store's sync, coalesced into one basic.ack when a sync releases many)."""

from __future__ import annotations

from functools import partial

from amqpproto import PublishRun, RawProperties, spec

from .._message import Message
from .._mypyc import interpreted_class
from .._props import props_to_headers
from .._raw_message import RawMessage
from ..model import PUBLISH_REFUSED, PUBLISH_ROUTED, PUBLISH_WROTE, Exchange, Queue, VHost
from ..model.security import check_topic_access
from ..store import StoreError
from ..streams import RunInterrupted
from .base import REPLY_TO, ChannelBase
from .errors import AmqpConnectionError, ChannelError
from .permissions import permit_publish
from .properties import message_props
from .replies import expiration_ms
from .stream_shapes import stream_shape

__all__ = ["PublishMethods", "Confirm"]


class Confirm:
    """Publisher confirms held until the store's sync: the ``n`` sequence numbers up to ``seq``
    (a run of publishes one sync covers holds one Confirm, not one each). Acked then (coalesced
    when one sync releases many), nacked when the messages were refused or the sync failed."""

    __slots__ = ("chan", "seq", "refused", "n")

    def __init__(self, chan: PublishMethods, seq: int, refused: bool) -> None:
        self.chan = chan
        self.seq = seq
        self.refused = refused
        self.n = 1

    def __call__(self) -> None:
        chan = self.chan
        session = chan.session
        if session.channels.get(chan.id) is not chan:
            return
        if self.refused:
            chan.nack(self.seq)
            return
        n = self.n
        session.model.confirmed += n
        if session.batching is not None:  # released by a sync: coalesce
            chan.ack_upto = self.seq
            chan.ack_batch += n
            session.batching[chan] = None
        else:
            chan.send(spec.BasicAck(self.seq, n > 1))

    def fail(self) -> None:
        chan = self.chan
        if chan.session.channels.get(chan.id) is chan:
            chan.nack(self.seq, self.n > 1)


@interpreted_class
class PublishMethods(ChannelBase):
    __slots__ = ()

    # -- basic: publishing --------------------------------------------------------------------------
    def _target(self, m: spec.BasicPublish | PublishRun) -> Exchange:
        """The exchange ``m`` publishes to, once the publisher may (errors as RabbitMQ's)."""
        if m.immediate:  # dropped from RabbitMQ 3.0: a hard error there too
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "immediate=true", spec.BasicPublish)
        permit_publish(self.session.access, m.exchange, spec.BasicPublish)
        x = self._exchange(m.exchange, spec.BasicPublish)
        if x.internal:
            raise ChannelError(spec.ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}' in "
                               f"vhost '{self.vhost.name}'", spec.BasicPublish)
        if x.type == "topic":  # the test here: a publish to any other exchange pays nothing more
            check_topic_access(self.session.access, x, m.routing_key, "write")
        return x

    def on_publish_run(self, run: PublishRun) -> None:
        """Publishes of one method in a row (the codec's ``PublishRun``): checked once, as each of
        them would be; those the stream's raw path takes appended to its log a run at a time
        (``_append_run``), the others published as the one ``BasicPublish`` each stands for (in order)."""
        x = self._target(run)
        session = self.session
        stream = session.model.stream_by_key(self.vhost, x, run.routing_key)
        props = run.properties
        bodies = run.bodies
        raw = stream is not None and self._raw_allowed()
        msgs: list[RawMessage] = []
        for i in range(len(props)):
            msg = self._raw_message(x, run.routing_key, props[i], bodies[i]) if raw else None
            if msg is not None:
                msgs.append(msg)
                continue
            if msgs:  # those before it first: answers and records keep the publishes' order
                self._append_run(x, run.mandatory, stream, msgs)  # type: ignore[arg-type]
                msgs = []
            self._publish(x, spec.BasicPublish(run.ticket, run.exchange, run.routing_key, run.mandatory,
                                               run.immediate, props[i], bodies[i], run.channel))
            if session.channels.get(self.id) is not self:
                return  # closed by one of them (its error): the rest go with the channel, as they would have
        if msgs:
            self._append_run(x, run.mandatory, stream, msgs)  # type: ignore[arg-type]

    def _append_run(self, x: Exchange, mandatory: bool, stream: Queue, msgs: list[RawMessage]) -> None:
        """``_route`` of each of ``msgs`` (the raw path's) to ``stream``, the log appending them in
        one call: the same records, counters and confirms. A store error stops the run: the message
        it stopped at is answered as ``_route`` answers one, the rest go one at a time as before."""
        model = self.session.model
        before = model.store_writes
        try:
            model.append_stream_run(stream, msgs)
            taken = len(msgs)
        except RunInterrupted as exc:
            taken = exc.taken
            failed = exc
        if self.confirm:
            wrote = model.store_writes != before
            if taken:
                self._hold_confirms(self.pub_seq + 1, self.pub_seq + taken, wrote)
                self.pub_seq += taken
        if taken == len(msgs):
            return
        if not self.confirm:
            raise failed.__cause__ or failed  # nobody to nack: the session closes the connection with 541
        self.pub_seq += 1
        self._hold_confirm(self.pub_seq, False, True)  # refused, nothing of it written (as ``_route``)
        for msg in msgs[taken + 1:]:
            self.pub_seq += 1
            self._route(x, msg, mandatory, self.pub_seq, None, stream)

    def on_publish(self, m: spec.BasicPublish) -> None:
        x = self._target(m)
        props = m.properties
        if type(props) is RawProperties:  # kept as received by the codec: appended as it is if it can be
            stream = self.session.model.stream_by_key(self.vhost, x, m.routing_key)
            if stream is not None and self._append_raw(x, m.routing_key, m.mandatory, props, m.body, stream):
                return
        self._publish(x, m)

    def _publish(self, x: Exchange, m: spec.BasicPublish) -> None:
        """The general path of ``m`` to ``x`` (checked by ``_target``)."""
        session = self.session
        vhost = self.vhost
        props = m.properties
        if type(props) is RawProperties:
            props = props.view()  # read here, never changed
        now = session.host.now
        headers = props_to_headers(props)
        priority = 0
        expires_at = None
        persistent = False
        if props is not None:
            if props.priority is not None:
                priority = props.priority  # an octet; only queues with x-max-priority use it
            if props.expiration is not None:
                ms = expiration_ms(props.expiration, type(m))
                expires_at = now + ms / 1000.0
            persistent = props.delivery_mode == 2
            if props.user_id is not None and session.user is not None and props.user_id != session.user.name \
                    and not session.relay:
                raise ChannelError(spec.PRECONDITION_FAILED, f"user_id property set to '{props.user_id}' but "
                                   f"authenticated user was '{session.user.name}'", type(m))
            reply_to = props.reply_to
            if reply_to == REPLY_TO:
                name = getattr(session, "reply_to", None)
                if name is None:
                    raise ChannelError(spec.PRECONDITION_FAILED, "fast reply consumer does not exist", type(m))
                headers["reply-to"] = name
        msg = Message(session.model.next_message_id(), x.name, m.routing_key, headers, m.body, priority,
                      expires_at, persistent)
        key = None
        if session.relay:  # routed by a cluster peer (engine.cluster.link): into the queue it named,
            key = m.routing_key  # with the route its publisher gave restored
            msg = session.relayed(msg)
        mandatory = m.mandatory
        if self.confirm:
            self.pub_seq += 1
        seq = self.pub_seq if self.confirm else 0
        if self.tx is None:  # the common case, without a closure per message
            stream = None
            if vhost.trace is None and not priority and key is None:  # else the general path: firehose,
                stream = session.model.sole_stream(vhost, x, msg)  # per-queue priority, a peer's relay
            self._route(x, msg, mandatory, seq, key, stream)
        else:
            self.tx.append(partial(self._route, x, msg, mandatory, seq, key))

    def _raw_allowed(self) -> bool:
        """The raw path is off while the firehose, a transaction or a cluster relay is on."""
        return self.tx is None and self.vhost.trace is None and not self.session.relay

    def _raw_message(self, x: Exchange, routing_key: str, props: RawProperties, body: bytes) -> RawMessage | None:
        """The publish as the stream's raw path appends it, with its properties as published;
        None when its property shape needs the general path (``stream_shapes``)."""
        shape = props.shape
        reading = shape.memo
        if reading is None:
            reading = shape.memo = stream_shape(shape) or False
        if reading is False:
            return None
        pid = reading.publishing_id
        if reading.varying:
            pid = props.varying()
            if pid < 0:
                return None  # the general path refuses it
        return RawMessage(self.session.model.next_message_id(), x.name, routing_key, props.raw, body,
                          reading.persistent, reading.producer, pid, reading.filter)

    def _append_raw(self, x: Exchange, routing_key: str, mandatory: bool, props: RawProperties, body: bytes,
                    stream: Queue) -> bool:
        """The stream append's fast path: a publish appended to ``stream`` (the one queue it reaches,
        by the default exchange) with its properties as published (``_raw_message``), unless
        ``_raw_allowed`` says no. False: not taken."""
        if not self._raw_allowed():
            return False
        msg = self._raw_message(x, routing_key, props, body)
        if msg is None:
            return False
        if self.confirm:
            self.pub_seq += 1
        self._route(x, msg, mandatory, self.pub_seq if self.confirm else 0, None, stream)
        return True

    def _route(self, x: Exchange, msg: Message, mandatory: bool, seq: int, key: str | None = None,
               stream: Queue | None = None) -> None:
        """Publish ``msg`` (straight to ``stream`` when it is the one queue it reaches: the stream
        append's own path; by ``key`` when a cluster peer routed it) and hold its confirm."""
        session = self.session
        model = session.model
        before = model.store_writes
        try:
            if key is not None and _led_elsewhere(self.vhost, key):
                # a peer's message for a queue this node no longer leads: nacked (the peer's
                # publisher is, or its dead letter is kept), never forwarded on, since a peer's
                # confirm goes out on this node's own commit (``Session.durable_locally``)
                result = PUBLISH_REFUSED
            elif stream is not None:
                result = model.append_stream(stream, msg)
            else:
                result = model.publish(self.vhost, x, msg, True,
                                       self.trace_origin() if self.vhost.trace is not None else None, key=key)
        except StoreError:
            if not seq:
                raise  # nobody to nack: the session closes the connection with 541
            # disk full / I/O error: a confirm-mode publisher gets a nack, as RabbitMQ's
            result = PUBLISH_ROUTED | PUBLISH_REFUSED | (PUBLISH_WROTE if model.store_writes != before else 0)
        if key is not None and not result:
            result = PUBLISH_REFUSED  # a peer's message for a queue not here (yet): nacked, never dropped
        if mandatory and not result:
            self.send(spec.BasicReturn(spec.NO_ROUTE, "NO_ROUTE", x.name, msg.routing_key, message_props(msg),
                                       msg.body))
        if seq:
            self._hold_confirm(seq, bool(result & PUBLISH_WROTE), bool(result & PUBLISH_REFUSED))

    def _hold_confirm(self, seq: int, wrote: bool, refused: bool) -> None:
        """Confirm ``seq`` after the sync of what its publish wrote: joined to this channel's
        Confirm held last when that one ends at ``seq - 1`` and is released by the same sync (a
        pipelining publisher holds one per read, not one per message)."""
        session = self.session
        if not refused:
            last = session.held_last(wrote)
            if type(last) is Confirm and last.chan is self and last.seq == seq - 1 and not last.refused:
                last.seq = seq
                last.n += 1
                return
        session.after_sync(wrote, Confirm(self, seq, refused))

    def _hold_confirms(self, first: int, last: int, wrote: bool) -> None:
        """``_hold_confirm`` of ``first`` to ``last``: the rest folded into the Confirm held for
        ``first`` at once when each of them would be folded into it in turn."""
        self._hold_confirm(first, wrote, False)
        if last == first:
            return
        held = self.session.held_last(wrote)
        if type(held) is Confirm and held.chan is self and held.seq == first and not held.refused:
            held.n += last - first
            held.seq = last
            return
        for seq in range(first + 1, last + 1):  # released at once (no sync to wait for): each acked
            self._hold_confirm(seq, wrote, False)

    def nack(self, seq: int, multiple: bool = False) -> None:
        self.flush_confirms()  # acks released before it keep their place in the sequence
        self.send(spec.BasicNack(seq, multiple, False))

    def flush_confirms(self) -> None:
        """Send the coalesced acks: every sequence number up to ``ack_upto`` not yet confirmed
        (confirms are released in publish order, so none of them is missing)."""
        if self.ack_batch:
            n, self.ack_batch = self.ack_batch, 0
            if self.session.channels.get(self.id) is self:
                self.send(spec.BasicAck(self.ack_upto, n > 1))

    def on_confirm_select(self, m: spec.ConfirmSelect) -> None:
        if self.tx is not None:
            raise ChannelError(spec.PRECONDITION_FAILED, "cannot switch from tx to confirm mode", type(m))
        self.confirm = True
        if not m.nowait:
            self.send(spec.ConfirmSelectOk())


def _led_elsewhere(vhost: VHost, name: str) -> bool:
    q = vhost.queues.get(name)
    return q is not None and q.leader is not None
