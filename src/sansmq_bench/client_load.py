"""The AMQP and STOMP load connections, on ``sansmq_client.asyncio``'s low-overhead calls.

A producer publishes each burst with one ``publish_burst`` (encoded and written together) and keeps the
send stamp of every publish still unconfirmed; confirms come back as ``(number, multiple, error)``. A
consumer takes each socket read's deliveries in one ``subscribe_batches`` callback, stamped with one
arrival time (the latency is arrival minus the stamp in the body). The bench wants a failure to show,
so the client does not reconnect (``reconnect=false``); it asks for no heart-beats (a run is never idle:
STOMP has none then, AMQP the broker's interval, as a 0 from one side leaves the choice to the other).

Routing: AMQP producers publish to the default exchange with the queue name as routing key (queue mode)
or to ``amq.topic`` with the topic as key (fanout mode, which is what RabbitMQ's STOMP ``/topic/NAME``
does, so AMQP and STOMP runs route alike). Queues are declared durable, as RabbitMQ's STOMP plugin
declares ``/queue/NAME``, so the two protocols can share them. STOMP acks: ``client-individual``, or with
``--multi-ack N`` ``client`` with a cumulative ACK every Nth MESSAGE; with ``--receipt-every N`` every
Nth SEND asks for a RECEIPT, which covers every earlier SEND too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

import sansmq_client
import sansmq_client.asyncio
from sansmq_client import BasicProperties, Batch, ClientError, ConnectionLost, PublishNacked

from .options import Options
from .payload import Payload, now_us
from .stats import Stats
from .transport import BrokerError

__all__ = ["ClientLoad", "client_url"]

TOPIC_EXCHANGE = "amq.topic"
_MASK = 0xFFFFFFFF  # stamps are microseconds mod 2**32


def client_url(opts: Options) -> str:
    """The bench's connection as a sansmq_client URL: no reconnect, heart-beats 0, its send buffer."""
    vhost = "" if opts.vhost == "/" else quote(opts.vhost, safe="")
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    query = "heartbeat=0&reconnect=false" + (f"&send_buffer={opts.send_buffer}" if opts.send_buffer else "")
    return (f"{opts.protocol}://{quote(opts.user, safe='')}:{quote(opts.password, safe='')}@{host}:{opts.port}"
            f"/{vhost}?{query}")


class ClientLoad:
    """A producer or a consumer on its own connection."""

    def __init__(self, stats: Stats, name: str, opts: Options, payload: Payload) -> None:
        self.stats, self.name, self.opts, self.payload = stats, name, opts, payload
        self.amqp = opts.protocol == "amqp"
        self.conn: sansmq_client.asyncio.Connection | None = None
        self.failure: BrokerError | None = None
        self.closing = False  # we started an orderly close: what arrives now is not ours to count
        self.progress = asyncio.Event()  # set on every confirm/receipt (producers wait on it)
        self.sent = 0  # messages this connection published
        # producer
        self.target = ""
        self.publish_options: dict[str, Any] = {}
        self.confirming = bool(opts.confirm if self.amqp else opts.receipt_every)
        self.pending: OrderedDict[int, int] = OrderedDict()  # number -> send stamp (us), while unconfirmed
        # consumer
        self.no_ack = opts.ack == "auto"
        self.multi = opts.multi_ack
        self.unacked = 0
        self.last: tuple[Batch, Any] | None = None  # the last delivery not acked yet (multi-ack)

    # -- failures: recorded once, then the run stops ------------------------------------------
    def fail(self, text: str) -> None:
        if self.failure is None:
            self.failure = BrokerError(text)
            self.stats.error(f"{self.name}: {text}")
            self.progress.set()  # wake a producer waiting for its window: it sees the failure

    def _ended(self, error: BaseException | None) -> None:
        if error is not None and not self.closing:
            self.fail(str(error))

    # -- set-up ------------------------------------------------------------------------------
    async def open(self) -> None:
        o = self.opts
        try:
            self.conn = await sansmq_client.asyncio.connect(client_url(o))
        except ConnectionLost as exc:
            self.fail(f"cannot connect to {o.host}:{o.port}: {exc}")
            raise self.failure or BrokerError(str(exc)) from None
        except ClientError as exc:  # the log-in refused
            self.fail(str(exc))
            raise self.failure or BrokerError(str(exc)) from None

    async def _setup(self, queue: str, consumer: bool) -> None:
        try:
            await (self._setup_consumer if consumer else self._setup_producer)(queue)
        except ClientError as exc:
            self.fail(str(exc))
            raise self.failure or BrokerError(str(exc)) from None

    async def setup_producer(self, queue: str) -> None:
        await self._setup(queue, False)

    async def setup_consumer(self, queue: str) -> None:
        await self._setup(queue, True)

    async def _declare(self, queue: str) -> None:
        assert self.conn is not None
        await self.conn.declare_queue(queue, durable=True, arguments=dict(self.opts.queue_args))

    async def _setup_producer(self, queue: str) -> None:
        o = self.opts
        if not self.amqp:
            self.target = f"/topic/{o.topic}" if o.topic is not None else f"/queue/{queue}"
            if o.persistent:
                self.publish_options = {"headers": {"persistent": "true"}}
            return
        if o.topic is not None:
            self.target, self.publish_options["exchange"] = o.topic, TOPIC_EXCHANGE
        else:
            await self._declare(queue)
            self.target = queue
        self.publish_options["properties"] = BasicProperties(delivery_mode=2 if o.persistent else 1)

    async def _setup_consumer(self, queue: str) -> None:
        o, conn = self.opts, self.conn
        assert conn is not None
        if not self.amqp:
            source = f"/topic/{o.topic}" if o.topic is not None else f"/queue/{queue}"
        elif o.topic is not None:
            source = await conn.declare_queue("", exclusive=True, auto_delete=True)
            await conn.bind_queue(source, TOPIC_EXCHANGE, o.topic)
        else:
            await self._declare(queue)
            source = queue
        # the subscription exists (consume-ok / RECEIPT) before any producer starts
        await conn.subscribe_batches(source, self._on_batch, prefetch=min(o.prefetch, 65535), auto_ack=self.no_ack,
                                     cumulative=self.multi > 1, on_end=self._ended)

    # -- publishing --------------------------------------------------------------------------
    @property
    def unconfirmed(self) -> int:
        return len(self.pending)

    async def publish(self, n: int) -> None:
        """Publish ``n`` messages now (the caller respects the window); waits while the socket is behind."""
        assert self.conn is not None
        body = self.payload.body
        bodies = [body() for _ in range(n)]
        first = self.sent + 1  # the client numbers a connection's publishes 1, 2, ...: all of them ours
        if self.confirming:
            pending = self.pending
            for number, b in enumerate(bodies, first):
                pending[number] = int(b[:8], 16)
        self.sent += n
        self.stats.sent += n
        try:
            await self.conn.publish_burst(self.target, bodies, on_confirm=self._on_confirm if self.confirming else None,
                                          confirm_every=self.opts.receipt_every, **self.publish_options)
        except ClientError as exc:
            self.fail(str(exc))

    def _on_confirm(self, number: int, multiple: bool, error: BaseException | None) -> None:
        pending = self.pending
        if multiple:
            times = []
            while pending and next(iter(pending)) <= number:
                times.append(pending.popitem(last=False)[1])
        else:
            t = pending.pop(number, None)
            times = [] if t is None else [t]
        if not times:
            return
        if error is None:
            now, hist = now_us(), self.stats.confirm_window
            # a confirm is per message (AMQP); a receipt (STOMP) times the one SEND that asked for it
            for t in times if self.amqp else times[-1:]:
                hist.record((now - t) & _MASK)
            self.stats.confirmed += len(times)
        elif isinstance(error, PublishNacked):
            self.stats.nacked += len(times)
        else:
            self.fail(str(error))
        self.progress.set()

    # -- consuming ---------------------------------------------------------------------------
    def _on_batch(self, batch: Batch) -> None:
        if self.closing and not self.no_ack:
            return  # after our close: not acked, so the broker requeues them
        stats, latency, now = self.stats, self.payload.latency_us, now_us()  # one arrival time per read
        record = stats.window.record
        for b in batch.bodies:
            lat = latency(b, now)
            if lat < 0:
                stats.stale += 1
            else:
                stats.received += 1
                record(lat)
        if self.no_ack:
            return
        multi = self.multi
        if multi == 1:
            batch.ack_each()
            return
        for ack_id in batch.ack_ids:
            self.unacked += 1
            if self.unacked >= multi:
                self.unacked = 0
                batch.ack(ack_id, multiple=True)
                self.last = None
            else:
                self.last = (batch, ack_id)

    # -- closing -----------------------------------------------------------------------------
    async def close(self, timeout: float = 5.0) -> None:
        if self.conn is None:
            return
        if self.last is not None and self.failure is None:  # cumulative: covers the rest
            batch, ack_id = self.last
            batch.ack(ack_id, multiple=True)
            self.last = None
        self.closing = True
        try:  # (after a failure too: a channel error leaves the connection open)
            await asyncio.wait_for(self.conn.close(), timeout)
        except (ClientError, TimeoutError):
            pass
