"""One model for STOMP and AMQP: destinations and headers/properties mapped both ways (as
RabbitMQ's STOMP plugin does), plus the AMQP close handshake deadline."""

from __future__ import annotations

from datetime import UTC, datetime

from enginetest_helpers import connected, new_net, send, subscribe
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, spec
from engine.testing import AmqpSimClient
from stompproto import Message as StompMessage


def test_stomp_send_to_queue_reaches_amqp_consumer_with_properties() -> None:
    net = new_net()
    a = amqp(net)
    s = connected(net)
    declare(a, "q", durable=True)
    a.call(spec.BasicConsume(queue="q", consumer_tag="c", channel=1))
    send(s, "/queue/q", b"hi", content_type="text/plain", persistent="true", priority="4",
         correlation_id="corr", reply_to="/queue/replies", expiration="60000", amqp_message_id="m-1",
         timestamp="1700000000", type="t", app_id="app", x_custom="yes")
    net.run_until_idle()
    d = a.last(spec.BasicDeliver)
    assert d.body == b"hi" and d.routing_key == "q" and d.exchange == ""
    p = d.properties
    assert (p.content_type, p.delivery_mode, p.priority, p.correlation_id, p.reply_to) == (
        "text/plain", 2, 4, "corr", "/queue/replies")
    assert (p.expiration, p.message_id, p.timestamp, p.type, p.app_id) == (
        "60000", "m-1", datetime.fromtimestamp(1700000000, UTC), "t", "app")
    assert p.headers == {"x-custom": "yes"}


def test_amqp_publish_reaches_stomp_queue_subscriber_with_headers() -> None:
    net = new_net()
    a = amqp(net)
    s = connected(net)
    subscribe(s, "/queue/q2", "1")
    net.run_until_idle()
    publish(a, "q2", b"yo", props=BasicProperties(content_type="application/json", delivery_mode=2, priority=2,
                                                  correlation_id="c", reply_to="r", message_id="mid",
                                                  timestamp=datetime.fromtimestamp(5, UTC), type="ty", user_id="guest", app_id="ap",
                                                  headers={"n": 7, "flag": True, "s": "str"}))
    net.run_until_idle()
    (m,) = s.frames(StompMessage)
    h = m.headers
    assert m.body == b"yo"
    assert (h["content-type"], h["persistent"], h["priority"], h["correlation-id"], h["reply-to"]) == (
        "application/json", "true", "2", "c", "r")
    assert (h["amqp-message-id"], h["timestamp"], h["type"], h["user-id"], h["app-id"]) == (
        "mid", "5", "ty", "guest", "ap")
    assert (h["n"], h["flag"], h["s"]) == ("7", "true", "str")
    assert h["destination"] == "/queue/q2"


def test_amqp_topic_publish_reaches_stomp_topic_and_light_subscriptions() -> None:
    net = new_net()
    a = amqp(net)
    s = connected(net)
    subscribe(s, "/topic/news.uk", "light")  # a light (queue-less) subscription
    subscribe(s, "/topic/news.*", "wild")
    net.run_until_idle()
    publish(a, "news.uk", b"t", exchange="amq.topic")
    net.run_until_idle()
    subs = sorted(m.headers["subscription"] for m in s.frames(StompMessage))
    assert subs == ["light", "wild"]
    assert {m.headers["destination"] for m in s.frames(StompMessage)} == {"/topic/news.uk"}


def test_stomp_exchange_destination_and_amqp_bound_queue() -> None:
    net = new_net()
    a = amqp(net)
    s = connected(net)
    a.call(spec.ExchangeDeclare(exchange="logs", type="direct", channel=1))
    declare(a, "errors")
    a.call(spec.QueueBind(queue="errors", exchange="logs", routing_key="error", channel=1))
    send(s, "/exchange/logs/error", b"boom")
    send(s, "/exchange/logs/info", b"fine")
    net.run_until_idle()
    got = a.call(spec.BasicGet(queue="errors", no_ack=True, channel=1))
    assert got.body == b"boom" and got.exchange == "logs" and got.routing_key == "error"
    assert isinstance(a.call(spec.BasicGet(queue="errors", channel=1)), spec.BasicGetEmpty)


def test_amqp_to_amqp_properties_round_trip() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "rt")
    props = BasicProperties(content_type="a/b", content_encoding="gzip", headers={"x": [1, "two"], "y": 2.5},
                            delivery_mode=2, priority=9, correlation_id="c", reply_to="r", expiration="100000",
                            message_id="m",
                            timestamp=datetime.fromtimestamp(123, UTC), type="t", app_id="app")
    publish(a, "rt", b"body", props=props)
    net.run_until_idle()
    got = a.call(spec.BasicGet(queue="rt", no_ack=True, channel=1))
    assert got.properties == props


def test_server_close_waits_for_close_ok_then_drops() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    c.amqp_open()
    c.open_channel(1)
    c.send_raw(b"\x01\x00\x01\x00\x00\x00\x05\x00\x14\x00\x0a\x00\xce")  # channel.open again: hard 504
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 504 and close.reply_text.startswith("CHANNEL_ERROR")
    assert c.server_closed  # the sim client answered close-ok


def test_silent_peer_after_server_close_is_dropped_by_deadline() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    c.amqp_open()
    c.open_channel(1)
    # a client that never answers: swallow the server's close by stopping to read
    c.stop_reading()
    c.send_raw(b"\x01\x00\x01\x00\x00\x00\x04\x00\x63\x00\x01\xce")  # unknown class 99
    net.run_until_idle()
    assert not c.server_closed
    net.advance(10)
    assert c.server_closed
    assert not net.broker.sessions
