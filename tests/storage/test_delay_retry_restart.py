"""Delayed messages and pending retries on the real stores (segment files, PostgreSQL): they keep
their due time, order and attempt count across restarts, and go from the store once released."""

from __future__ import annotations

from typing import Any

from storagetest_helpers import new_net

from amqpproto import BasicProperties, spec
from engine.testing import SimNetwork


def restart(net: SimNetwork, stores: Any) -> SimNetwork:
    net.broker.store.close()
    return new_net(stores.open(), start=net.now)


def amqp(net: SimNetwork) -> Any:
    c = net.connect(protocol="amqp")
    assert isinstance(c.amqp_open(), spec.ConnectionOpenOk)
    c.open_channel(1)
    return c


def publish(c: Any, body: bytes, exchange: str, key: str, delay: int | None = None) -> None:
    props = BasicProperties(headers={"x-delay": delay} if delay is not None else None, delivery_mode=2)
    c.send(spec.BasicPublish(exchange=exchange, routing_key=key, properties=props, body=body, channel=1))


def get_all(c: Any, queue: str) -> list[Any]:
    out = []
    while isinstance(ok := c.call(spec.BasicGet(queue=queue, no_ack=True, channel=1)), spec.BasicGetOk):
        out.append(ok)
    return out


def durable_delayed_exchange(c: Any, kind: str, key: str) -> None:
    """Durable delayed exchange "dx" of ``kind`` with durable queue "q" bound by ``key``."""
    c.call(spec.ExchangeDeclare(exchange="dx", type="x-delayed-message", durable=True,
                                arguments={"x-delayed-type": kind}, channel=1))
    c.call(spec.QueueDeclare(queue="q", durable=True, channel=1))
    c.call(spec.QueueBind(queue="q", exchange="dx", routing_key=key, channel=1))


def test_delayed_messages_survive_restarts_in_due_order(store_factory) -> None:
    net = new_net(store_factory.open())
    c = amqp(net)
    durable_delayed_exchange(c, "fanout", "")
    for body, delay in ((b"c", 30_000), (b"a", 10_000), (b"b", 20_000), (b"b2", 20_000)):
        publish(c, body, "dx", "", delay)
    net.advance(15)  # "a" is released before the restart
    assert [m.body for m in get_all(c, "q")] == [b"a"]
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(4.999)
    assert get_all(c, "q") == []
    net.advance(0.001)
    assert [m.body for m in get_all(c, "q")] == [b"b", b"b2"]
    net = restart(net, store_factory)  # "a", "b", "b2" left the store when released
    c = amqp(net)
    net.advance(60)  # due while it was down: released at once after the start
    got = get_all(c, "q")
    assert [m.body for m in got] == [b"c"]
    assert got[0].properties.headers["x-delay"] == -30_000 and "x-sansmq-due" not in got[0].properties.headers
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(60)
    assert get_all(c, "q") == []


def test_deleting_a_durable_delayed_exchange_forgets_its_messages(store_factory) -> None:
    net = new_net(store_factory.open())
    c = amqp(net)
    durable_delayed_exchange(c, "direct", "k")
    publish(c, b"m", "dx", "k", 5000)
    c.call(spec.ExchangeDelete(exchange="dx", channel=1))
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(10)
    assert get_all(c, "q") == []
    assert "dx" not in net.broker.model.vhosts["/"].exchanges


def test_pending_retry_survives_restart_with_its_count(store_factory) -> None:
    net = new_net(store_factory.open())
    c = amqp(net)
    c.call(spec.QueueDeclare(queue="dlq", durable=True, channel=1))
    c.call(spec.QueueDeclare(queue="work", durable=True, channel=1, arguments={
        "x-retry-delays": "2s,4s", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    publish(c, b"job", "", "work")
    net.run_until_idle()
    first = c.call(spec.BasicGet(queue="work", channel=1))
    c.send(spec.BasicNack(first.delivery_tag, requeue=False, channel=1))
    net.advance(1)
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(0.999)
    assert get_all(c, "work") == []
    net.advance(0.001)
    again = c.call(spec.BasicGet(queue="work", channel=1))
    assert isinstance(again, spec.BasicGetOk) and again.redelivered
    assert again.properties.headers["x-retry-count"] == 1
    c.send(spec.BasicReject(again.delivery_tag, requeue=True, channel=1))
    net.advance(1)
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(3)
    third = c.call(spec.BasicGet(queue="work", channel=1))
    assert third.properties.headers["x-retry-count"] == 2
    c.send(spec.BasicNack(third.delivery_tag, requeue=True, channel=1))
    net.run_until_idle()
    net = restart(net, store_factory)
    c = amqp(net)
    net.advance(10)
    assert get_all(c, "work") == []
    dead = get_all(c, "dlq")
    assert [m.body for m in dead] == [b"job"]
    assert dead[0].properties.headers["x-death"][0]["reason"] == "rejected"
