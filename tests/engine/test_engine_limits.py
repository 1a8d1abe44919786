"""Per-connection bounds: subscriptions, open transactions (count, frames, bytes) and receipts held
for the store. A breach closes that connection only (ERROR first), or pauses reading it."""

from enginetest_helpers import bodies, connected, errors, new_net, send, subscribe, unsubscribe

from engine import Config, Limits
from engine._session import SUBSCRIPTION_BYTES
from engine.testing import FakeStore
from stompproto import Abort, Begin, Commit, Disconnect, Receipt


def _limits(**kw):
    return Config(limits=Limits(**kw))


def test_subscription_cap_closes_only_the_greedy_connection():
    net = new_net(_limits(max_subscriptions=3))
    greedy, other, p = connected(net), connected(net), connected(net)
    subscribe(greedy, "/queue/a", "1")
    subscribe(greedy, "/topic/b", "2")
    subscribe(greedy, "/topic/c.*", "3")
    net.run_until_idle()
    assert errors(greedy) == []
    subscribe(greedy, "/topic/d", "4", receipt="r4")
    net.run_until_idle()
    [err] = errors(greedy)
    assert err.headers["message"] == "Too many subscriptions" and err.headers["receipt-id"] == "r4"
    assert greedy.server_closed
    subscribe(other, "/topic/b", "1")
    net.run_until_idle()
    send(p, "/topic/b", b"still works")
    net.run_until_idle()
    assert bodies(other) == [b"still works"]
    # the closed connection left nothing bound behind
    vhost = net.broker.model.vhosts["/"]
    assert len(net.broker.model.route(vhost, vhost.exchanges["amq.topic"], "b", None)) == 1


def test_unsubscribe_frees_room_under_the_cap():
    net = new_net(_limits(max_subscriptions=1))
    c = connected(net)
    for i in range(3):
        subscribe(c, "/topic/x", f"s{i}")
        unsubscribe(c, f"s{i}")
    net.run_until_idle()
    assert errors(c) == [] and not c.server_closed


def test_temp_queues_count_as_subscriptions():
    net = new_net(_limits(max_subscriptions=2))
    c = connected(net)
    send(c, "/queue/rpc", b"", reply_to="/temp-queue/a")
    send(c, "/queue/rpc", b"", reply_to="/temp-queue/a")  # the same one again: no new subscription
    send(c, "/queue/rpc", b"", reply_to="/temp-queue/b")
    net.run_until_idle()
    assert errors(c) == []
    send(c, "/queue/rpc", b"", reply_to="/temp-queue/c")
    net.run_until_idle()
    assert errors(c)[0].headers["message"] == "Too many subscriptions"
    queues = net.broker.model.vhosts["/"].queues
    assert not [n for n in queues if n.startswith("amq.gen-")]  # torn down with the connection


def test_open_transaction_cap():
    net = new_net(_limits(max_transactions=2))
    c = connected(net)
    c.send(Begin({"transaction": "t1"}))
    c.send(Begin({"transaction": "t2"}))
    c.send(Abort({"transaction": "t1"}))
    c.send(Begin({"transaction": "t3"}))  # t1 ended: room again
    net.run_until_idle()
    assert errors(c) == []
    c.send(Begin({"transaction": "t4", "receipt": "b4"}))
    net.run_until_idle()
    [err] = errors(c)
    assert err.headers["message"] == "Too many transactions" and err.headers["receipt-id"] == "b4"
    assert c.server_closed


def test_transaction_frame_cap_discards_the_transaction():
    net = new_net(_limits(max_tx_frames=3))
    c, watcher = connected(net), connected(net)
    subscribe(watcher, "/queue/tx", "1")
    net.run_until_idle()
    c.send(Begin({"transaction": "t"}))
    for i in range(3):
        send(c, "/queue/tx", b"%d" % i, transaction="t")
    net.run_until_idle()
    assert errors(c) == []
    send(c, "/queue/tx", b"one too many", transaction="t")
    c.send(Commit({"transaction": "t"}))
    net.run_until_idle()
    assert errors(c)[0].headers["message"] == "Transaction too large"
    assert c.server_closed
    assert bodies(watcher) == []  # nothing of the transaction was published


def test_transaction_byte_cap():
    net = new_net(_limits(max_tx_bytes=1000))
    c = connected(net)
    c.send(Begin({"transaction": "t"}))
    send(c, "/queue/tx", b"x" * 600, transaction="t")
    net.run_until_idle()
    assert errors(c) == []
    send(c, "/queue/tx", b"x" * 600, transaction="t")
    net.run_until_idle()
    assert errors(c)[0].headers["message"] == "Transaction too large"


def test_committed_transaction_within_caps_still_works():
    net = new_net(_limits(max_tx_frames=2, max_tx_bytes=100))
    c, watcher = connected(net), connected(net)
    subscribe(watcher, "/queue/tx", "1")
    net.run_until_idle()
    for round_ in range(3):  # the caps are per transaction, not per connection lifetime
        c.send(Begin({"transaction": "t"}))
        send(c, "/queue/tx", b"a%d" % round_, transaction="t")
        send(c, "/queue/tx", b"b%d" % round_, transaction="t")
        c.send(Commit({"transaction": "t"}))
    net.run_until_idle()
    assert errors(c) == []
    assert bodies(watcher) == [b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"]


def test_receipts_waiting_for_the_store_pause_reading_then_resume():
    store = FakeStore(needs_sync=True)
    net = new_net(_limits(max_pending_receipts=4), store=store, auto_sync=False)
    p = connected(net)
    send(p, "/queue/d", b"", receipt="declare")
    net.run_until_idle()
    net.complete_syncs()
    p.events()
    session = net.broker.sessions[p.conn_id]
    for i in range(10):
        send(p, "/queue/d", b"%d" % i, persistent="true", receipt=f"r{i}")
        net.run_until_idle()
    assert p.paused and session.held_paused
    assert len(session.held) == 5  # the frame that crossed the limit, then nothing more was read
    net.complete_syncs()  # releases the 5; reading resumes and the rest arrive
    while net.pending_syncs:
        net.complete_syncs()
    got = [r.headers["receipt-id"] for r in p.received if isinstance(r, Receipt)]
    assert got[-10:] == [f"r{i}" for i in range(10)]
    assert not p.paused and not session.held_paused and session.held is None
    assert errors(p) == []


def test_no_subscription_cap_by_default():
    """As RabbitMQ: a connection may hold any number of subscriptions (it used to be refused
    the 10,001st); the memory alarm, not a cap, bounds what they cost."""
    net = new_net()
    c, p = connected(net), connected(net)
    n = 10_050
    for i in range(n):
        subscribe(c, f"/topic/k.{i}", f"s{i}")
    subscribe(c, "/queue/last", "q", receipt="r")
    net.run_until_idle()
    assert errors(c) == [] and not c.server_closed
    send(p, f"/topic/k.{n - 1}", b"to the last topic")
    send(p, "/queue/last", b"to the queue")
    net.run_until_idle()
    assert sorted(bodies(c)) == [b"to the last topic", b"to the queue"]


def test_subscriptions_count_in_the_memory_alarm():
    """Uncapped subscriptions raise the memory alarm (SUBSCRIPTION_BYTES each), which blocks
    publishers as RabbitMQ's memory watermark does; unsubscribing clears it."""
    net = new_net(_limits(memory_high_watermark=10 * SUBSCRIPTION_BYTES))
    greedy, p = connected(net), connected(net)
    send(p, "/queue/m", b"x")
    net.run_until_idle()
    for i in range(11):
        subscribe(greedy, f"/topic/t.{i}", f"s{i}")
    net.run_until_idle()
    assert net.broker.mem_alarm and net.broker.memory_used() >= 11 * SUBSCRIPTION_BYTES
    send(p, "/queue/m", b"y")
    net.run_until_idle()
    assert p.paused  # a publisher is blocked while the alarm is on
    for i in range(3):
        unsubscribe(greedy, f"s{i}")
    net.run_until_idle()
    assert not net.broker.mem_alarm and not p.paused
    greedy.send(Disconnect({}))
    net.run_until_idle()
    assert net.broker.memory_used() == net.broker.model.queued_bytes  # nothing left counted
