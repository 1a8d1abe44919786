"""The asyncio and trio clients against a real broker: the same scenarios on both front ends, over AMQP
and STOMP: confirmed publishes, consuming with ack/nack/reject, QoS, transactions, streams with offsets."""

from __future__ import annotations

from typing import Any

import pytest
from clientkit import ASYNC, Broker, Io, name, run_async

from sansmq_client import ConnectionClosedByUser, NotSupported

PROTOCOLS = ["amqp", "stomp"]


def target(protocol: str, queue: str) -> str:
    """Where a queue is published to and consumed from: its name (AMQP) or destination (STOMP)."""
    return queue if protocol == "amqp" else f"/queue/{queue}"


async def queue_for(io: Io, conn: Any, protocol: str) -> str:
    q = name()
    if protocol == "amqp":
        await conn.declare_queue(q, durable=True)
    return target(protocol, q)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ASYNC)
def test_publish_consume_ack_nack_reject(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol))
        where = await queue_for(io, conn, protocol)
        for i in range(4):
            await conn.publish(where, f"m{i}".encode(), headers={"n": str(i)})  # returns once confirmed
        sub = await conn.subscribe(where, prefetch=10)
        seen: list[tuple[bytes, bool]] = []
        async for d in sub:
            seen.append((d.body, d.redelivered))
            if d.body == b"m1" and not d.redelivered:
                await conn.nack(d, requeue=True)  # comes back, redelivered
            elif d.body == b"m2":
                await conn.reject(d)  # gone for good
            else:
                await conn.ack(d)
            if len(seen) == 5:
                break
        assert [b for b, _ in seen[:4]] == [b"m0", b"m1", b"m2", b"m3"]
        assert seen[4] == (b"m1", True)
        await conn.publish(where, b"h", headers={"n": "7"})
        d = await sub.__anext__()
        assert (d.body, d.headers["n"]) == (b"h", "7")
        await conn.ack(d)
        await sub.cancel()
        with pytest.raises(StopAsyncIteration):
            await sub.__anext__()
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ASYNC)
def test_transactions_commit_and_rollback(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol))
        where = await queue_for(io, conn, protocol)
        async with conn.transaction() as tx:
            await tx.publish(where, b"committed")
        with pytest.raises(KeyError):
            async with conn.transaction() as tx:
                await tx.publish(where, b"rolled back")
                raise KeyError("abandon")
        await conn.publish(where, b"after")
        sub = await conn.subscribe(where, prefetch=5)
        got = []
        async for d in sub:
            got.append(d.body)
            await conn.ack(d)
            if len(got) == 2:
                break
        assert got == [b"committed", b"after"]
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_stomp_ack_inside_a_transaction_waits_for_commit(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp"))
        where = target("stomp", name())
        await conn.publish(where, b"once")
        sub = await conn.subscribe(where, prefetch=1)
        d = await sub.__anext__()
        tx = conn.transaction()
        await tx.begin()
        await tx.ack(d)
        await tx.rollback()  # the ack is undone: the message is still ours, unacked
        await sub.cancel()   # ... so cancelling requeues it
        again = await conn.subscribe(where, prefetch=1)
        d2 = await again.__anext__()
        assert (d2.body, d2.redelivered) == (b"once", True)
        await conn.ack(d2)
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ASYNC)
def test_stream_from_an_offset(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol))
        q = name("stream")
        if protocol == "amqp":
            await conn.declare_queue(q, durable=True, arguments={"x-queue-type": "stream"})
            where = q
            args: dict[str, Any] = {}
        else:  # RabbitMQ's STOMP: the stream is declared by the first SUBSCRIBE/SEND's headers
            where = f"/amq/queue/{q}"
            args = {"x-queue-type": "stream", "durable": "true", "auto-delete": "false"}
        for i in range(5):
            await conn.publish(q if protocol == "amqp" else f"/queue/{q}", f"s{i}".encode(), headers=args)
        sub = await conn.subscribe(where, prefetch=10, offset=2, arguments=args if protocol == "stomp" else None)
        got = []
        async for d in sub:
            got.append((d.offset, d.body))
            await conn.ack(d)
            if len(got) == 3:
                break
        assert got == [(2, b"s2"), (3, b"s3"), (4, b"s4")]
        assert sub.consumer.last_offset == 4
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ASYNC)
def test_prefetch_holds_back_deliveries_until_acked(broker: Broker, kind: str, protocol: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url(protocol))
        where = await queue_for(io, conn, protocol)
        for i in range(3):
            await conn.publish(where, f"{i}".encode())
        sub = await conn.subscribe(where, prefetch=2)
        first, second = await sub.__anext__(), await sub.__anext__()
        await io.sleep(0.3)  # time for a third delivery the prefetch must hold back
        assert sub.pending() == 0
        await conn.ack(first)
        third = await sub.__anext__()
        assert [d.body for d in (first, second, third)] == [b"0", b"1", b"2"]
        await conn.ack(second)
        await conn.ack(third)
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_stomp_refuses_amqp_only_calls_and_close_ends_everything(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp"))
        with pytest.raises(NotSupported, match="declares on SUBSCRIBE"):
            await conn.declare_queue("x")
        with pytest.raises(NotSupported, match="not \\['exchange'\\]"):
            await conn.publish("/queue/x", b"", exchange="amq.direct")
        sub = await conn.subscribe(target("stomp", name()))
        await conn.close()
        with pytest.raises(StopAsyncIteration):  # closed by us: the iteration simply ends
            await sub.__anext__()
        with pytest.raises(ConnectionClosedByUser):
            await conn.publish("/queue/x", b"late")
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_a_tight_loop_of_unconfirmed_publishes_keeps_heartbeats_and_shared_properties(broker: Broker,
                                                                                      kind: str) -> None:
    async def scenario(io: Io) -> None:
        from sansmq_client import BasicProperties
        conn = await io.client.connect(broker.url("amqp", query="heartbeat=1"))
        q = await conn.declare_queue(name(), durable=True)
        shared = BasicProperties(content_type="text/plain")
        n = 3000
        for i in range(n):  # never suspends on a confirm: the client yields to its I/O task by itself
            await conn.publish(q, b"x" * 1000, confirm=False, properties=shared, headers={"i": i})
        assert shared.headers is None  # the caller's properties were not changed by per-message headers
        await conn.publish(q, b"last")  # confirmed: everything before it is in the queue
        sub = await conn.subscribe(q, prefetch=500)
        count = 0
        async for d in sub:
            await conn.ack(d)
            if d.body == b"last":
                break
            assert d.headers["i"] == count
            count += 1
        assert count == n and conn._core.generation == 1
        await conn.close()
    run_async(kind, scenario)
