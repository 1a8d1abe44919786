"""Robust reconnect against a broker killed mid-stream and started again on its data directory: the
client tries the next host with back-off, restores the exchanges, queues, bindings and consumers it
declared, fails the publish that was in flight (ConnectionLost, never silence), and its stream consumer
resumes right after the last offset it acked."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest
from clientkit import ASYNC, Broker, Io, free_port, name, run_async, until

import sansmq_client.sync
from sansmq_client import ConnectionLost

QUERY = "reconnect_delay=0.05&reconnect_max_delay=0.3&heartbeat=1"


def failover_url(broker: Broker) -> str:
    """A dead host first: connecting and every reconnect move on to the next one."""
    return f"amqp://guest:guest@127.0.0.1:{free_port()},127.0.0.1:{broker.ports['amqp']}/?{QUERY}"


@pytest.mark.parametrize("kind", ASYNC)
def test_broker_killed_and_restarted_mid_stream(fresh_broker: Broker, kind: str) -> None:
    broker = fresh_broker.start()
    stream, exchange, queue = name("stream"), name("x"), name("transient")

    async def scenario(io: Io) -> None:
        conn = await io.client.connect(failover_url(broker))
        await conn.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"})
        await conn.declare_exchange(exchange, "direct")  # transient: the restart forgets them ...
        await conn.declare_queue(queue)
        await conn.bind_queue(queue, exchange, "k")     # ... and the client declares them again
        for i in range(5):
            await conn.publish(stream, f"s{i}".encode())
        reader = await conn.subscribe(stream, prefetch=10, offset="first")
        transient = await conn.subscribe(queue, prefetch=10)
        for expected in range(3):
            d = await reader.__anext__()
            assert d.offset == expected
            await conn.ack(d)                             # processed: 0, 1, 2
        assert (await reader.__anext__()).offset == 3     # received, never acked

        broker.pause()  # the broker stops reading: this publish stays unconfirmed ...
        in_flight = _start(io, conn.publish(stream, b"in flight"))
        await io.sleep(0.2)
        broker.kill()   # ... and its connection dies under it
        with pytest.raises(ConnectionLost):
            await in_flight()
        broker.start()
        await conn.publish(stream, b"s5")  # waits for the reconnect, then is confirmed
        resumed = [(await reader.__anext__()) for _ in range(3)]
        assert [(d.offset, d.body) for d in resumed] == [(3, b"s3"), (4, b"s4"), (5, b"s5")]
        for d in resumed:
            await conn.ack(d)
        await conn.publish("k", b"routed", exchange=exchange)  # exchange, queue, binding, consumer: back
        assert (await transient.__anext__()).body == b"routed"
        assert conn._core.generation >= 2
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_stomp_stream_subscription_resumes_after_a_broker_restart(fresh_broker: Broker, kind: str) -> None:
    broker = fresh_broker.start()
    stream = name("stream")
    declare = {"x-queue-type": "stream", "durable": "true", "auto-delete": "false"}  # RabbitMQ's STOMP headers

    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp", query=QUERY))
        for i in range(4):
            await conn.publish(f"/queue/{stream}", f"s{i}".encode(), headers=declare)
        reader = await conn.subscribe(f"/amq/queue/{stream}", prefetch=10, offset="first")
        for expected in (0, 1):
            d = await reader.__anext__()
            assert d.offset == expected
            await conn.ack(d)
        broker.kill()
        await until(io, lambda: not conn._core.ready, what="the client to notice")
        broker.start()  # (blocks this test's event loop: the client sees the new broker afterwards)
        await conn.publish(f"/queue/{stream}", b"s4", headers=declare)  # waits for the reconnect
        resumed = [(await reader.__anext__()) for _ in range(3)]
        assert [(d.offset, d.body) for d in resumed] == [(2, b"s2"), (3, b"s3"), (4, b"s4")]
        await conn.close()
    run_async(kind, scenario)


def close_connections(broker: Broker, label: str) -> int:
    """Have the broker close the connections named ``label`` (management API: connection.close 320
    CONNECTION_FORCED); returns how many it closed."""
    assert broker.proc is not None
    base = f"http://127.0.0.1:{broker.proc.port('http')}/api/connections"
    auth = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
    deadline = time.monotonic() + 10
    def ours() -> list[dict[str, Any]]:
        listed = json.load(urllib.request.urlopen(urllib.request.Request(base, headers=auth), timeout=5))
        return [c for c in listed if c.get("client_properties", {}).get("connection_name") == label]

    while not (conns := ours()):
        assert time.monotonic() < deadline, "the management API never listed the client's connection"
        time.sleep(0.05)
    for c in conns:
        name = urllib.parse.quote(c["name"], safe="")
        urllib.request.urlopen(urllib.request.Request(f"{base}/{name}", method="DELETE", headers=auth), timeout=5)
    return len(conns)


@pytest.mark.parametrize("kind", ASYNC)
def test_a_forced_close_is_transient_the_client_reconnects(fresh_broker: Broker, kind: str) -> None:
    broker = fresh_broker.start()

    async def scenario(io: Io) -> None:
        label = name("conn")
        conn = await io.client.connect(broker.url("amqp", query=f"{QUERY}&name={label}"))
        q = await conn.declare_queue(name("transient"))  # not durable, but the broker keeps running
        sub = await conn.subscribe(q)
        assert close_connections(broker, label) == 1  # 320 CONNECTION_FORCED: an operator's kick
        await until(io, lambda: conn._core.generation == 2 and conn._core.ready, what="the reconnect")
        await conn.publish(q, b"after the kick")
        assert (await sub.__anext__()).body == b"after the kick"  # the queue's consumer is back
        await conn.close()
    run_async(kind, scenario)


def _start(io: Io, coro: object) -> object:
    """Run ``coro`` concurrently; returns an awaitable for its outcome (asyncio task or trio nursery-free)."""
    if io.kind == "asyncio":
        import asyncio
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]

        async def wait() -> object:
            return await task
        return wait
    import trio
    outcome: list[object] = []
    done = trio.Event()

    async def runner() -> None:
        try:
            outcome.append(("ok", await coro))  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            outcome.append(("error", exc))
        done.set()
    trio.lowlevel.spawn_system_task(runner)

    async def wait_trio() -> object:
        await done.wait()
        kind, value = outcome[0]  # type: ignore[misc]
        if kind == "error":
            raise value  # type: ignore[misc]
        return value
    return wait_trio


def test_sync_client_survives_a_restart_and_fails_the_publish_in_flight(fresh_broker: Broker) -> None:
    broker = fresh_broker.start()
    conn = sansmq_client.sync.connect(failover_url(broker))
    q = conn.declare_queue(name(), durable=True)
    got: list[bytes] = []
    arrived = threading.Condition()

    def handler(d: sansmq_client.Delivery) -> None:
        with arrived:
            got.append(d.body)
            arrived.notify_all()
        conn.ack(d)

    sub = conn.subscribe(q, handler, prefetch=10)
    conn.publish(q, b"before")
    broker.pause()
    outcome: list[BaseException | None] = []
    publisher = threading.Thread(target=lambda: outcome.append(_raised(lambda: conn.publish(q, b"in flight"))))
    publisher.start()
    publisher.join(0.3)
    broker.kill()
    publisher.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionLost)
    broker.start()
    conn.publish(q, b"after")  # the durable queue survived; the consumer is back on it
    with arrived:
        assert arrived.wait_for(lambda: b"after" in got, 20), got
    assert got[0] == b"before" and got[-1] == b"after"
    sub.cancel()
    conn.close()


def _raised(fn: object) -> BaseException | None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None
