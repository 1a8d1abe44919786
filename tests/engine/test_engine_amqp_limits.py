"""The memory alarm (connection.blocked), x-max-length-bytes, x-max-priority, the consumer timeout,
basic.qos prefetch_size and basic.consume no_local, simulated with engine.testing."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import confirm_outcomes, connected, messages, new_net, send, subscribe

import amqpproto as A
from amqpproto import BasicProperties, spec
from engine import Config, Limits
from engine._session import SUBSCRIPTION_BYTES
from engine.testing import AmqpSimClient, SimNetwork

KB = 1024


def amqp(net: SimNetwork, caps: dict[str, Any] | None = None, channels: int = 1) -> AmqpSimClient:
    """Open with the capabilities ``caps`` in start-ok (pika and friends send connection.blocked)."""
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    c.send(A.ProtocolHeader())
    net.run_until_idle()
    c.send(spec.ConnectionStartOk({"product": "sim", "capabilities": caps or {}}, "PLAIN",
                                  A.plain_response("guest", "guest"), "en_US"))
    net.run_until_idle()
    c.send(c.conn.tune_ok(c.last(spec.ConnectionTune)))  # type: ignore[attr-defined]
    c.send(spec.ConnectionOpen("/"))
    net.run_until_idle()
    assert c.last(spec.ConnectionOpenOk) is not None, c.received
    for ch in range(1, channels + 1):
        assert isinstance(c.open_channel(ch), spec.ChannelOpenOk)
    return c


def publish(c: AmqpSimClient, key: str, body: bytes, ch: int = 1, **props: Any) -> None:
    c.send(spec.BasicPublish(routing_key=key, properties=BasicProperties(**props), body=body, channel=ch))


def declare(c: AmqpSimClient, name: str, ch: int = 1, **args: Any) -> Any:
    return c.call(spec.QueueDeclare(queue=name, arguments=args or {}, channel=ch))


def net_with(**limits: Any) -> SimNetwork:
    return new_net(Config(limits=Limits(**limits)))


# -- memory alarm -----------------------------------------------------------------------------------
def test_publishers_blocked_over_the_watermark_and_unblocked_when_drained() -> None:
    net = net_with(memory_high_watermark=10 * KB)
    pub = amqp(net, {"connection.blocked": True})
    quiet = amqp(net, {"connection.blocked": True})  # never publishes: never blocked
    legacy = amqp(net)  # publishes but did not ask for the notification
    declare(pub, "mem")
    publish(legacy, "mem", b"x")
    for _ in range(10):
        publish(pub, "mem", b"a" * KB)
    net.run_until_idle()
    assert net.broker.model.queued_bytes == 10 * KB + 1 and net.broker.mem_alarm
    assert pub.of(spec.ConnectionBlocked) and pub.of(spec.ConnectionBlocked)[0].reason == "low on memory"
    assert pub.paused and legacy.paused and not quiet.paused
    assert not quiet.of(spec.ConnectionBlocked) and not legacy.of(spec.ConnectionBlocked)
    # what a blocked publisher sends waits in its socket
    publish(pub, "mem", b"late")
    net.run_until_idle()
    assert net.broker.model.vhosts["/"].queues["mem"].count == 11
    # a consumer (another connection) still gets deliveries; acking drains below the mark
    cons = amqp(net)
    cons.call(spec.BasicConsume(queue="mem", consumer_tag="c", channel=1))
    assert len(cons.of(spec.BasicDeliver)) == 11
    assert pub.paused  # unacked messages still count
    cons.call(spec.BasicAck(0, multiple=True, channel=1))
    assert not net.broker.mem_alarm and not pub.paused and not legacy.paused
    assert len(pub.of(spec.ConnectionUnblocked)) == 1
    net.run_until_idle()
    assert [d.body for d in cons.of(spec.BasicDeliver)][-1] == b"late"  # the held publish went through
    cons.call(spec.BasicAck(0, multiple=True, channel=1))
    assert net.broker.model.queued_bytes == 0


def test_consumers_count_in_the_memory_alarm() -> None:
    """No cap on consumers (as RabbitMQ): what they cost counts against the watermark instead."""
    net = net_with(memory_high_watermark=10 * SUBSCRIPTION_BYTES)
    c = amqp(net, channels=2)
    for i in range(11):
        declare(c, f"many-{i}", ch=1 + i % 2)
        c.call(spec.BasicConsume(queue=f"many-{i}", consumer_tag=f"c{i}", channel=1 + i % 2))
    assert net.broker.mem_alarm
    for i in range(3):
        c.call(spec.BasicCancel(consumer_tag=f"c{i}", channel=1 + i % 2))
    assert not net.broker.mem_alarm


def test_a_connection_that_first_publishes_during_the_alarm_is_blocked_then() -> None:
    net = net_with(memory_high_watermark=4 * KB)
    a = amqp(net, {"connection.blocked": True})
    declare(a, "q")
    publish(a, "q", b"z" * (5 * KB))
    net.run_until_idle()
    assert a.paused
    b = amqp(net, {"connection.blocked": True})
    assert not b.paused and not b.of(spec.ConnectionBlocked)
    publish(b, "q", b"one")
    net.run_until_idle()
    assert b.paused and len(b.of(spec.ConnectionBlocked)) == 1
    # purging clears the alarm for both
    consumer = amqp(net)
    consumer.call(spec.QueuePurge(queue="q", channel=1))
    assert not a.paused and not b.paused and len(b.of(spec.ConnectionUnblocked)) == 1


def test_stomp_publishers_are_paused_and_keep_their_heartbeat_grace() -> None:
    net = net_with(memory_high_watermark=2 * KB)
    p = connected(net, headers={"heart-beat": "1000,0"})  # it sends heart-beats every 1 s
    c = connected(net)
    send(p, "/queue/s", b"b" * (3 * KB))
    net.run_until_idle()
    assert p.paused and not c.paused
    net.advance(10.0)  # its heart-beats are unread while paused: no timeout for that
    assert not p.server_closed
    subscribe(c, "/queue/s", "1")
    net.run_until_idle()
    assert len(messages(c)) == 1 and not p.paused
    send(p, "/queue/s", b"after")
    net.run_until_idle()
    assert [m.body for m in messages(c)][-1] == b"after"


def test_watermark_zero_disables_the_alarm_and_accounting_is_exact() -> None:
    net = net_with(memory_high_watermark=0)
    a = amqp(net)
    declare(a, "acct", **{"x-message-ttl": 1000})
    declare(a, "acct2")
    for i in range(6):
        publish(a, "acct", b"%d" % i * 100)
    publish(a, "acct2", b"y" * 50)
    net.run_until_idle()
    model = net.broker.model
    assert model.queued_bytes == 600 + 50 and not a.paused
    a.call(spec.BasicGet(queue="acct2", no_ack=False, channel=1))
    a.call(spec.BasicReject(a.last(spec.BasicGetOk).delivery_tag, requeue=True, channel=1))
    assert model.queued_bytes == 650
    a.call(spec.QueueDelete(queue="acct2", channel=1))
    assert model.queued_bytes == 600
    net.advance(2.0)  # every message of "acct" expired
    assert model.queued_bytes == 0


# -- x-max-length-bytes -----------------------------------------------------------------------------
def test_max_length_bytes_drop_head_dead_letters_the_oldest() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "dlq")
    a.call(spec.QueueBind(queue="dlq", exchange="amq.fanout", channel=1))
    declare(a, "mlb", **{"x-max-length-bytes": 250, "x-dead-letter-exchange": "amq.fanout"})
    for i in range(5):
        publish(a, "mlb", b"%d" % i * 100)
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["mlb"]
    assert (q.count, q.bytes) == (2, 200)
    a.call(spec.BasicConsume(queue="mlb", no_ack=True, channel=1))
    assert [d.body[:1] for d in a.of(spec.BasicDeliver)] == [b"3", b"4"]
    dead = net.broker.model.vhosts["/"].queues["dlq"]
    assert dead.count == 3


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_max_length_bytes_reject_publish_nacks(overflow: str) -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "dl")
    a.call(spec.QueueBind(queue="dl", exchange="amq.fanout", channel=1))
    declare(a, "rj", **{"x-max-length-bytes": 300, "x-overflow": overflow, "x-dead-letter-exchange": "amq.fanout"})
    a.call(spec.ConfirmSelect(channel=1))
    for size in (100, 150, 100, 50):
        publish(a, "rj", b"r" * size)
    net.run_until_idle()
    assert confirm_outcomes(a) == [("ack", 1), ("ack", 2), ("nack", 3), ("ack", 4)]
    q = net.broker.model.vhosts["/"].queues["rj"]
    assert (q.count, q.bytes) == (3, 300)
    assert net.broker.model.vhosts["/"].queues["dl"].count == (1 if overflow == "reject-publish-dlx" else 0)


def test_max_length_bytes_argument_is_validated() -> None:
    net = new_net()
    a = amqp(net)
    close = declare(a, "bad", **{"x-max-length-bytes": -1})
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 406


# -- x-max-priority ----------------------------------------------------------------------------------
def test_max_priority_caps_and_plain_queues_ignore_amqp_priority() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "prio", **{"x-max-priority": 5})
    declare(a, "fifo")
    for q in ("prio", "fifo"):
        a.call(spec.QueueBind(queue=q, exchange="amq.fanout", channel=1))
    for body, prio in ((b"p0", 0), (b"p9", 9), (b"p5", 5), (b"p200", 200), (b"p3", 3)):
        a.send(spec.BasicPublish(exchange="amq.fanout", properties=BasicProperties(priority=prio), body=body,
                                 channel=1))
    net.run_until_idle()
    a.call(spec.BasicConsume(queue="prio", no_ack=True, channel=1))
    got = [(d.body, d.properties.priority) for d in a.of(spec.BasicDeliver)]
    # 9, 5 and 200 are all "5" (capped), FIFO among themselves; the property is kept as published
    assert got == [(b"p9", 9), (b"p5", 5), (b"p200", 200), (b"p3", 3), (b"p0", 0)]
    a.call(spec.BasicConsume(queue="fifo", no_ack=True, channel=1))
    got = [d.body for d in a.of(spec.BasicDeliver)][5:]
    assert got == [b"p0", b"p9", b"p5", b"p200", b"p3"]


def test_stomp_priorities_keep_ocamlmq_order_and_respect_a_cap() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "capped", **{"x-max-priority": 2})
    p = connected(net)
    for prio in ("0", "7", "2", "9"):
        send(p, "/amq/queue/capped", prio.encode(), priority=prio)
        send(p, "/queue/plain", prio.encode(), priority=prio)
    net.run_until_idle()
    a.call(spec.BasicConsume(queue="capped", no_ack=True, channel=1))
    assert [d.body for d in a.of(spec.BasicDeliver)] == [b"7", b"2", b"9", b"0"]
    c = connected(net)
    subscribe(c, "/queue/plain", "1")
    net.run_until_idle()
    assert [m.body for m in messages(c)] == [b"9", b"7", b"2", b"0"]


def test_max_priority_out_of_range_is_406() -> None:
    net = new_net()
    a = amqp(net)
    close = declare(a, "p", **{"x-max-priority": 256})
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 406


# -- consumer timeout ----------------------------------------------------------------------------------
def test_consumer_timeout_closes_the_channel_with_406_and_requeues() -> None:
    net = net_with(consumer_timeout=5000)
    a = amqp(net, channels=2)
    declare(a, "slow")
    for i in range(3):
        publish(a, "slow", b"%d" % i)
    a.call(spec.BasicConsume(queue="slow", consumer_tag="c", channel=1))
    assert len(a.of(spec.BasicDeliver, 1)) == 3
    a.call(spec.BasicAck(1, channel=1))
    net.advance(4.9)
    assert not a.of(spec.ChannelClose)
    net.advance(0.2)
    close = a.last(spec.ChannelClose)
    assert close is not None and close.channel == 1 and close.reply_code == 406
    assert close.reply_text.startswith("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out")
    assert "5000 ms" in close.reply_text
    q = net.broker.model.vhosts["/"].queues["slow"]
    assert q.count == 2 and q.consumer_count() == 0
    # channel 2 and the connection live on; the requeued messages come back redelivered
    a.call(spec.BasicConsume(queue="slow", no_ack=True, channel=2))
    got = [(d.body, d.redelivered) for d in a.of(spec.BasicDeliver, 2)]
    assert got == [(b"1", True), (b"2", True)]


def test_consumer_timeout_covers_basic_get_and_a_queue_argument_overrides_it() -> None:
    net = net_with(consumer_timeout=0)  # off by configuration
    a = amqp(net)
    declare(a, "off")
    declare(a, "short", **{"x-consumer-timeout": 1000})
    publish(a, "off", b"o")
    publish(a, "short", b"s")
    net.run_until_idle()
    a.call(spec.BasicGet(queue="off", channel=1))
    net.advance(60.0)
    assert not a.of(spec.ChannelClose)
    a.call(spec.BasicGet(queue="short", channel=1))
    net.advance(1.5)
    close = a.last(spec.ChannelClose)
    assert close is not None and "1000 ms" in close.reply_text
    assert net.broker.model.vhosts["/"].queues["short"].count == 1


def test_acked_in_time_never_times_out() -> None:
    net = net_with(consumer_timeout=1000)
    a = amqp(net)
    declare(a, "fast")
    a.call(spec.BasicConsume(queue="fast", consumer_tag="c", channel=1))
    for i in range(10):
        publish(a, "fast", b"%d" % i)
        net.run_until_idle()
        a.call(spec.BasicAck(a.last(spec.BasicDeliver).delivery_tag, channel=1))
        net.advance(0.5)
    net.advance(5.0)
    assert not a.of(spec.ChannelClose) and len(a.of(spec.BasicDeliver)) == 10


# -- basic.qos prefetch_size and basic.consume no_local ---------------------------------------------------
def test_qos_prefetch_size_is_540_not_implemented_connection_close() -> None:
    net = new_net()
    a = amqp(net)
    close = a.call(spec.BasicQos(prefetch_size=1000, prefetch_count=0, channel=1))
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 540
    assert close.reply_text == "NOT_IMPLEMENTED - prefetch_size!=0 (1000)"
    assert (close.class_id, close.method_id) == (60, 10)


def test_no_local_is_ignored_as_rabbitmq_does() -> None:
    net = new_net()
    a = amqp(net)
    declare(a, "self")
    a.call(spec.BasicConsume(queue="self", no_local=True, no_ack=True, channel=1))
    publish(a, "self", b"mine")
    net.run_until_idle()
    assert [d.body for d in a.of(spec.BasicDeliver)] == [b"mine"]


# -- publisher confirms released by one sync are coalesced -------------------------------------------
def test_confirms_released_by_one_sync_are_one_multiple_ack_and_nacks_keep_their_place() -> None:
    from engine.testing import FakeStore

    net = new_net(store=FakeStore(), auto_sync=False)
    a = amqp(net)
    a.call(spec.QueueDeclare(queue="dur", durable=True, arguments={"x-max-length": 3, "x-overflow": "reject-publish"},
                             channel=1))
    net.complete_syncs()
    a.call(spec.ConfirmSelect(channel=1))
    for i in range(5):
        publish(a, "dur", b"%d" % i, delivery_mode=2)
    net.run_until_idle()
    assert not a.of(spec.BasicAck) and not a.of(spec.BasicNack)  # all wait for the fsync
    net.complete_syncs()
    got = [(type(m).__name__, m.delivery_tag, m.multiple) for m in a.received
           if isinstance(m, (spec.BasicAck, spec.BasicNack))]
    assert got == [("BasicAck", 3, True), ("BasicNack", 4, False), ("BasicNack", 5, False)]
    # nothing held: a transient publish is confirmed at once, alone
    a.call(spec.QueuePurge(queue="dur", channel=1))
    net.complete_syncs()
    publish(a, "dur", b"t")
    net.run_until_idle()
    last = a.received[-1]
    assert isinstance(last, spec.BasicAck) and (last.delivery_tag, last.multiple) == (6, False)


def test_blocked_amqp_publisher_is_not_timed_out_for_unread_heartbeats() -> None:
    net = net_with(memory_high_watermark=KB)
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    c.send(A.ProtocolHeader())
    net.run_until_idle()
    c.send(spec.ConnectionStartOk({"capabilities": {"connection.blocked": True}}, "PLAIN",
                                  A.plain_response("guest", "guest"), "en_US"))
    net.run_until_idle()
    c.conn.config_heartbeat = 2  # type: ignore[attr-defined]
    c.send(c.conn.tune_ok(c.last(spec.ConnectionTune)))  # type: ignore[attr-defined]
    c.send(spec.ConnectionOpen("/"))
    net.run_until_idle()
    c.open_channel(1)
    declare(c, "hb")
    publish(c, "hb", b"h" * (2 * KB))
    net.run_until_idle()
    assert c.paused and c.of(spec.ConnectionBlocked)
    net.advance(30.0)  # 2 s heartbeats: long past the 4 s the broker would allow a silent peer
    assert not c.server_closed and not c.of(spec.ConnectionClose)
    other = amqp(net)
    other.call(spec.QueuePurge(queue="hb", channel=1))
    assert not c.paused and c.of(spec.ConnectionUnblocked)
    assert len(c.of(A.Heartbeat)) >= 10  # the broker kept sending its heartbeats meanwhile
    net.advance(3.0)
    assert not c.server_closed
    c.auto_heartbeat = False  # a peer that goes silent once unblocked is still timed out
    net.advance(10.0)
    assert c.server_closed


def test_a_shorter_queue_timeout_fires_before_an_armed_longer_one() -> None:
    net = net_with(consumer_timeout=60_000)
    a = amqp(net)
    declare(a, "long")
    declare(a, "short", **{"x-consumer-timeout": 2000})
    publish(a, "long", b"l")
    publish(a, "short", b"s")
    net.run_until_idle()
    a.call(spec.BasicGet(queue="long", channel=1))
    net.advance(1.0)
    a.call(spec.BasicGet(queue="short", channel=1))
    net.advance(2.5)
    close = a.last(spec.ChannelClose)
    assert close is not None and "2000 ms" in close.reply_text
    assert [net.broker.model.vhosts["/"].queues[n].count for n in ("long", "short")] == [1, 1]
