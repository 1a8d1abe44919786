"""AMQP 0-9-1 session on the engine: connection handshake, channels, queues, exchanges, basic.*
(deterministic, with a client-role amqpproto connection in SimNetwork)."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import confirm_outcomes, new_net

import amqpproto as A
from amqpproto import BasicProperties, spec
from engine import Config, User
from engine.testing import AmqpSimClient, FakeStore, SimNetwork


def amqp(net: SimNetwork, channels: int = 1, **kw: Any) -> AmqpSimClient:
    client = net.connect(protocol="amqp")
    assert isinstance(client, AmqpSimClient)
    ok = client.amqp_open(**kw)
    assert isinstance(ok, spec.ConnectionOpenOk), ok
    for ch in range(1, channels + 1):
        assert isinstance(client.open_channel(ch), spec.ChannelOpenOk)
    return client


def publish(c: AmqpSimClient, key: str, body: bytes, exchange: str = "", ch: int = 1,
            props: BasicProperties | None = None, mandatory: bool = False) -> None:
    c.send(spec.BasicPublish(exchange=exchange, routing_key=key, mandatory=mandatory,
                             properties=props or BasicProperties(), body=body, channel=ch))


def declare(c: AmqpSimClient, name: str, ch: int = 1, **kw: Any) -> Any:
    return c.call(spec.QueueDeclare(queue=name, channel=ch, **kw))


# -- connection ---------------------------------------------------------------------------------
def test_handshake_advertises_rabbitmq_capabilities_and_negotiates_tune() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    assert isinstance(c.amqp_open(heartbeat=10), spec.ConnectionOpenOk)
    start = c.last(spec.ConnectionStart)
    caps = start.server_properties["capabilities"]
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
                "connection.blocked", "authentication_failure_close", "per_consumer_qos", "direct_reply_to"):
        assert caps[cap] is True, cap
    assert set(start.mechanisms.split()) == {b"PLAIN", b"AMQPLAIN"}
    tune = c.last(spec.ConnectionTune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert c.conn.heartbeat == 10  # the smaller non-zero heartbeat wins
    assert c.conn.frame_max == 131072


def test_amqplain_login_and_bad_password_is_403_connection_close() -> None:
    cfg = Config(users={"bob": User("bob", "pw")})
    net = new_net(cfg)
    good = net.connect(protocol="amqp")
    assert isinstance(good.amqp_open("bob", "pw", mechanism="AMQPLAIN"), spec.ConnectionOpenOk)
    bad = net.connect(protocol="amqp")
    close = bad.amqp_open("bob", "nope")
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED")
    assert bad.server_closed or bad.gone


def test_guest_is_loopback_only() -> None:
    net = new_net()
    c = net.connect(peer=("10.1.2.3", 5555), protocol="amqp")
    close = c.amqp_open()
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 403


def test_unknown_vhost_is_530() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    close = c.amqp_open(vhost="nope")
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 530


def test_wrong_protocol_header_gets_ours_and_close() -> None:
    net = new_net()
    c = net.connect(protocol="amqp")
    c.send_raw(b"AMQP\x01\x01\x00\x0a")
    net.run_until_idle()
    assert c.server_closed
    writes = [e[2] for e in net.log if e[0] == "write" and e[1] == c.conn_id]
    assert writes == [b"AMQP\x00\x00\x09\x01"]


def test_client_close_gets_close_ok_and_connection_ends() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ConnectionClose(200, "bye", 0, 0))
    assert c.last(spec.ConnectionCloseOk) is not None
    assert c.server_closed
    assert not net.broker.sessions


def test_heartbeats_sent_and_silent_peer_dropped() -> None:
    net = new_net()
    c = net.connect(protocol="amqp", auto_heartbeat=False)
    c.amqp_open(heartbeat=5)
    net.advance(6)
    assert any(isinstance(e, A.Heartbeat) for e in c.received)
    assert not c.server_closed
    net.advance(10)  # nothing from the client for 2 intervals
    assert c.server_closed


def test_client_heartbeats_keep_connection() -> None:
    net = new_net()
    c = net.connect(protocol="amqp", auto_heartbeat=True)
    c.amqp_open(heartbeat=5)
    net.advance(60)
    assert not c.server_closed


# -- queues and basic ---------------------------------------------------------------------------
def test_declare_publish_get_ack() -> None:
    net = new_net()
    c = amqp(net)
    ok = declare(c, "q")
    assert isinstance(ok, spec.QueueDeclareOk) and (ok.queue, ok.message_count) == ("q", 0)
    publish(c, "q", b"one", props=BasicProperties(content_type="text/plain", headers={"a": 1}))
    publish(c, "q", b"two")
    net.run_until_idle()
    got = c.call(spec.BasicGet(queue="q", channel=1))
    assert isinstance(got, spec.BasicGetOk)
    assert (got.body, got.delivery_tag, got.redelivered, got.message_count) == (b"one", 1, False, 1)
    assert got.properties.content_type == "text/plain" and got.properties.headers == {"a": 1}
    c.send(spec.BasicAck(1, channel=1))
    got2 = c.call(spec.BasicGet(queue="q", no_ack=True, channel=1))
    assert got2.body == b"two"
    assert isinstance(c.call(spec.BasicGet(queue="q", channel=1)), spec.BasicGetEmpty)
    assert declare(c, "q", passive=True).message_count == 0


def test_server_named_queue_and_consume_with_generated_tag() -> None:
    net = new_net()
    c = amqp(net)
    ok = declare(c, "", exclusive=True)
    assert ok.queue.startswith("amq.gen-")
    cok = c.call(spec.BasicConsume(queue=ok.queue, channel=1))
    assert cok.consumer_tag.startswith("amq.ctag-")
    publish(c, ok.queue, b"x")
    net.run_until_idle()
    d = c.last(spec.BasicDeliver)
    assert (d.consumer_tag, d.delivery_tag, d.body, d.routing_key) == (cok.consumer_tag, 1, b"x", ok.queue)


def test_order_is_kept_per_queue_and_nack_requeue_redelivers_first() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    for i in range(20):
        publish(c, "q", str(i).encode())
    c.call(spec.BasicQos(0, 5, False, channel=1))
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=1))
    ds = c.of(spec.BasicDeliver)
    assert [d.body for d in ds] == [b"0", b"1", b"2", b"3", b"4"]  # prefetch 5
    c.send(spec.BasicNack(2, multiple=True, requeue=True, channel=1))  # 0 and 1 back
    net.run_until_idle()
    ds = c.of(spec.BasicDeliver)[5:]
    assert [(d.body, d.redelivered) for d in ds] == [(b"0", True), (b"1", True)]
    c.send(spec.BasicAck(0, multiple=True, channel=1))
    net.run_until_idle()
    bodies = [d.body for d in c.of(spec.BasicDeliver)[7:]]
    assert bodies == [b"5", b"6", b"7", b"8", b"9"]


def test_reject_without_requeue_dead_letters() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "dead")
    declare(c, "q", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    publish(c, "q", b"m")
    net.run_until_idle()
    got = c.call(spec.BasicGet(queue="q", channel=1))
    c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
    net.run_until_idle()
    dead = c.call(spec.BasicGet(queue="dead", no_ack=True, channel=1))
    assert isinstance(dead, spec.BasicGetOk) and dead.body == b"m"


def test_unknown_delivery_tag_is_406_channel_close_others_live() -> None:
    net = new_net()
    c = amqp(net, channels=2)
    declare(c, "q", ch=2)
    c.call(spec.BasicAck(99, channel=1))
    close = c.last(spec.ChannelClose)
    assert close.channel == 1 and close.reply_code == 406
    assert close.class_id == 60 and close.method_id == 80
    assert isinstance(declare(c, "q", ch=2, passive=True), spec.QueueDeclareOk)
    assert not c.server_closed


def test_channel_errors_404_405_406() -> None:
    net = new_net()
    a = amqp(net, channels=3)
    b = amqp(net)
    r = declare(a, "nope", passive=True)
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 404 and r.channel == 1
    declare(a, "ex", ch=2, exclusive=True)
    r = declare(b, "ex")
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 405
    declare(a, "d", ch=3, durable=True)
    r = declare(a, "d", ch=3, durable=False)
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406
    assert not a.server_closed and not b.server_closed
    assert isinstance(a.open_channel(4), spec.ChannelOpenOk)


def test_reopen_closed_channel_and_close_requeues_unacked() -> None:
    net = new_net()
    c = amqp(net, channels=2)
    declare(c, "q")
    publish(c, "q", b"m")
    net.run_until_idle()
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=2))
    assert c.last(spec.BasicDeliver).body == b"m"
    assert isinstance(c.call(spec.ChannelClose(200, "", 0, 0, channel=2)), spec.ChannelCloseOk)
    got = c.call(spec.BasicGet(queue="q", channel=1))
    assert got.body == b"m" and got.redelivered
    assert isinstance(c.open_channel(2), spec.ChannelOpenOk)


def test_connection_loss_requeues_with_redelivered() -> None:
    net = new_net()
    a = amqp(net)
    b = amqp(net)
    declare(a, "q")
    publish(a, "q", b"m")
    a.call(spec.BasicConsume(queue="q", channel=1))
    assert a.last(spec.BasicDeliver).redelivered is False
    a.drop()
    net.run_until_idle()
    b.call(spec.BasicConsume(queue="q", channel=1))
    d = b.last(spec.BasicDeliver)
    assert d.body == b"m" and d.redelivered is True


def test_exchanges_declare_bind_route_and_reserved_names() -> None:
    net = new_net()
    c = amqp(net)
    assert isinstance(c.call(spec.ExchangeDeclare(exchange="x", type="topic", channel=1)), spec.ExchangeDeclareOk)
    declare(c, "q")
    c.call(spec.QueueBind(queue="q", exchange="x", routing_key="a.*", channel=1))
    publish(c, "a.b", b"hit", exchange="x")
    publish(c, "b.a", b"miss", exchange="x")
    net.run_until_idle()
    assert declare(c, "q", passive=True).message_count == 1
    r = c.call(spec.ExchangeDeclare(exchange="x", type="fanout", channel=1))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406
    c.open_channel(2)
    r = c.call(spec.ExchangeDeclare(exchange="amq.mine", type="direct", channel=2))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 403
    c.open_channel(3)
    r = c.call(spec.ExchangeDeclare(exchange="nope", passive=True, channel=3))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 404
    c.open_channel(4)
    for name, kind in (("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                       ("amq.headers", "headers"), ("amq.match", "headers")):
        assert isinstance(c.call(spec.ExchangeDeclare(exchange=name, type=kind, passive=True, channel=4)),
                          spec.ExchangeDeclareOk)
    r = c.call(spec.BasicPublish(exchange="nope", routing_key="k", channel=4, properties=BasicProperties(),
                                 body=b""))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 404


def test_exchange_to_exchange_binding_and_delete_if_unused() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="src", type="fanout", channel=1))
    c.call(spec.ExchangeDeclare(exchange="dst", type="direct", channel=1))
    declare(c, "q")
    c.call(spec.QueueBind(queue="q", exchange="dst", routing_key="k", channel=1))
    assert isinstance(c.call(spec.ExchangeBind(destination="dst", source="src", channel=1)), spec.ExchangeBindOk)
    publish(c, "k", b"via-e2e", exchange="src")
    net.run_until_idle()
    assert c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)).body == b"via-e2e"
    r = c.call(spec.ExchangeDelete(exchange="src", if_unused=True, channel=1))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406
    c.open_channel(2)
    c.call(spec.ExchangeUnbind(destination="dst", source="src", channel=2))
    assert isinstance(c.call(spec.ExchangeDelete(exchange="src", if_unused=True, channel=2)), spec.ExchangeDeleteOk)


def test_mandatory_unroutable_is_returned_312() -> None:
    net = new_net()
    c = amqp(net)
    publish(c, "nowhere", b"r", exchange="amq.direct", mandatory=True)
    net.run_until_idle()
    ret = c.last(spec.BasicReturn)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key, ret.body) == (
        312, "NO_ROUTE", "amq.direct", "nowhere", b"r")


def test_publisher_confirms_wait_for_store_sync_for_persistent_messages() -> None:
    store = FakeStore()
    net = new_net(store=store, auto_sync=False)
    c = amqp(net)
    declare(c, "dq", durable=True)
    net.complete_syncs()
    assert isinstance(c.call(spec.ConfirmSelect(channel=1)), spec.ConfirmSelectOk)
    publish(c, "dq", b"p", props=BasicProperties(delivery_mode=2))
    net.run_until_idle()
    assert c.of(spec.BasicAck) == []  # not yet synced
    net.complete_syncs()
    acks = c.of(spec.BasicAck)
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(1, False)]
    publish(c, "dq", b"t")  # transient: confirmed at once
    net.run_until_idle()
    assert [a.delivery_tag for a in c.of(spec.BasicAck)] == [1, 2]


def test_tx_commit_and_rollback() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    assert isinstance(c.call(spec.TxSelect(channel=1)), spec.TxSelectOk)
    publish(c, "q", b"a")
    net.run_until_idle()
    assert declare(c, "q", passive=True).message_count == 0
    assert isinstance(c.call(spec.TxCommit(channel=1)), spec.TxCommitOk)
    assert declare(c, "q", passive=True).message_count == 1
    publish(c, "q", b"b")
    assert isinstance(c.call(spec.TxRollback(channel=1)), spec.TxRollbackOk)
    c.call(spec.TxCommit(channel=1))
    assert declare(c, "q", passive=True).message_count == 1


def test_queue_delete_cancels_consumer_with_notification() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=1))
    ok = c.call(spec.QueueDelete(queue="q", channel=1))
    assert isinstance(ok, spec.QueueDeleteOk)
    cancel = c.last(spec.BasicCancel)
    assert cancel is not None and cancel.consumer_tag == "t"


def test_purge_and_delete_if_empty() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    publish(c, "q", b"1")
    publish(c, "q", b"2")
    net.run_until_idle()
    r = c.call(spec.QueueDelete(queue="q", if_empty=True, channel=1))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406
    c.open_channel(2)
    assert c.call(spec.QueuePurge(queue="q", channel=2)).message_count == 2
    assert isinstance(c.call(spec.QueueDelete(queue="q", if_empty=True, channel=2)), spec.QueueDeleteOk)


def test_exclusive_queue_deleted_with_its_connection() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "mine", exclusive=True)
    a.close()
    net.run_until_idle()
    b = amqp(net)
    r = declare(b, "mine", passive=True)
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 404


def test_per_message_expiration() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    publish(c, "q", b"short", props=BasicProperties(expiration="1000"))
    publish(c, "q", b"long")
    net.run_until_idle()
    net.advance(2)
    got = c.call(spec.BasicGet(queue="q", no_ack=True, channel=1))
    assert got.body == b"long"


def test_global_qos_is_shared_by_channel_consumers() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q1")
    declare(c, "q2")
    for _ in range(3):
        publish(c, "q1", b"a")
        publish(c, "q2", b"b")
    c.call(spec.BasicQos(0, 2, True, channel=1))
    c.call(spec.BasicConsume(queue="q1", channel=1))
    c.call(spec.BasicConsume(queue="q2", channel=1))
    assert len(c.of(spec.BasicDeliver)) == 2
    c.send(spec.BasicAck(0, multiple=True, channel=1))
    net.run_until_idle()
    assert len(c.of(spec.BasicDeliver)) == 4


def test_direct_reply_to() -> None:
    net = new_net()
    client = amqp(net)
    server = amqp(net)
    declare(server, "rpc")
    server.call(spec.BasicConsume(queue="rpc", no_ack=True, channel=1))
    client.call(spec.BasicConsume(queue="amq.rabbitmq.reply-to", no_ack=True, channel=1))
    publish(client, "rpc", b"ping", props=BasicProperties(reply_to="amq.rabbitmq.reply-to",
                                                          correlation_id="42"))
    net.run_until_idle()
    req = server.last(spec.BasicDeliver)
    assert req.properties.reply_to.startswith("amq.rabbitmq.reply-to.")
    publish(server, req.properties.reply_to, b"pong",
            props=BasicProperties(correlation_id=req.properties.correlation_id))
    net.run_until_idle()
    rep = client.last(spec.BasicDeliver)
    assert (rep.body, rep.properties.correlation_id) == (b"pong", "42")


def test_large_message_split_into_frames() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "big")
    body = bytes(range(256)) * 40_000  # ~10 MB
    publish(c, "big", body)
    net.run_until_idle()
    assert c.call(spec.BasicGet(queue="big", no_ack=True, channel=1)).body == body


def test_hundred_channels_on_one_connection() -> None:
    net = new_net()
    c = amqp(net, channels=100)
    for ch in range(1, 101):
        declare(c, f"q{ch}", ch=ch)
        publish(c, f"q{ch}", b"x", ch=ch)
    net.run_until_idle()
    for ch in range(1, 101):
        assert c.call(spec.BasicGet(queue=f"q{ch}", no_ack=True, channel=ch)).body == b"x"


@pytest.mark.parametrize("garbage", [b"\x01\x00\x01\x00\x00\x00\x04\x00\x63\x00\x01\xce",  # unknown class
                                     b"\x09\x00\x00\x00\x00\x00\x00\xce",  # bad frame type
                                     b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x0a\x00"])  # bad frame end
def test_bad_frames_close_only_their_connection(garbage: bytes) -> None:
    net = new_net()
    bad = amqp(net)
    good = amqp(net)
    declare(good, "q")
    bad.send_raw(garbage)
    net.run_until_idle()
    close = bad.last(spec.ConnectionClose)
    assert close is not None and close.reply_code in (501, 502, 503, 505, 540)
    assert bad.server_closed
    assert isinstance(declare(good, "q", passive=True), spec.QueueDeclareOk)


def test_oversized_frame_is_501() -> None:
    net = new_net()
    bad = amqp(net)
    bad.send_raw(b"\x01\x00\x01\x00\x10\x00\x00")  # 1 MiB frame > frame_max
    net.run_until_idle()
    close = bad.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 501
    assert bad.server_closed


def test_x_death_header_as_rabbitmq_writes_it() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="dlx", type="fanout", channel=1))
    declare(c, "dlq")
    c.call(spec.QueueBind(queue="dlq", exchange="dlx", channel=1))
    declare(c, "work", arguments={"x-dead-letter-exchange": "dlx"})
    publish(c, "work", b"m", props=BasicProperties(expiration="5000"))
    net.run_until_idle()
    for round_ in (1, 2):
        got = c.call(spec.BasicGet(queue="work", channel=1))
        c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
        net.run_until_idle()
        dead = c.call(spec.BasicGet(queue="dlq", no_ack=True, channel=1))
        (death,) = dead.properties.headers["x-death"]
        assert (death["count"], death["reason"], death["queue"], death["exchange"], death["routing-keys"]) == (
            round_, "rejected", "work", "", ["work"])
        assert dead.properties.headers["x-first-death-reason"] == "rejected"
        assert dead.properties.expiration is None
        if round_ == 1:
            assert death["original-expiration"] == "5000"
            publish(c, "work", dead.body, props=BasicProperties(headers=dead.properties.headers))
            net.run_until_idle()
    assert death["time"].timestamp() == int(net.now)  # an AMQP timestamp, as RabbitMQ writes it


def test_cancel_keeps_unacked_deliveries_ackable_and_close_requeues_them() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    for b in (b"1", b"2"):
        publish(c, "q", b)
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=1))
    assert [d.delivery_tag for d in c.of(spec.BasicDeliver)] == [1, 2]
    assert isinstance(c.call(spec.BasicCancel("t", channel=1)), spec.BasicCancelOk)
    assert declare(c, "q", passive=True).message_count == 0  # still unacked, not requeued
    c.send(spec.BasicAck(1, channel=1))  # a tag of the cancelled consumer is still valid
    net.run_until_idle()
    assert c.last(spec.ChannelClose) is None
    c.call(spec.ChannelClose(200, "", 0, 0, channel=1))
    c.open_channel(2)
    got = c.call(spec.BasicGet(queue="q", no_ack=True, channel=2))
    assert got.body == b"2" and got.redelivered


def test_overflow_reject_publish_nacks_and_drop_head_drops_oldest() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "rej", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    declare(c, "drop", arguments={"x-max-length": 1})
    c.call(spec.ConfirmSelect(channel=1))
    for body in (b"a", b"b"):
        publish(c, "rej", body)
        publish(c, "drop", body)
    net.run_until_idle()
    assert confirm_outcomes(c) == [("ack", 1), ("ack", 2), ("nack", 3), ("ack", 4)]
    assert c.call(spec.BasicGet(queue="rej", no_ack=True, channel=1)).body == b"a"
    assert c.call(spec.BasicGet(queue="drop", no_ack=True, channel=1)).body == b"b"
    r = declare(c, "bad", arguments={"x-overflow": "explode"})
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406


def test_single_active_consumer_and_delivery_limit() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "dead")
    declare(c, "sac", arguments={"x-single-active-consumer": True, "x-delivery-limit": 1,
                                 "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    c.call(spec.BasicConsume(queue="sac", consumer_tag="first", channel=1))
    c.call(spec.BasicConsume(queue="sac", consumer_tag="second", channel=1))
    for i in range(4):
        publish(c, "sac", str(i).encode())
    net.run_until_idle()
    assert {d.consumer_tag for d in c.of(spec.BasicDeliver)} == {"first"}
    c.send(spec.BasicNack(0, multiple=True, requeue=True, channel=1))  # 1st return: allowed
    net.run_until_idle()
    redelivered = [d for d in c.of(spec.BasicDeliver) if d.redelivered]
    assert len(redelivered) == 4 and {d.consumer_tag for d in redelivered} == {"first"}
    c.send(spec.BasicNack(0, multiple=True, requeue=True, channel=1))  # 2nd return: over the limit
    net.run_until_idle()
    assert declare(c, "dead", passive=True).message_count == 4
    got = c.call(spec.BasicGet(queue="dead", no_ack=True, channel=1))
    assert got.properties.headers["x-death"][0]["reason"] == "delivery_limit"


def test_alternate_exchange_cc_bcc_and_unknown_exchange_type() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "unrouted")
    c.call(spec.ExchangeDeclare(exchange="alt", type="fanout", channel=1))
    c.call(spec.QueueBind(queue="unrouted", exchange="alt", channel=1))
    c.call(spec.ExchangeDeclare(exchange="main", type="direct", arguments={"alternate-exchange": "alt"},
                                channel=1))
    publish(c, "nobody", b"to-alt", exchange="main", mandatory=True)
    for q in ("a", "b", "c"):
        declare(c, q)
    publish(c, "a", b"cc", props=BasicProperties(headers={"CC": ["b"], "BCC": ["c"]}))
    net.run_until_idle()
    assert c.last(spec.BasicReturn) is None
    assert c.call(spec.BasicGet(queue="unrouted", no_ack=True, channel=1)).body == b"to-alt"
    for q in ("a", "b", "c"):
        got = c.call(spec.BasicGet(queue=q, no_ack=True, channel=1))
        assert got.body == b"cc" and got.routing_key == "a"
        assert got.properties.headers == {"CC": ["b"]}  # BCC is never delivered
    r = c.call(spec.ExchangeDeclare(exchange="weird", type="nonsense", channel=1))
    assert isinstance(r, spec.ConnectionClose) and r.reply_code == 503


def test_recover_requeues_and_exclusive_consumer_is_403() -> None:
    net = new_net()
    c = amqp(net, channels=2)
    declare(c, "q")
    publish(c, "q", b"m")
    c.call(spec.BasicConsume(queue="q", consumer_tag="solo", exclusive=True, channel=1))
    assert c.last(spec.BasicDeliver).redelivered is False
    c.call(spec.BasicRecover(requeue=True, channel=1))
    assert c.last(spec.BasicRecoverOk) is not None
    d = c.of(spec.BasicDeliver)[-1]
    assert (d.body, d.redelivered, d.delivery_tag) == (b"m", True, 2)
    r = c.call(spec.BasicConsume(queue="q", consumer_tag="other", channel=2))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 403


def test_consumer_priorities_serve_highest_ready_first() -> None:
    net = new_net()
    c = amqp(net, channels=3)
    declare(c, "q")
    c.call(spec.BasicQos(0, 2, False, channel=2))
    c.call(spec.BasicConsume(queue="q", consumer_tag="low", channel=1))
    c.call(spec.BasicConsume(queue="q", consumer_tag="high", arguments={"x-priority": 10}, channel=2))
    for i in range(5):
        publish(c, "q", str(i).encode(), ch=3)
    net.run_until_idle()
    tags = [d.consumer_tag for d in c.of(spec.BasicDeliver)]
    assert tags == ["high", "high", "low", "low", "low"]  # high until its prefetch (2) is full


def test_auto_delete_exchange_goes_with_its_last_binding() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="ad", type="fanout", auto_delete=True, channel=1))
    declare(c, "q1")
    declare(c, "q2")
    c.call(spec.QueueBind(queue="q1", exchange="ad", channel=1))
    c.call(spec.QueueBind(queue="q2", exchange="ad", channel=1))
    c.call(spec.QueueUnbind(queue="q1", exchange="ad", channel=1))
    assert isinstance(c.call(spec.ExchangeDeclare(exchange="ad", passive=True, channel=1)), spec.ExchangeDeclareOk)
    c.call(spec.QueueDelete(queue="q2", channel=1))
    r = c.call(spec.ExchangeDeclare(exchange="ad", passive=True, channel=1))
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 404
