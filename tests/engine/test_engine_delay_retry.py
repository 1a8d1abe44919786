"""Delayed delivery (x-delayed-message exchanges, x-delay) and retry back-off (x-retry-delays) on a
fake clock: exact due times, order, protocol errors, AMQP and STOMP, and restarts on the memory store
(the segment and PostgreSQL stores: tests/storage/test_delay_retry_restart.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from enginetest_helpers import ack, amqp, connected, messages, nack, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st

from amqpproto import BasicProperties, spec
from engine import Broker, Config, Limits, MemoryStore
from engine.testing import AmqpSimClient, FakeStore, SimNetwork

PERSISTENT = 2


def delayed_topology(c: AmqpSimClient, kind: str = "direct", durable: bool = False) -> None:
    ok = c.call(spec.ExchangeDeclare(exchange="dx", type="x-delayed-message", durable=durable,
                                     arguments={"x-delayed-type": kind}, channel=1))
    assert isinstance(ok, spec.ExchangeDeclareOk), ok
    c.call(spec.QueueDeclare(queue="q", durable=durable, channel=1))
    c.call(spec.QueueBind(queue="q", exchange="dx", routing_key="k", channel=1))


def publish(c: AmqpSimClient, body: bytes, delay: Any = None, exchange: str = "dx", key: str = "k",
            mandatory: bool = False, persistent: bool = False) -> None:
    headers = {"x-delay": delay} if delay is not None else None
    props = BasicProperties(headers=headers, delivery_mode=PERSISTENT if persistent else None)
    c.send(spec.BasicPublish(exchange=exchange, routing_key=key, mandatory=mandatory, properties=props,
                             body=body, channel=1))


def delivered(c: AmqpSimClient) -> list[bytes]:
    return [d.body for d in c.of(spec.BasicDeliver)]


# -- delayed delivery ------------------------------------------------------------------------------
def test_delayed_message_is_routed_exactly_when_due() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    c.call(spec.BasicConsume(queue="q", no_ack=True, channel=1))
    publish(c, b"later", delay=5000)
    publish(c, b"now")
    net.run_until_idle()
    assert delivered(c) == [b"now"]
    net.advance(4.999)
    assert delivered(c) == [b"now"]
    net.advance(0.001)
    assert delivered(c) == [b"now", b"later"]
    d = c.of(spec.BasicDeliver)[-1]
    assert d.properties.headers["x-delay"] == -5000  # as the plugin: not delayed again downstream
    assert d.exchange == "dx"


def test_delayed_messages_come_out_by_due_time_then_arrival() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    c.call(spec.BasicConsume(queue="q", no_ack=True, channel=1))
    for body, delay in ((b"a", 300), (b"b", 100), (b"c", 100), (b"d", 200), (b"e", 0), (b"f", -50)):
        publish(c, body, delay=delay)
    net.run_until_idle()
    assert delivered(c) == [b"e", b"f"]  # zero and negative delays are no delay
    net.advance(1)
    assert delivered(c) == [b"e", b"f", b"b", b"c", b"d", b"a"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-100, 3000), st.floats(0, 2)), min_size=1, max_size=12))
def test_every_message_comes_out_at_its_due_time_in_due_then_arrival_order(plan: list[tuple[int, float]]) -> None:
    """Messages published at different times with different delays: each is delivered exactly
    when publish time + delay is reached, ties in arrival order (a reference model of the holder)."""
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    c.call(spec.BasicConsume(queue="q", no_ack=True, channel=1))
    t0 = net.now
    due: list[tuple[float, int]] = []
    for i, (delay, gap) in enumerate(plan):
        net.advance(gap)
        publish(c, str(i).encode(), delay=delay)
        net.run_until_idle()
        due.append((net.now + max(delay, 0) / 1000.0, i))
    expected = [str(i).encode() for _, i in sorted(due)]
    for when in sorted({d for d, _ in due}):
        if when > net.now:
            net.advance(when - net.now)
        released = {str(i).encode() for d, i in due if d <= net.now}
        assert set(delivered(c)) == released, (when - t0, plan)
    net.advance(1)
    assert delivered(c) == expected


def test_routing_happens_when_due_against_the_bindings_then() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c, "topic")
    c.call(spec.QueueDeclare(queue="late", channel=1))
    publish(c, b"m", delay=1000, key="a.b")
    net.run_until_idle()
    c.call(spec.QueueBind(queue="late", exchange="dx", routing_key="a.*", channel=1))
    net.advance(1)
    ok = c.call(spec.BasicGet(queue="late", no_ack=True, channel=1))
    assert isinstance(ok, spec.BasicGetOk) and ok.body == b"m"


def test_messages_reaching_a_delayed_exchange_through_a_binding_wait_too() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    c.call(spec.ExchangeDeclare(exchange="front", type="fanout", channel=1))
    c.call(spec.ExchangeBind(destination="dx", source="front", routing_key="", channel=1))
    publish(c, b"via", delay=2000, exchange="front")
    net.advance(1.999)
    assert isinstance(c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)), spec.BasicGetEmpty)
    net.advance(0.001)
    assert c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)).body == b"via"


def test_unroutable_when_due_goes_to_the_alternate_exchange_then() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="dx", type="x-delayed-message", channel=1,
                                arguments={"x-delayed-type": "direct", "alternate-exchange": "ae"}))
    c.call(spec.ExchangeDeclare(exchange="ae", type="fanout", channel=1))
    c.call(spec.QueueDeclare(queue="unrouted", channel=1))
    c.call(spec.QueueBind(queue="unrouted", exchange="ae", routing_key="", channel=1))
    publish(c, b"m", delay=1000, key="nobody")
    net.run_until_idle()
    assert c.call(spec.QueueDeclare(queue="unrouted", passive=True, channel=1)).message_count == 0
    net.advance(1)
    assert c.call(spec.QueueDeclare(queue="unrouted", passive=True, channel=1)).message_count == 1


def test_held_messages_keep_their_priority_for_priority_queues() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="dx", type="x-delayed-message", arguments={"x-delayed-type": "direct"},
                                channel=1))
    c.call(spec.QueueDeclare(queue="pq", arguments={"x-max-priority": 10}, channel=1))
    c.call(spec.QueueBind(queue="pq", exchange="dx", routing_key="k", channel=1))
    for body, priority in ((b"low", 1), (b"high", 9)):
        c.send(spec.BasicPublish(exchange="dx", routing_key="k", body=body, channel=1,
                                 properties=BasicProperties(headers={"x-delay": 500}, priority=priority)))
    net.advance(1)
    got = [c.call(spec.BasicGet(queue="pq", no_ack=True, channel=1)).body for _ in range(2)]
    assert got == [b"high", b"low"]


def test_dead_letters_to_a_delayed_exchange_wait_too() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    c.call(spec.QueueDeclare(queue="ttl", channel=1, arguments={
        "x-message-ttl": 1000, "x-dead-letter-exchange": "dx", "x-dead-letter-routing-key": "k"}))
    publish(c, b"m", delay=2000, exchange="", key="ttl")  # x-delay means nothing to the default exchange
    net.advance(2.999)  # expired at 1 s, then held 2 s by the delayed exchange
    assert isinstance(c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)), spec.BasicGetEmpty)
    net.advance(0.001)
    assert c.call(spec.BasicGet(queue="q", no_ack=True, channel=1)).body == b"m"


def test_confirm_of_a_held_persistent_message_waits_for_the_sync() -> None:
    net = new_net(store=FakeStore(needs_sync=True), auto_sync=False)
    c = amqp(net)
    delayed_topology(c, durable=True)
    net.complete_syncs()
    c.call(spec.ConfirmSelect(channel=1))
    publish(c, b"transient", delay=1000)
    net.run_until_idle()
    assert [a.delivery_tag for a in c.of(spec.BasicAck)] == [1]  # nothing to sync: acked at once
    publish(c, b"kept", delay=1000, persistent=True)
    net.run_until_idle()
    assert len(c.of(spec.BasicAck)) == 1 and net.pending_syncs
    net.complete_syncs()
    assert [a.delivery_tag for a in c.of(spec.BasicAck)] == [1, 2]


def test_mandatory_delayed_publish_is_not_returned() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    publish(c, b"held", delay=1000, key="nowhere", mandatory=True)
    publish(c, b"now", key="nowhere", mandatory=True)
    net.advance(2)
    assert [r.body for r in c.of(spec.BasicReturn)] == [b"now"]


@pytest.mark.parametrize("args", [None, {"x-delayed-type": "nope"}, {"x-delayed-type": "x-delayed-message"}])
def test_delayed_exchange_needs_a_routing_type(args: Any) -> None:
    net = new_net()
    c = amqp(net)
    close = c.call(spec.ExchangeDeclare(exchange="dx", type="x-delayed-message", arguments=args or {}, channel=1))  # {}: compiled codecs check the type
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 406
    assert "x-delayed-type" in close.reply_text


def test_deleting_a_delayed_exchange_drops_what_it_held() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    publish(c, b"m", delay=1000)
    net.run_until_idle()
    c.call(spec.ExchangeDelete(exchange="dx", channel=1))
    due = net.broker.get_timer()
    assert due is None or due > net.now + 1  # the held message's timer went (a heart-beat may remain)
    net.advance(2)
    assert c.call(spec.QueueDeclare(queue="q", passive=True, channel=1)).message_count == 0


def test_stomp_send_to_a_delayed_exchange() -> None:
    net = new_net()
    c = amqp(net)
    delayed_topology(c)
    s = connected(net)
    subscribe(s, "/amq/queue/q", "0")
    send(s, "/exchange/dx/k", b"stomp", **{"x-delay": "1500"})
    net.run_until_idle()
    assert messages(s) == []
    net.advance(1.5)
    got = messages(s)
    assert [m.body for m in got] == [b"stomp"]
    assert got[0].headers["x-delay"] == "-1500"


def restart(net: SimNetwork, store: Any) -> SimNetwork:
    return SimNetwork(Broker(Config(), store, random.Random(1)), seed=1, start=net.now)


def test_durable_delayed_message_survives_a_restart_at_its_due_time() -> None:
    store = MemoryStore()
    net = new_net(store=store)
    c = amqp(net)
    delayed_topology(c, durable=True)
    publish(c, b"kept", delay=10_000, persistent=True)
    publish(c, b"transient", delay=10_000)
    net.advance(4)
    net2 = restart(net, store)
    c2 = amqp(net2)
    net2.advance(5.999)
    assert c2.call(spec.QueueDeclare(queue="q", durable=True, passive=True, channel=1)).message_count == 0
    net2.advance(0.001)
    ok = c2.call(spec.BasicGet(queue="q", no_ack=True, channel=1))
    assert isinstance(ok, spec.BasicGetOk) and ok.body == b"kept"
    assert "x-sansmq-due" not in (ok.properties.headers or {})
    assert isinstance(c2.call(spec.BasicGet(queue="q", channel=1)), spec.BasicGetEmpty)


# -- retry with back-off ---------------------------------------------------------------------------
def retry_queue(c: AmqpSimClient, delays: Any = "1s,5s", dlx: bool = True, durable: bool = False) -> None:
    args: dict[str, Any] = {"x-retry-delays": delays}
    if dlx:
        c.call(spec.QueueDeclare(queue="dlq", durable=durable, channel=1))
        args["x-dead-letter-exchange"] = ""
        args["x-dead-letter-routing-key"] = "dlq"
    ok = c.call(spec.QueueDeclare(queue="work", durable=durable, arguments=args, channel=1))
    assert isinstance(ok, spec.QueueDeclareOk), ok


def consuming_a_job() -> tuple[SimNetwork, AmqpSimClient]:
    """A consumer on queue "work" (retry delays 1 s, 5 s; dead letters to "dlq") got "job"."""
    net = new_net()
    c = amqp(net)
    retry_queue(c)
    c.call(spec.BasicConsume(queue="work", consumer_tag="w", channel=1))
    publish(c, b"job", exchange="", key="work")
    net.run_until_idle()
    return net, c


@pytest.mark.parametrize("requeue", [True, False])
def test_rejected_message_comes_back_after_each_delay_then_dead_letters(requeue: bool) -> None:
    net, c = consuming_a_job()
    first = c.last(spec.BasicDeliver)
    assert not first.redelivered
    c.send(spec.BasicNack(first.delivery_tag, requeue=requeue, channel=1))
    net.advance(0.999)
    assert len(c.of(spec.BasicDeliver)) == 1
    net.advance(0.001)
    second = c.last(spec.BasicDeliver)
    assert second.body == b"job" and second.redelivered
    assert second.properties.headers["x-retry-count"] == 1
    c.send(spec.BasicReject(second.delivery_tag, requeue=requeue, channel=1))
    net.advance(4.999)
    assert len(c.of(spec.BasicDeliver)) == 2
    net.advance(0.001)
    third = c.last(spec.BasicDeliver)
    assert third.properties.headers["x-retry-count"] == 2
    c.send(spec.BasicNack(third.delivery_tag, requeue=requeue, channel=1))  # delays used up: dead
    net.advance(60)
    assert len(c.of(spec.BasicDeliver)) == 3
    dead = c.call(spec.BasicGet(queue="dlq", no_ack=True, channel=1))
    assert isinstance(dead, spec.BasicGetOk) and dead.body == b"job"
    death = dead.properties.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", "work", 1)


def test_retry_without_dead_letter_exchange_drops_and_ack_ends_it() -> None:
    net = new_net()
    c = amqp(net)
    retry_queue(c, [100], dlx=False)
    c.call(spec.BasicConsume(queue="work", consumer_tag="w", channel=1))
    publish(c, b"a", exchange="", key="work")
    publish(c, b"b", exchange="", key="work")
    net.run_until_idle()
    a, b = c.of(spec.BasicDeliver)
    c.send(spec.BasicAck(b.delivery_tag, channel=1))
    c.send(spec.BasicNack(a.delivery_tag, requeue=False, channel=1))
    net.advance(0.1)
    again = c.last(spec.BasicDeliver)
    assert again.body == b"a" and again.properties.headers["x-retry-count"] == 1
    c.send(spec.BasicNack(again.delivery_tag, requeue=False, channel=1))
    net.advance(10)
    assert len(c.of(spec.BasicDeliver)) == 3
    assert c.call(spec.QueueDeclare(queue="work", passive=True, channel=1)).message_count == 0


def test_connection_loss_requeues_at_once_without_counting_a_retry() -> None:
    net, c = consuming_a_job()
    c.close()
    net.run_until_idle()
    c2 = amqp(net)
    ok = c2.call(spec.BasicGet(queue="work", channel=1))
    assert isinstance(ok, spec.BasicGetOk) and ok.redelivered
    assert "x-retry-count" not in (ok.properties.headers or {})


@pytest.mark.parametrize("value", ["", "1s,x", "5 fortnights", [1, -2], [1.5], 7])
def test_invalid_retry_delays_are_precondition_failed(value: Any) -> None:
    net = new_net()
    c = amqp(net)
    close = c.call(spec.QueueDeclare(queue="work", arguments={"x-retry-delays": value}, channel=1))
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 406
    assert "x-retry-delays" in close.reply_text


def test_stomp_nack_uses_the_retry_delays() -> None:
    net = new_net()
    c = amqp(net)
    retry_queue(c, "250ms,2s")
    s = connected(net)
    subscribe(s, "/amq/queue/work", "0", ack="client-individual")
    send(s, "/amq/queue/work", b"job")
    net.run_until_idle()
    (first,) = messages(s)
    nack(s, first)
    net.advance(0.25)
    (second,) = messages(s)
    assert second.headers["x-retry-count"] == "1" and second.headers["redelivered"] == "true"
    assert second.headers["x-delivery-count"] == "1"
    ack(s, second)
    net.advance(5)
    assert messages(s) == []


def test_pending_retry_survives_a_restart_with_its_due_time_and_count() -> None:
    store = MemoryStore()
    net = new_net(store=store)
    c = amqp(net)
    retry_queue(c, "10s,1m", durable=True)
    c.call(spec.BasicConsume(queue="work", consumer_tag="w", channel=1))
    publish(c, b"job", exchange="", key="work", persistent=True)
    net.run_until_idle()
    c.send(spec.BasicNack(c.last(spec.BasicDeliver).delivery_tag, requeue=False, channel=1))
    net.advance(3)
    net2 = restart(net, store)
    c2 = amqp(net2)
    c2.call(spec.BasicConsume(queue="work", consumer_tag="w", channel=1))
    net2.advance(6.999)
    assert c2.of(spec.BasicDeliver) == []
    net2.advance(0.001)
    back = c2.last(spec.BasicDeliver)
    assert back.body == b"job" and back.redelivered and back.properties.headers["x-retry-count"] == 1


def test_no_client_queue_can_take_a_holders_store_name() -> None:
    net = new_net()
    s = connected(net)
    send(s, "/queue/amq.sansmq.retry.work", b"x")
    net.run_until_idle()
    (error,) = [e for e in s.received if type(e).__name__ == "Error"]
    assert "reserved" in error.body.decode() and error.headers["message"] == "access_refused"
    assert "amq.sansmq.retry.work" not in net.broker.model.vhosts["/"].queues


# -- held messages and the memory alarm ---------------------------------------------------------------
KB = 1024


def memory_net(watermark: int, store: Any = None) -> SimNetwork:
    return new_net(Config(limits=Limits(memory_high_watermark=watermark)), store=store)


def test_delayed_messages_count_towards_the_memory_alarm() -> None:
    net = memory_net(4 * KB)
    c = amqp(net)
    delayed_topology(c)
    for _ in range(5):
        publish(c, b"d" * KB, delay=10_000)
    net.run_until_idle()
    model = net.broker.model
    assert model.queued_bytes == 5 * KB  # nothing is in a queue yet: all of it is held
    assert net.broker.mem_alarm and c.paused
    net.advance(10)  # due: the bytes move from the holder to the queue, still counted once
    assert model.vhosts["/"].queues["q"].count == 5 and model.queued_bytes == 5 * KB
    reader = amqp(net)
    for _ in range(5):
        assert isinstance(reader.call(spec.BasicGet(queue="q", no_ack=True, channel=1)), spec.BasicGetOk)
    assert model.queued_bytes == 0 and not net.broker.mem_alarm and not c.paused


def test_deleting_a_delayed_exchange_gives_its_held_bytes_back() -> None:
    net = memory_net(2 * KB)
    c = amqp(net)
    delayed_topology(c)
    publish(c, b"d" * (3 * KB), delay=60_000)
    net.run_until_idle()
    assert net.broker.model.queued_bytes == 3 * KB and c.paused
    other = amqp(net)
    other.call(spec.ExchangeDelete(exchange="dx", channel=1))
    assert net.broker.model.queued_bytes == 0 and not net.broker.mem_alarm and not c.paused


def test_messages_waiting_for_a_retry_count_towards_the_memory_alarm() -> None:
    net = memory_net(2 * KB)
    c = amqp(net)
    retry_queue(c, delays="5s")
    other = amqp(net)
    publish(other, b"r" * (3 * KB), exchange="", key="work")
    net.run_until_idle()
    model = net.broker.model
    assert model.queued_bytes == 3 * KB and other.paused
    c.call(spec.BasicConsume(queue="work", consumer_tag="w", channel=1))
    c.send(spec.BasicNack(c.last(spec.BasicDeliver).delivery_tag, requeue=True, channel=1))
    net.run_until_idle()
    assert model.vhosts["/"].queues["work"].count == 0  # waiting in the retry holder
    assert model.queued_bytes == 3 * KB and net.broker.mem_alarm and other.paused
    net.advance(5)
    again = c.last(spec.BasicDeliver)
    assert again.properties.headers["x-retry-count"] == 1
    c.send(spec.BasicAck(again.delivery_tag, channel=1))
    net.run_until_idle()
    assert model.queued_bytes == 0 and not other.paused


def test_held_messages_read_back_on_restart_are_counted() -> None:
    store = MemoryStore()
    net = memory_net(0, store)
    c = amqp(net)
    delayed_topology(c, durable=True)
    publish(c, b"k" * KB, delay=10_000, persistent=True)
    net.run_until_idle()
    net2 = SimNetwork(Broker(Config(limits=Limits(memory_high_watermark=KB // 2)), store, random.Random(1)),
                      seed=1, start=net.now)
    assert net2.broker.model.queued_bytes == KB
    publisher = amqp(net2)
    publish(publisher, b"x", exchange="", key="q")
    net2.run_until_idle()
    assert net2.broker.mem_alarm and publisher.paused  # over the mark with only the held message
    net2.advance(10)  # released into the queue: a reader drains it and the alarm clears
    reader = amqp(net2)
    got = [reader.call(spec.BasicGet(queue="q", no_ack=True, channel=1)) for _ in range(2)]
    assert sorted(g.body for g in got) == [b"k" * KB, b"x"]
    assert net2.broker.model.queued_bytes == 0 and not publisher.paused
