"""Quorum queues on one node (issue 24): the declare rules and texts of RabbitMQ 3.10 (probed on
Debian's rabbitmq-server 3.10.8), the delivery limit and its x-delivery-count header, storage of
every message whatever its delivery mode, delivery counts across a crash, policies by queue type,
at-least-once dead-lettering's write order. Deterministic, in memory (SimNetwork)."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import bodies, confirm_outcomes, connected, errors, messages, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, spec
from engine.model.policies import Policy
from engine.stats import snapshot
from engine.testing import AmqpSimClient, FakeStore, SimNetwork

QUORUM = {"x-queue-type": "quorum"}


def refused(c: AmqpSimClient, name: str, **kw: Any) -> str:
    r = declare(c, name, **kw)
    assert isinstance(r, spec.ChannelClose) and r.reply_code == 406, r
    assert c.open_channel(1).__class__ is spec.ChannelOpenOk
    return str(r.reply_text)


@pytest.mark.parametrize(("props", "text"), [
    ({"durable": False}, "invalid property 'non-durable' for queue 'q' in vhost '/'"),
    ({"durable": True, "exclusive": True}, "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"),
    ({"durable": True, "auto_delete": True}, "invalid property 'auto-delete' for queue 'q' in vhost '/'"),
    # RabbitMQ's order: auto-delete, then exclusive, then non-durable
    ({"durable": False, "exclusive": True, "auto_delete": True},
     "invalid property 'auto-delete' for queue 'q' in vhost '/'"),
    ({"durable": False, "exclusive": True}, "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"),
])
def test_quorum_queue_is_durable_only(props: dict[str, Any], text: str) -> None:
    c = amqp(new_net())
    assert refused(c, "q", arguments=QUORUM, **props) == "PRECONDITION_FAILED - " + text
    assert "q" not in c.net.broker.model.vhosts["/"].queues


@pytest.mark.parametrize(("arg", "value"), [
    ("x-max-priority", 5), ("x-max-priority", 0), ("x-queue-mode", "lazy"), ("x-queue-version", 2),
    ("x-queue-master-locator", "min-masters"), ("x-max-age", "1D"), ("x-stream-max-segment-size-bytes", 1000),
    ("x-initial-cluster-size", 2),
])
def test_arguments_a_quorum_queue_refuses(arg: str, value: Any) -> None:
    c = amqp(new_net())
    assert refused(c, "q", durable=True, arguments={**QUORUM, arg: value}) == (
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue")


@pytest.mark.parametrize(("arg", "value"), [
    ("x-overflow", "reject-publish-dlx"), ("x-overflow", "reject-publish"), ("x-overflow", "drop-head"),
    ("x-message-ttl", 1000), ("x-expires", 10000), ("x-max-length", 5), ("x-max-length-bytes", 100),
    ("x-delivery-limit", 3), ("x-delivery-limit", -1), ("x-dead-letter-strategy", "at-least-once"),
    ("x-dead-letter-strategy", "at-most-once"), ("x-quorum-initial-group-size", 3),
    ("x-single-active-consumer", True), ("x-max-in-memory-length", 3), ("x-queue-leader-locator", "balanced"),
    ("x-dead-letter-exchange", "dlx"), ("x-dead-letter-routing-key", "k"),
])
def test_arguments_a_quorum_queue_takes(arg: str, value: Any) -> None:
    c = amqp(new_net())
    assert isinstance(declare(c, "q", durable=True, arguments={**QUORUM, arg: value}), spec.QueueDeclareOk)
    q = c.net.broker.model.vhosts["/"].queues["q"]
    assert q.quorum and q.durable and q.declared_args == {**QUORUM, arg: value}


@pytest.mark.parametrize(("args", "text"), [
    ({**QUORUM, "x-dead-letter-strategy": "bogus"},
     "invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/': invalid_dlx_strategy"),
    ({**QUORUM, "x-quorum-initial-group-size": 0}, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in "
     "vhost '/': {value_zero,0}"),
    ({**QUORUM, "x-quorum-initial-group-size": -1}, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in "
     "vhost '/': {value_negative,-1}"),
    ({**QUORUM, "x-quorum-initial-group-size": "abc"}, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in "
     "vhost '/': \"expected integer, got longstr\""),
    # a quorum queue's own arguments on a classic queue
    ({"x-dead-letter-strategy": "at-least-once"},
     "invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"),
    ({"x-quorum-initial-group-size": 3},
     "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"),
])
def test_bad_quorum_arguments(args: dict[str, Any], text: str) -> None:
    c = amqp(new_net())
    assert refused(c, "q", durable=True, arguments=args) == "PRECONDITION_FAILED - " + text


def test_server_named_quorum_queue_and_redeclares_of_another_type() -> None:
    c = amqp(new_net())
    assert refused(c, "", durable=True, arguments=QUORUM) == (
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue")
    declare(c, "qq", durable=True, arguments={**QUORUM, "x-delivery-limit": 3})
    declare(c, "cl", durable=True)
    assert refused(c, "qq", durable=True) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'qq' in vhost '/': received none but "
        "current is the value 'quorum' of type 'longstr'")
    assert refused(c, "cl", durable=True, arguments=QUORUM) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'cl' in vhost '/': received the value "
        "'quorum' of type 'longstr' but current is none")
    assert refused(c, "qq", durable=True, arguments={**QUORUM, "x-delivery-limit": 4}) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'qq' in vhost '/': received '4' but "
        "current is '3'")
    assert isinstance(declare(c, "qq", durable=True, arguments={**QUORUM, "x-delivery-limit": 3}), spec.QueueDeclareOk)


def _get(c: AmqpSimClient, queue: str) -> Any:
    got = c.call(spec.BasicGet(queue=queue, channel=1))
    return got if isinstance(got, spec.BasicGetOk) else None


def _dead_lettering(c: AmqpSimClient, limit: int | None) -> None:
    declare(c, "dead", durable=True)
    args = {**QUORUM, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    if limit is not None:
        args["x-delivery-limit"] = limit
    declare(c, "work", durable=True, arguments=args)


def test_delivery_limit_counts_returns_and_dead_letters_with_delivery_limit_reason() -> None:
    net = new_net()
    c = amqp(net)
    _dead_lettering(c, 2)
    publish(c, "work", b"m", props=BasicProperties(headers={"a": 1}))
    net.run_until_idle()
    seen = []
    while (got := _get(c, "work")) is not None:  # basic.get always carries the count (RabbitMQ 3.10)
        seen.append((got.redelivered, got.properties.headers))
        c.send(spec.BasicNack(got.delivery_tag, requeue=True, channel=1))
        net.run_until_idle()
    assert seen == [(False, {"a": 1, "x-delivery-count": 0}), (True, {"a": 1, "x-delivery-count": 1}),
                    (True, {"a": 1, "x-delivery-count": 2})]
    dead = _get(c, "dead")
    assert dead.properties.headers["x-first-death-reason"] == "delivery_limit"
    assert dead.properties.headers["x-death"][0]["reason"] == "delivery_limit"
    assert "x-delivery-count" not in dead.properties.headers


def test_default_delivery_limit_is_20_and_negative_means_none() -> None:
    net = new_net()
    c = amqp(net)
    _dead_lettering(c, None)
    declare(c, "endless", durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
    publish(c, "work", b"w")
    publish(c, "endless", b"e")
    net.run_until_idle()
    for queue, returns in (("work", 21), ("endless", 30)):
        for _ in range(returns):
            got = _get(c, queue)
            assert got is not None
            c.send(spec.BasicReject(got.delivery_tag, requeue=True, channel=1))
            net.run_until_idle()
    assert _get(c, "work") is None and _get(c, "dead").body == b"w"  # 21 returns: over 20
    assert _get(c, "endless").properties.headers["x-delivery-count"] == 30


def test_consumer_deliveries_carry_the_count_only_when_redelivered() -> None:
    net = new_net()
    c = amqp(net, channels=2)
    declare(c, "work", durable=True, arguments=QUORUM)
    publish(c, "work", b"m")
    c.call(spec.BasicConsume(queue="work", consumer_tag="t", channel=2))
    first = c.last(spec.BasicDeliver)
    assert not first.redelivered and first.properties.headers is None
    c.call(spec.ChannelClose(200, "bye", 0, 0, channel=2))  # a channel closed with it unacked: a return
    c.open_channel(2)
    c.call(spec.BasicConsume(queue="work", consumer_tag="t", channel=2))
    again = c.last(spec.BasicDeliver)
    assert again.redelivered and again.properties.headers == {"x-delivery-count": 1}
    c.call(spec.BasicCancel("t", channel=2))  # cancelled with it unacked: a return too
    net.run_until_idle()
    c.call(spec.ChannelClose(200, "bye", 0, 0, channel=2))
    assert _get(c, "work").properties.headers == {"x-delivery-count": 2}


def test_classic_queue_deliveries_carry_no_delivery_count() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "cl", durable=True)
    publish(c, "cl", b"m")
    net.run_until_idle()
    got = _get(c, "cl")
    c.send(spec.BasicNack(got.delivery_tag, requeue=True, channel=1))
    net.run_until_idle()
    again = _get(c, "cl")
    assert again.redelivered and again.properties.headers is None


def test_every_message_of_a_quorum_queue_is_stored_and_counts_survive_a_crash() -> None:
    store = FakeStore(needs_sync=True)
    net = new_net(store=store)
    c = amqp(net)
    declare(c, "qq", durable=True, arguments={**QUORUM, "x-delivery-limit": 5})
    declare(c, "cl", durable=True)
    c.call(spec.ExchangeDeclare(exchange="fan", type="fanout", durable=True, channel=1))
    for q in ("qq", "cl"):
        c.call(spec.QueueBind(queue=q, exchange="fan", channel=1))
    publish(c, "", b"transient", exchange="fan")  # delivery mode 1: kept by the quorum queue only
    net.run_until_idle()
    for _ in range(2):
        got = _get(c, "qq")
        c.send(spec.BasicNack(got.delivery_tag, requeue=True, channel=1))
        net.run_until_idle()
    net2 = new_net(store=store.crash())
    c2 = amqp(net2)
    got = _get(c2, "qq")
    assert got.body == b"transient" and got.redelivered and got.properties.headers == {"x-delivery-count": 2}
    assert got.properties.delivery_mode in (None, 1)  # the delivery mode is the publisher's
    assert _get(c2, "cl") is None
    assert net2.broker.model.vhosts["/"].queues["qq"].quorum


def test_confirm_of_a_transient_message_waits_for_the_quorum_queues_sync() -> None:
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    c = amqp(net)
    declare(c, "qq", durable=True, arguments=QUORUM)
    net.complete_syncs()
    c.call(spec.ConfirmSelect(channel=1))
    publish(c, "qq", b"m")
    net.run_until_idle()
    assert not c.of(spec.BasicAck)
    net.complete_syncs()
    net.run_until_idle()
    assert [a.delivery_tag for a in c.of(spec.BasicAck)] == [1]


def _policy(net: SimNetwork, name: str, apply_to: str, definition: dict[str, Any]) -> None:
    net.broker.model.policies.put(Policy("/", name, "^p-", definition, 0, apply_to))


def test_policies_apply_to_their_queue_type_and_delivery_limit_policy() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "p-quorum", durable=True, arguments=QUORUM)
    declare(c, "p-classic", durable=True)
    queues = net.broker.model.vhosts["/"].queues
    _policy(net, "qq", "quorum_queues", {"delivery-limit": 1})
    assert queues["p-quorum"].policy == "qq" and queues["p-classic"].policy is None
    _policy(net, "qq", "classic_queues", {"delivery-limit": 1})
    assert queues["p-quorum"].policy is None and queues["p-classic"].policy == "qq"
    _policy(net, "qq", "quorum_queues", {"delivery-limit": 1, "dead-letter-strategy": "at-least-once"})
    assert queues["p-quorum"].args == {**QUORUM, "x-delivery-limit": 1, "x-dead-letter-strategy": "at-least-once"}
    publish(c, "p-quorum", b"m")
    net.run_until_idle()
    for _ in range(2):
        got = _get(c, "p-quorum")
        c.send(spec.BasicNack(got.delivery_tag, requeue=True, channel=1))
        net.run_until_idle()
    assert queues["p-quorum"].count == 0  # the policy's limit: gone after its second return


def test_negative_delivery_limit_loses_to_any_other() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "p-a", durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
    declare(c, "p-b", durable=True, arguments={**QUORUM, "x-delivery-limit": 7})
    _policy(net, "lim", "quorum_queues", {"delivery-limit": 3})
    queues = net.broker.model.vhosts["/"].queues
    assert queues["p-a"].args["x-delivery-limit"] == 3 and queues["p-b"].args["x-delivery-limit"] == 3
    _policy(net, "lim", "quorum_queues", {"delivery-limit": -1})
    assert queues["p-b"].args["x-delivery-limit"] == 7


def test_reject_publish_dlx_behaves_as_drop_head() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "qq", durable=True, arguments={**QUORUM, "x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    c.call(spec.ConfirmSelect(channel=1))
    publish(c, "qq", b"1")
    publish(c, "qq", b"2")
    net.run_until_idle()
    assert confirm_outcomes(c) == [("ack", 1), ("ack", 2)]
    assert _get(c, "qq").body == b"2"


def _dead_letter_ops(strategy: str, overflow: str) -> list[str]:
    store = FakeStore(needs_sync=False)
    net = new_net(store=store)
    c = amqp(net)
    declare(c, "dead", durable=True)
    declare(c, "work", durable=True, arguments={**QUORUM, "x-dead-letter-exchange": "",
                                                "x-dead-letter-routing-key": "dead",
                                                "x-dead-letter-strategy": strategy, "x-overflow": overflow})
    publish(c, "work", b"m", props=BasicProperties(delivery_mode=2))
    net.run_until_idle()
    got = _get(c, "work")
    del store.ops[:]
    c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
    net.run_until_idle()
    assert _get(c, "dead").body == b"m"
    return [name for name, _ in store.ops if name in ("enqueue", "remove")][:2]


def test_at_least_once_writes_the_dead_lettered_copy_before_the_removal() -> None:
    assert _dead_letter_ops("at-least-once", "reject-publish") == ["enqueue", "remove"]
    # at-most-once, and at-least-once under drop-head (RabbitMQ falls back to at-most-once)
    assert _dead_letter_ops("at-most-once", "reject-publish") == ["remove", "enqueue"]
    assert _dead_letter_ops("at-least-once", "drop-head") == ["remove", "enqueue"]


def test_stomp_declares_quorum_queues_with_headers() -> None:
    net = new_net()
    c = connected(net)
    send(c, "/queue/sq", b"m", **{"x-queue-type": "quorum", "x-delivery-limit": "1"})
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["sq"]
    assert q.quorum and q.declared_args == {"x-queue-type": "quorum", "x-delivery-limit": 1}
    send(c, "/queue/sq", b"again")  # without its type: RabbitMQ's redeclare refusal
    net.run_until_idle()
    err = errors(c)
    assert err and "inequivalent arg 'x-queue-type'" in err[0].headers["message"] + err[0].body.decode()
    d = connected(net)
    send(d, "/queue/nd", b"m", **{"x-queue-type": "quorum", "durable": "false"})
    net.run_until_idle()
    err = errors(d)
    assert err and "invalid property" in err[0].headers["message"] + err[0].body.decode()
    e = connected(net)
    subscribe(e, "/amq/queue/sq", "s", ack="client-individual")
    net.run_until_idle()
    assert bodies(e) == [b"m"]
    e.drop()
    net.run_until_idle()
    f = connected(net)
    subscribe(f, "/amq/queue/sq", "s", ack="client-individual")
    net.run_until_idle()
    [redelivered] = messages(f)
    assert redelivered.headers["x-delivery-count"] == "1"


def _at_least_once(c: AmqpSimClient, dlx: str, **extra: Any) -> None:
    declare(c, "work", durable=True, arguments={**QUORUM, "x-dead-letter-exchange": dlx, "x-overflow": "reject-publish",
                                                "x-dead-letter-strategy": "at-least-once", **extra})


def test_at_least_once_keeps_a_dead_letter_that_reaches_no_queue_until_one_takes_it() -> None:
    store = FakeStore(needs_sync=False)
    net = new_net(store=store)
    c = amqp(net)
    _at_least_once(c, "later")  # the dead-letter exchange does not exist yet
    publish(c, "work", b"m", props=BasicProperties(delivery_mode=2))
    net.run_until_idle()
    got = _get(c, "work")
    c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
    net.run_until_idle()
    work = net.broker.model.vhosts["/"].queues["work"]
    assert _get(c, "work") is None and net.broker.model.publisher.at_least_once.held(work) == 1
    [info] = [q for q in snapshot(net.broker, ("queues",))["queues"] if q["name"] == "work"]
    assert (info["messages_ready"], info["messages_dlx"], info["messages"]) == (0, 1, 1)  # as RabbitMQ lists it
    c.call(spec.ExchangeDeclare(exchange="later", type="fanout", durable=True, channel=1))
    declare(c, "dead", durable=True)
    c.call(spec.QueueBind(queue="dead", exchange="later", channel=1))
    del store.ops[:]
    net.advance(9.0)
    assert _get(c, "dead") is None  # not yet: routed again every 10 seconds
    net.advance(1.5)
    dead = _get(c, "dead")
    assert dead.body == b"m" and dead.properties.headers["x-first-death-reason"] == "rejected"
    assert net.broker.model.publisher.at_least_once.held(work) == 0
    assert [name for name, _ in store.ops if name in ("enqueue", "remove")][:2] == ["enqueue", "remove"]


def test_at_least_once_retries_only_the_queue_that_refused() -> None:
    net = new_net()
    c = amqp(net)
    c.call(spec.ExchangeDeclare(exchange="dlx", type="fanout", durable=True, channel=1))
    declare(c, "full", durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    declare(c, "open", durable=True)
    for q in ("full", "open"):
        c.call(spec.QueueBind(queue=q, exchange="dlx", channel=1))
    _at_least_once(c, "dlx")
    publish(c, "full", b"filler")
    publish(c, "work", b"m")
    net.run_until_idle()
    got = _get(c, "work")
    c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
    net.run_until_idle()
    assert _get(c, "open").body == b"m" and _get(c, "open") is None
    c.send(spec.BasicAck(_get(c, "full").delivery_tag, channel=1))  # room in "full" now
    net.run_until_idle()
    net.advance(10.5)
    assert _get(c, "full").body == b"m"
    assert _get(c, "open") is None  # it took the dead letter once: not again


def test_a_kept_dead_letter_is_back_in_its_queue_after_a_crash() -> None:
    store = FakeStore(needs_sync=True)
    net = new_net(store=store)
    c = amqp(net)
    _at_least_once(c, "nowhere")
    publish(c, "work", b"m")
    net.run_until_idle()
    got = _get(c, "work")
    c.send(spec.BasicReject(got.delivery_tag, requeue=False, channel=1))
    net.run_until_idle()
    net2 = new_net(store=store.crash())
    assert _get(amqp(net2), "work").body == b"m"


def test_consuming_from_a_quorum_queue_under_global_qos_is_540() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "qq", durable=True, arguments=QUORUM)
    c.call(spec.BasicQos(0, 10, True, channel=1))
    close = c.call(spec.BasicConsume(queue="qq", consumer_tag="t", channel=1))
    assert isinstance(close, spec.ConnectionClose) and (close.reply_code, close.reply_text) == (
        540, "NOT_IMPLEMENTED - queue 'qq' in vhost '/' does not support global qos")


@settings(max_examples=40, deadline=None)
@given(limit=st.integers(min_value=0, max_value=4),
       actions=st.lists(st.sampled_from(["ack", "nack", "reject", "close", "discard"]), min_size=1, max_size=40))
def test_delivery_counts_and_deaths_follow_a_reference_model(limit: int, actions: list[str]) -> None:
    """Random verdicts on three messages of a quorum queue: every delivery's x-delivery-count is the
    returns so far, a message dies with ``delivery_limit`` exactly on its return past the limit,
    with ``rejected`` when discarded, and nothing is lost or duplicated."""
    net = new_net()
    c = amqp(net)
    _dead_lettering(c, limit)
    bodies_ = [b"m0", b"m1", b"m2"]
    for body in bodies_:
        publish(c, "work", body)
    net.run_until_idle()
    returns = dict.fromkeys(bodies_, 0)
    fate: dict[bytes, str] = {}
    for action in actions:
        got = _get(c, "work")
        if got is None:
            break
        assert got.properties.headers["x-delivery-count"] == returns[got.body]
        assert got.redelivered == (returns[got.body] > 0)
        tag = got.delivery_tag
        if action == "ack":
            c.send(spec.BasicAck(tag, channel=1))
            fate[got.body] = "acked"
        elif action == "discard":
            c.send(spec.BasicReject(tag, requeue=False, channel=1))
            fate[got.body] = "rejected"
        else:
            if action == "nack":
                c.send(spec.BasicNack(tag, requeue=True, channel=1))
            elif action == "reject":
                c.send(spec.BasicReject(tag, requeue=True, channel=1))
            else:
                c.call(spec.ChannelClose(200, "bye", 0, 0, channel=1))
                c.open_channel(1)
            returns[got.body] += 1
            if returns[got.body] > limit:
                fate[got.body] = "delivery_limit"
        net.run_until_idle()
    dead = {}
    while (got := c.call(spec.BasicGet(queue="dead", no_ack=True, channel=1))) is not None and \
            isinstance(got, spec.BasicGetOk):
        assert got.body not in dead
        dead[got.body] = got.properties.headers["x-first-death-reason"]
    assert dead == {b: f for b, f in fate.items() if f != "acked"}
    left = declare(c, "work", passive=True).message_count
    assert left == len(bodies_) - len(fate)
