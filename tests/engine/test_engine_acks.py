"""Ack modes, NACK and dead-lettering, ack timeouts, prefetch, redelivery on connection death,
priorities and expiry."""

import pytest
from enginetest_helpers import ack, bodies, connected, errors, messages, nack, new_net, receipts, send, subscribe

from stompproto import Ack, Unsubscribe


def fill(net, dest, n, **headers):
    p = connected(net)
    for i in range(n):
        send(p, dest, b"%d" % i, **headers)
    net.run_until_idle()
    return p


def test_auto_ack_removes_on_delivery():
    net = new_net()
    fill(net, "/queue/q", 2)
    c = connected(net)
    subscribe(c, "/queue/q", "1")
    net.run_until_idle()
    got = messages(c)
    assert [m.body for m in got] == [b"0", b"1"]
    assert all("ack" not in m.headers for m in got)
    c.drop()
    net.run_until_idle()
    assert net.broker.model.vhosts["/"].queues["q"].count == 0


def test_client_ack_is_cumulative():
    net = new_net()
    fill(net, "/queue/q", 4)
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client")
    net.run_until_idle()
    got = messages(c)
    assert [m.body for m in got] == [b"0", b"1", b"2", b"3"]
    ack(c, got[2], receipt="r")
    net.run_until_idle()
    assert receipts(c)[0].headers["receipt-id"] == "r"
    c.drop()
    net.run_until_idle()
    d = connected(net)
    subscribe(d, "/queue/q", "1", ack="client")
    net.run_until_idle()
    [m] = messages(d)
    assert m.body == b"3" and m.headers["redelivered"] == "true"


def test_client_individual_ack_only_that_message():
    net = new_net()
    fill(net, "/queue/q", 3)
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    got = messages(c)
    ack(c, got[1])
    net.run_until_idle()
    c.drop()
    net.run_until_idle()
    d = connected(net)
    subscribe(d, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    assert bodies(d) == [b"0", b"2"]


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_older_versions_ack_by_message_id(version):
    net = new_net()
    fill(net, "/queue/q", 2)
    c = connected(net, version=version)
    subscribe(c, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    got = messages(c)
    assert all("ack" not in m.headers for m in got)
    headers = {"message-id": got[0].headers["message-id"], "receipt": "r"}
    if version == "1.1":
        headers["subscription"] = "1"
    c.send(Ack(headers))
    net.run_until_idle()
    assert receipts(c)
    assert net.broker.model.vhosts["/"].queues["q"].unacked_count() == 1


def test_unknown_ack_id_is_an_error_and_requeues():
    net = new_net()
    fill(net, "/queue/q", 1)
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client")
    net.run_until_idle()
    [m] = messages(c)
    c.send(Ack({"id": "T_1@@999"}))
    net.run_until_idle()
    assert errors(c)[0].headers["message"] == "Unknown ack id"
    assert c.server_closed
    q = net.broker.model.vhosts["/"].queues["q"]
    assert q.count == 1 and q.ready_entries()[0].count == 1


def test_nack_requeues_to_front_redelivered():
    net = new_net()
    fill(net, "/queue/q", 3)
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual", prefetch_count="1")
    net.run_until_idle()
    [m0] = messages(c)
    nack(c, m0)
    net.run_until_idle()
    [again] = messages(c)
    assert again.body == b"0"
    assert again.headers["redelivered"] == "true" and again.headers["x-delivery-count"] == "1"
    assert again.headers["message-id"] != m0.headers["message-id"]
    ack(c, again)
    net.run_until_idle()
    assert bodies(c) == [b"1"]


def test_nack_requeue_false_drops_without_dlx_and_dead_letters_with_one():
    net = new_net()
    dl = connected(net)
    subscribe(dl, "/queue/dead", "d")
    c = connected(net)
    subscribe(c, "/queue/work", "1", ack="client-individual",
              x_dead_letter_exchange="", x_dead_letter_routing_key="dead")
    subscribe(c, "/queue/plain", "2", ack="client-individual")
    net.run_until_idle()
    p = fill(net, "/queue/work", 1, x_custom="v")
    send(p, "/queue/plain", b"p")
    net.run_until_idle()
    got = {m.headers["subscription"]: m for m in messages(c)}
    nack(c, got["1"], requeue="false")
    nack(c, got["2"], requeue="false")
    net.run_until_idle()
    [dead] = messages(dl)
    assert dead.body == b"0"
    assert dead.headers["x-first-death-reason"] == "rejected"
    assert dead.headers["x-first-death-queue"] == "work"
    assert dead.headers["x-custom"] == "v"
    assert net.broker.model.vhosts["/"].queues["plain"].count == 0
    assert messages(c) == []


def test_ack_timeout_moves_message_to_another_subscriber():
    net = new_net()
    slow, fast = connected(net), connected(net)
    subscribe(slow, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    p = connected(net)
    send(p, "/queue/q", b"job", ack_timeout="2.5")
    net.run_until_idle()
    [m] = messages(slow)
    subscribe(fast, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    net.advance(2.4)
    assert messages(fast) == []
    net.advance(0.2)
    [m2] = messages(fast)
    assert m2.body == b"job" and m2.headers["redelivered"] == "true"
    # the late ack of the taken-back delivery is tolerated
    ack(slow, m, receipt="late")
    net.run_until_idle()
    assert receipts(slow)[0].headers["receipt-id"] == "late" and not slow.server_closed
    ack(fast, m2)
    net.advance(10)
    assert messages(slow) == [] and messages(fast) == []


def test_ack_timeout_alone_redelivers_to_same():
    net = new_net()
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client")
    net.run_until_idle()
    send(c, "/queue/q", b"j", ack_timeout="1")
    net.run_until_idle()
    assert bodies(c) == [b"j"]
    net.advance(1.0)
    [m] = messages(c)
    assert m.headers["redelivered"] == "true"
    ack(c, m)
    net.advance(5)
    assert messages(c) == []


def test_prefetch_limits_unacked():
    net = new_net()
    fill(net, "/queue/q", 5)
    c, d = connected(net), connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual", prefetch_count="2")
    net.run_until_idle()
    got = messages(c)
    assert [m.body for m in got] == [b"0", b"1"]
    subscribe(d, "/queue/q", "1", ack="client-individual", prefetch="1")
    net.run_until_idle()
    [m2] = messages(d)
    assert m2.body == b"2"
    ack(c, got[0])
    net.run_until_idle()
    assert bodies(c) == [b"3"]


def test_disconnect_requeues_in_original_order_with_delivery_count():
    net = new_net()
    fill(net, "/queue/q", 4)
    c = connected(net)
    subscribe(c, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    got = messages(c)
    ack(c, got[1])
    net.run_until_idle()
    c.close()
    net.run_until_idle()
    d = connected(net)
    subscribe(d, "/queue/q", "1", ack="client-individual")
    net.run_until_idle()
    again = messages(d)
    assert [m.body for m in again] == [b"0", b"2", b"3"]
    assert [m.headers["x-delivery-count"] for m in again] == ["1", "1", "1"]
    d.drop()
    net.run_until_idle()
    e = connected(net)
    subscribe(e, "/queue/q", "1", ack="client")
    net.run_until_idle()
    assert [m.headers["x-delivery-count"] for m in messages(e)] == ["2", "2", "2"]


def test_priorities_higher_first_fifo_within_level():
    net = new_net()
    p = connected(net)
    for body, prio in ((b"a", "0"), (b"b", "5"), (b"c", "9"), (b"d", "5"), (b"e", "42"), (b"f", None)):
        if prio is None:
            send(p, "/queue/pq", body)
        else:
            send(p, "/queue/pq", body, priority=prio)
    net.run_until_idle()
    c = connected(net)
    subscribe(c, "/queue/pq", "1", ack="client-individual")
    net.run_until_idle()
    got = messages(c)
    assert [m.body for m in got] == [b"c", b"e", b"b", b"d", b"a", b"f"]
    assert got[1].headers["priority"] == "9"  # clamped
    nack(c, got[2])  # b goes back to the front of level 5
    net.run_until_idle()
    assert bodies(c) == [b"b"]


@pytest.mark.parametrize("header,value", [("ttl", "1000"), ("expiration", "1000"), ("expires", None)])
def test_expiry_headers(header, value):
    net = new_net()
    p = connected(net)
    if value is None:
        value = str(int((net.now + 1.0) * 1000))
    send(p, "/queue/exp", b"short", **{header: value})
    send(p, "/queue/exp", b"long", ttl="5000")
    send(p, "/queue/exp", b"forever")
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["exp"]
    assert q.count == 3
    net.advance(1.5)
    assert q.count == 2
    c = connected(net)
    subscribe(c, "/queue/exp", "1")
    net.run_until_idle()
    assert bodies(c) == [b"long", b"forever"]


def test_expired_message_dead_letters_and_never_delivers_after_requeue():
    net = new_net()
    dl = connected(net)
    subscribe(dl, "/queue/expired", "d")
    net.run_until_idle()
    c = connected(net)
    subscribe(c, "/queue/e", "1", ack="client-individual", x_dead_letter_exchange="",
              x_dead_letter_routing_key="expired")
    net.run_until_idle()
    send(c, "/queue/e", b"x", expiration="1000")
    net.run_until_idle()
    [m] = messages(c)  # delivered in time; unacked messages do not expire
    net.advance(2)
    assert messages(dl) == []
    nack(c, m)  # back in the queue after its expiry: dead-lettered, not redelivered
    net.run_until_idle()
    assert messages(c) == []
    [d] = messages(dl)
    assert d.body == b"x" and d.headers["x-first-death-reason"] == "expired"


def test_no_timer_without_ttl_or_ack_timeout():
    net = new_net()
    p = connected(net)
    before = len(net.broker.timers)
    for _ in range(50):
        send(p, "/queue/plain", b"x")
    net.run_until_idle()
    assert len(net.broker.timers) == before


def test_queue_ttl_and_max_length_arguments():
    net = new_net()
    dl = connected(net)
    subscribe(dl, "/queue/dlq", "d")
    net.run_until_idle()
    p = connected(net)
    send(p, "/queue/ttl", b"a", x_message_ttl="1000", x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    net.run_until_idle()
    net.advance(0.5)
    send(p, "/queue/ttl", b"b")
    net.advance(0.6)
    assert bodies(dl) == [b"a"]
    net.advance(0.5)
    assert bodies(dl) == [b"b"]
    for i in range(5):
        send(p, "/queue/short", b"%d" % i, x_max_length="2")
    net.run_until_idle()
    c = connected(net)
    subscribe(c, "/queue/short", "1")
    net.run_until_idle()
    assert bodies(c) == [b"3", b"4"]


def test_exchange_to_exchange_binding_reaches_stomp_subscriber():
    net = new_net()
    c, p = connected(net), connected(net)
    model = net.broker.model
    vhost = model.vhosts["/"]
    front = model.declare_exchange(vhost, "front", "fanout")
    model.bind(vhost, vhost.exchanges["amq.topic"], front, "")
    subscribe(c, "/topic/x.y", "1")
    subscribe(c, "/exchange/front", "2")
    net.run_until_idle()
    send(p, "/exchange/front/x.y", b"hop")
    net.run_until_idle()
    assert sorted(m.headers["subscription"] for m in messages(c)) == ["1", "2"]


def test_unused_queue_expires():
    net = new_net()
    c = connected(net)
    subscribe(c, "/queue/tmp", "1", x_expires="2000")
    net.run_until_idle()
    queues = net.broker.model.vhosts["/"].queues
    net.advance(5)
    assert "tmp" in queues  # in use
    c.send(Unsubscribe({"id": "1"}))
    net.advance(1.5)
    send(c, "/queue/tmp", b"x")  # a redeclare restarts the countdown
    net.advance(1.5)
    assert "tmp" in queues
    net.advance(0.6)
    assert "tmp" not in queues
