"""The event exchange (amq.rabbitmq.event) in simulation: RabbitMQ's routing keys and headers for
connection, channel, queue, exchange, binding, consumer, user/vhost/permission and alarm events;
off by default; timestamps from the injected clock; nothing built without a binding."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import connected, new_net, subscribe
from test_engine_amqp import amqp, declare

from amqpproto import spec
from engine import Config
from engine.config_schema import ConfigError, from_mapping
from engine.model.events import EVENT_EXCHANGE
from engine.testing import AmqpSimClient, SimNetwork


def events_net(vhost: str | None = "/") -> SimNetwork:
    cfg = Config()
    cfg.vhosts = ("/", "other")
    cfg.event_vhost = vhost
    return new_net(cfg)


def event_queue(c: AmqpSimClient, key: str = "#", name: str = "events") -> None:
    declare(c, name)
    assert isinstance(c.call(spec.QueueBind(queue=name, exchange=EVENT_EXCHANGE, routing_key=key, channel=1)),
                      spec.QueueBindOk)


def drain(c: AmqpSimClient, queue: str = "events") -> list[tuple[str, dict[str, Any], Any]]:
    """Every event in ``queue`` (basic.get, no-ack): (routing key, headers, properties)."""
    out = []
    while isinstance(got := c.call(spec.BasicGet(queue=queue, no_ack=True, channel=1)), spec.BasicGetOk):
        assert got.body == b""  # the plugin's events have an empty body
        out.append((got.routing_key, got.properties.headers, got.properties))
    return out


def test_another_clients_connection_channel_queue_and_consumer_are_events() -> None:
    net = events_net()
    watcher = amqp(net)
    event_queue(watcher)
    drain(watcher)  # the watcher's own binding.created
    other = amqp(net)
    declare(other, "work", durable=True, arguments={"x-max-length": 10})
    other.call(spec.BasicConsume(queue="work", consumer_tag="ctag", channel=1))
    other.call(spec.BasicCancel(consumer_tag="ctag", channel=1))
    other.call(spec.QueueDelete(queue="work", channel=1))
    other.close()
    net.run_until_idle()
    events = drain(watcher)
    assert [key for key, _, _ in events] == [
        "user.authentication.success", "connection.created", "channel.created", "queue.created", "consumer.created", "consumer.deleted",
        "queue.deleted", "channel.closed", "connection.closed"]
    by_key = {key: h for key, h, _ in events}
    conn = by_key["connection.created"]
    assert conn["user"] == "guest" and conn["vhost"] == "/" and conn["protocol"] == "AMQP 0-9-1"
    assert conn["user_who_performed_action"] == "guest" and conn["name"] and conn["peer_port"] > 0
    assert by_key["channel.created"]["number"] == 1 and by_key["channel.created"]["connection"] == conn["name"]
    assert by_key["channel.closed"]["user_who_performed_action"] == "guest"
    q = by_key["queue.created"]
    assert (q["name"], q["vhost"], q["durable"], q["exclusive"]) == ("work", "/", True, False)
    assert q["arguments"] == {"x-max-length": 10} and q["user_who_performed_action"] == "guest"
    cons = by_key["consumer.created"]
    assert (cons["consumer_tag"], cons["queue"], cons["vhost"], cons["ack_required"]) == ("ctag", "work", "/", True)
    assert by_key["consumer.deleted"]["consumer_tag"] == "ctag"
    assert by_key["queue.deleted"]["name"] == "work"
    closed = by_key["connection.closed"]
    assert closed["name"] == conn["name"] and "user_who_performed_action" not in closed  # as RabbitMQ's
    for _, h, props in events:  # the plugin's message: persistent, timestamps from the broker's clock
        assert props.delivery_mode == 2
        assert h["timestamp_in_ms"] == int(net.now * 1000) and props.timestamp.timestamp() == int(net.now)


def test_bindings_exchanges_and_the_binding_to_the_event_exchange_itself() -> None:
    net = events_net()
    c = amqp(net)
    event_queue(c, "binding.*")
    declare(c, "q")
    c.call(spec.ExchangeDeclare(exchange="x", type="topic", channel=1))
    c.call(spec.QueueBind(queue="q", exchange="x", routing_key="a.b", channel=1))
    c.call(spec.QueueUnbind(queue="q", exchange="x", routing_key="a.b", channel=1))
    events = drain(c)
    assert [key for key, _, _ in events] == ["binding.created", "binding.created", "binding.deleted"]
    own, made, gone = (h for _, h, _ in events)
    assert own["source_name"] == EVENT_EXCHANGE and own["destination_name"] == "events"
    assert (made["source_name"], made["source_kind"], made["destination_name"], made["destination_kind"],
            made["routing_key"], made["vhost"]) == ("x", "exchange", "q", "queue", "a.b", "/")
    assert gone["routing_key"] == "a.b"
    event_queue(c, "exchange.*", name="xs")
    c.call(spec.ExchangeDelete(exchange="x", channel=1))
    (key, h, _), = drain(c, "xs")
    assert key == "exchange.deleted" and h["name"] == "x" and h["user_who_performed_action"] == "guest"


def test_events_of_every_vhost_go_to_the_event_vhost_only() -> None:
    net = events_net("other")
    assert EVENT_EXCHANGE not in net.broker.model.vhosts["/"].exchanges
    watcher = amqp(net, vhost="other")
    event_queue(watcher, "queue.*")
    c = amqp(net)
    declare(c, "in-default")
    (key, h, _), = drain(watcher)
    assert key == "queue.created" and h["name"] == "in-default" and h["vhost"] == "/"


def test_stomp_connections_and_subscriptions_are_events_too() -> None:
    net = events_net()
    watcher = amqp(net)
    event_queue(watcher, "#")
    drain(watcher)
    s = connected(net)
    subscribe(s, "/queue/sq", "sub-1")
    net.run_until_idle()
    keys = [(key, h) for key, h, _ in drain(watcher)]
    assert [k for k, _ in keys] == ["user.authentication.success", "connection.created", "queue.created",
                                    "consumer.created"]
    assert keys[1][1]["protocol"] == "STOMP" and keys[1][1]["user"] == "guest"
    assert keys[3][1]["consumer_tag"] == "T_sub-1" and keys[3][1]["queue"] == "sq"


def test_administration_and_alarms_are_events_of_rmq_internal() -> None:
    net = events_net()
    c = amqp(net)
    event_queue(c, "#")
    drain(c)
    broker = net.broker
    broker.add_user("wabbit", "pw")
    broker.set_permissions("wabbit", "other", ".*", ".*", ".*")
    broker.clear_permissions("wabbit", "other")
    broker.delete_user("wabbit")
    broker.add_vhost("v2")
    broker.delete_vhost("v2")
    broker.model.events.alarm(True, "memory")
    events = drain(c)
    assert [key for key, _, _ in events] == ["user.created", "permission.created", "permission.deleted",
                                             "user.deleted", "vhost.created", "vhost.deleted", "alarm.set"]
    assert events[1][1]["user"] == "wabbit" and events[1][1]["vhost"] == "other" and events[1][1]["read"] == ".*"
    assert all(h["user_who_performed_action"] == "rmq-internal" for _, h, _ in events[:6])
    assert events[6][1]["source"] == "memory" and events[6][1]["node"]


def test_off_by_default_and_nothing_built_without_a_binding() -> None:
    net = events_net(None)
    assert EVENT_EXCHANGE not in net.broker.model.vhosts["/"].exchanges
    c = amqp(net)
    declare(c, "q")
    net = events_net()
    c = amqp(net)
    ids = net.broker.model.next_message_id()
    declare(c, "unwatched")
    assert net.broker.model.next_message_id() == ids + 1  # no event message was made


def test_clients_cannot_publish_to_the_internal_event_exchange() -> None:
    net = events_net()
    c = amqp(net)
    c.send(spec.BasicPublish(exchange=EVENT_EXCHANGE, routing_key="queue.created", body=b"x", channel=1))
    net.run_until_idle()
    close = c.last(spec.ChannelClose)
    assert close is not None and close.reply_code == spec.ACCESS_REFUSED


def test_event_vhost_config_key_is_checked() -> None:
    assert from_mapping({"vhosts": ["a"], "event_vhost": "a"}).event_vhost == "a"
    assert from_mapping({"event_vhost": ""}).event_vhost is None
    with pytest.raises(ConfigError, match="event_vhost"):
        from_mapping({"event_vhost": "missing"})


def test_authentication_success_and_failure_are_user_events() -> None:
    net = events_net()
    watcher = amqp(net)
    event_queue(watcher, "user.#")
    amqp(net)
    bad = net.connect(protocol="amqp")
    assert isinstance(bad, AmqpSimClient)
    bad.amqp_open(password="wrong")
    s = net.connect()
    s.stomp_connect({"login": "guest", "passcode": "guest"})
    net.run_until_idle()
    events = drain(watcher)
    assert [key for key, _, _ in events] == ["user.authentication.success", "user.authentication.failure",
                                             "user.authentication.success"]
    ok, failed, stomp_ok = (h for _, h, _ in events)
    assert ok["name"] == "guest" and ok["auth_mechanism"] == "PLAIN" and ok["protocol"] == "AMQP 0-9-1"
    assert ok["connection_type"] == "network" and "vhost" not in ok  # as RabbitMQ's
    assert failed["name"] == "guest" and "wrong password" in failed["error"]
    assert stomp_ok["protocol"] == "STOMP" and stomp_ok["connection_name"] == "{}:{}".format(*s.peer[:2])
