"""The firehose (amq.rabbitmq.trace) in simulation: RabbitMQ's routing keys and trace headers for
publishes and deliveries, per vhost, off by default, the trace exchange never traced itself."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import bodies, connected, new_net, send, subscribe, unsubscribe
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, spec
from engine import Config
from engine.config_schema import ConfigError, from_mapping
from engine.model.trace import TRACE_EXCHANGE
from engine.testing import AmqpSimClient, SimNetwork


def traced_net(*vhosts: str) -> SimNetwork:
    cfg = Config()
    cfg.vhosts = ("/", "other")
    cfg.trace_vhosts = vhosts
    return new_net(cfg)


def trace_queue(c: AmqpSimClient, name: str = "trace", key: str = "#") -> None:
    declare(c, name)
    assert isinstance(c.call(spec.QueueBind(queue=name, exchange=TRACE_EXCHANGE, routing_key=key, channel=1)),
                      spec.QueueBindOk)


def drain(c: AmqpSimClient, queue: str = "trace") -> list[Any]:
    """Every message in ``queue`` (basic.get, no-ack): (routing key, headers, body)."""
    out = []
    while isinstance(got := c.call(spec.BasicGet(queue=queue, no_ack=True, channel=1)), spec.BasicGetOk):
        out.append((got.routing_key, got.properties.headers, got.body))
    return out


def test_publish_and_deliver_are_traced_with_rabbitmqs_keys_and_headers() -> None:
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c)
    declare(c, "q")
    publish(c, "q", b"hello", props=BasicProperties(delivery_mode=2, content_type="text/plain",
                                                    headers={"h": "v"}))
    publish(c, "nowhere", b"lost", exchange="amq.direct")
    got = c.call(spec.BasicGet(queue="q", channel=1))
    assert isinstance(got, spec.BasicGetOk) and got.body == b"hello"
    c.send(spec.BasicNack(delivery_tag=got.delivery_tag, requeue=True, channel=1))
    assert isinstance(c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)), spec.BasicGetOk)
    traces = drain(c)
    assert [key for key, _, _ in traces] == ["publish.amq.default", "publish.amq.direct", "deliver.q", "deliver.q"]
    key, h, body = traces[0]
    assert body == b"hello"
    assert h["exchange_name"] == "" and h["routing_keys"] == ["q"] and h["routed_queues"] == ["q"]
    assert h["delivery_mode"] == 2 and h["vhost"] == "/" and h["user"] == "guest" and h["channel"] == 1
    assert h["properties"] == {"content_type": "text/plain", "delivery_mode": 2, "headers": {"h": "v"}}
    assert h["timestamp_in_ms"] == int(net.now * 1000)
    assert h["connection"] and h["node"]
    assert traces[1][1]["routed_queues"] == [] and traces[1][1]["exchange_name"] == "amq.direct"
    first, again = traces[2][1], traces[3][1]
    assert first["redelivered"] == 0 and again["redelivered"] == 1
    assert "routed_queues" not in first and first["exchange_name"] == ""


def test_untraced_vhosts_and_the_trace_exchange_itself_stay_silent() -> None:
    net = traced_net("other")
    c = amqp(net)
    trace_queue(c)
    declare(c, "q")
    publish(c, "q", b"x")
    assert isinstance(c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)), spec.BasicGetOk)
    assert drain(c) == []  # vhost "/" is not traced
    other = amqp(net, vhost="other")
    trace_queue(other)
    declare(other, "q")
    publish(other, "q", b"y")
    # consuming the trace queue is a delivery of trace messages: never traced (no feedback loop)
    traces = drain(other)
    assert [key for key, _, _ in traces] == ["publish.amq.default"]
    assert drain(other) == []


def test_clients_cannot_publish_to_the_internal_trace_exchange() -> None:
    net = traced_net("/")
    c = amqp(net)
    publish(c, "k", b"x", exchange=TRACE_EXCHANGE)
    net.run_until_idle()
    close = c.last(spec.ChannelClose)
    assert close is not None and close.reply_code == spec.ACCESS_REFUSED


def test_stomp_traffic_is_traced_too() -> None:
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c, key="publish.#")
    s = connected(net)
    send(s, "/queue/sq", b"from stomp")
    net.run_until_idle()
    traces = drain(c)
    assert [(key, body) for key, _, body in traces] == [("publish.amq.default", b"from stomp")]
    assert traces[0][1]["routed_queues"] == ["sq"]


def test_trace_vhosts_config_key_is_checked() -> None:
    assert from_mapping({"vhosts": ["a"], "trace_vhosts": ["a"]}).trace_vhosts == ("a",)
    with pytest.raises(ConfigError, match="trace_vhosts"):
        from_mapping({"trace_vhosts": ["missing"]})
    with pytest.raises(ConfigError):
        from_mapping({"trace_vhosts": "/"})


def test_deliveries_from_a_stream_are_traced_but_not_those_of_a_trace_stream() -> None:
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c)
    declare(c, "history", durable=True, arguments={"x-queue-type": "stream"})
    assert isinstance(c.call(spec.QueueBind(queue="history", exchange=TRACE_EXCHANGE, routing_key="publish.#",
                                            channel=1)), spec.QueueBindOk)
    declare(c, "s", durable=True, arguments={"x-queue-type": "stream"})
    publish(c, "s", b"event")
    net.run_until_idle()
    c.call(spec.BasicQos(prefetch_count=10, channel=1))
    for queue in ("s", "history"):
        c.call(spec.BasicConsume(queue=queue, consumer_tag=queue, arguments={"x-stream-offset": "first"},
                                 channel=1))
    net.run_until_idle()
    assert sorted((d.consumer_tag, d.body) for d in c.of(spec.BasicDeliver)) == [("history", b"event"),
                                                                                 ("s", b"event")]
    traces = drain(c)
    assert [key for key, _, _ in traces] == ["publish.amq.default", "deliver.s"]
    assert traces[1][1]["redelivered"] == 0


def test_stomp_publishes_and_deliveries_carry_user_and_connection() -> None:
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c)
    s = connected(net)
    subscribe(s, "/queue/sq", "sub")
    send(s, "/queue/sq", b"round trip")
    net.run_until_idle()
    traces = drain(c)
    assert [key for key, _, _ in traces] == ["publish.amq.default", "deliver.sq"]
    for _, h, _ in traces:
        assert h["user"] == "guest" and h["channel"] == 1
        assert h["connection"] == "{}:{}".format(*s.peer[:2])  # the STOMP client's address


def test_a_delayed_exchange_release_is_traced_once() -> None:
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c)
    c.call(spec.ExchangeDeclare(exchange="later", type="x-delayed-message",
                                arguments={"x-delayed-type": "direct"}, channel=1))
    declare(c, "due")
    c.call(spec.QueueBind(queue="due", exchange="later", routing_key="k", channel=1))
    publish(c, "k", b"wait", exchange="later", props=BasicProperties(headers={"x-delay": 1000}))
    net.run_until_idle()
    net.advance(2)
    got = c.call(spec.BasicGet(queue="due", no_ack=True, channel=1))
    assert isinstance(got, spec.BasicGetOk) and got.body == b"wait"
    traces = drain(c)
    assert [key for key, _, _ in traces] == ["publish.later", "deliver.due"]
    assert traces[0][1]["user"] == "guest" and traces[0][1]["routed_queues"] == []  # held, as the plugin's


def test_trace_routes_follow_binding_changes_between_messages() -> None:
    """The tracer caches where each trace key goes; every binding change (a bind, an unbind, a
    deleted queue, a STOMP subscription, an exchange bound in between) is seen by the next message."""
    net = traced_net("/")
    c = amqp(net)
    declare(c, "q")
    trace_queue(c, "t1", "publish.#")

    def traced() -> dict[str, list[str]]:
        publish(c, "q", b"m")
        net.run_until_idle()
        return {name: [key for key, _, _ in drain(c, name)] for name in ("t1", "t2", "t3")}

    declare(c, "t2")
    declare(c, "t3")
    assert traced() == {"t1": ["publish.amq.default"], "t2": [], "t3": []}
    c.call(spec.QueueBind(queue="t2", exchange=TRACE_EXCHANGE, routing_key="#", channel=1))
    assert traced() == {"t1": ["publish.amq.default"], "t2": ["publish.amq.default"], "t3": []}
    c.call(spec.QueueUnbind(queue="t1", exchange=TRACE_EXCHANGE, routing_key="publish.#", channel=1))
    assert traced()["t1"] == []
    c.call(spec.QueueDelete(queue="t2", channel=1))
    declare(c, "t2")
    assert traced() == {"t1": [], "t2": [], "t3": []}
    # an exchange in between: its own bindings change what the trace exchange reaches
    c.call(spec.ExchangeDeclare(exchange="relay", type="fanout", channel=1))
    c.call(spec.ExchangeBind(destination="relay", source=TRACE_EXCHANGE, routing_key="#", channel=1))
    assert traced()["t3"] == []
    c.call(spec.QueueBind(queue="t3", exchange="relay", channel=1))
    assert traced()["t3"] == ["publish.amq.default"]
    c.call(spec.QueueUnbind(queue="t3", exchange="relay", channel=1))
    assert traced()["t3"] == []
    s = connected(net)  # a STOMP subscription to the trace exchange is bound (and unbound) too
    subscribe(s, f"/exchange/{TRACE_EXCHANGE}/publish.#", "sub")
    net.run_until_idle()
    bodies(s)
    traced()
    assert bodies(s) == [b"m"]
    unsubscribe(s, "sub")
    net.run_until_idle()
    traced()
    assert bodies(s) == []


def test_a_stomp_topic_subscription_is_a_routed_queue_and_its_deliveries_are_traced() -> None:
    """A light subscription (no queue of its own) stands for the auto-delete queue RabbitMQ's STOMP
    adapter would make: a publish reaching only it is routed, not unroutable, and it is delivered."""
    net = traced_net("/")
    c = amqp(net)
    trace_queue(c)
    s = connected(net)
    subscribe(s, "/topic/news", "sub-1")
    net.run_until_idle()
    sender = connected(net)
    send(sender, "/topic/news", b"headline")
    send(sender, "/topic/sport", b"nobody listens")
    net.run_until_idle()
    assert bodies(s) == [b"headline"]
    name = "stomp-subscription-{}:{}-sub-1".format(*s.peer[:2])
    traces = drain(c)
    assert [(key, h.get("routed_queues"), body) for key, h, body in traces] == [
        ("publish.amq.topic", [name], b"headline"), ("publish.amq.topic", [], b"nobody listens"),
        (f"deliver.{name}", None, b"headline")]
    delivered = traces[2][1]
    assert delivered["redelivered"] == 0 and delivered["exchange_name"] == "amq.topic"
    assert delivered["user"] == "guest" and delivered["connection"] == "{}:{}".format(*s.peer[:2])
