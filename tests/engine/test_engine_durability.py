"""Receipts held until the store synced, group commit, sync failures, crash and recovery."""

import random

from enginetest_helpers import bodies, connected, errors, messages, new_net, receipts, send, subscribe

from engine import Broker, Config, MemoryStore, Sync, Write
from engine.testing import FakeStore, SimNetwork
from stompproto import Disconnect, Receipt, Send


def test_persistent_send_receipt_waits_for_sync():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    p = connected(net)
    net.complete_syncs()
    p.events()
    send(p, "/queue/d", b"keep", persistent="true", receipt="r1")
    net.run_until_idle()
    assert receipts(p) == []
    assert net.pending_syncs
    net.complete_syncs()
    assert [r.headers["receipt-id"] for r in receipts(p)] == ["r1"]


def test_non_persistent_receipt_is_immediate_but_ordered_behind_held():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    p = connected(net)
    send(p, "/queue/d", b"", receipt="declare")  # declaring the durable queue is a store write
    net.run_until_idle()
    net.complete_syncs()
    p.events()
    send(p, "/topic/t", b"transient", receipt="t1")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in receipts(p)] == ["t1"]
    send(p, "/queue/d", b"p", persistent="true", receipt="p1")
    send(p, "/topic/t", b"transient", receipt="t2")
    net.run_until_idle()
    assert receipts(p) == []  # t2 queues behind p1 to keep receipt order
    net.complete_syncs()
    assert [r.headers["receipt-id"] for r in receipts(p)] == ["p1", "t2"]


def test_group_commit_one_sync_per_drain():
    store = FakeStore(needs_sync=True)
    broker = Broker(Config(), store, random.Random(0))
    net = SimNetwork(broker, seed=0, auto_sync=False)
    p = connected(net)
    net.complete_syncs()
    p.events()
    data = b"".join(
        p.conn.send(Send({"destination": "/queue/d", "persistent": "true", "receipt": f"r{i}"}, b"x"), net.now)
        for i in range(20)
    )
    broker.data_received(p.conn_id, data, net.now)
    actions = broker.drain()
    syncs = [a for a in actions if isinstance(a, Sync)]
    assert len(syncs) == 1
    assert not any(isinstance(a, Write) for a in actions)  # every receipt held
    assert broker.drain() == []
    store.sync(syncs[0].token)
    broker.synced(syncs[0].token, net.now)
    [w] = broker.drain()
    assert w.data.count(b"RECEIPT") == 20


def test_memory_store_emits_no_sync():
    net = new_net(store=MemoryStore())
    p = connected(net)
    send(p, "/queue/d", b"x", persistent="true", receipt="r")
    net.run_until_idle()
    assert receipts(p)
    assert not any(entry[0] == "sync" for entry in net.log)


def test_disconnect_receipt_waits_for_sync_then_closes():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    p = connected(net)
    send(p, "/queue/d", b"x", persistent="true")
    p.send(Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    assert not p.server_closed and receipts(p) == []
    net.complete_syncs()
    assert [r.headers["receipt-id"] for r in receipts(p)] == ["bye"]
    assert p.server_closed


def test_failed_sync_errors_waiting_connection_only():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    p, other = connected(net), connected(net)
    net.complete_syncs()
    send(p, "/queue/d", b"x", persistent="true", receipt="r")
    net.run_until_idle()
    store.fail_next_sync()
    net.complete_syncs()
    assert p.server_closed and errors(p)[0].headers["message"] == "store failure"
    assert not any(isinstance(e, Receipt) for e in p.received)
    assert not other.server_closed


def test_crash_keeps_only_synced_messages():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store, auto_sync=False)
    p = connected(net)
    send(p, "/queue/d", b"synced", persistent="true")
    send(p, "/queue/d", b"transient")  # not persistent: never stored
    net.run_until_idle()
    net.complete_syncs()
    send(p, "/queue/d", b"unsynced", persistent="true")
    net.run_until_idle()
    survivor = store.crash()
    net2 = new_net(store=survivor)
    c = connected(net2)
    subscribe(c, "/queue/d", "1")
    net2.run_until_idle()
    assert bodies(c) == [b"synced"]


def test_recovery_restores_durable_subscription_and_delivery_count():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store)
    a, p = connected(net), connected(net)
    subscribe(a, "/topic/news", "keep", durable="true")
    subscribe(a, "/queue/jobs", "j", ack="client-individual")
    net.run_until_idle()
    a.drop()
    net.run_until_idle()
    send(p, "/topic/news", b"n1", persistent="true")
    send(p, "/queue/jobs", b"j1", persistent="true")
    net.run_until_idle()
    c = connected(net)
    subscribe(c, "/queue/jobs", "j", ack="client-individual")
    net.run_until_idle()
    assert bodies(c) == [b"j1"]
    c.drop()  # unacked: back with delivery count 1
    net.run_until_idle()
    net2 = new_net(store=store.crash())
    b = connected(net2)
    subscribe(b, "/topic/news", "keep", durable="true")
    subscribe(b, "/queue/jobs", "j", ack="client-individual")
    net2.run_until_idle()
    got = {m.headers["subscription"]: m for m in messages(b)}
    assert got["keep"].body == b"n1"
    assert got["j"].body == b"j1" and got["j"].headers["x-delivery-count"] == "1"
    # new message ids continue after the recovered ones
    send(b, "/queue/jobs", b"j2", persistent="true")
    net2.run_until_idle()
    ids = [m.message.id for m in net2.broker.store.recover().messages[("/", "jobs")]]
    assert len(ids) == len(set(ids))


def test_store_write_failure_errors_the_sender_only():
    store = FakeStore(needs_sync=True)
    net = new_net(store=store)
    p, c = connected(net), connected(net)
    subscribe(c, "/queue/d", "1")
    net.run_until_idle()
    store.fail_next_write()
    send(p, "/queue/d", b"lost", persistent="true", receipt="r")
    net.run_until_idle()
    assert p.server_closed and errors(p)[0].headers["message"] == "store failure"
    assert errors(p)[0].headers["receipt-id"] == "r"  # names the SEND that was refused
    assert not any(isinstance(e, Receipt) for e in p.received)
    q = connected(net)
    send(q, "/queue/d", b"ok", persistent="true")
    net.run_until_idle()
    assert bodies(c) == [b"ok"]


def test_chunked_transfer_gives_same_events_as_whole():
    def run(max_chunk):
        net = new_net(max_chunk=max_chunk)
        a, p = connected(net), connected(net)
        subscribe(a, "/queue/q", "1", ack="client", receipt="s")
        for i in range(5):
            send(p, "/queue/q", b"body %d" % i * 7, receipt=f"r{i}", x_h="v:\\n")
        net.run_until_idle()
        return a.received, p.received

    assert run(None) == run(1) == run(5)
