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

    def stream(self, prefix: str) -> str:
        """A fresh stream with a unique name."""
        name = f"{prefix}-{os.getpid()}-{next(_ids)}"
        with Client(self.url) as c:
            c.declare(name, {"x-queue-type": "stream"})
        return name

    def publish(self, stream: str, bodies: list[bytes], headers: dict[str, object] | None = None) -> None:
        with Client(self.url) as c:
            c.confirm_select()
            props = spec.encode_properties(spec.BasicProperties(headers=headers, content_type="text/plain"))
            for i, body in enumerate(bodies, 1):
                c.publish("", stream, props, body)
                if i % 1000 == 0:
                    c.wait_confirms(i - 500)
            c.wait_confirms(c.published)

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

    def end(self, stream: str) -> int:
        from pipeline.offsets import stream_end

        with Client(self.url) as c:
            return stream_end(c, stream, 300)
