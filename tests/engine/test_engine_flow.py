"""Credit flow: a publisher is not read while a queue it publishes to is over its credit (ready
messages the consumers have not taken yet), and is read again once the queue drains to half."""

from enginetest_helpers import ack, amqp, bodies, connected, messages, new_net, send, subscribe, unsubscribe
from hypothesis import given, settings
from hypothesis import strategies as st

from amqpproto import spec
from engine._broker import FLOW_CREDIT
from engine._session import SUBSCRIPTION_BYTES
from engine.config import Config, Limits


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


# -- the credit as a config key, several publishers and queues, deletion, cancel, the clock -----------


def _net(credit):
    return new_net(Config(limits=Limits(flow_credit=credit)))


def _drain(c, until=lambda: False):
    """Ack what the consumer has until ``until()`` holds or nothing more comes; the bodies, in order."""
    got = []
    while not until() and (batch := messages(c)):
        for m in batch:
            ack(c, m)
            got.append(m.body)
        c.net.run_until_idle()
    return got


def test_credit_is_the_flow_credit_limit_and_zero_turns_it_off():
    net = _net(30)
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    net.run_until_idle()
    _publish(p, 31)  # the consumer holds 1, 30 wait: at the credit
    net.run_until_idle()
    assert p.paused and _queue(net, "flow").count == 30
    got = _drain(c, until=lambda: not p.paused)
    assert _queue(net, "flow").count <= 15 and len(got) >= 15  # resumed at half, not before

    off = _net(0)
    c, p = connected(off), connected(off)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    off.run_until_idle()
    _publish(p, 10 * FLOW_CREDIT)
    off.run_until_idle()
    assert not p.paused and _queue(off, "flow").count == 10 * FLOW_CREDIT - 1 and off.broker._flow == {}


def test_several_publishers_to_one_queue_pause_together_and_resume_together():
    net = _net(40)
    c = connected(net)
    ps = [connected(net) for _ in range(3)]
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "5"})
    net.run_until_idle()
    for i, p in enumerate(ps):  # each publisher's burst crosses the credit on its own
        for n in range(50):
            send(p, "/queue/flow", b"p%d-%d" % (i, n))
        net.run_until_idle()
    q = _queue(net, "flow")
    assert all(p.paused for p in ps) and set(net.broker._flow[q]) == {net.broker.sessions[p.conn_id] for p in ps}
    got = _drain(c)
    assert not any(p.paused for p in ps) and net.broker._flow == {} and q.count == 0
    for i in range(3):  # nothing lost, each publisher's messages in its own order
        assert [b for b in got if b.startswith(b"p%d-" % i)] == [b"p%d-%d" % (i, n) for n in range(50)]


def test_publisher_to_several_queues_is_paused_by_the_one_over_credit():
    net = _net(20)
    slow, fast, p = connected(net), connected(net), connected(net)
    subscribe(slow, "/queue/slow", "s", ack="client-individual", **{"prefetch-count": "1"})
    subscribe(fast, "/queue/fast", "f", ack="auto")
    net.run_until_idle()
    for n in range(30):
        send(p, "/queue/fast", b"f%d" % n)
        send(p, "/queue/slow", b"s%d" % n)
    net.run_until_idle()
    slow_q, fast_q = _queue(net, "slow"), _queue(net, "fast")
    assert p.paused and list(net.broker._flow) == [slow_q] and fast_q.count == 0
    assert bodies(fast) == [b"f%d" % n for n in range(30)]  # the queue that keeps up is not held back
    send(p, "/queue/fast", b"late")  # not read while paused, whichever queue it goes to
    net.run_until_idle()
    assert bodies(fast) == []
    got = _drain(slow)
    assert got == [b"s%d" % n for n in range(30)] and not p.paused
    assert bodies(fast) == [b"late"]


def test_queue_deleted_while_its_publisher_is_paused_resumes_the_publisher():
    net = _net(20)
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    net.run_until_idle()
    _publish(p, 30)
    net.run_until_idle()
    assert p.paused
    admin = amqp(net)
    assert isinstance(admin.call(spec.QueueDelete(queue="flow", channel=1)), spec.QueueDeleteOk)
    net.run_until_idle()
    assert not p.paused and net.broker._flow == {}
    _publish(p, 5, start=30)  # read again: the queue is made anew by the next SEND
    net.run_until_idle()
    assert _queue(net, "flow").count == 5 and not p.paused


def test_consumer_that_cancels_resumes_the_publisher_only_when_none_is_left():
    net = _net(20)
    c1, c2, p = connected(net), connected(net), connected(net)
    for c in (c1, c2):
        subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    net.run_until_idle()
    _publish(p, 30)
    net.run_until_idle()
    assert p.paused
    unsubscribe(c1, "s")
    net.run_until_idle()
    assert p.paused  # c2 still consumes: the queue must drain first
    unsubscribe(c2, "s")
    net.run_until_idle()
    assert not p.paused and net.broker._flow == {}  # no consumer: left to paging and the alarm
    _publish(p, 3 * 20, start=30)
    net.run_until_idle()
    assert not p.paused and _queue(net, "flow").count == 30 + 3 * 20  # c1 and c2 gave theirs back


def test_paused_publisher_stays_paused_and_connected_while_the_clock_runs():
    """Time alone releases nothing (only draining does), and a publisher we do not read is not
    closed for heart-beats we did not read."""
    net = _net(20)
    c, p = connected(net), connected(net, headers={"heart-beat": "1000,1000"})
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "1"})
    net.run_until_idle()
    _publish(p, 30)
    net.run_until_idle()
    assert p.paused
    net.advance(120.0)
    assert p.paused and p.conn_id in net.broker.sessions
    assert _drain(c) == [b"m%d" % i for i in range(30)]
    assert not p.paused
    _publish(p, 1, start=30)
    net.run_until_idle()
    assert bodies(c) == [b"m30"]


# -- the memory alarm stays the last line of defence, where credit cannot help -----------------------


def _alarm_net(credit=20):
    # 20 KB of bodies, plus what the one subscription counts
    return new_net(Config(limits=Limits(flow_credit=credit, memory_high_watermark=20 * 1024 + SUBSCRIPTION_BYTES)))


def test_memory_alarm_blocks_a_publisher_to_a_queue_without_consumers():
    net = _alarm_net()
    p = connected(net)
    for _n in range(30):  # 30 KB into a queue no one reads: credit does not apply
        send(p, "/queue/flow", b"x" * 1024)
        net.run_until_idle()
    assert net.broker.mem_alarm and p.paused and net.broker._flow == {}
    assert _queue(net, "flow").count <= 21  # blocked as soon as it passed the watermark
    c = connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual", **{"prefetch-count": "5"})
    net.run_until_idle()
    got = _drain(c)  # the held-back SENDs are read once the alarm clears, and drained too
    assert len(got) == 30 and not net.broker.mem_alarm and not p.paused


def test_memory_alarm_blocks_a_publisher_whose_consumer_holds_everything_unacked():
    """Unlimited prefetch: every message is delivered at once, so no queue holds ready messages over
    its credit, but the unacknowledged bodies still count against the watermark."""
    net = _alarm_net()
    c, p = connected(net), connected(net)
    subscribe(c, "/queue/flow", "s", ack="client-individual")
    net.run_until_idle()
    for _n in range(40):
        send(p, "/queue/flow", b"x" * 1024)
        net.run_until_idle()
    q = _queue(net, "flow")
    assert q.count == 0 and net.broker._flow == {}  # nothing ready: credit is not what stops it
    assert net.broker.mem_alarm and p.paused
    held = messages(c)
    assert 20 <= len(held) <= 21
    for m in held:
        ack(c, m)
    net.run_until_idle()
    assert not net.broker.mem_alarm and not p.paused
