"""AMQP 0-9-1 edge paths as RabbitMQ 3.10 takes them (issue 17), with real clients (pika, aio-pika,
stomp.py) over 127.0.0.1 against each server.

Opt-in, the same tests run against a real RabbitMQ node too, so the two cannot drift apart:
    SANSMQ_RABBITMQ=127.0.0.1:5672 .venv/bin/python -m pytest tests/e2e/test_e2e_amqp_edges.py
(tests that need the broker in-process — logging, a small configured limit — skip there).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions as pe
import pytest
from e2ekit import close_quietly, connect, pika_open, uid, wait_until

import servers
from engine import Config
from engine.config import Limits

LISTENERS = [("amqp", "127.0.0.1", 0), ("stomp", "127.0.0.1", 0)]
RABBITMQ = os.environ.get("SANSMQ_RABBITMQ")
KINDS = [*servers.SERVER_KINDS, *(["rabbitmq"] if RABBITMQ else [])]
MiB = 1024 * 1024


@dataclass
class Target:
    kind: str
    host: str
    port: int
    running: Any = None  # the in-process server (None for RabbitMQ)

    def sansmq_only(self) -> None:
        if self.running is None:
            pytest.skip("needs the broker in-process")


@pytest.fixture(scope="module", params=KINDS)
def srv(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "rabbitmq":
        host, port = RABBITMQ.rsplit(":", 1)  # type: ignore[union-attr]
        yield Target("rabbitmq", host, int(port))
        return
    with servers.running(request.param, LISTENERS) as running:
        yield Target(request.param, *running.address("amqp"), running)


def params(srv: Target, password: str = "guest") -> pika.ConnectionParameters:
    return pika.ConnectionParameters(srv.host, srv.port, credentials=pika.PlainCredentials("guest", password),
                                     connection_attempts=1, socket_timeout=10, blocked_connection_timeout=30)


@pytest.fixture()
def conn(srv: Target) -> Iterator[pika.BlockingConnection]:
    with pika_open(params(srv)) as c:
        yield c


def channel_error(conn: pika.BlockingConnection, fn: Any, *args: Any, **kw: Any) -> tuple[int, str]:
    """Run ``fn`` on a fresh channel; the (code, text) of the channel.close it provokes."""
    ch = conn.channel()
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        getattr(ch, fn)(*args, **kw)
    return ei.value.reply_code, ei.value.reply_text


def get_one(ch: Any, q: str, auto_ack: bool = False) -> tuple[Any, Any, bytes]:
    """basic.get until a message is there (publishes are asynchronous)."""
    got = wait_until(lambda: (r := ch.basic_get(q, auto_ack=auto_ack))[0] is not None and r, what=f"a message on {q}")
    return got  # type: ignore[no-any-return]


def amqp_url(srv: Target) -> str:
    return f"amqp://guest:guest@{srv.host}:{srv.port}/"


def run_async(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


# -- 1. auto-delete cascade -------------------------------------------------------------------------
def test_unbind_cascades_auto_delete_through_exchange_binding(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    src, dst, rk = uid("src"), uid("dst"), "rk"
    ch.exchange_declare(src, "direct", auto_delete=True)
    ch.exchange_declare(dst, "direct", auto_delete=True)
    q = ch.queue_declare("", auto_delete=True).method.queue
    ch.queue_bind(q, dst, rk)
    ch.exchange_bind(dst, src, rk)
    ch.basic_publish(src, rk, b"through two exchanges")
    method = get_one(ch, q, auto_ack=True)[0]
    assert method.routing_key == rk
    ch.queue_unbind(q, dst, rk)  # dst loses its last source binding: gone, and src with it
    ch.exchange_unbind(dst, src, rk)  # unbinding what is gone: fine
    for name in (dst, src):
        code, text = channel_error(conn, "exchange_declare", name, passive=True)
        assert (code, text) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")
    assert conn.is_open


def test_exclusive_and_auto_delete_queues_go_with_their_connection_and_consumer(srv: Target) -> None:
    """kombu: an exclusive queue is deleted when its connection closes; an auto-delete queue when
    its last consumer is cancelled, taking its auto-delete exchange (last source binding) along."""
    import kombu

    x, excl, auto = uid("kx"), uid("kexcl"), uid("kauto")
    exchange = kombu.Exchange(x, "direct", auto_delete=True, durable=False)
    with kombu.Connection(amqp_url(srv)) as c1:
        channel = c1.channel()
        kombu.Queue(excl, exchange, "e", exclusive=True, channel=channel).declare()
        auto_q = kombu.Queue(auto, exchange, "a", auto_delete=True, durable=False, channel=channel)
        auto_q.declare()
        consumer = kombu.Consumer(channel, [auto_q], callbacks=[lambda body, message: None])
        consumer.consume()
        consumer.cancel()  # the auto-delete queue goes; the exchange keeps its binding to excl
    # c1 closed: the exclusive queue went, and with it the exchange's last binding
    with kombu.Connection(amqp_url(srv)) as c2:
        for name, kind in ((auto, "queue"), (excl, "queue"), (x, "exchange")):
            channel = c2.channel()
            with pytest.raises(Exception) as ei:
                if kind == "queue":
                    channel.queue_declare(name, passive=True)
                else:
                    channel.exchange_declare(name, "direct", passive=True)
            assert getattr(ei.value, "code", None) == 404, (name, ei.value)


# -- 2. internal errors are logged -------------------------------------------------------------------
def test_internal_error_is_logged_with_traceback_and_client_gets_541(
        srv: Target, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    srv.sansmq_only()
    from amqpproto import spec
    from engine.amqp import channel as _amqp_channel

    def boom(chan: Any, m: Any) -> None:
        raise RuntimeError("boom in queue.purge")

    monkeypatch.setitem(_amqp_channel._HANDLERS, spec.QueuePurge, boom)
    caplog.set_level(logging.ERROR, logger="sansmq.engine")
    c = pika.BlockingConnection(params(srv))
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(pe.ConnectionClosedByBroker) as ei:
        ch.queue_purge(q)
    assert ei.value.reply_code == 541
    assert ei.value.reply_text.startswith("INTERNAL_ERROR")
    record = wait_until(lambda: next((r for r in caplog.records if r.name == "sansmq.engine"), None),
                        what="the internal error's log record")
    assert record.levelno == logging.ERROR and "internal error on connection" in record.getMessage()
    assert record.exc_info is not None and "boom in queue.purge" in caplog.text
    assert "Traceback" in caplog.text and "in boom" in caplog.text


# -- 3. message size -------------------------------------------------------------------------------
def test_large_messages_up_to_22_mib_from_aio_pika(srv: Target) -> None:
    import aio_pika

    async def main() -> list[int]:
        connection = await aio_pika.connect(amqp_url(srv))
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(uid("big"), auto_delete=True)
            sizes = [20 * MiB, 22 * MiB]
            for n in sizes:
                body = bytes([n % 251]) * n
                await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
            got = []
            async with queue.iterator() as it:
                async for message in it:
                    async with message.process():
                        assert message.body == bytes([len(message.body) % 251]) * len(message.body)
                        got.append(len(message.body))
                    if len(got) == len(sizes):
                        break
            return got

    assert run_async(main(), 120) == [20 * MiB, 22 * MiB]


def test_large_message_from_pika(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    payload = bytes(range(256)) * (21 * MiB // 256)
    ch.basic_publish("", q, payload, pika.BasicProperties(delivery_mode=2))
    method, _, body = get_one(ch, q, auto_ack=True)
    assert body == payload


def test_default_max_message_size_is_rabbitmqs() -> None:
    assert Limits().max_message_size == 128 * MiB


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_message_over_configured_max_size_gets_406_and_the_connection_lives(kind: str) -> None:
    config = Config(limits=Limits(max_message_size=MiB))
    with servers.running(kind, LISTENERS, config=config) as running:
        host, port = running.address("amqp")
        c = pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1))
        try:
            ch = c.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, b"x" * (MiB + 1))
            with pytest.raises(pe.ChannelClosedByBroker) as ei:
                ch.queue_declare(q, passive=True)  # the channel.close arrives first
            assert (ei.value.reply_code, ei.value.reply_text) == (
                406, f"PRECONDITION_FAILED - message size {MiB + 1} is larger than configured max size {MiB}")
            ch2 = c.channel()
            ch2.basic_publish("", q, b"x" * MiB)  # at the limit: fine
            assert get_one(ch2, q, auto_ack=True)[2] == b"x" * MiB
        finally:
            close_quietly(c)


# -- 4. requeue order -----------------------------------------------------------------------------------
def _drain_get(ch: Any, q: str) -> list[tuple[bytes, bool]]:
    out = []
    while True:
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method is None:
            return out
        out.append((body, method.redelivered))


def test_rejected_messages_go_back_to_their_original_position(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("order"), auto_delete=False).method.queue
    for i in range(7):
        ch.basic_publish("", q, f"m{i}".encode())
    ch.basic_qos(prefetch_count=5)
    tags = []
    for method, _, _ in ch.consume(q, inactivity_timeout=10):
        assert method is not None
        tags.append(method.delivery_tag)
        if len(tags) == 5:
            break
    ch.basic_ack(tags[0])
    ch.cancel()
    for tag in tags[1:]:  # one at a time, oldest first: each must not jump ahead of the others
        ch.basic_reject(tag, requeue=True)
    got = _drain_get(ch, q)
    # (m5 may come back redelivered: pika's cancel() requeues what arrived after the ack)
    assert [body for body, _ in got] == [b"m1", b"m2", b"m3", b"m4", b"m5", b"m6"]
    assert [redelivered for _, redelivered in got[:4]] == [True] * 4 and not got[-1][1]
    ch.queue_delete(q)


def test_requeue_keeps_position_within_priority(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("prio"), arguments={"x-max-priority": 5}).method.queue
    for name, prio in (("a1", 1), ("b5", 5), ("a2", 1), ("c5", 5), ("a3", 1)):
        ch.basic_publish("", q, name.encode(), pika.BasicProperties(priority=prio))
    got = [get_one(ch, q) for _ in range(5)]
    assert [body for _, _, body in got] == [b"b5", b"c5", b"a1", b"a2", b"a3"]
    for method, _, _ in got:  # in delivery order: later ones must not jump ahead
        ch.basic_nack(method.delivery_tag, requeue=True)
    assert [body for body, _ in _drain_get(ch, q)] == [b"b5", b"c5", b"a1", b"a2", b"a3"]
    ch.queue_delete(q)


def test_stomp_nack_puts_messages_back_in_order(srv: Target) -> None:
    """NACKs applied oldest first in one go (a transaction commits them together, before any
    redelivery) must leave the messages in their original order."""
    srv.sansmq_only()  # RabbitMQ's STOMP plugin is not part of the opt-in target
    q = f"/queue/{uid('stomp-order')}"
    c, got = connect(srv.running.address("stomp"))
    try:
        for i in range(4):
            c.send(q, f"m{i}")
        c.subscribe(q, id="1", ack="client-individual", headers={"prefetch-count": "4"})
        first = got.wait_messages(4)
        assert [f.body for f in first] == ["m0", "m1", "m2", "m3"]
        tx = c.begin()
        for frame in first:
            c.nack(frame.headers["ack"], transaction=tx)
        c.commit(tx)
        again = got.wait_messages(8)[4:]
        assert [f.body for f in again] == ["m0", "m1", "m2", "m3"]
        assert all(f.headers.get("redelivered") == "true" for f in again)
    finally:
        close_quietly(c)


# -- 5. transactions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("settle", ["ack", "nack", "reject"])
def test_rolled_back_settle_is_requeued_when_the_channel_closes(conn: pika.BlockingConnection,
                                                                settle: str) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("tx")).method.queue
    ch.basic_publish("", q, b"precious")
    ch.tx_select()
    method = get_one(ch, q)[0]
    if settle == "ack":
        ch.basic_ack(method.delivery_tag)
    elif settle == "nack":
        ch.basic_nack(method.delivery_tag, requeue=False)
    else:
        ch.basic_reject(method.delivery_tag, requeue=False)
    ch.tx_rollback()
    ch.close()
    ch2 = conn.channel()
    method, _, body = get_one(ch2, q, auto_ack=True)
    assert body == b"precious" and method.redelivered
    ch2.queue_delete(q)


def test_rolled_back_ack_leaves_the_delivery_unacked_and_ackable(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("tx2")).method.queue
    ch.basic_publish("", q, b"once")
    ch.tx_select()
    method = get_one(ch, q)[0]
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()
    ch.basic_ack(method.delivery_tag)  # unacked again: a second ack is valid (RabbitMQ)
    ch.tx_commit()
    ch.close()
    ch2 = conn.channel()
    assert ch2.basic_get(q)[0] is None  # acked for good
    ch2.queue_delete(q)


def test_stomp_ack_inside_aborted_transaction_is_redelivered(srv: Target) -> None:
    srv.sansmq_only()
    addr = srv.running.address("stomp")
    q = f"/queue/{uid('stomp-tx')}"
    c, got = connect(addr)
    try:
        c.send(q, "precious")
        c.subscribe(q, id="1", ack="client-individual")
        frame = got.wait_messages(1)[0]
        tx = c.begin()
        c.ack(frame.headers["ack"], transaction=tx)
        c.abort(tx)  # the ack is discarded: still unacked, requeued when the connection goes
    finally:
        close_quietly(c)
    c, got = connect(addr)
    try:
        c.subscribe(q, id="2", ack="auto")
        frame = got.wait_messages(1)[0]
        assert frame.body == "precious" and frame.headers.get("redelivered") == "true"
    finally:
        close_quietly(c)


# -- 6. exclusive queues ---------------------------------------------------------------------------------
def locked(q: str) -> tuple[int, str]:
    return (405, f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. "
                 "It could be originally declared on another connection or the exclusive property value does "
                 "not match that of the original declaration.")


def test_exclusive_queue_redeclared_non_exclusive_is_locked(conn: pika.BlockingConnection) -> None:
    q = conn.channel().queue_declare(uid("excl"), exclusive=True).method.queue
    assert channel_error(conn, "queue_declare", q, exclusive=False) == locked(q)


def test_another_connections_exclusive_queue_is_locked(conn: pika.BlockingConnection, srv: Target) -> None:
    q = conn.channel().queue_declare(uid("excl2"), exclusive=True).method.queue
    other = pika.BlockingConnection(params(srv))
    try:
        assert channel_error(other, "queue_declare", q, exclusive=True) == locked(q)
        assert channel_error(other, "queue_declare", q) == locked(q)
        assert channel_error(other, "basic_consume", q, lambda *a: None) == locked(q)
        assert channel_error(other, "basic_get", q) == locked(q)
    finally:
        other.close()


# -- 7. default exchange ------------------------------------------------------------------------------------
DEFAULT = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_default_exchange_cannot_be_declared_deleted_or_bound(conn: pika.BlockingConnection) -> None:
    q = conn.channel().queue_declare("", exclusive=True).method.queue
    x = uid("x")
    conn.channel().exchange_declare(x, "direct", auto_delete=True)
    assert channel_error(conn, "exchange_declare", "", "direct") == DEFAULT
    assert channel_error(conn, "exchange_declare", "", "direct", passive=True) == DEFAULT
    assert channel_error(conn, "exchange_delete", "") == DEFAULT
    assert channel_error(conn, "queue_bind", q, "", "k") == DEFAULT
    assert channel_error(conn, "queue_unbind", q, "", "k") == DEFAULT
    assert channel_error(conn, "exchange_bind", x, "", "k") == DEFAULT
    assert channel_error(conn, "exchange_bind", "", x, "k") == DEFAULT
    assert channel_error(conn, "exchange_delete", "amq.direct") == (
        403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")
    conn.channel().exchange_delete(x)


# -- 8. channel numbers -----------------------------------------------------------------------------------------
def test_channel_65535_can_be_opened_and_used(conn: pika.BlockingConnection) -> None:
    ch = conn.channel(channel_number=65535)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"on the last channel")
    assert get_one(ch, q, auto_ack=True)[2] == b"on the last channel"
    ch.close()


def test_channel_max_caps_how_many_are_open(srv: Target) -> None:
    p = params(srv)
    p.channel_max = 3
    c = pika.BlockingConnection(p)
    try:
        assert c._impl.params.channel_max == 3
        chans = [c.channel(channel_number=n) for n in (1000, 2000, 3000)]
        chans[0].close()
        c.channel(channel_number=60000)  # a free slot: any number will do
        with pytest.raises(pe.ConnectionClosedByBroker) as ei:
            c.channel(channel_number=4000)  # a fourth open channel
        assert (ei.value.reply_code, ei.value.reply_text) == (
            530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)")
    finally:
        close_quietly(c)


# -- 9. connection.update-secret ---------------------------------------------------------------------------------
def test_update_secret_is_answered(conn: pika.BlockingConnection) -> None:
    conn.update_secret("guest", "rotated")
    ch = conn.channel()  # the connection carries on
    assert ch.queue_declare("", exclusive=True).method.queue


def test_update_secret_with_the_wrong_secret_closes_with_530(srv: Target) -> None:
    srv.sansmq_only()  # RabbitMQ's internal backend does not re-check the secret
    c = pika.BlockingConnection(params(srv))
    try:
        with pytest.raises(pe.ConnectionClosedByBroker) as ei:
            c.update_secret("not-the-password", "rotated")
            c.channel()
        assert (ei.value.reply_code, ei.value.reply_text) == (
            530, "NOT_ALLOWED - New secret was refused by one of the backends")
    finally:
        close_quietly(c)


def test_aiormq_update_secret(srv: Target) -> None:
    import aiormq

    async def main() -> None:
        connection = await aiormq.connect(amqp_url(srv))
        try:
            await connection.update_secret("guest", reason="rotated")
            channel = await connection.channel()
            await channel.queue_declare("", exclusive=True)
        finally:
            await connection.close()

    run_async(main())


# -- 10. idempotent unbind; aio-pika RPC and master/worker, repeatedly ---------------------------------------
def test_unbind_of_missing_queue_exchange_or_binding_is_ok(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = uid("x")
    ch.exchange_declare(x, "direct", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, "held")  # keeps the auto-delete exchange alive
    ch.queue_unbind(q, x, "never-bound")
    ch.queue_unbind(uid("no-such-queue"), x, "k")
    ch.queue_unbind(q, uid("no-such-exchange"), "k")
    ch.exchange_unbind(x, uid("no-such-exchange"), "k")
    ch.exchange_unbind(uid("no-such-exchange"), x, "k")
    assert ch.is_open
    code, text = channel_error(conn, "queue_bind", uid("no-such-queue"), x, "k")
    assert code == 404 and text.startswith("NOT_FOUND - no queue")


async def _rpc_then_master_worker(connection: Any, cycle: int) -> None:
    """One aio-pika RPC call and one Master/Worker round, each on its own channel, then closed."""
    from aio_pika.patterns import RPC, Master

    channel = await connection.channel()
    rpc = await RPC.create(channel)

    async def multiply(*, x: int, y: int) -> int:
        return x * y

    name = uid(f"mul{cycle}")
    await rpc.register(name, multiply, auto_delete=True)
    assert await rpc.proxy.__getattr__(name)(x=cycle, y=7) == cycle * 7
    assert await rpc.call(name, kwargs=dict(x=3, y=cycle)) == 3 * cycle
    await rpc.close()  # basic.cancel (auto-deletes its queue), then queue.unbind: fine

    worker_channel = await connection.channel()
    master = Master(worker_channel)
    done: asyncio.Queue[int] = asyncio.Queue()

    async def work(*, n: int) -> None:
        await done.put(n)

    task = uid(f"task{cycle}")
    worker = await master.create_worker(task, work, auto_delete=True)
    for n in range(3):
        await master.proxy.__getattr__(task)(n=n)
    assert sorted([await asyncio.wait_for(done.get(), 10) for _ in range(3)]) == [0, 1, 2]
    await worker.close()
    await worker_channel.close()
    await channel.close()


def test_aio_pika_rpc_and_master_worker_repeatedly_on_one_connection(srv: Target) -> None:
    import aio_pika

    async def main() -> None:
        connection = await aio_pika.connect(amqp_url(srv))
        async with connection:
            for cycle in range(5):
                await _rpc_then_master_worker(connection, cycle)

    run_async(main(), 120)


# -- reply codes and texts for common mistakes -----------------------------------------------------------------
def test_unknown_exchange_type_closes_the_connection_with_503(srv: Target) -> None:
    c = pika.BlockingConnection(params(srv))
    try:
        with pytest.raises(pe.ConnectionClosedByBroker) as ei:
            c.channel().exchange_declare(uid("x"), "no-such-type")
        assert (ei.value.reply_code, ei.value.reply_text) == (
            503, "COMMAND_INVALID - unknown exchange type 'no-such-type'")
    finally:
        close_quietly(c)


def test_inequivalent_redeclare_texts(conn: pika.BlockingConnection) -> None:
    x = uid("x")
    conn.channel().exchange_declare(x, "direct", auto_delete=True)
    assert channel_error(conn, "exchange_declare", x, "fanout", auto_delete=True) == (
        406, f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in vhost '/': received "
             "'fanout' but current is 'direct'")
    assert channel_error(conn, "exchange_declare", x, "direct", durable=True, auto_delete=True) == (
        406, f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{x}' in vhost '/': received "
             "'true' but current is 'false'")
    assert channel_error(conn, "exchange_declare", "amq.direct", "fanout", durable=True) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'amq.direct' in vhost '/': received "
             "'fanout' but current is 'direct'")
    q = conn.channel().queue_declare(uid("q"), auto_delete=True).method.queue
    assert channel_error(conn, "queue_declare", q, durable=True, auto_delete=True) == (
        406, f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{q}' in vhost '/': received "
             "'true' but current is 'false'")
    conn.channel().exchange_delete(x)
    conn.channel().queue_delete(q)


def test_reserved_names_and_unknown_delivery_tag(conn: pika.BlockingConnection) -> None:
    name = "amq." + uid("x")
    assert channel_error(conn, "exchange_declare", name, "direct") == (
        403, f"ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'")
    assert channel_error(conn, "queue_declare", name) == (
        403, f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'")
    ch = conn.channel()
    ch.basic_ack(12345)
    with pytest.raises(pe.ChannelClosedByBroker) as ei:
        ch.queue_declare("", exclusive=True)
    assert (ei.value.reply_code, ei.value.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 12345")


def _declare_twice(first: dict[str, Any], second: dict[str, Any] | None) -> Any:
    def run(conn: pika.BlockingConnection, ch: Any, name: str) -> None:
        ch.queue_declare(name, auto_delete=True, arguments=first)
        ch.queue_declare(name, auto_delete=True, arguments=second)
    return run


def _publish_then_sync(props: pika.BasicProperties) -> Any:
    def run(conn: pika.BlockingConnection, ch: Any, name: str) -> None:
        ch.basic_publish("", name, b"x", props)
        ch.queue_declare("", exclusive=True)  # the channel.close of the publish arrives first
    return run


def _exclusive_consumer_then(exclusive: bool) -> Any:
    def run(conn: pika.BlockingConnection, ch: Any, name: str) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None, exclusive=not exclusive)
        ch.basic_consume(name, lambda *a: None, exclusive=exclusive)
    return run


def _delete_non_empty(conn: pika.BlockingConnection, ch: Any, name: str) -> None:
    ch.queue_declare(name, exclusive=True)
    ch.basic_publish("", name, b"x")
    wait_until(lambda: ch.queue_declare(name, passive=True).method.message_count, what="the message")
    ch.queue_delete(name, if_empty=True)


def _alternate_exchange(conn: pika.BlockingConnection, ch: Any, name: str) -> None:
    ch.exchange_declare(name, "fanout", auto_delete=True, arguments={"alternate-exchange": "a"})
    conn.channel().exchange_declare(name, "fanout", auto_delete=True, arguments={"alternate-exchange": "a"})
    ch.exchange_declare(name, "fanout", auto_delete=True, arguments={"alternate-exchange": "b"})


def _invalid(arg: str, reason: str) -> str:
    return f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{{q}}' in vhost '/': {reason}"


#: a common mistake -> RabbitMQ 3.10's (channel or connection, code, text); {q} is the name used
MISTAKES: dict[str, tuple[Any, str, int, str]] = {
    "ttl not an integer": (lambda c, ch, q: ch.queue_declare(q, auto_delete=True, arguments={"x-message-ttl": "abc"}),
                           "channel", 406, _invalid("x-message-ttl", '"expected integer, got longstr"')),
    "negative max-length": (lambda c, ch, q: ch.queue_declare(q, auto_delete=True, arguments={"x-max-length": -1}),
                            "channel", 406, _invalid("x-max-length", "{value_negative,-1}")),
    "x-expires zero": (lambda c, ch, q: ch.queue_declare(q, auto_delete=True, arguments={"x-expires": 0}),
                       "channel", 406, _invalid("x-expires", "{value_zero,0}")),
    "max-priority too high": (lambda c, ch, q: ch.queue_declare(q, auto_delete=True, arguments={"x-max-priority": 300}),
                              "channel", 406, _invalid("x-max-priority", "{max_value_exceeded,300}")),
    "bad overflow": (lambda c, ch, q: ch.queue_declare(q, auto_delete=True, arguments={"x-overflow": "bogus"}),
                     "channel", 406, _invalid("x-overflow", "invalid_overflow")),
    "inequivalent ttl": (_declare_twice({"x-message-ttl": 1000}, {"x-message-ttl": 2000}), "channel", 406,
                         "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{q}' in vhost '/': "
                         "received '2000' but current is '1000'"),
    "ttl missing on redeclare": (_declare_twice({"x-message-ttl": 1000}, None), "channel", 406,
                                 "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{q}' in vhost "
                                 "'/': received none but current is the value '1000' of type 'signedint'"),
    "inequivalent alternate-exchange": (_alternate_exchange, "channel", 406,
                                        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange "
                                        "'{q}' in vhost '/': received 'b' but current is 'a'"),
    "delete non-empty if_empty": (_delete_non_empty, "channel", 406,
                                  "PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty"),
    "exclusive consume on a used queue": (_exclusive_consumer_then(True), "channel", 403,
                                          "ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"),
    "consume beside an exclusive consumer": (_exclusive_consumer_then(False), "channel", 403,
                                             "ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"),
    "expiration not a number": (_publish_then_sync(pika.BasicProperties(expiration="abc")), "channel", 406,
                                "PRECONDITION_FAILED - invalid expiration 'abc': no_integer"),
    "negative expiration": (_publish_then_sync(pika.BasicProperties(expiration="-5")), "channel", 406,
                            "PRECONDITION_FAILED - invalid expiration '-5': {value_negative,-5}"),
    "expiration with trailing text": (_publish_then_sync(pika.BasicProperties(expiration="10s")), "channel", 406,
                                      "PRECONDITION_FAILED - invalid expiration '10s': {leftover_string,\"s\"}"),
    "recover without requeue": (lambda c, ch, q: ch.basic_recover(requeue=False), "connection", 540,
                                "NOT_IMPLEMENTED - requeue=false"),
    "commit outside a transaction": (lambda c, ch, q: ch.tx_commit(), "channel", 406,
                                     "PRECONDITION_FAILED - channel is not transactional"),
    "tx after confirm": (lambda c, ch, q: (ch.confirm_delivery(), ch.tx_select()), "channel", 406,
                         "PRECONDITION_FAILED - cannot switch from confirm to tx mode"),
    "publish to a missing exchange": (lambda c, ch, q: (ch.basic_publish(q, "k", b"x"),
                                                        ch.queue_declare("", exclusive=True)),
                                      "channel", 404, "NOT_FOUND - no exchange '{q}' in vhost '/'"),
    "prefetch_size": (lambda c, ch, q: ch.basic_qos(prefetch_size=1), "connection", 540,
                      "NOT_IMPLEMENTED - prefetch_size!=0 (1)"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_reply_codes_and_texts_of_common_mistakes(srv: Target, mistake: str) -> None:
    fn, scope, code, text = MISTAKES[mistake]
    name = uid("mistake")
    c = pika.BlockingConnection(params(srv))
    try:
        error = pe.ChannelClosedByBroker if scope == "channel" else pe.ConnectionClosedByBroker
        with pytest.raises(error) as ei:
            fn(c, c.channel(), name)
        assert (ei.value.reply_code, ei.value.reply_text) == (code, text.replace("{q}", name))
    finally:
        close_quietly(c)


# -- publisher confirms coalesced -------------------------------------------------------------------
def test_pipelined_transient_publishes_get_coalesced_confirms(srv: Target) -> None:
    """640 publishes written at once (as amqplib's test suite does) are all confirmed, with fewer
    basic.ack frames than messages: at least one carries multiple=true, as RabbitMQ's do."""
    import socket

    import amqpproto as a

    n = 640
    conn = a.Connection(a.CLIENT, heartbeat=0)
    sock = socket.create_connection((srv.host, srv.port), timeout=10)

    def until(cls: type) -> Any:
        while True:
            ev = conn.next_event()
            if ev is a.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            elif isinstance(ev, cls):
                return ev
            elif isinstance(ev, (a.ConnectionClose, a.ChannelClose, a.ConnectionClosed)):
                raise AssertionError(f"unexpected {ev!r}")

    try:
        sock.sendall(conn.send(a.ProtocolHeader()))
        until(a.ConnectionStart)
        sock.sendall(conn.send(a.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                                   response=a.plain_response("guest", "guest"))))
        sock.sendall(conn.send(conn.tune_ok(until(a.ConnectionTune))))
        sock.sendall(conn.send(a.ConnectionOpen(virtual_host="/")))
        until(a.ConnectionOpenOk)
        sock.sendall(conn.send(a.ChannelOpen(channel=1)))
        until(a.ChannelOpenOk)
        q = uid("confirms")
        sock.sendall(conn.send(a.QueueDeclare(queue=q, auto_delete=True, channel=1)))
        until(a.QueueDeclareOk)
        sock.sendall(conn.send(a.ConfirmSelect(channel=1)))
        until(a.ConfirmSelectOk)
        sock.sendall(b"".join(conn.send(a.BasicPublish(routing_key=q, properties=a.BasicProperties(),
                                                       body=b"m%d" % i, channel=1)) for i in range(n)))
        confirmed, frames, multiple = 0, 0, 0
        while confirmed < n:
            ack = until(a.BasicAck)
            assert ack.delivery_tag > confirmed and (ack.multiple or ack.delivery_tag == confirmed + 1)
            confirmed, frames, multiple = ack.delivery_tag, frames + 1, multiple + ack.multiple
        assert confirmed == n and multiple >= 1 and frames < n
    finally:
        sock.close()
