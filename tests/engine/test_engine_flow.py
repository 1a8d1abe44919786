"""Credit flow: a publisher is not read while a queue it publishes to is over its credit (ready
messages the consumers have not taken yet), and is read again once the queue drains to half."""

from enginetest_helpers import ack, connected, messages, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st

from engine._broker import FLOW_CREDIT


def _queue(net, name):
    return net.broker.model.vhosts["/"].queues[name]


def _publish(client, n, start=0):
    for i in range(start, start + n):
        send(client, "/queue/flow", b"m%d" % i)


def test_publisher_paused_over_credit_and_resumed_at_half():
    net = new_net()
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "10"})
    net.run_until_idle()
    _publish(p, FLOW_CREDIT + 50)  # one read: the consumer takes 10, the rest wait
    net.run_until_idle()
    q = _queue(net, "flow")
    assert q.count == FLOW_CREDIT + 40
    assert p.paused and not c.paused
    _publish(p, 20, start=FLOW_CREDIT + 50)  # not read while paused
    net.run_until_idle()
    assert q.count == FLOW_CREDIT + 40
    got = 0
    while p.paused:
        batch = messages(c)
        assert batch, "the consumer drained the queue but the publisher stayed paused"
        for m in batch:
            ack(c, m)
            got += 1
        net.run_until_idle()
    # resumed once the ready messages were down to half the credit, not before
    assert got >= FLOW_CREDIT + 40 - FLOW_CREDIT // 2
    while batch := messages(c):  # everything, the 20 held back included, arrives in order
        for m in batch:
            ack(c, m)
            got += 1
        net.run_until_idle()
    assert got == FLOW_CREDIT + 70
    assert not p.paused and net.broker._flow == {}


def test_queue_without_consumers_does_not_pause_its_publisher():
    net = new_net()
    p = connected(net)
    _publish(p, 2 * FLOW_CREDIT)
    net.run_until_idle()
    _publish(p, 10, start=2 * FLOW_CREDIT)
    net.run_until_idle()
    assert not p.paused and _queue(net, "flow").count == 2 * FLOW_CREDIT + 10


def test_paused_publisher_resumed_when_the_consumer_leaves_and_forgotten_when_it_goes():
    net = new_net()
    c, p, p2 = connected(net), connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    net.run_until_idle()
    _publish(p, FLOW_CREDIT + 5)
    _publish(p2, FLOW_CREDIT + 5, start=FLOW_CREDIT + 5)
    net.run_until_idle()
    assert p.paused and p2.paused
    p2.drop()
    net.run_until_idle()
    assert [s.conn_id for waiting in net.broker._flow.values() for s in waiting] == [p.conn_id]
    c.drop()  # no consumer left: nothing to wait for
    net.run_until_idle()
    assert not p.paused and net.broker._flow == {}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), min_size=1, max_size=12),
       st.integers(1, 50))
def test_credit_flow_never_loses_reorders_or_sticks(steps, prefetch):
    """Any interleaving of publish bursts and consumer acks: a paused publisher is paused on a queue
    that was over its credit, every message arrives once and in order, and nothing stays paused."""
    net = new_net()
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": str(prefetch)})
    net.run_until_idle()
    q = _queue(net, "flow")
    sent, got, unacked = 0, [], []
    for burst, acks in steps:
        _publish(p, burst, start=sent)
        sent += burst
        net.run_until_idle()
        if p.paused:
            assert q.count > FLOW_CREDIT // 2
        unacked += messages(c)
        for m in unacked[:acks]:
            got.append(m.body)
            ack(c, m)
        del unacked[:acks]
        net.run_until_idle()
    while unacked or (unacked := messages(c)):
        for m in unacked:
            got.append(m.body)
            ack(c, m)
        unacked = []
        net.run_until_idle()
    assert got == [b"m%d" % i for i in range(sent)]
    assert q.count == 0 and not p.paused and net.broker._flow == {}
