"""Delayed delivery and retry back-off through real clients (pika, aio-pika, stomp.py) over
127.0.0.1 against each server, and across a restart of the server on its data directory.

Exact due times are proven on the fake clock (tests/engine/test_engine_delay_retry.py); here a
message must never come early (elapsed time measured from before the publish), and must come."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from e2ekit import BASE_CONFIG, ServerProcess, close_quietly, connect, fresh_data_dir, pika_open, uid, wait_until

from servers.management import OPS_EPHEMERAL


def params(server: ServerProcess) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", server.port("amqp"),
                                     credentials=pika.PlainCredentials("guest", "guest"),
                                     connection_attempts=1, socket_timeout=5, blocked_connection_timeout=10)


@pytest.fixture()
def ch(server: ServerProcess) -> Iterator[Any]:
    with pika_open(params(server)) as c:
        yield c.channel()


def delayed_exchange(ch: Any, kind: str = "direct", durable: bool = False) -> tuple[str, str]:
    """A delayed exchange with a queue bound by key ``k``: their names."""
    x, q = uid("dx"), uid("dq")
    ch.exchange_declare(x, "x-delayed-message", durable=durable, arguments={"x-delayed-type": kind})
    ch.queue_declare(q, durable=durable)
    ch.queue_bind(q, x, "k")
    return x, q


def get_within(ch: Any, q: str, timeout: float = 10.0) -> tuple[Any, Any, bytes]:
    """basic.get until a message arrives (bounded)."""
    return wait_until(lambda: (r := ch.basic_get(q, auto_ack=True)) and r[0] is not None and r, timeout,
                      f"a message on {q}")


# -- delayed delivery --------------------------------------------------------------------------
def test_pika_delayed_message_comes_after_its_delay(ch: Any) -> None:
    x, q = delayed_exchange(ch)
    ch.confirm_delivery()
    start = time.monotonic()
    ch.basic_publish(x, "k", b"later", pika.BasicProperties(headers={"x-delay": 600}), mandatory=True)
    ch.basic_publish(x, "k", b"now", pika.BasicProperties(headers={"x-delay": 0}))
    assert ch.basic_get(q, auto_ack=True)[2] == b"now"  # confirmed, so routed: the delayed one is not
    _, props, body = get_within(ch, q)
    assert body == b"later" and time.monotonic() - start >= 0.6
    assert props.headers["x-delay"] == -600


def test_pika_delayed_exchange_without_type_is_406(ch: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(uid("dx"), "x-delayed-message")
    assert info.value.reply_code == 406 and "x-delayed-type" in info.value.reply_text


def test_aio_pika_delayed_messages_arrive_by_due_time(server: ServerProcess) -> None:
    import aio_pika

    port = server.port("amqp")

    async def main() -> list[bytes]:
        c = await aio_pika.connect_robust(f"amqp://guest:guest@127.0.0.1:{port}/")
        async with c:
            ch = await c.channel()
            x = await ch.declare_exchange(uid("dx"), "x-delayed-message", arguments={"x-delayed-type": "fanout"})
            q = await ch.declare_queue(uid("dq"), auto_delete=True)
            await q.bind(x)
            for body, delay in ((b"c", 900), (b"a", 300), (b"b", 600)):
                await x.publish(aio_pika.Message(body, headers={"x-delay": delay}), routing_key="")
            got: list[bytes] = []
            async with q.iterator() as it:
                async for message in it:
                    async with message.process():
                        got.append(message.body)
                    if len(got) == 3:
                        return got
        raise AssertionError("no message")

    assert asyncio.run(asyncio.wait_for(main(), 20)) == [b"a", b"b", b"c"]


def test_stomp_send_with_x_delay_to_a_delayed_exchange(server: ServerProcess, ch: Any) -> None:
    x, q = delayed_exchange(ch, "topic")
    conn, coll = connect(server.addr)
    try:
        conn.subscribe(f"/amq/queue/{q}", "s1", ack="auto")
        start = time.monotonic()
        conn.send(f"/exchange/{x}/k", "stomp-later", headers={"x-delay": "500", "receipt": "r1"})
        coll.wait_receipt("r1")
        msg = coll.wait_messages(1)[0]
        assert msg.body == "stomp-later" and time.monotonic() - start >= 0.5
        assert msg.headers["x-delay"] == "-500"
    finally:
        close_quietly(conn)


# -- retry with back-off -------------------------------------------------------------------------
def retry_queue(ch: Any, delays: Any, durable: bool = False) -> tuple[str, str]:
    q, dlq = uid("work"), uid("dead")
    ch.queue_declare(dlq, durable=durable)
    ch.queue_declare(q, durable=durable, arguments={"x-retry-delays": delays, "x-dead-letter-exchange": "",
                                                    "x-dead-letter-routing-key": dlq})
    return q, dlq


@pytest.mark.parametrize("delays", ["200ms,400ms", [200, 400]])
def test_pika_nack_retries_after_each_delay_then_dead_letters(ch: Any, delays: Any) -> None:
    q, dlq = retry_queue(ch, delays)
    ch.basic_publish("", q, b"job")
    seen: list[tuple[Any, float]] = []
    start = time.monotonic()
    for attempt in range(3):
        method, props, body = wait_until(lambda: (r := ch.basic_get(q)) and r[0] is not None and r, 10,
                                         f"attempt {attempt}")
        seen.append(((props.headers or {}).get("x-retry-count"), time.monotonic() - start))
        assert body == b"job" and method.redelivered == (attempt > 0)
        if attempt == 1:
            ch.basic_reject(method.delivery_tag, requeue=True)
        else:
            ch.basic_nack(method.delivery_tag, requeue=False)
    assert [c for c, _ in seen] == [None, 1, 2]
    assert seen[1][1] >= 0.2 and seen[2][1] >= 0.6
    _, props, body = get_within(ch, dlq)
    assert body == b"job" and props.headers["x-death"][0]["reason"] == "rejected"
    assert ch.basic_get(q)[0] is None


def test_pika_invalid_retry_delays_is_406(ch: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(uid("work"), arguments={"x-retry-delays": "soon"})
    assert info.value.reply_code == 406 and "x-retry-delays" in info.value.reply_text


def test_stomp_nack_retries_with_the_queue_delays(server: ServerProcess, ch: Any) -> None:
    q, dlq = retry_queue(ch, "300ms")
    conn, coll = connect(server.addr)
    try:
        conn.subscribe(f"/amq/queue/{q}", "s1", ack="client-individual")
        start = time.monotonic()
        conn.send(f"/amq/queue/{q}", "job")
        first = coll.wait_messages(1)[0]
        conn.nack(first.headers["ack"])
        second = coll.wait_messages(2)[1]
        assert time.monotonic() - start >= 0.3
        assert second.headers["x-retry-count"] == "1" and second.headers["redelivered"] == "true"
        conn.nack(second.headers["ack"])  # no delay left: dead-lettered
        _, _, body = get_within(ch, dlq)
        assert body == b"job"
    finally:
        close_quietly(conn)


# -- across a restart ----------------------------------------------------------------------------
def test_delayed_message_and_pending_retry_survive_a_server_restart(kind: str, tmp_path: Path) -> None:
    config = tmp_path / "sansmq.toml"
    config.write_text(BASE_CONFIG)
    data = fresh_data_dir()
    cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--server", kind, "--stomp", "127.0.0.1:0",
           "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", data, "--config", str(config)]
    srv = ServerProcess(cmd, kind)
    try:
        with pika_open(params(srv)) as c:
            ch = c.channel()
            ch.confirm_delivery()
            x, dq = delayed_exchange(ch, durable=True)
            rq, _ = retry_queue(ch, "2s", durable=True)
            start = time.monotonic()
            ch.basic_publish(x, "k", b"delayed", pika.BasicProperties(delivery_mode=2, headers={"x-delay": 2000}))
            ch.basic_publish("", rq, b"retried", pika.BasicProperties(delivery_mode=2))
            method, _, _ = ch.basic_get(rq)
            ch.basic_nack(method.delivery_tag, requeue=False)
            ch.basic_publish("", rq, b"marker", pika.BasicProperties(delivery_mode=2))  # confirmed after the nack
            assert ch.basic_get(dq)[0] is None
    finally:
        assert srv.terminate() == 0
    srv = ServerProcess(cmd, kind)
    try:
        with pika_open(params(srv)) as c:
            ch = c.channel()
            _, props, body = get_within(ch, dq)
            assert body == b"delayed" and time.monotonic() - start >= 2.0
            got = {}
            wait_until(lambda: (r := ch.basic_get(rq, auto_ack=True))[0] is not None and got.setdefault(r[2], r)
                       and len(got) == 2, 10, "the marker and the retried message")
            assert got[b"retried"][1].headers["x-retry-count"] == 1 and got[b"retried"][0].redelivered
            assert time.monotonic() - start >= 2.0
    finally:
        assert srv.terminate() == 0

