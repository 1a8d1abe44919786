"""Helpers of the pipeline suite: a broker handle, stream set-up and reading back, with our client."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from amqpproto import spec
from pipeline.client import Client
from pipeline.offsets import offset_of

_ids = itertools.count()


@dataclass(frozen=True)
class Broker:
    url: str
    dedup: bool  # producer deduplication (x-producer/x-publishing-id): sansmq yes, RabbitMQ no
    name: str
    #: the vhost's firehose is on (sansmq serve --trace /); RabbitMQ's needs rabbitmqctl trace_on
    firehose: bool = False

    def stream(self, prefix: str, **arguments: object) -> str:
        """A fresh stream with a unique name (and queue ``arguments`` such as retention)."""
        name = f"{prefix}-{os.getpid()}-{next(_ids)}"
        with Client(self.url) as c:
            c.declare(name, {"x-queue-type": "stream", **arguments})
        return name

    def publish(self, stream: str, bodies: list[bytes], headers: dict[str, object] | None = None) -> None:
        with Client(self.url, timeout=120) as c:
            c.confirm_select()
            c.publish_bodies("", stream, spec.encode_properties(
                spec.BasicProperties(headers=headers, content_type="text/plain")), bodies)

    def read_all(self, stream: str, expect: int, timeout: float = 30.0) -> list[tuple[int, bytes, dict]]:
        """(offset, body, headers) of the stream's first ``expect`` messages; fails if fewer arrive."""
        out: list[tuple[int, bytes, dict]] = []
        with Client(self.url, timeout=timeout) as c:
            c.qos(1000)
            c.consume(stream, {"x-stream-offset": "first"})
            while len(out) < expect:
                d = c.next_delivery()
                assert d is not None, f"only {len(out)} of {expect} messages in {stream}"
                c.ack(d.delivery_tag)
                out.append((offset_of(d.properties.headers), d.body, d.properties.headers or {}))
        return out

    def first(self, stream: str) -> int:
        """The first offset retention kept."""
        from pipeline.offsets import stream_first

        with Client(self.url) as c:
            return stream_first(c, stream, self.end(stream))

    def end(self, stream: str) -> int:
        from pipeline.offsets import stream_end

        with Client(self.url) as c:
            return stream_end(c, stream, 300)


class TrafficRecorder:
    """Real traffic through the broker's classic queues, into a trace stream: the broker's own
    firehose when it has one on (the stream is bound to amq.rabbitmq.trace while the traffic runs),
    else recorded by the clients in the firehose's format (routing key ``publish.<exchange>`` /
    ``deliver.<queue>``, RabbitMQ's trace headers plus ``timestamp_in_ms``) and appended by ``flush``.

    Work queues ``orders`` and ``billing`` (bound to amq.topic), and ``retry`` whose rejected
    messages are dead-lettered to ``parked``: deliveries, redeliveries and dead letters all happen
    on the broker, the recorder writes down what it saw and when.
    """

    def __init__(self, broker: Broker, trace: str) -> None:
        self.broker, self.trace = broker, trace
        self.tag = f"{os.getpid()}-{next(_ids)}"
        self.queues = {q: f"{q}-{self.tag}" for q in ("orders", "billing", "retry", "parked")}
        self.records: list[tuple[str, dict[str, object], bytes]] = []

    def _record(self, routing_key: str, headers: dict[str, object], body: bytes) -> None:
        import time

        if self.broker.firehose:
            return  # the broker traces it

        headers["timestamp_in_ms"] = int(time.time() * 1000)
        headers["node"] = "pipeline-test"
        if not self.broker.dedup:
            # RabbitMQ 3.10's streams drop table and array header values over AMQP 0-9-1: store them
            # as the source would flatten them (dotted keys, arrays as JSON)
            from pipeline.source import flat_headers

            headers = dict(flat_headers(headers))
        self.records.append((routing_key, headers, body))

    def run(self, messages: int) -> dict[str, int]:
        """Publish ``messages`` to amq.topic, consume them all; returns counts for the assertions."""
        q = self.queues
        counts = {"published": 0, "redelivered": 0, "dead_letters": 0}
        with Client(self.broker.url) as c:
            if self.broker.firehose:
                c.bind(self.trace, "amq.rabbitmq.trace", "#")
            c.declare(q["orders"], durable=False)
            c.declare(q["billing"], durable=False)
            c.declare(q["parked"], durable=False)
            c.declare(q["retry"], {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q["parked"]},
                      durable=False)
            c.bind(q["orders"], "amq.topic", f"orders.{self.tag}.*")
            c.bind(q["billing"], "amq.topic", f"billing.{self.tag}")
            c.bind(q["retry"], "amq.topic", f"retry.{self.tag}")
            c.confirm_select()
            for i in range(messages):
                kind = ("orders", "orders", "orders", "billing", "retry")[i % 5]
                rk = f"orders.{self.tag}.{('eu', 'us', 'asia')[i % 3]}" if kind == "orders" else f"{kind}.{self.tag}"
                body = b"x" * (16 << (i % 7))
                mid = f"m-{self.tag}-{i}"
                c.publish("amq.topic", rk, spec.BasicProperties(message_id=mid), body)
                self._record("publish.amq.topic", {"exchange_name": "amq.topic", "routing_keys": [rk],
                                                   "properties": {"message_id": mid},
                                                   "routed_queues": [q[kind]]}, body)
                counts["published"] += 1
            c.wait_confirms(c.published)
            c.qos(100)
            for name in ("orders", "billing", "retry"):
                self._drain(c, name, counts)
            self._drain(c, "parked", counts)
        return counts

    def _drain(self, c: Client, name: str, counts: dict[str, int]) -> None:
        queue = self.queues[name]
        tag = c.consume(queue)
        first_deliveries = 0
        while (d := c.next_delivery(1.0)) is not None:
            p = d.properties
            mid = p.message_id or ""
            props: dict[str, object] = {"message_id": mid}
            if p.headers and "x-first-death-queue" in p.headers:
                props["headers"] = {"x-first-death-queue": p.headers["x-first-death-queue"]}
            self._record(f"deliver.{queue}", {"exchange_name": d.exchange, "routing_keys": [d.routing_key],
                                              "properties": props, "redelivered": int(d.redelivered)}, d.body)
            counts["redelivered"] += d.redelivered
            first_deliveries += not d.redelivered
            if name == "orders" and not d.redelivered and first_deliveries % 10 == 1:
                c.reject(d.delivery_tag, requeue=True)  # every 10th order comes back redelivered
            elif name == "retry":
                c.reject(d.delivery_tag, requeue=False)  # dead-lettered to parked
                counts["dead_letters"] += 1
                self._record("publish.amq.default", {
                    "exchange_name": "", "routing_keys": [self.queues["parked"]],
                    "properties": {"message_id": mid, "headers": {"x-first-death-queue": queue}}}, d.body)
            else:
                c.ack(d.delivery_tag, multiple=False)
        c.cancel(tag)

    def flush(self) -> None:
        """Append the records to the trace stream (stop tracing into it, with the broker's firehose)."""
        if self.broker.firehose:
            with Client(self.broker.url) as c:
                c.unbind(self.trace, "amq.rabbitmq.trace", "#")
            return
        exchange = f"firehose-{self.tag}"  # stands for amq.rabbitmq.trace
        with Client(self.broker.url) as c:
            c.declare_exchange(exchange, "topic", durable=False)
            c.bind(self.trace, exchange, "#")
            c.confirm_select()
            for rk, headers, body in self.records:
                c.publish(exchange, rk, spec.BasicProperties(headers=headers), body)
            c.wait_confirms(c.published)
