"""Errors that explain: a broker close is one typed exception (code, text, causing method, channel); a
channel error harms only its channel, whose state afterwards is defined (reopened on next use, its
consumer ended with the error); the rest of the connection keeps working."""

from __future__ import annotations

import dataclasses

import pytest
from clientkit import ASYNC, Broker, Io, name, run_async

from sansmq_client import BrokerClosedConnection, BrokerError, ChannelClosed, ConsumerCancelled


@pytest.mark.parametrize("kind", ASYNC)
def test_refused_vhost_and_login_raise_at_connect_without_retrying(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        with pytest.raises(BrokerClosedConnection) as info:
            await io.client.connect(broker.url("amqp", vhost="no-such-vhost"))
        e = info.value
        assert (e.reply_code, e.method, e.channel) == (530, "connection.open", 0)
        assert "no-such-vhost" in e.reply_text
        with pytest.raises(BrokerClosedConnection) as info:
            await io.client.connect(broker.url("amqp", creds="guest:wrong"))
        assert info.value.reply_code == 403 and "ACCESS_REFUSED" in info.value.reply_text
        with pytest.raises(BrokerError) as stomp_info:
            await io.client.connect(broker.url("stomp", creds="guest:wrong"))
        assert stomp_info.value.message
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_declaration_error_closes_only_the_control_channel(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        q = await conn.declare_queue(name(), durable=True)
        sub = await conn.subscribe(q, prefetch=5)
        with pytest.raises(ChannelClosed) as info:
            await conn.declare_queue(name("missing"), passive=True)
        e = info.value
        assert (e.reply_code, e.method, e.channel) == (404, "queue.declare", 1)
        assert "NOT_FOUND" in e.reply_text
        assert await conn.declare_queue(q, durable=True) == q  # the control channel was reopened
        await conn.publish(q, b"still here")                      # publishing never noticed
        d = await sub.__anext__()                                 # nor did the consumer
        assert d.body == b"still here"
        await conn.ack(d)
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_publish_to_a_missing_exchange_fails_that_publish_only(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        q = await conn.declare_queue(name(), durable=True)
        with pytest.raises(ChannelClosed) as info:
            await conn.publish("k", b"lost", exchange=name("no-exchange"))
        assert (info.value.reply_code, info.value.method, info.value.channel) == (404, "basic.publish", 2)
        await conn.publish(q, b"next")  # the publishing channel is back, in confirm mode
        sub = await conn.subscribe(q)
        assert (await sub.__anext__()).body == b"next"
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_channel_error_mid_consume_ends_that_consumer_only(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        q1, q2 = await conn.declare_queue(name(), durable=True), await conn.declare_queue(name(), durable=True)
        sub1, sub2 = await conn.subscribe(q1, prefetch=5), await conn.subscribe(q2, prefetch=5)
        await conn.publish(q1, b"a")
        d = await sub1.__anext__()
        await conn.ack(dataclasses.replace(d, ack_id=d.ack_id + 1000))  # a tag the broker never gave
        with pytest.raises(ChannelClosed) as info:
            await sub1.__anext__()
        assert (info.value.reply_code, info.value.method) == (406, "basic.ack")
        assert "PRECONDITION_FAILED" in info.value.reply_text
        with pytest.raises(ChannelClosed):  # and it stays ended
            await sub1.__anext__()
        await conn.publish(q2, b"b")  # the other consumer, publishing and declaring all still work
        assert (await sub2.__anext__()).body == b"b"
        again = await conn.subscribe(q1, prefetch=5)  # "a" was requeued when its channel closed
        d = await again.__anext__()
        assert (d.body, d.redelivered) == (b"a", True)
        await conn.ack(d)
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_queue_deleted_under_a_consumer(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        q = await conn.declare_queue(name(), durable=True)
        sub = await conn.subscribe(q)
        await conn.delete_queue(q)
        with pytest.raises(ConsumerCancelled, match="cancelled consumer"):
            await sub.__anext__()
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_stomp_error_names_the_frame_and_the_client_reconnects(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("stomp", query="reconnect_delay=0.05"))
        with pytest.raises(BrokerError) as info:  # an unknown destination kind: ERROR, connection ends
            await conn.publish("/nowhere/x", b"")
        assert info.value.command == "SEND" and info.value.message
        q = f"/queue/{name()}"
        await conn.publish(q, b"after")  # a STOMP ERROR ends the connection; the client made a new one
        sub = await conn.subscribe(q)
        assert (await sub.__anext__()).body == b"after"
        assert conn._core.generation == 2
        await conn.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_a_refused_subscription_raises_and_is_never_restored(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        with pytest.raises(ChannelClosed) as info:
            await conn.subscribe(name("missing"))
        assert (info.value.reply_code, info.value.method) == (404, "basic.consume")
        assert info.value.channel >= 3  # the subscription's own channel, not the connection's others
        assert not conn._core.consumers
        q = await conn.declare_queue(name(), durable=True)
        await conn.publish(q, b"fine")
        assert (await (await conn.subscribe(q)).__anext__()).body == b"fine"
        await conn.close()

        stomp = await io.client.connect(broker.url("stomp", query="reconnect_delay=0.05"))
        with pytest.raises(BrokerError) as refused:
            await stomp.subscribe("/nowhere/x")
        assert refused.value.command == "SUBSCRIBE"
        assert not stomp._core.consumers  # the reconnect that follows does not try it again
        where = f"/queue/{name()}"
        await stomp.publish(where, b"fine")
        assert (await (await stomp.subscribe(where)).__anext__()).body == b"fine"
        await stomp.close()
    run_async(kind, scenario)


@pytest.mark.parametrize("kind", ASYNC)
def test_a_channel_error_inside_a_transaction_ends_that_transaction_only(broker: Broker, kind: str) -> None:
    async def scenario(io: Io) -> None:
        conn = await io.client.connect(broker.url("amqp"))
        q = await conn.declare_queue(name(), durable=True)
        with pytest.raises(ChannelClosed) as info:
            async with conn.transaction() as tx:
                await tx.publish(q, b"never")
                await tx.publish("k", b"lost", exchange=name("no-exchange"))  # closes the tx's channel
                await io.sleep(0.2)  # (the close may come before or after the commit: same error)
        assert (info.value.reply_code, info.value.method) == (404, "basic.publish")
        with pytest.raises(ChannelClosed):  # and the transaction stays ended
            await tx.commit()
        with pytest.raises(KeyError) as own:  # an error in the block stays the one raised
            async with conn.transaction() as tx:
                await tx.publish("k", b"lost", exchange=name("no-exchange"))
                await io.sleep(0.2)
                raise KeyError("the block's own")
        assert "the rollback failed" in own.value.__notes__[0]
        async with conn.transaction() as tx:  # the next transaction is unaffected
            await tx.publish(q, b"committed")
        sub = await conn.subscribe(q)
        assert (await sub.__anext__()).body == b"committed"
        await conn.close()
    run_async(kind, scenario)
