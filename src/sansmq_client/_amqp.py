"""One AMQP 0-9-1 connection of the client, on amqpproto: log-in, channels, confirms, consumers,
restoring the topology and consumers the Core remembers, and turning broker closes into errors.

Channels have one job each, so a soft error harms only that job: channel 1 carries declarations
(reopened after an error), channel 2 publishes in confirm mode (reopened; its unconfirmed publishes
fail), every consumer and every transaction gets its own channel."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import amqpproto as amqp
from amqpproto import spec

from ._bulk import BatchSink, BurstConfirms, OnConfirm
from ._errors import (
    BrokerClosedConnection,
    ChannelClosed,
    ConnectionClosedByUser,
    ConnectionLost,
    ConsumerCancelled,
    PublishNacked,
    Unroutable,
)
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from ._session import Session, TxRecord

__all__ = ["AmqpSession", "DECLARE_METHODS"]

log = logging.getLogger("sansmq_client")

CONTROL, PUBLISH = 1, 2
#: the Core's declaration kinds and the method each sends (keyword arguments are the method's fields)
DECLARE_METHODS: dict[str, type[Any]] = {
    "exchange": spec.ExchangeDeclare, "queue": spec.QueueDeclare, "bind": spec.QueueBind,
    "unbind": spec.QueueUnbind, "exchange_bind": spec.ExchangeBind, "delete_queue": spec.QueueDelete,
    "delete_exchange": spec.ExchangeDelete, "purge": spec.QueuePurge,
}
#: broker closes after which reconnecting makes sense (the broker restarting, an operator's kick)
TRANSIENT_CLOSE = frozenset({spec.CONNECTION_FORCED})
_Rpc = tuple[tuple[type, ...], Pending[Any]]


def method_name(class_id: int, method_id: int) -> str:
    cls = spec.METHODS.get((class_id << 16) | method_id)
    return cls.NAME if cls is not None else ("" if not class_id else f"{class_id}/{method_id}")


class AmqpSession(Session):
    NEED_DATA = amqp.NEED_DATA
    REMOTE_ERROR = amqp.RemoteProtocolError
    DELIVERY = spec.BasicDeliver

    def __init__(self, core: Any, now: float) -> None:
        super().__init__(core)
        # AMQP negotiates whole seconds: round a fraction up, never down to 0 (= off)
        self.conn = amqp.Connection(amqp.CLIENT, heartbeat=math.ceil(max(0.0, self.params.heartbeat)))
        self.rpcs: dict[int, deque[_Rpc]] = {}
        self.held: dict[int, list[Any]] = {}  # methods waiting for their channel's open-ok
        self.confirms: dict[int, Pending[None] | None] = {}
        self.seq = 0
        self.server_properties: dict[str, Any] = {}  # the broker's connection.start
        self.returned: list[spec.BasicReturn] = []  # mandatory publishes returned, their confirm still to come
        self.bursts = BurstConfirms()  # confirms of publish_burst: ranges, not one Pending per message
        self.unconfirmed_channel: int | None = None  # bursts nobody confirms: no confirm mode, nothing back
        self.consumers: dict[int, ConsumerRecord] = {}
        self.transactions: dict[int, TxRecord] = {}
        self.free_channels: set[int] = set()
        self.next_channel = 3
        self.close_pending: Pending[None] | None = None
        self._send(amqp.ProtocolHeader(), now)

    # -- output ---------------------------------------------------------------------------
    def _send(self, event: Any, now: float) -> None:
        self.out += self.conn.send(event, now=now)

    def _send_on(self, method: Any, now: float) -> None:
        """Send now, or after the channel's open-ok if it is still opening."""
        held = self.held.get(method.channel)
        if held is not None:
            held.append(method)
        else:
            self._send(method, now)

    def _rpc(self, method: Any, now: float) -> Pending[Any]:
        p: Pending[Any] = Pending()
        self.rpcs.setdefault(method.channel, deque()).append((spec.RESPONSES[type(method)], p))
        self._send_on(method, now)
        return p

    def _open_channel(self, channel: int, now: float) -> Pending[Any]:
        p = self._rpc(spec.ChannelOpen(channel=channel), now)
        self.held[channel] = []
        return p

    def _free(self, ch: int) -> None:
        """Reuse a channel number once its close handshake is complete (not while it is crossing ours)."""
        if self.conn.channel_state(ch) is amqp.ChannelState.CH_CLOSED:
            self.free_channels.add(ch)

    def _take_channel(self) -> int:
        if self.free_channels:
            return self.free_channels.pop()
        self.next_channel += 1
        return self.next_channel - 1

    # -- input ----------------------------------------------------------------------------
    def protocol_error(self, exc: Exception, now: float) -> None:
        if isinstance(exc, amqp.RemoteProtocolError) and exc.hint is not None and not exc.fatal:
            self.out += self.conn.send(exc.hint, now=now)  # tell the broker what was wrong with its bytes
        super().protocol_error(exc, now)

    def _handle(self, event: Any, now: float) -> None:
        match event:
            case spec.BasicAck() | spec.BasicNack() if event.channel == PUBLISH:
                self._confirm(event)
            case amqp.HeartbeatDue():
                self._send(amqp.Heartbeat(), now)
            case amqp.PeerTimedOut():
                self.end(ConnectionLost("the broker stopped sending heart-beats"))
            case amqp.ConnectionClosed():
                self.end(ConnectionLost("the broker closed the socket"))
            case spec.ConnectionStart():
                self.server_properties = event.server_properties or {}
                start_ok = self.conn.start_ok(event, self.params.user, self.params.password, "sansmq_client")
                if self.params.name:
                    start_ok.client_properties["connection_name"] = self.params.name
                self._send(start_ok, now)
            case spec.ConnectionTune():
                self._send(self.conn.tune_ok(event), now)
                self._send(spec.ConnectionOpen(virtual_host=self.params.vhost), now)
            case spec.ConnectionOpenOk():
                self._restore(now)
            case spec.ConnectionClose():
                self._send(spec.ConnectionCloseOk(), now)
                self._broker_closed(event)
            case spec.ConnectionCloseOk():
                self.end(ConnectionClosedByUser("the connection was closed"), fatal=True)
                if self.close_pending is not None:
                    self.close_pending.resolve(None)
            case spec.ChannelClose():
                self._send(spec.ChannelCloseOk(channel=event.channel), now)
                self._channel_closed(event, now)
            case spec.BasicCancel():  # the broker ended a consumer (its queue was deleted, ...)
                consumer = self.consumers.pop(event.channel, None)
                if consumer is not None:
                    self.core.forget_consumer(consumer)
                    consumer.end(ConsumerCancelled(f"the broker cancelled consumer {consumer.tag}"))
                    self._close_channel(event.channel, "consumer cancelled by the broker")
            case spec.BasicReturn() if event.channel == PUBLISH:  # before the confirm of the same publish
                self.returned.append(event)
            case amqp.Heartbeat() | spec.ConnectionBlocked() | spec.ConnectionUnblocked() | spec.BasicReturn():
                pass
            case _:
                self._reply(event, now)

    def _reply(self, method: Any, now: float) -> None:
        queue = self.rpcs.get(method.channel)
        if not queue or not isinstance(method, queue[0][0]):
            return  # e.g. the close-ok of a channel we closed without waiting
        _, pending = queue.popleft()
        if isinstance(method, spec.ChannelOpenOk):
            for held in self.held.pop(method.channel, []):
                self._send(held, now)
        pending.resolve(method)

    # -- the handshake's end: channels, topology and consumers come back ---------------------
    def _restore(self, now: float) -> None:
        self._open_channel(CONTROL, now)
        self._open_channel(PUBLISH, now)
        for kind, args in self.core.topology.values():
            self._rpc(DECLARE_METHODS[kind](**args, channel=CONTROL), now).add_done_callback(
                self._log_refusal(kind, args))
        self.restore_consumers(now)
        self._rpc(spec.ConfirmSelect(channel=PUBLISH), now).add_done_callback(self._ready)

    def _log_refusal(self, kind: str, args: dict[str, Any]) -> Callable[[Pending[Any]], None]:
        def check(p: Pending[Any]) -> None:
            if p.error is not None and self.error is None:  # refused now (e.g. declared differently meanwhile)
                log.warning("sansmq_client: restoring %s %s after a reconnect failed: %s", kind, args, p.error)
        return check

    def _ready(self, p: Pending[Any]) -> None:
        if p.error is None:
            self.ready.resolve(None)

    # -- errors ---------------------------------------------------------------------------
    def _broker_closed(self, close: spec.ConnectionClose) -> None:
        method = method_name(close.class_id, close.method_id)
        # The broker names the method, not the channel: it is the one whose reply we still wait for.
        cls = spec.METHODS.get((close.class_id << 16) | close.method_id)
        channel = 0 if close.class_id == 10 else next(
            (ch for ch, q in self.rpcs.items() if q and cls is not None and cls in _requests(q[0][0])), None)
        error = BrokerClosedConnection(close.reply_code, close.reply_text, method, channel)
        if close.reply_code in TRANSIENT_CLOSE:  # the client reconnects: in flight means lost, as on a reset
            lost = ConnectionLost(f"connection lost: {error}")
            lost.__cause__ = error
            self.end(lost)
        else:
            self.end(error, fatal=True)

    def _channel_closed(self, close: spec.ChannelClose, now: float) -> None:
        ch = close.channel
        error = ChannelClosed(close.reply_code, close.reply_text, method_name(close.class_id, close.method_id), ch)
        self.held.pop(ch, None)
        for _, pending in self.rpcs.pop(ch, ()):
            pending.fail(error)
        if ch == CONTROL:
            self._open_channel(CONTROL, now)
        elif ch == PUBLISH:
            self._fail_confirms(error)
            self.seq = 0
            self._open_channel(PUBLISH, now)
            self._rpc(spec.ConfirmSelect(channel=PUBLISH), now)
        else:
            consumer = self.consumers.pop(ch, None)
            if consumer is not None:
                self.core.forget_consumer(consumer)
                consumer.end(error)
            tx = self.transactions.pop(ch, None)
            if tx is not None:  # whatever the transaction does next raises this, not a codec complaint
                tx.error = error
            if ch == self.unconfirmed_channel:  # the next burst opens another
                self.unconfirmed_channel = None
            self._free(ch)

    def fail_in_flight(self, error: BaseException) -> None:
        for queue in self.rpcs.values():
            for _, pending in queue:
                pending.fail(error)
        self.rpcs.clear()
        self._fail_confirms(error)
        if self.close_pending is not None:
            self.close_pending.fail(error)

    def _fail_confirms(self, error: BaseException) -> None:
        self.bursts.fail_all(error)
        confirms, self.confirms = self.confirms, {}
        for pending in confirms.values():
            if pending is not None:
                pending.fail(error)

    # -- publishing -------------------------------------------------------------------------
    def publish(self, target: str, body: bytes, headers: dict[str, Any], options: dict[str, Any],
                confirm: bool, tx: TxRecord | None, now: float) -> Pending[None]:
        props = _properties(headers, options)
        if tx is not None and tx.error is not None:
            raise tx.error
        channel = tx.channel if tx is not None else PUBLISH
        self._send_on(spec.BasicPublish(exchange=options.get("exchange", ""), routing_key=target,
                                        mandatory=False, properties=props, body=body, channel=channel), now)
        if tx is not None:
            return Pending.resolved(None)  # settled by the commit
        self.seq += 1
        pending: Pending[None] = Pending() if confirm else Pending.resolved(None)
        self.confirms[self.seq] = pending if confirm else None
        return pending

    def publish_encoded(self, frames: bytes, outcome: Pending[None]) -> None:
        """Publishes already encoded as frames on the publish channel (``sansmq_client.bulk``), written
        as they are; ``outcome`` is resolved once per confirm of one of them, or failed."""
        self.out += frames
        seq = self.seq
        count = getattr(outcome, "count", 1)
        self.confirms.update(dict.fromkeys(range(seq + 1, seq + count + 1), outcome))
        self.seq = seq + count

    def publish_burst(self, target: str, bodies: Sequence[bytes], headers: dict[str, Any], options: dict[str, Any],
                      first_number: int, on_confirm: OnConfirm | None, confirm_every: int, now: float) -> Pending[None]:
        props = spec.encode_properties(_properties(headers, options))  # once for the burst: send() takes bytes
        channel = PUBLISH if on_confirm is not None else self._unconfirmed(now)
        exchange, publish, held = options.get("exchange", ""), spec.BasicPublish, self.held.get(channel)
        if held is not None:  # the channel is (re)opening: after its open-ok
            held.extend(publish(0, exchange, target, False, False, props, body, channel) for body in bodies)
        else:
            send = self.conn.send
            self.out += b"".join([send(publish(0, exchange, target, False, False, props, body, channel))
                                  for body in bodies])
        if on_confirm is None:
            return _DONE
        first = self.seq + 1
        self.seq += len(bodies)
        self.bursts.add(first, self.seq, first_number - first, on_confirm)  # (confirm_every is STOMP's)
        return _DONE

    def _unconfirmed(self, now: float) -> int:
        """The channel of bursts published without on_confirm, opened on first use: not in confirm mode, so
        the broker sends nothing back for them (no reads, no work on either side)."""
        if self.unconfirmed_channel is None:
            self.unconfirmed_channel = self._take_channel()
            self._open_channel(self.unconfirmed_channel, now)
        return self.unconfirmed_channel

    def _confirm(self, method: spec.BasicAck | spec.BasicNack) -> None:
        upto = method.delivery_tag
        if self.bursts.ranges:
            self.bursts.settle(method.delivery_tag, method.multiple, None if isinstance(method, spec.BasicAck)
                               else PublishNacked(f"the broker nacked publish #{method.delivery_tag}"))
        # confirms are kept in publish order: a multiple one settles a prefix, found without scanning the rest
        tags = list(itertools.takewhile(upto.__ge__, self.confirms)) if method.multiple else [upto]
        # RabbitMQ sends a publish's basic.return just before its confirm: one of these was returned (which,
        # a multiple confirm does not say), so each fails: a publish is never reported taken when it was not
        ret, self.returned = (self.returned[0] if self.returned else None), []
        for tag in tags:
            pending = self.confirms.pop(tag, None)
            if pending is None:
                continue
            if ret is not None:
                pending.fail(Unroutable(f"a publish up to #{upto} was returned: {ret.reply_code} {ret.reply_text} "
                                        f"(exchange {ret.exchange!r}, routing key {ret.routing_key!r})"))
            elif isinstance(method, spec.BasicAck):
                pending.resolve(None)
            else:
                pending.fail(PublishNacked(f"the broker nacked publish #{tag}"))

    # -- consuming ------------------------------------------------------------------------
    def subscribe(self, consumer: ConsumerRecord, now: float) -> Pending[None]:
        ch = self._take_channel()
        self.consumers[ch] = consumer
        self._open_channel(ch, now)
        if consumer.prefetch:
            self._rpc(spec.BasicQos(prefetch_count=consumer.prefetch, channel=ch), now)
        arguments = dict(consumer.arguments)
        if (offset := consumer.resume_offset()) is not None:
            arguments["x-stream-offset"] = offset
        ok = self._rpc(spec.BasicConsume(queue=consumer.source, consumer_tag=consumer.tag, no_ack=consumer.auto_ack,
                                         arguments=arguments, channel=ch), now)
        done: Pending[None] = Pending()
        ok.add_done_callback(lambda p: done.fail(p.error) if p.error else done.resolve(None))
        return done

    def channel_of(self, consumer: ConsumerRecord) -> int | None:
        return next((ch for ch, c in self.consumers.items() if c is consumer), None)

    def ack_upto(self, consumer: ConsumerRecord, tag: int, now: float) -> None:
        """Ack every delivery of ``consumer`` up to ``tag`` (one basic.ack multiple: a bulk reader's credit)."""
        ch = self.channel_of(consumer)
        if ch is not None:
            self._send_on(spec.BasicAck(delivery_tag=tag, multiple=True, channel=ch), now)

    def cancel(self, consumer: ConsumerRecord, now: float) -> Pending[None]:
        ch = self.channel_of(consumer)
        if ch is None:
            return Pending.resolved(None)
        del self.consumers[ch]  # closing its channel ends it; the broker requeues what it had unacked
        return self._close_channel(ch, "consumer cancelled")

    def _expect(self, channel: int, reply: type) -> Pending[Any]:
        p: Pending[Any] = Pending()
        self.rpcs.setdefault(channel, deque()).append(((reply,), p))
        return p

    def _deliver(self, m: spec.BasicDeliver) -> None:
        consumer = self.consumers.get(m.channel)
        if consumer is None:
            return
        if consumer.batch is not None:
            self.add_to_batch(m.channel, consumer, m, m.body, m.delivery_tag)
            return
        headers = dict(m.properties.headers or {})
        offset = headers.get("x-stream-offset")
        delivery = Delivery(m.body, headers, consumer, m.redelivered, m.routing_key, m.exchange, m.properties,
                            offset if isinstance(offset, int) else None, m.delivery_tag, self.generation)
        if consumer.auto_ack and delivery.offset is not None:
            consumer.last_offset = delivery.offset
        consumer.on_delivery(delivery)

    def settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None, now: float) -> None:
        ch = self.channel_of(delivery.consumer)
        if ch is None:  # its consumer's channel is gone: the broker already requeued the message
            return
        tag = delivery.ack_id
        method = (spec.BasicAck(delivery_tag=tag, channel=ch) if how == "ack" else
                  spec.BasicNack(delivery_tag=tag, requeue=requeue, channel=ch) if how == "nack" else
                  spec.BasicReject(delivery_tag=tag, requeue=requeue, channel=ch))
        self._send_on(method, now)

    def settle_raw(self, route: Any, sink: BatchSink, ack_id: Any, how: str, multiple: bool, requeue: bool) -> None:
        if route in self.consumers:  # else its channel is gone, and the broker requeued the message
            self.out += self.conn.send(spec.BasicAck(ack_id, multiple, route) if how == "ack" else
                                       spec.BasicNack(ack_id, multiple, requeue, route))

    def ack_each(self, route: Any, ack_ids: list[Any]) -> None:
        if route in self.consumers:
            send, ack = self.conn.send, spec.BasicAck
            self.out += b"".join([send(ack(tag, False, route)) for tag in ack_ids])

    def stream_offset(self, event: Any) -> int | None:
        offset = (event.properties.headers or {}).get("x-stream-offset")
        return offset if isinstance(offset, int) else None

    # -- declarations and transactions ---------------------------------------------------------
    def declare(self, kind: str, args: dict[str, Any], now: float) -> Pending[Any]:
        return self._rpc(DECLARE_METHODS[kind](**args, channel=CONTROL), now)

    def tx_begin(self, tx: TxRecord, now: float) -> Pending[None]:
        tx.channel = self._take_channel()
        self.transactions[tx.channel] = tx
        self._open_channel(tx.channel, now)
        return self._rpc(spec.TxSelect(channel=tx.channel), now)

    def tx_end(self, tx: TxRecord, commit: bool, now: float) -> Pending[None]:
        if tx.error is not None:
            raise tx.error
        method = spec.TxCommit(channel=tx.channel) if commit else spec.TxRollback(channel=tx.channel)
        done = self._rpc(method, now)

        def over(p: Pending[Any]) -> None:
            # Close the channel only after the answer: once closing, the codec drops what arrives on it.
            if self.transactions.pop(tx.channel, None) is not None and self.error is None:
                self._close_channel(tx.channel, "transaction over")
        done.add_done_callback(over)
        return done

    def _close_channel(self, ch: int, why: str) -> Pending[Any]:
        self._send_on(spec.ChannelClose(reply_code=spec.REPLY_SUCCESS, reply_text=why, channel=ch), self.core.clock())
        done = self._expect(ch, spec.ChannelCloseOk)
        done.add_done_callback(lambda p: self._free(ch))
        return done

    def close(self, now: float) -> Pending[None]:
        self.close_pending = Pending()
        self._send(spec.ConnectionClose(reply_code=spec.REPLY_SUCCESS, reply_text="bye"), now)
        return self.close_pending


_DONE: Pending[None] = Pending.resolved(None)


def _properties(headers: dict[str, Any], options: dict[str, Any]) -> spec.BasicProperties:
    props = options.get("properties") or spec.BasicProperties()
    if headers:  # on a copy: the caller's properties may be shared by many publishes
        props = dataclasses.replace(props, headers={**(props.headers or {}), **headers})
    return props


def _requests(replies: tuple[type, ...]) -> set[type]:
    """The request methods whose answer is one of ``replies`` (spec.RESPONSES read backwards)."""
    return {req for req, answers in spec.RESPONSES.items() if set(answers) & set(replies)}
