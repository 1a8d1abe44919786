"""Heart-beats never depend on user code: a consumer that awaits (async) or blocks (sync) for more than
three heart-beat periods keeps its connection -- the same one, not a reconnected one -- because the
client's own I/O task or thread answers the broker's heart-beats. The broker drops a client silent for
two periods, so without that these tests see a new connection (generation 2) or a lost delivery."""

from __future__ import annotations

import threading
import time

import pytest
from clientkit import ASYNC, Broker, Io, name, run_async, until

import sansmq_client.sync
from sansmq_client import ConnectionLost

#: URL heart-beat and how long the handler stalls: AMQP negotiates whole seconds, STOMP milliseconds
PERIOD = {"amqp": 1.0, "stomp": 0.3}


def where(protocol: str) -> str:
    return name() if protocol == "amqp" else f"/queue/{name()}"


@pytest.mark.parametrize("protocol", list(PERIOD))
@pytest.mark.parametrize("kind", ASYNC)
def test_a_handler_awaiting_3x_the_heartbeat_keeps_the_connection(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol, query=f"heartbeat={PERIOD[protocol]}"))
        q = where(protocol)
        if protocol == "amqp":
            await conn.declare_queue(q)
        await conn.publish(q, b"slow")
        sub = await conn.subscribe(q, prefetch=1)
        async for d in sub:
            await io.sleep(3.5 * PERIOD[protocol])  # a handler busy with something else
            await conn.ack(d)
            break
        await conn.publish(q, b"still connected")
        assert (await sub.__anext__()).body == b"still connected"
        assert conn._core.generation == 1  # never reconnected
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("protocol", list(PERIOD))
def test_a_sync_callback_blocking_3x_the_heartbeat_keeps_the_connection(broker: Broker, protocol: str) -> None:
    conn = sansmq_client.sync.connect(broker.url(protocol, query=f"heartbeat={PERIOD[protocol]}"))
    q = where(protocol)
    if protocol == "amqp":
        conn.declare_queue(q)
    got: list[bytes] = []
    done = threading.Event()

    def handler(d: sansmq_client.Delivery) -> None:
        if not got:
            time.sleep(3.5 * PERIOD[protocol])  # blocks its thread: not the I/O thread
        got.append(d.body)
        conn.ack(d)
        if len(got) == 2:
            done.set()

    sub = conn.subscribe(q, handler, prefetch=1)
    conn.publish(q, b"slow")
    conn.publish(q, b"next")
    assert done.wait(20), got
    assert got == [b"slow", b"next"]
    assert conn._core.generation == 1
    sub.cancel()
    conn.close()


@pytest.mark.parametrize("kind", ASYNC)
def test_a_broker_that_stops_answering_is_detected_by_heartbeats(fresh_broker: Broker, kind: str) -> None:
    """No FIN, no RST: only the missing heart-beats tell. The publish in flight fails saying so, and the
    client reconnects once the broker answers again."""
    broker = fresh_broker.start()

    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp", query="heartbeat=0.3&reconnect_delay=0.05"))
        q = where("stomp")
        broker.pause()
        try:
            with pytest.raises(ConnectionLost, match="stopped sending heart-beats"):
                await conn.publish(q, b"unanswered")
        finally:
            broker.resume()
        await until(io, lambda: conn._core.ready and conn._core.generation >= 2, what="the reconnect")
        await conn.publish(q, b"answered")
        await conn.close()
    run_async(kind, scenario)
