"""Helpers of the pipeline suite: a broker handle, stream set-up and reading back, with our client."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from amqpproto import spec
from pipeline.driver import Driver
from pipeline.offsets import offset_of
from sansmq_client import sync
from sansmq_client.bulk import publish_batch

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
        with sync.connect(self.url) as c:
            c.declare_queue(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
        return name

    def publish(self, stream: str, bodies: list[bytes], headers: dict[str, object] | None = None) -> None:
        props = spec.encode_properties(spec.BasicProperties(headers=headers, content_type="text/plain"))
        with sync.connect(self.url) as c:
            publish_batch(c, "", [(stream, props, body) for body in bodies], timeout=120)

    def read_all(self, stream: str, expect: int, timeout: float = 30.0) -> list[tuple[int, bytes, dict]]:
        """(offset, body, headers) of the stream's first ``expect`` messages; fails if fewer arrive."""
        out: list[tuple[int, bytes, dict]] = []
        with sync.connect(self.url) as c:
            sub = c.subscribe(stream, prefetch=1000, offset="first")
            while len(out) < expect:
                d = sub.get(timeout)
                assert d is not None, f"only {len(out)} of {expect} messages in {stream}"
                c.ack(d)
                out.append((offset_of(d.headers), d.body, d.headers))
        return out

    def first(self, stream: str) -> int:
        """The first offset retention kept."""
        from pipeline.offsets import stream_first

        with Driver(self.url, 30.0) as c:
            return stream_first(c, stream, self.end(stream))

    def finish_copy(self, query, src: str, dst: str, had: int, more: int, wait: Callable[..., object],
                    what: str) -> None:
        """Publish rows ``had`` .. ``had + more`` (``%06d``) to ``src`` and check that the running copy
        ``query`` makes ``dst`` exactly rows 0 .. ``had + more``, each once, in order (``wait`` the
        suite's wait helper: (predicate, timeout, what))."""
        total = had + more
        self.publish(src, [b"%06d" % i for i in range(had, total)])
        wait(lambda: query.exception() or self.end(dst) >= total, 240, what)
        assert query.exception() is None and query.isActive, query.exception()
        time.sleep(2)  # nothing more arrives: no row was copied twice
        assert self.end(dst) == total
        assert [b for _, b, _ in self.read_all(dst, total)] == [b"%06d" % i for i in range(total)]

    def end(self, stream: str) -> int:
        from pipeline.offsets import stream_end

        with Driver(self.url, 30.0) as c:
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
        published = []
        with sync.connect(self.broker.url) as c:
            if self.broker.firehose:
                c.bind_queue(self.trace, "amq.rabbitmq.trace", "#")
            c.declare_queue(q["orders"])
            c.declare_queue(q["billing"])
            c.declare_queue(q["parked"])
            c.declare_queue(q["retry"], arguments={"x-dead-letter-exchange": "",
                                                    "x-dead-letter-routing-key": q["parked"]})
            c.bind_queue(q["orders"], "amq.topic", f"orders.{self.tag}.*")
            c.bind_queue(q["billing"], "amq.topic", f"billing.{self.tag}")
            c.bind_queue(q["retry"], "amq.topic", f"retry.{self.tag}")
            for i in range(messages):
                kind = ("orders", "orders", "orders", "billing", "retry")[i % 5]
                rk = f"orders.{self.tag}.{('eu', 'us', 'asia')[i % 3]}" if kind == "orders" else f"{kind}.{self.tag}"
                body = b"x" * (16 << (i % 7))
                mid = f"m-{self.tag}-{i}"
                published.append((rk, spec.encode_properties(spec.BasicProperties(message_id=mid)), body))
                self._record("publish.amq.topic", {"exchange_name": "amq.topic", "routing_keys": [rk],
                                                   "properties": {"message_id": mid},
                                                   "routed_queues": [q[kind]]}, body)
                counts["published"] += 1
            publish_batch(c, "amq.topic", published)
            for name in ("orders", "billing", "retry"):
                self._drain(c, name, counts)
            self._drain(c, "parked", counts)
        return counts

    def _drain(self, c: sync.Connection, name: str, counts: dict[str, int]) -> None:
        queue = self.queues[name]
        sub = c.subscribe(queue, prefetch=100)
        first_deliveries = 0
        while (d := sub.get(1.0)) is not None:
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
                c.reject(d, requeue=True)  # every 10th order comes back redelivered
            elif name == "retry":
                c.reject(d, requeue=False)  # dead-lettered to parked
                counts["dead_letters"] += 1
                self._record("publish.amq.default", {
                    "exchange_name": "", "routing_keys": [self.queues["parked"]],
                    "properties": {"message_id": mid, "headers": {"x-first-death-queue": queue}}}, d.body)
            else:
                c.ack(d)
        sub.cancel()

    def flush(self) -> None:
        """Append the records to the trace stream (stop tracing into it, with the broker's firehose)."""
        if self.broker.firehose:
            with sync.connect(self.broker.url) as c:
                c.unbind_queue(self.trace, "amq.rabbitmq.trace", "#")
            return
        exchange = f"firehose-{self.tag}"  # stands for amq.rabbitmq.trace
        with sync.connect(self.broker.url) as c:
            c.declare_exchange(exchange, "topic")
            c.bind_queue(self.trace, exchange, "#")
            publish_batch(c, exchange, [(rk, spec.encode_properties(spec.BasicProperties(headers=headers)), body)
                                        for rk, headers, body in self.records])
