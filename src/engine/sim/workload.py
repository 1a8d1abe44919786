"""Generated clients of the simulated broker: publishers (AMQP with and without confirms, STOMP with
receipts, also over WebSocket), consumers (AMQP with prefetch, acks, nacks with requeue, rejects,
cancels; STOMP with client-individual acks), a TTL queue and a stream consumer reading offsets. Each actor reconnects on
its next step after its connection went down, and reports what it sees to the ``Oracle``."""

from __future__ import annotations

from collections import deque
from typing import Any

import stompproto
from amqpproto import spec

from .oracle import Oracle, Violation, body_for
from .world import SimWorld

__all__ = ["DEAD", "DELAYED", "DLQ", "PRIO", "QUEUES", "STREAM", "TTL", "TXQ", "Actor", "AmqpPublisher",
           "Consumer", "Refused", "make_actors"]

#: "ttl" has a message TTL (seconds); "dl" dead-letters (rejected, expired, over its max length)
#: into "dead"; "prio" has priorities; "qd" is fed by the delayed exchange; "qtx" by transactions
TTL = 3.0
DLQ, DEAD, PRIO, DELAYED, TXQ = "dl", "dead", "prio", "qd", "qtx"
#: classic durable queues (every one is drained and checked at the end)
QUEUES = ("q0", "q1", "ttl", DLQ, DEAD, PRIO, DELAYED, TXQ)
STREAM = "s0"
#: the heartbeat of the consumer that goes half-open (s); the broker gives up after two
HEARTBEAT = 10
#: the delayed exchange (RabbitMQ's x-delayed-message plugin), bound to DELAYED by its name
DELAY_EXCHANGE = "xdelay"
_ARGS: dict[str, dict[str, Any]] = {
    "q0": {}, "q1": {}, "ttl": {"x-message-ttl": int(TTL * 1000)},
    DLQ: {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": DEAD, "x-max-length": 4,
          "x-message-ttl": int(TTL * 1000)},
    DEAD: {}, PRIO: {"x-max-priority": 9}, DELAYED: {}, TXQ: {},
    STREAM: {"x-queue-type": "stream"},
}


def declare_topology(c: Any) -> None:
    """Send the declarations of every queue, the delayed exchange and its binding on channel 1."""
    for name, args in _ARGS.items():
        c.send(spec.QueueDeclare(queue=name, durable=True, arguments=args, channel=1))
    c.send(spec.ExchangeDeclare(exchange=DELAY_EXCHANGE, type="x-delayed-message", durable=True,
                                arguments={"x-delayed-type": "direct"}, channel=1))
    c.send(spec.QueueBind(queue=DELAYED, exchange=DELAY_EXCHANGE, routing_key=DELAYED, channel=1))


def declare_all(world: SimWorld) -> None:
    """The topology, declared by a short-lived admin connection (every actor re-declares it too)."""
    c: Any = world.connect("amqp")
    c.amqp_open()
    c.open_channel(1)
    declare_topology(c)
    world.run()
    c.close()
    world.run()


class Refused(Exception):
    """The broker refused a client's connection (after a media fault: lost users)."""


class Actor:
    """One client role; ``client`` is None until its first step and after its connection died."""

    protocol = "amqp"
    #: the heartbeat (seconds) an AMQP actor asks for (0: none)
    heartbeat = 0

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        self.name = name
        self.world = world
        self.oracle = oracle
        self.client: Any = None
        self._cursor = 0
        self._closed = False  # the broker closed our channel or connection (an ack timeout, a failed sync)
        #: half-open since (a fault): the client neither reads nor sends heartbeats nor acts
        self.frozen_at: float | None = None

    # -- connection ------------------------------------------------------------------------------
    def alive(self) -> bool:
        c = self.client
        return (c is not None and not self._closed and not c.gone and not c.server_closed and c.error is None
                and getattr(c, "amqp_error", None) is None and getattr(c, "ws_error", None) is None
                and c.net is self.world.net)

    def freeze(self) -> None:
        """The peer goes half-open: it stops reading and heart-beating (and acting)."""
        if self.alive():
            self.client.stop_reading()
            self.client.auto_heartbeat = False
            self.frozen_at = self.world.now

    def closed_by_broker(self) -> bool:
        c = self.client
        return (c is None or c.net is not self.world.net or c.server_closed
                or c.conn_id not in self.world.broker.sessions)

    def ensure(self) -> bool:
        """Connect (again) unless connected; whether the connection is usable now."""
        if self.frozen_at is not None:
            if not self.closed_by_broker():
                return False  # a half-open peer does nothing until the broker gives up on it
            self.frozen_at = None
        self.collect()  # an ERROR or a close that arrived meanwhile
        if self.alive():
            return True
        if self.client is not None:
            self.lost()
            if self.client.net is self.world.net:
                self.client.drop()
        self.client = self.connect()
        self._cursor = 0
        self._closed = False
        self.setup()
        self.world.run()
        self.collect()
        return self.alive()

    def connect(self) -> Any:
        return self.world.connect(self.protocol)

    def setup(self) -> None:
        c = self.client
        opened = c.amqp_open(heartbeat=self.heartbeat)
        if not isinstance(opened, spec.ConnectionOpenOk):
            raise Refused(f"{self.name}: the broker refused the connection: {opened}")
        c.open_channel(1)
        declare_topology(c)

    def lost(self) -> None:
        """The connection went down: what it held is no longer ours."""

    def drop(self) -> None:
        if self.alive():
            self.client.drop()
            self.world.run()
        self.collect()

    # -- events ----------------------------------------------------------------------------------
    def collect(self) -> None:
        c = self.client
        if c is None:
            return
        new = c.received[self._cursor:]
        self._cursor = len(c.received)
        for ev in new:
            if isinstance(ev, (spec.ChannelClose, spec.ConnectionClose, stompproto.Error)):
                self._closed = True
            self.on_event(ev)

    def on_event(self, ev: Any) -> None:
        pass

    def step(self, op: str, arg: int) -> None:
        raise NotImplementedError


class AmqpPublisher(Actor):
    """Persistent publishes to one of the queues or the stream, with or without confirms."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle, confirms: bool) -> None:
        super().__init__(name, world, oracle)
        self.confirms = confirms
        self._tags: dict[int, int] = {}  # delivery tag -> message id
        self._next_tag = 1

    def setup(self) -> None:
        super().setup()
        self._tags.clear()
        self._next_tag = 1
        if self.confirms:
            self.client.send(spec.ConfirmSelect(channel=1))

    def publish(self, mid: int, queue: str) -> None:
        if not self.ensure():
            return
        self.oracle.publish(mid, queue, self.name, self.world.now, TTL if queue == "ttl" else None,
                            **self.published_as(mid, queue))
        self.send_message(mid, queue)

    def send_message(self, mid: int, queue: str) -> None:
        exchange, key = self.route(queue)
        self.client.send(spec.BasicPublish(exchange=exchange, routing_key=key, body=body_for(mid), channel=1,
                                           properties=self.properties(mid, queue)))
        self.sent(mid)

    def published_as(self, mid: int, queue: str) -> dict[str, Any]:
        """What the oracle needs to know of this publish beyond its queue (priority, delay...)."""
        return {"dead_to": DEAD} if queue == DLQ else {}

    def route(self, queue: str) -> tuple[str, str]:
        return "", queue

    def properties(self, mid: int, queue: str) -> spec.BasicProperties:
        return spec.BasicProperties(delivery_mode=2)

    def sent(self, mid: int) -> None:
        if self.confirms:
            self._tags[self._next_tag] = mid
            self._next_tag += 1

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, (spec.BasicAck, spec.BasicNack)):
            tags = [t for t in self._tags if t <= ev.delivery_tag] if ev.multiple else [ev.delivery_tag]
            for t in tags:
                mid = self._tags.pop(t, None)
                if mid is not None and isinstance(ev, spec.BasicAck):
                    self.confirmed(mid)
                elif mid is not None:
                    self.nacked(mid)

    def confirmed(self, mid: int) -> None:
        self.oracle.confirm(mid)

    def nacked(self, mid: int) -> None:
        """The broker refused ``mid`` (a failing disk): this publisher does not try again."""

    def lost(self) -> None:
        self._tags.clear()  # never answered: the publisher does not know (it would republish)

    def unanswered(self) -> int:
        return len(self._tags) if self.alive() else 0


class StompPublisher(Actor):
    """Persistent SENDs with receipts."""

    protocol = "stomp"

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle)
        self._waiting: set[int] = set()

    def setup(self) -> None:
        self._waiting.clear()
        connected = self.client.stomp_connect()
        if not isinstance(connected, stompproto.Connected):
            raise Refused(f"{self.name}: the broker refused the connection: {connected}")

    def publish(self, mid: int, queue: str) -> None:
        if not self.ensure():
            return
        self.oracle.publish(mid, queue, self.name, self.world.now, TTL if queue == "ttl" else None)
        self._waiting.add(mid)
        self.client.send(stompproto.Send({"destination": f"/amq/queue/{queue}", "persistent": "true",
                                          "receipt": f"m{mid}"}, body_for(mid)))

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, stompproto.Receipt):
            mid = int(ev.headers["receipt-id"][1:])
            if mid in self._waiting:
                self._waiting.discard(mid)
                self.oracle.confirm(mid)

    def lost(self) -> None:
        self._waiting.clear()

    def unanswered(self) -> int:
        return len(self._waiting) if self.alive() else 0


class WsStompPublisher(StompPublisher):
    """The same over WebSocket (``/ws``, subprotocol v12.stomp): each frame one message."""

    def connect(self) -> Any:
        return self.world.net.connect_ws()


class Consumer(Actor):
    """A consumer of one queue: ``step`` acks, nacks (requeue), rejects some of its oldest unacked
    deliveries, or cancels (and next time consumes again); the protocol parts are the subclass's."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle, queue: str, prefetch: int) -> None:
        super().__init__(name, world, oracle)
        self.queue = queue
        self.prefetch = prefetch
        self.unacked: deque[tuple[Any, int]] = deque()  # (protocol's ack handle, message id)
        self.consuming = False

    def lost(self) -> None:
        self.unacked.clear()

    def check_prefetch(self, unacked: int) -> None:
        """More unacked deliveries than the prefetch allows is a violation (a slow reader too)."""
        if self.prefetch and unacked > self.prefetch:
            raise Violation("prefetch", f"{self.name}: {unacked} unacked deliveries, prefetch {self.prefetch}")

    def consume(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    def settle_one(self, op: str, handle: Any) -> bool:
        """Send ``op`` for one delivery; whether that settles it (removes it from the queue)."""
        raise NotImplementedError

    def step(self, op: str, arg: int) -> None:
        if not self.ensure():
            return
        if op == "cancel":
            if self.consuming:
                self.cancel()
            else:
                self.consume()
            return
        settled = []
        for _ in range(min(arg, len(self.unacked))):
            handle, mid = self.unacked.popleft()
            # a reject in a dead-lettering queue moves the message, not settles it
            if self.settle_one(op, handle) and not (op == "reject" and self.queue == DLQ):
                settled.append(mid)
        self.world.run()
        if self.queue != STREAM:  # a stream's ack only gives credit back
            for mid in settled:
                self.oracle.settle(mid, self.alive())


class AmqpConsumer(Consumer):
    """basic.consume with a prefetch on one queue (the stream: from ``first``, offsets checked)."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle, queue: str, prefetch: int) -> None:
        super().__init__(name, world, oracle, queue, prefetch)
        #: each basic.consume gets a new tag: deliveries to a cancelled one may still arrive
        self._generation = 0
        self._last_offset: dict[str, int] = {}  # consumer tag -> the last stream offset it got
        self._consumer_of: dict[int, str] = {}  # delivery tag -> consumer tag
        self.first_offset: int | None = None  # the first stream offset this consumer got

    def setup(self) -> None:
        super().setup()
        self.unacked.clear()
        self._last_offset.clear()
        self._consumer_of.clear()
        self.client.send(spec.BasicQos(prefetch_count=self.prefetch, channel=1))
        self.consume()

    def consume(self) -> None:
        args = {"x-stream-offset": "first"} if self.queue == STREAM else {}
        self._generation += 1
        self.client.send(spec.BasicConsume(queue=self.queue, consumer_tag=f"c{self._generation}", arguments=args,
                                           channel=1))
        self.consuming = True

    def cancel(self) -> None:
        self.client.send(spec.BasicCancel(consumer_tag=f"c{self._generation}", channel=1))
        self.consuming = False

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, spec.BasicDeliver):
            offset = None
            if self.queue == STREAM:
                offset = (ev.properties.headers or {}).get("x-stream-offset")
            last = self._last_offset.get(ev.consumer_tag)
            mid = self.oracle.deliver(self.queue, ev.body, ev.redelivered, offset, last, now=self.world.now,
                                      headers=ev.properties.headers)
            if offset is not None:
                if self.first_offset is None:
                    self.first_offset = offset
                self._last_offset[ev.consumer_tag] = offset
            self.unacked.append((ev.delivery_tag, mid))
            self._consumer_of[ev.delivery_tag] = ev.consumer_tag
            # RabbitMQ's prefetch (global=false) is per consumer: a cancelled one keeps its unacked
            mine = sum(1 for tag, _ in self.unacked if self._consumer_of.get(tag) == ev.consumer_tag)
            self.check_prefetch(mine)
        elif isinstance(ev, spec.BasicCancel):
            self.consuming = False

    def settle_one(self, op: str, handle: Any) -> bool:
        if op == "ack":
            self.client.send(spec.BasicAck(delivery_tag=handle, channel=1))
        elif op == "nack":
            self.client.send(spec.BasicNack(delivery_tag=handle, requeue=True, channel=1))
        else:
            self.client.send(spec.BasicReject(delivery_tag=handle, requeue=False, channel=1))
        return op != "nack"


class HeartbeatConsumer(AmqpConsumer):
    """An AMQP consumer with heartbeats: the one that can go half-open or stall its heartbeats."""

    heartbeat = HEARTBEAT


class StompConsumer(Consumer):
    """SUBSCRIBE with ack client-individual and a prefetch; ACK and NACK (requeue)."""

    protocol = "stomp"

    def setup(self) -> None:
        self.unacked.clear()
        connected = self.client.stomp_connect()
        if not isinstance(connected, stompproto.Connected):
            raise Refused(f"{self.name}: the broker refused the connection: {connected}")
        self.consume()

    def consume(self) -> None:
        self.client.send(stompproto.Subscribe({"destination": f"/amq/queue/{self.queue}", "id": "s",
                                               "ack": "client-individual", "prefetch-count": str(self.prefetch)}))
        self.consuming = True

    def cancel(self) -> None:
        self.client.send(stompproto.Unsubscribe({"id": "s"}))
        self.consuming = False
        self.unacked.clear()  # RabbitMQ requeues a cancelled STOMP subscription's unacked

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, stompproto.Message):
            mid = self.oracle.deliver(self.queue, ev.body, ev.headers.get("redelivered") == "true",
                                      now=self.world.now)
            self.unacked.append((ev.headers["ack"], mid))
            self.check_prefetch(len(self.unacked))

    def settle_one(self, op: str, handle: Any) -> bool:
        if op == "ack":
            self.client.send(stompproto.Ack({"id": handle}))
            return True
        self.client.send(stompproto.Nack({"id": handle}))  # nack and reject: STOMP NACK requeues
        return False


def make_actors(world: SimWorld, oracle: Oracle) -> dict[str, Actor]:
    return {
        "pc": AmqpPublisher("pc", world, oracle, confirms=True),
        "pn": AmqpPublisher("pn", world, oracle, confirms=False),
        "ps": StompPublisher("ps", world, oracle),
        "pw": WsStompPublisher("pw", world, oracle),
        "c0": HeartbeatConsumer("c0", world, oracle, "q0", prefetch=5),
        "c1": StompConsumer("c1", world, oracle, "q1", prefetch=3),
        "ct": AmqpConsumer("ct", world, oracle, "ttl", prefetch=2),
        "cs": AmqpConsumer("cs", world, oracle, STREAM, prefetch=10),
    }

