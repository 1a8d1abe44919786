"""The clients against the broker's other two servers (the rest of the suite uses the threads server):
each front end publishes with confirms and consumes with acks over AMQP and STOMP."""

from __future__ import annotations

from pathlib import Path

import pytest
from clientkit import ASYNC, Io, make_broker, name, run_async

import sansmq_client.sync


async def round_trip(io: Io, url: str, where: str) -> None:
    conn = await io.client.connect(url)
    await conn.publish(where, io.kind.encode())
    sub = await conn.subscribe(where, prefetch=5)
    d = await sub.__anext__()
    await conn.ack(d)
    assert d.body == io.kind.encode()
    await conn.close()


@pytest.mark.parametrize("server", ["asyncio", "trio"])
def test_every_front_end_on_the_server(tmp_path: Path, server: str) -> None:
    broker = make_broker(tmp_path, server).start()
    try:
        for protocol in ("amqp", "stomp"):
            where = name() if protocol == "amqp" else f"/queue/{name()}"
            with sansmq_client.sync.connect(broker.url(protocol)) as conn:
                if protocol == "amqp":
                    conn.declare_queue(where, durable=True)
                conn.publish(where, b"sync")
                d = next(conn.subscribe(where, prefetch=5))
                conn.ack(d)
                assert d.body == b"sync"
            for kind in ASYNC:
                run_async(kind, round_trip, broker.url(protocol), where)
    finally:
        broker.stop()
