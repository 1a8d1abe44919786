"""Stream appends on their own path, end to end: aio-pika pipelining publishes with publisher
confirms to a stream (interleaved with publishes to a classic queue on the same channel, and
producer resends that dedup drops), every publish confirmed, the stream read back in order. Runs on
each sansmq server and durable store, and opt-in against RabbitMQ (see ``targets``)."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import aio_pika
from pamqp.commands import Basic
from targets import Target, pg_url, sansmq_only, target

__all__ = ["pg_url", "target"]  # the fixtures this module's tests use

_names = itertools.count()
STREAM = {"x-queue-type": "stream"}


async def _read(ch: Any, name: str, n: int) -> list[tuple[int, bytes]]:
    """``n`` records from the start of stream ``name``: (offset, body)."""
    await ch.set_qos(prefetch_count=100)
    queue = await ch.declare_queue(name, durable=True, arguments=STREAM)
    got: list[tuple[int, bytes]] = []
    async with queue.iterator(arguments={"x-stream-offset": "first"}) as it:
        async for message in it:
            got.append((message.headers["x-stream-offset"], message.body))
            await message.ack()
            if len(got) == n:
                break
    return got


def _run(target: Target, publishes: list[tuple[str, bytes, dict[str, Any] | None]], read: int) -> tuple[Any, ...]:
    """Declare a stream and a classic queue, publish ``publishes`` ("stream"/"classic", body,
    headers) all at once on one confirming channel, then read ``read`` records of the stream."""
    async def run() -> tuple[Any, ...]:
        conn = await aio_pika.connect(f"amqp://guest:guest@{target.amqp[0]}:{target.amqp[1]}/")
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            names = {"stream": f"sa-{os.getpid()}-{next(_names)}", "classic": f"sa-c-{os.getpid()}-{next(_names)}"}
            await ch.declare_queue(names["stream"], durable=True, arguments=STREAM)
            classic = await ch.declare_queue(names["classic"], durable=True)
            confirms = await asyncio.gather(*(
                ch.default_exchange.publish(aio_pika.Message(body, headers=headers, delivery_mode=2),
                                            routing_key=names[where])
                for where, body, headers in publishes))
            records = await _read(await conn.channel(), names["stream"], read)
            depth = (await ch.declare_queue(names["classic"], durable=True)).declaration_result.message_count
            await classic.delete(if_unused=False, if_empty=False)
            return confirms, records, depth

    return asyncio.run(run())


def test_pipelined_stream_appends_are_all_confirmed_and_read_back_in_order(target: Target) -> None:
    publishes: list[tuple[str, bytes, dict[str, Any] | None]] = [
        ("classic" if i % 7 == 3 else "stream", b"m%d" % i, {"app": i} if i % 2 else None) for i in range(600)]
    confirms, records, depth = _run(target, publishes, read=sum(w == "stream" for w, _, _ in publishes))
    assert len(confirms) == 600 and all(isinstance(c, Basic.Ack) for c in confirms)
    expected = [body for where, body, _ in publishes if where == "stream"]
    assert [body for _, body in records] == expected
    assert [offset for offset, _ in records] == list(range(len(expected)))
    assert depth == 600 - len(expected)


def test_pipelined_producer_resends_are_confirmed_and_dropped(target: Target) -> None:
    sansmq_only(target, "producer deduplication (x-producer, x-publishing-id) is a sansmq extension")
    publishes: list[tuple[str, bytes, dict[str, Any] | None]] = []
    for pid in range(300):
        publishes.append(("stream", b"p%d" % pid, {"x-producer": "app", "x-publishing-id": pid}))
        if pid % 4 == 3:  # a resend of an earlier one, in the same pipeline
            publishes.append(("stream", b"again-%d" % (pid - 2), {"x-producer": "app", "x-publishing-id": pid - 2}))
    confirms, records, _ = _run(target, publishes, read=300)
    assert len(confirms) == len(publishes)
    assert all(isinstance(c, Basic.Ack) for c in confirms)
    assert [body for _, body in records] == [b"p%d" % pid for pid in range(300)]
