"""Light topic subscriptions: no queue per non-durable /topic subscription, same semantics (acks,
NACK, prefetch, ack timeouts, TTL, priorities), a bounded buffer with drop-head for slow consumers,
messages gone with the connection, control counts, and the router index behind it."""

import itertools

import pytest
from enginetest_helpers import ack, bodies, connected, errors, messages, nack, new_net, send, subscribe, unsubscribe
from hypothesis import example, given
from hypothesis import strategies as st

import stompproto
from engine import Config, Limits
from engine.model import Exchange, VHost
from engine.model.light import LightConsumer
from engine.model.routers import TopicRouter
from engine.stomp.session import StompLightSubscription, StompSubscription
from stompproto import Receipt


def _sub(net, client, sub_id):
    return net.broker.sessions[client.conn_id].subs[sub_id]


def test_non_durable_topic_subscriptions_make_no_queue_and_idle_again_after_use():
    net = new_net()
    a, p = connected(net), connected(net)
    queues_before = set(net.broker.model.vhosts["/"].queues)
    subscribe(a, "/topic/t.x", "exact", ack="client-individual")
    subscribe(a, "/topic/t.*", "wild")
    subscribe(a, "/topic/t*", "prefix")
    subscribe(a, "/exchange/amq.topic/t.x", "xchg")
    net.run_until_idle()
    assert set(net.broker.model.vhosts["/"].queues) == queues_before
    subs = [_sub(net, a, s) for s in ("exact", "wild", "prefix", "xchg")]
    assert all(type(s) is StompLightSubscription and s.buf is None for s in subs)
    send(p, "/topic/t.x", b"hello")
    net.run_until_idle()
    got = messages(a)
    assert sorted(m.headers["subscription"] for m in got) == ["exact", "prefix", "wild", "xchg"]
    assert all(m.body == b"hello" and m.headers["destination"] == "/topic/t.x" for m in got)
    assert subs[0].buf is not None and subs[0].unacked_count() == 1  # client-individual: unacked
    assert all(s.buf is None for s in subs[1:])  # auto ack: nothing kept
    ack(a, next(m for m in got if m.headers["subscription"] == "exact"))
    net.run_until_idle()
    assert subs[0].buf is None


def test_direct_exchange_and_queue_args_and_durable_keep_real_queues():
    net = new_net()
    a = connected(net)
    subscribe(a, "/exchange/amq.direct/k", "direct")
    subscribe(a, "/topic/capped", "args", x_max_length="2")
    subscribe(a, "/topic/kept", "dur", durable="true")
    net.run_until_idle()
    assert all(type(_sub(net, a, s)) is StompSubscription for s in ("direct", "args", "dur"))


def test_client_ack_is_cumulative_and_nack_requeues_to_the_same_subscription():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/c", "1", ack="client")
    net.run_until_idle()
    for i in range(3):
        send(p, "/topic/c", b"%d" % i)
    net.run_until_idle()
    got = messages(a)
    assert [m.body for m in got] == [b"0", b"1", b"2"]
    ack(a, got[1])  # acks 0 and 1
    net.run_until_idle()
    sub = _sub(net, a, "1")
    assert list(sub.unacked.values())[0].msg.body == b"2" and sub.unacked_count() == 1
    nack(a, got[2])
    net.run_until_idle()
    [again] = messages(a)
    assert again.body == b"2"
    assert again.headers["redelivered"] == "true" and again.headers["x-delivery-count"] == "1"
    nack(a, again, requeue="false")
    net.run_until_idle()
    assert messages(a) == [] and sub.buf is None


def test_prefetch_limits_unacked_deliveries():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/pf", "1", ack="client-individual", prefetch_count="2")
    net.run_until_idle()
    for i in range(5):
        send(p, "/topic/pf", b"%d" % i)
    net.run_until_idle()
    got = messages(a)
    assert [m.body for m in got] == [b"0", b"1"]
    ack(a, got[0])
    net.run_until_idle()
    assert bodies(a) == [b"2"]


def _slow_subscriber(limit, ack_mode="auto"):
    cfg = Config(limits=Limits(max_topic_buffer=limit, max_outbound_buffer=1))
    net = new_net(cfg)
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/flood", "1", ack=ack_mode)
    net.run_until_idle()
    a.events()
    return net, a, p


def test_slow_subscriber_buffer_is_bounded_with_drop_head():
    net, a, p = _slow_subscriber(5)
    a.stop_reading()
    for i in range(20):
        send(p, "/topic/flood", b"%d" % i)
        net.run_until_idle()
    sub = _sub(net, a, "1")
    model = net.broker.model
    # message 0 went out and blocked the connection; 1..19 met a buffer of 5: 14 oldest dropped
    assert sub.count == 5
    assert model.light_dropped[sub] == 14 and model.light_dropped_total == 14
    a.start_reading()
    net.run_until_idle()
    assert bodies(a) == [b"0", b"15", b"16", b"17", b"18", b"19"]
    assert sub.buf is None
    assert errors(a) == [] and errors(p) == []
    unsubscribe(a, "1")
    net.run_until_idle()
    assert sub not in model.light_dropped and model.light_dropped_total == 14


def test_full_of_unacked_deliveries_drops_the_newcomer():
    net = new_net(Config(limits=Limits(max_topic_buffer=3)))
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/u", "1", ack="client-individual")
    net.run_until_idle()
    for i in range(5):
        send(p, "/topic/u", b"%d" % i)
        net.run_until_idle()  # each is delivered (and unacked) before the next arrives
    got = messages(a)
    assert [m.body for m in got] == [b"0", b"1", b"2"]
    sub = _sub(net, a, "1")
    assert net.broker.model.light_dropped[sub] == 2
    ack(a, got[0])
    send(p, "/topic/u", b"5")
    net.run_until_idle()
    assert bodies(a) == [b"5"]


def test_disconnect_drops_topic_messages_and_unbinds():
    net = new_net()
    a, b, p = connected(net), connected(net), connected(net)
    subscribe(a, "/topic/gone", "1", ack="client-individual")
    subscribe(b, "/queue/watch", "1")
    net.run_until_idle()
    send(p, "/topic/gone", b"m")
    net.run_until_idle()
    assert bodies(a) == [b"m"]
    sub = _sub(net, a, "1")
    a.drop()
    net.run_until_idle()
    model = net.broker.model
    vhost = model.vhosts["/"]
    assert model.route(vhost, vhost.exchanges["amq.topic"], "gone", None) == []
    assert sub.buf is None and sub not in model.dirty
    send(p, "/control/count-subscribers/topic/gone", receipt="r")
    net.run_until_idle()
    [r] = [e for e in p.events() if isinstance(e, Receipt)]
    assert r.headers["num-subscribers"] == "0"
    assert bodies(b) == []


def test_unsubscribe_unbinds_every_kind():
    net = new_net()
    a, p = connected(net), connected(net)
    for sub_id, dest in (("e", "/topic/u.v"), ("w", "/topic/u.#"), ("p", "/topic/u*")):
        subscribe(a, dest, sub_id)
    net.run_until_idle()
    for sub_id in ("e", "w", "p"):
        unsubscribe(a, sub_id)
    net.run_until_idle()
    send(p, "/topic/u.v", b"x")
    net.run_until_idle()
    assert bodies(a) == []
    router = net.broker.model.vhosts["/"].exchanges["amq.topic"].router
    assert router._exact is None and router._root.children is None and not router._prefixes
    assert router._light_prefixes is None and not router._prefix_lengths


def test_count_subscribers_counts_light_subscriptions():
    net = new_net()
    a, b, p = connected(net), connected(net), connected(net)
    subscribe(a, "/topic/n.x", "1")
    subscribe(a, "/topic/n.*", "2")
    subscribe(b, "/topic/n.x", "1")
    subscribe(b, "/topic/n*", "2")
    subscribe(b, "/topic/n.x", "3", durable="true")
    net.run_until_idle()
    send(p, "/control/count-subscribers/topic/n.x", receipt="r")
    net.run_until_idle()
    [r] = [e for e in p.events() if isinstance(e, Receipt)]
    assert r.headers["num-subscribers"] == "5"


def test_ack_timeout_redelivers_to_the_same_topic_subscription_and_late_ack_is_ignored():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/at", "1", ack="client-individual")
    net.run_until_idle()
    send(p, "/topic/at", b"job", ack_timeout="2")
    net.run_until_idle()
    [first] = messages(a)
    net.advance(2.5)
    [second] = messages(a)
    assert second.body == b"job" and second.headers["redelivered"] == "true"
    ack(a, first)  # late: tolerated
    ack(a, second)
    net.run_until_idle()
    assert errors(a) == [] and _sub(net, a, "1").buf is None


def test_expired_messages_are_not_delivered_after_waiting():
    net, a, p = _slow_subscriber(100)
    a.stop_reading()
    send(p, "/topic/flood", b"first")
    net.run_until_idle()
    send(p, "/topic/flood", b"short", ttl="1000")
    send(p, "/topic/flood", b"long", ttl="60000")
    net.run_until_idle()
    net.advance(5)
    a.start_reading()
    net.run_until_idle()
    assert bodies(a) == [b"first", b"long"]


def test_priorities_order_the_waiting_messages():
    net, a, p = _slow_subscriber(100)
    a.stop_reading()
    send(p, "/topic/flood", b"blocker")
    net.run_until_idle()
    for body, prio in ((b"low", "0"), (b"high", "9"), (b"mid", "5"), (b"high2", "9"), (b"low2", "0")):
        send(p, "/topic/flood", body, priority=prio)
    net.run_until_idle()
    a.start_reading()
    net.run_until_idle()
    assert bodies(a) == [b"blocker", b"high", b"high2", b"mid", b"low", b"low2"]


def test_dead_letters_reach_light_subscriptions():
    net = new_net()
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/dead.#", "1")
    net.run_until_idle()
    send(p, "/queue/src", b"bye", x_message_ttl="1000", x_dead_letter_exchange="amq.topic",
         x_dead_letter_routing_key="dead.letter")
    net.advance(2)
    [m] = messages(a)
    assert m.body == b"bye" and m.headers["x-first-death-reason"] == "expired"


def test_deleted_exchange_leaves_subscription_harmless():
    net = new_net()
    model = net.broker.model
    vhost = model.vhosts["/"]
    model.declare_exchange(vhost, "events", "topic")
    a, p = connected(net), connected(net)
    subscribe(a, "/exchange/events/e.1", "1")
    net.run_until_idle()
    assert type(_sub(net, a, "1")) is StompLightSubscription
    send(p, "/exchange/events/e.1", b"one")
    net.run_until_idle()
    assert bodies(a) == [b"one"]
    model.delete_exchange(vhost, "events")
    unsubscribe(a, "1", receipt="u")
    net.run_until_idle()
    assert [e.headers["receipt-id"] for e in a.events() if isinstance(e, Receipt)] == ["u"]


def test_back_pressure_resumes_deliveries_for_light_subscriptions():
    cfg = Config(limits=Limits(max_outbound_buffer=600))
    net = new_net(cfg)
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/bp", "1")
    net.run_until_idle()
    a.stop_reading()
    for i in range(30):
        send(p, "/topic/bp", b"%02d" % i + b"." * 100)
    net.run_until_idle()
    sub = _sub(net, a, "1")
    assert net.broker.sessions[a.conn_id].blocked and sub.count > 0
    a.start_reading()
    net.run_until_idle()
    assert [m.body[:2] for m in messages(a)] == [b"%02d" % i for i in range(30)]


# -- the router index -------------------------------------------------------------------------------
class _Owner:
    blocked = False


def _light(key, prefix=False):
    # a real exchange: the compiled build checks the declared argument types
    return LightConsumer(_Owner(), Exchange(VHost("/"), "amq.topic", "topic", True, False, False, None),  # type: ignore[arg-type]
                         key, prefix, 0, True)


def _route(router, key):
    out = {}
    router.route(key, None, out)
    return list(out)


@pytest.mark.parametrize("key", ["a.b", "", "a..b", "a*b.c#"])
def test_exact_keys_share_one_slot_and_collapse_back(key):
    router = TopicRouter()
    s1, s2, s3 = _light(key), _light(key), _light(key)
    router.add_light(s1, key, False)
    assert router._exact == {key: s1}
    router.add_light(s2, key, False)
    router.add_light(s3, key, False)
    assert _route(router, key) == [s1, s2, s3]
    assert _route(router, key + ".z") == []
    router.remove_light(s2, key, False)
    router.remove_light(s1, key, False)
    assert router._exact == {key: s3}
    router.remove_light(s3, key, False)
    router.remove_light(s3, key, False)  # twice: harmless
    assert router._exact is None and len(router) == 0


def test_wildcard_and_prefix_light_subscriptions_route_with_queue_bindings():
    router = TopicRouter()
    star, hash_, pre = _light("a.*"), _light("a.#"), _light("a", prefix=True)
    router.add_light(star, "a.*", False)
    router.add_light(hash_, "a.#", False)
    router.add_light(pre, "a", True)
    router.add("queue", "a.b")
    assert _route(router, "a.b") == ["queue", star, hash_, pre]
    assert _route(router, "a") == [hash_, pre]
    assert _route(router, "ab.c") == [pre]
    assert len(router) == 1  # light subscriptions are not in the binding registry
    router.add("queue", "a", {"x-sansmq-prefix": True})  # a queue on the same prefix as a light one
    assert _route(router, "ab.c") == ["queue", pre]
    for sub, key, prefix in ((star, "a.*", False), (hash_, "a.#", False), (pre, "a", True)):
        router.remove_light(sub, key, prefix)
        router.remove_light(sub, key, prefix)  # twice: harmless
    assert _route(router, "a.b") == ["queue"]
    assert _route(router, "ab.c") == ["queue"]
    assert list(router._prefix_lengths) == [1]


def test_light_buffer_keeps_priority_order_for_new_and_returned_entries():
    from engine import Message
    from engine._message import Entry
    from engine.model.light import LightBuffer

    buf = LightBuffer()
    seqs = itertools.count(1)  # as the model numbers its entries: in creation order

    def entry(name, prio):
        return Entry(Message(0, "", "", {}, name, prio), next(seqs))

    returned = [entry(b"r5", 5), entry(b"r0", 0), entry(b"r9", 9)]  # delivered before the others came
    for name, prio in ((b"a0", 0), (b"b5", 5), (b"c0", 0), (b"d9", 9), (b"e5", 5)):
        buf.push(entry(name, prio))
    assert [e.msg.body for e in buf.ready] == [b"d9", b"b5", b"e5", b"a0", b"c0"]
    for e in returned:  # back at their original position: ahead of the later ones of their level
        buf.requeue(e)
    assert [e.msg.body for e in buf.ready] == [b"r9", b"d9", b"r5", b"b5", b"e5", b"r0", b"a0", b"c0"]
    late = entry(b"l5", 5)  # newer than everything: behind its level
    buf.requeue(late)
    assert [e.msg.body for e in buf.ready][:5] == [b"r9", b"d9", b"r5", b"b5", b"e5"]
    assert [e.msg.body for e in buf.ready][5] == b"l5"


# -- differential: a light subscription behaves as the queue-backed one it replaces -----------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 9)),
        st.tuples(st.just("ack"), st.integers(0, 5)),
        st.tuples(st.just("nack"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("read"), st.booleans()),
    ),
    max_size=25,
)


@given(ops=_OPS, ack_mode=st.sampled_from(["auto", "client", "client-individual"]),
       prefetch=st.sampled_from(["0", "1", "3"]))
# requeue goes first in line, behind higher priorities; cumulative acks; a blocked reader
@example(ops=[("send", 0), ("send", 0), ("nack", 0, True)], ack_mode="client", prefetch="1")
@example(ops=[("send", 0), ("send", 9), ("send", 5), ("nack", 0, True), ("ack", 0), ("ack", 0)],
         ack_mode="client-individual", prefetch="1")
@example(ops=[("read", False), *[("send", i % 10) for i in range(12)], ("read", True)], ack_mode="auto", prefetch="0")
def test_light_and_queue_backed_topic_subscriptions_deliver_the_same(ops, ack_mode, prefetch):
    net = new_net(Config(limits=Limits(max_outbound_buffer=300)))
    light, heavy, p = connected(net), connected(net), connected(net)
    subscribe(light, "/topic/d", "s", ack=ack_mode, prefetch_count=prefetch)
    # a queue argument forces the queue-backed path (a length cap it never reaches)
    subscribe(heavy, "/topic/d", "s", ack=ack_mode, prefetch_count=prefetch, x_max_length="100000")
    net.run_until_idle()
    assert type(_sub(net, light, "s")) is StompLightSubscription
    assert type(_sub(net, heavy, "s")) is StompSubscription
    seen = {light: [], heavy: []}
    pending = {light: [], heavy: []}
    n = 0
    for op in ops:
        if op[0] == "send":
            send(p, "/topic/d", b"%d" % n + b"." * 60, priority=str(op[1]))
            n += 1
        elif op[0] == "read":
            for c in (light, heavy):
                c.start_reading() if op[1] else c.stop_reading()
        elif ack_mode != "auto":
            for c in (light, heavy):
                if op[1] < len(pending[c]):
                    m = pending[c].pop(op[1])
                    if op[0] == "ack":
                        ack(c, m)
                    else:
                        nack(c, m, requeue="true" if op[2] else "false")
                    if ack_mode == "client":  # cumulative: everything delivered before it went too
                        pending[c] = [x for x in pending[c] if int(x.headers["ack"].rsplit("@@", 1)[1])
                                      > int(m.headers["ack"].rsplit("@@", 1)[1])]
        net.run_until_idle()
        for c in (light, heavy):
            got = messages(c)
            seen[c] += [(m.body, m.headers.get("redelivered"), m.headers.get("x-delivery-count")) for m in got]
            pending[c] += got
        assert seen[light] == seen[heavy]
    for c in (light, heavy):
        c.start_reading()
    net.run_until_idle()
    for c in (light, heavy):
        seen[c] += [(m.body, m.headers.get("redelivered"), m.headers.get("x-delivery-count")) for m in messages(c)]
    assert seen[light] == seen[heavy]
    assert errors(light) == [] and errors(heavy) == []


def test_prefix_lengths_stay_ordered_as_prefixes_come_and_go():
    router = TopicRouter()
    subs = {p: _light(p, prefix=True) for p in ("abc", "a", "ab", "x")}
    for p, sub in subs.items():
        router.add_light(sub, p, True)
    assert list(router._prefix_lengths) == [1, 2, 3]
    assert _route(router, "abcd") == [subs["a"], subs["ab"], subs["abc"]]
    router.remove_light(subs["ab"], "ab", True)
    router.remove_light(subs["a"], "a", True)
    assert list(router._prefix_lengths) == [1, 3]  # "x" still has length 1
    assert _route(router, "abcd") == [subs["abc"]]
    assert _route(router, "xy") == [subs["x"]]


# patches a codec instance's method: not possible on the compiled build (the pure suite runs it)
@pytest.mark.skipif(stompproto.COMPILED, reason="patches a codec instance: not possible compiled")
def test_a_delivery_that_breaks_the_session_closes_it_cleanly(monkeypatch):
    net = new_net(strict=False)
    a, b, p = connected(net), connected(net), connected(net)
    subscribe(a, "/topic/boom", "1", ack="client-individual")
    subscribe(a, "/topic/boom", "2")
    subscribe(b, "/topic/boom", "1")
    net.run_until_idle()
    broken = net.broker.sessions[a.conn_id]
    subs = list(broken.subs.values())

    def send_message_bytes(data, now=None):  # every MESSAGE of that session goes through here
        raise RuntimeError("bug while delivering")

    monkeypatch.setattr(broken.conn, "send_message_bytes", send_message_bytes)
    send(p, "/topic/boom", b"x")
    send(p, "/topic/boom", b"y")
    net.run_until_idle()
    assert a.server_closed and net.broker.internal_errors
    assert bodies(b) == [b"x", b"y"]
    assert all(s.buf is None for s in subs)
    vhost = net.broker.model.vhosts["/"]
    assert net.broker.model.route(vhost, vhost.exchanges["amq.topic"], "boom", None) == [_sub(net, b, "1")]
