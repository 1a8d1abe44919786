"""The AMQP 0-9-1 bench client, built on amqpproto's client role.

One connection, one channel (1). Producers publish to the default exchange with the queue name as
routing key (queue mode) or to ``amq.topic`` with the topic as key (fanout mode, which is what
RabbitMQ's STOMP ``/topic/NAME`` does, so AMQP and STOMP runs route alike). Queues are declared
durable, as RabbitMQ's STOMP plugin declares ``/queue/NAME``, so the two protocols can share them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import amqpproto
from amqpproto import spec

from .options import Options
from .payload import Payload, now_us
from .stats import Stats
from .transport import BenchConnection, BrokerError

__all__ = ["AmqpClient"]

CH = 1
TOPIC_EXCHANGE = "amq.topic"
_NEED_DATA = amqpproto.NEED_DATA
_Publish = spec.BasicPublish
_Ack = spec.BasicAck


def _negotiate(theirs: int, ours: int) -> int:
    return max(theirs, ours) if theirs == 0 or ours == 0 else min(theirs, ours)


class AmqpClient(BenchConnection):
    """A producer or a consumer on its own connection."""

    def __init__(self, stats: Stats, name: str, opts: Options, payload: Payload) -> None:
        super().__init__(stats, name, opts.send_buffer)
        self.opts = opts
        self.payload = payload
        self.conn = amqpproto.Connection(amqpproto.CLIENT, heartbeat=0)
        # producer state
        self.exchange = ""
        self.routing_key = ""
        self.props = spec.encode_properties(spec.BasicProperties(
            delivery_mode=2 if opts.persistent else 1))
        self.confirming = False
        self.next_tag = 1
        self.pending: OrderedDict[int, int] = OrderedDict()  # delivery tag -> publish time (us)
        # consumer state
        self.no_ack = opts.ack == "auto"
        self.multi = opts.multi_ack
        self.unacked = 0
        self.last_tag = 0
        self._now = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            spec.BasicDeliver: self._on_deliver,
            spec.BasicAck: self._on_confirm,
            spec.BasicNack: self._on_nack,
            spec.BasicReturn: self._on_return,
            spec.ConnectionStart: self._on_start,
            spec.ConnectionTune: self._on_tune,
            spec.ConnectionClose: self._on_connection_close,
            spec.ConnectionCloseOk: self._on_close_ok,
            spec.ChannelClose: self._on_channel_close,
            spec.BasicCancel: self._on_cancel,
            amqpproto.Heartbeat: _ignore,
            amqpproto.ConnectionClosed: self._on_eof,
        }

    # -- receiving ---------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        conn = self.conn
        conn.receive_data(data)
        self._now = now_us()  # arrival time: every message in this read shares it
        handlers = self._handlers
        try:
            while (ev := conn.next_event()) is not _NEED_DATA:
                handler = handlers.get(type(ev))
                if handler is not None:
                    handler(ev)
                else:  # set-up replies (declare-ok, consume-ok, ...)
                    self.deliver_expected(ev)
                if self.failure is not None:
                    return
        except amqpproto.RemoteProtocolError as exc:
            hint = exc.hint
            if hint is not None and not isinstance(hint, amqpproto.ProtocolHeader):
                try:
                    self.write(conn.send(hint))
                except amqpproto.LocalProtocolError:
                    pass
            self.fail(f"protocol error from the broker: {exc}")

    def eof(self) -> None:
        self.feed(b"")

    def _on_eof(self, ev: Any) -> None:
        if not self.closing:
            raise BrokerError("the broker closed the connection without connection.close")

    def _on_start(self, ev: spec.ConnectionStart) -> None:
        o = self.opts
        self.write(self.conn.send(self.conn.start_ok(ev, o.user, o.password, "sansmq bench")))

    def _on_tune(self, ev: spec.ConnectionTune) -> None:
        conn = self.conn
        # heartbeat 0: a bench run is never idle long enough to need one
        self.write(conn.send(spec.ConnectionTuneOk(
            channel_max=_negotiate(ev.channel_max, 2047),
            frame_max=_negotiate(ev.frame_max, 131072), heartbeat=0)))
        self.write(conn.send(spec.ConnectionOpen(self.opts.vhost)))

    def _on_connection_close(self, ev: spec.ConnectionClose) -> None:
        try:
            self.write(self.conn.send(spec.ConnectionCloseOk()))
        except amqpproto.LocalProtocolError:
            pass
        self.fail(f"connection closed by the broker: {ev.reply_code} {ev.reply_text}")

    def _on_close_ok(self, ev: Any) -> None:
        if self.transport is not None:
            self.transport.close()

    def _on_channel_close(self, ev: spec.ChannelClose) -> None:
        try:
            self.write(self.conn.send(spec.ChannelCloseOk(channel=ev.channel)))
        except amqpproto.LocalProtocolError:
            pass
        self.fail(f"channel closed by the broker: {ev.reply_code} {ev.reply_text}")

    def _on_cancel(self, ev: Any) -> None:
        self.fail(f"the broker cancelled consumer {ev.consumer_tag!r}")

    def _on_return(self, ev: Any) -> None:
        self.stats.returned += 1

    def _on_deliver(self, ev: spec.BasicDeliver) -> None:
        if self.closing and not self.no_ack:
            return  # after our connection.close: not acked, so the broker requeues it
        stats = self.stats
        lat = self.payload.latency_us(ev.body, self._now)
        if lat < 0:
            stats.stale += 1
        else:
            stats.received += 1
            stats.window.record(lat)
        if not self.no_ack:
            self.last_tag = ev.delivery_tag
            self.unacked += 1
            if self.unacked >= self.multi:
                self.unacked = 0
                self.write(self.conn.send(_Ack(ev.delivery_tag, self.multi > 1, CH)))

    def _settle(self, tag: int, multiple: bool) -> list[int]:
        pending = self.pending
        if not multiple:
            t = pending.pop(tag, None)
            return [] if t is None else [t]
        times = []
        while pending:
            first = next(iter(pending))
            if first > tag:
                break
            times.append(pending.popitem(last=False)[1])
        return times

    def _on_confirm(self, ev: spec.BasicAck) -> None:
        times = self._settle(ev.delivery_tag, ev.multiple)
        if times:
            now = self._now
            hist = self.stats.confirm_window
            for t in times:
                hist.record((now - t) & 0xFFFFFFFF)  # stamps are microseconds mod 2**32
            self.stats.confirmed += len(times)
            self.progress.set()

    def _on_nack(self, ev: spec.BasicNack) -> None:
        n = len(self._settle(ev.delivery_tag, ev.multiple))
        if n:
            self.stats.nacked += n
            self.progress.set()

    # -- set-up ------------------------------------------------------------------------------
    async def open(self) -> None:
        await self.loop.create_connection(lambda: self, self.opts.host, self.opts.port)
        self.write(self.conn.send(amqpproto.ProtocolHeader()))
        await self.expect(spec.ConnectionOpenOk)
        self.write(self.conn.send(spec.ChannelOpen(channel=CH)))
        await self.expect(spec.ChannelOpenOk)

    async def _call(self, method: Any, reply: type) -> Any:
        self.write(self.conn.send(method))
        return await self.expect(reply)

    async def _declare(self, queue: str) -> None:
        await self._call(spec.QueueDeclare(queue=queue, durable=True, arguments=dict(self.opts.queue_args),
                                           channel=CH), spec.QueueDeclareOk)

    async def setup_producer(self, queue: str) -> None:
        o = self.opts
        if o.topic is not None:
            self.exchange, self.routing_key = TOPIC_EXCHANGE, o.topic
        else:
            await self._declare(queue)
            self.exchange, self.routing_key = "", queue
        if o.confirm:
            await self._call(spec.ConfirmSelect(channel=CH), spec.ConfirmSelectOk)
            self.confirming = True

    async def setup_consumer(self, queue: str) -> None:
        o = self.opts
        if o.prefetch:
            await self._call(spec.BasicQos(prefetch_count=min(o.prefetch, 65535), channel=CH),
                             spec.BasicQosOk)
        if o.topic is not None:
            ok = await self._call(spec.QueueDeclare(queue="", exclusive=True, auto_delete=True,
                                                    channel=CH), spec.QueueDeclareOk)
            queue = ok.queue
            await self._call(spec.QueueBind(queue=queue, exchange=TOPIC_EXCHANGE,
                                            routing_key=o.topic, channel=CH), spec.QueueBindOk)
        else:
            await self._declare(queue)
        await self._call(spec.BasicConsume(queue=queue, no_ack=self.no_ack, channel=CH),
                         spec.BasicConsumeOk)

    # -- publishing --------------------------------------------------------------------------
    @property
    def unconfirmed(self) -> int:
        return len(self.pending)

    def publish(self, n: int) -> None:
        """Publish ``n`` messages now (the caller respects the window and back-pressure)."""
        send, write, body = self.conn.send, self.write, self.payload.body
        exchange, key, props = self.exchange, self.routing_key, self.props
        confirming, pending = self.confirming, self.pending
        for _ in range(n):
            b = body()
            # props: encoded once (bytes), which send() accepts in place of BasicProperties
            write(send(_Publish(0, exchange, key, False, False, props, b, CH)))  # type: ignore[arg-type]
            if confirming:
                pending[self.next_tag] = int(b[:8], 16)
                self.next_tag += 1
        self.sent += n
        self.stats.sent += n

    # -- closing -----------------------------------------------------------------------------
    async def close(self, timeout: float = 5.0) -> None:
        if self.failure is not None or self.transport is None:
            return
        self.closing = True
        try:
            if self.unacked and not self.no_ack:
                self.write(self.conn.send(_Ack(self.last_tag, True, CH)))
                self.unacked = 0
            self.write(self.conn.send(spec.ConnectionClose(200, "bench done")))
        except amqpproto.LocalProtocolError:
            self.abort()
            return
        await self.finish(timeout)


def _ignore(ev: Any) -> None:
    pass
