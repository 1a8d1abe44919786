"""Bad AMQP input: each error closes only its own channel or connection with RabbitMQ's code, never
breaks the broker (SimNetwork is strict: an exception in session code fails the test); and
determinism: the same inputs give the same bytes."""

from __future__ import annotations

import struct

from enginetest_helpers import new_net
from hypothesis import given
from hypothesis import strategies as st
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, ProtocolHeader, spec


def _frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + b"\xce"


def test_body_frame_without_header_is_505_unexpected_frame() -> None:
    net = new_net()
    c = amqp(net)
    c.send_raw(_frame(3, 1, b"stray body"))
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 505
    assert c.server_closed


def test_method_on_unopened_channel_is_504() -> None:
    net = new_net()
    c = amqp(net, channels=0)
    c.send_raw(_frame(1, 7, struct.pack(">HH", 50, 10) + b"\x00\x00" + b"\x01q" + b"\x00" + b"\x00\x00\x00\x00"))
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 504


def test_channel_method_before_connection_open_is_refused() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    c.send(ProtocolHeader())
    c.send_raw(_frame(1, 1, struct.pack(">HH", 20, 10) + b"\x00"))  # channel.open before start-ok
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code in (503, 504)
    assert c.server_closed  # the sim client answered close-ok


def test_unknown_method_of_known_class_is_540_or_503() -> None:
    net = new_net()
    c = amqp(net)
    c.send_raw(_frame(1, 1, struct.pack(">HH", 60, 999)))
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code in (503, 540)


def test_soft_error_on_one_channel_leaves_other_channels_consuming() -> None:
    net = new_net()
    c = amqp(net, channels=2)
    declare(c, "q", ch=2)
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", no_ack=True, channel=2))
    r = c.call(spec.QueueDeclare(queue="missing", passive=True, channel=1))
    assert isinstance(r, spec.ChannelClose) and r.channel == 1
    publish(c, "q", b"still flowing", ch=2)
    net.run_until_idle()
    assert c.last(spec.BasicDeliver).body == b"still flowing"


def _scenario(seed: int) -> list[tuple[object, ...]]:
    net = new_net(seed=seed)
    a = amqp(net, channels=2)
    b = amqp(net)
    declare(a, "", exclusive=True)
    declare(a, "q")
    a.call(spec.BasicConsume(queue="q", channel=2))
    for i in range(5):
        publish(b, "q", str(i).encode(), props=BasicProperties(headers={"i": i}))
    net.run_until_idle()
    a.send(spec.BasicNack(0, multiple=True, requeue=True, channel=2))
    net.advance(3)
    return net.log


def test_same_seed_same_bytes() -> None:
    assert _scenario(3) == _scenario(3)


@given(st.binary(min_size=1, max_size=200))
def test_garbage_after_handshake_never_breaks_the_broker(garbage: bytes) -> None:
    net = new_net()
    bad = amqp(net)
    good = amqp(net)
    declare(good, "q")
    bad.send_raw(garbage)
    net.run_until_idle()  # strict: an internal error in session code raises here
    assert isinstance(declare(good, "q", passive=True), spec.QueueDeclareOk)


def test_hard_error_with_active_consumer_stops_deliveries_and_requeues() -> None:
    net = new_net()
    bad = amqp(net)
    other = amqp(net)
    declare(bad, "q")
    bad.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=1))
    publish(other, "q", b"1")
    net.run_until_idle()
    bad.auto_heartbeat = False
    bad.stop_reading()  # will not answer our close: the consumer must not get more deliveries
    bad.send_raw(_frame(3, 1, b"stray body"))  # hard 505
    publish(other, "q", b"2")
    net.run_until_idle()
    assert declare(other, "q", passive=True).message_count == 2  # "1" requeued, "2" kept


def test_publish_immediate_is_540_connection_error_as_rabbitmq() -> None:
    net = new_net()
    c = amqp(net)
    r = c.call(spec.BasicPublish(routing_key="q", immediate=True, properties=BasicProperties(), body=b"",
                                 channel=1))
    assert isinstance(r, spec.ConnectionClose) and r.reply_code == 540
