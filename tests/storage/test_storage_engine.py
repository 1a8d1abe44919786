"""The broker over a real durable store: what survives a restart, and what the client is told.

The durability tests take ``store_factory`` and run once per store (segment files, PostgreSQL);
the last ones inject disk faults into the segment store (PostgreSQL faults: test_postgres_store.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from storagetest_helpers import FaultyStore, connected, new_net, send, split, subscribe

from amqpproto import BasicProperties, spec
from engine.segment_store import SegmentStore
from stompproto import Ack, Nack


def restart(net, stores, **kw):
    """Drop the broker; reopen its store (a directory or a database)."""
    net.broker.store.close()
    return new_net(stores.open(**kw))


def test_persistent_messages_in_durable_queues_survive_in_order(store_factory) -> None:
    net = new_net(store_factory.open())
    p = connected(net)
    for i in range(5):
        send(p, "/queue/a", b"p%d" % i, persistent="true", receipt=f"r{i}")
    send(p, "/queue/a", b"transient")  # not persistent: gone after restart
    send(p, "/topic/t", b"nobody")
    net.run_until_idle()
    _, rcpts, errs = split(p.events())
    assert [r.headers["receipt-id"] for r in rcpts] == [f"r{i}" for i in range(5)] and not errs
    net = restart(net, store_factory)
    c = connected(net)
    subscribe(c, "/queue/a", "s", ack="client-individual")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert [m.body for m in msgs] == [b"p%d" % i for i in range(5)]


def test_acked_messages_do_not_come_back_and_redelivery_survives(store_factory) -> None:
    net = new_net(store_factory.open())
    p = connected(net)
    for i in range(4):
        send(p, "/queue/b", b"m%d" % i, persistent="true", receipt=f"r{i}")
    c = connected(net)
    subscribe(c, "/queue/b", "s", ack="client-individual")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert len(msgs) == 4
    c.send(Ack({"id": msgs[0].headers["ack"], "receipt": "a0"}))
    c.send(Nack({"id": msgs[1].headers["ack"]}))  # back to the queue, delivered again
    net.run_until_idle()
    again, rcpts, _ = split(c.events())
    assert [m.body for m in again] == [b"m1"] and [r.headers["receipt-id"] for r in rcpts] == ["a0"]
    net = restart(net, store_factory)
    c = connected(net)
    subscribe(c, "/queue/b", "s", ack="client-individual")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert [m.body for m in msgs] == [b"m1", b"m2", b"m3"]  # m0 acked: gone for good
    assert msgs[0].headers.get("redelivered") == "true"
    assert msgs[1].headers.get("redelivered") in (None, "false")


def test_priority_and_expiry_survive(store_factory) -> None:
    net = new_net(store_factory.open())
    p = connected(net)
    start = net.now
    send(p, "/queue/p", b"low", persistent="true", priority="1")
    send(p, "/queue/p", b"high", persistent="true", priority="7")
    send(p, "/queue/p", b"short", persistent="true", expires=str(int((start + 5) * 1000)))
    send(p, "/queue/p", b"", receipt="r")
    net.run_until_idle()
    net = restart(net, store_factory)
    net.advance(60)  # the new broker's clock: "short" expired meanwhile
    c = connected(net)
    subscribe(c, "/queue/p", "s")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert [m.body for m in msgs] == [b"high", b"low"]


def test_durable_entities_survive_non_durable_do_not(store_factory) -> None:
    net = new_net(store_factory.open())
    p = connected(net)
    subscribe(p, "/topic/news.*", "dur", durable="true")  # durable topic subscription
    subscribe(p, "/temp-queue/t", "tmp")
    net.run_until_idle()
    p.send(__import__("stompproto").Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    q = connected(net)
    send(q, "/topic/news.x", b"while away", persistent="true", receipt="r")
    net.run_until_idle()
    assert split(q.events())[1]
    vh = net.broker.model.vhosts["/"]
    durable = {name for name, qq in vh.queues.items() if qq.durable}
    net = restart(net, store_factory)
    vh2 = net.broker.model.vhosts["/"]
    assert set(vh2.queues) == durable and durable
    c = connected(net)
    subscribe(c, "/topic/news.*", "dur", durable="true")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert [m.body for m in msgs] == [b"while away"]


def test_sync_off_writes_before_confirming_but_never_fsyncs(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path, sync=False)
    store.fail_fsyncs = -1  # any fsync would fail the receipt
    net = new_net(store, auto_sync=False)
    p = connected(net)
    send(p, "/queue/o", b"x", persistent="true", receipt="r")
    net.run_until_idle()
    assert not split(p.events())[1]  # held until the data is handed to the OS
    net.complete_syncs()
    assert split(p.events())[1]
    segs = sorted((tmp_path / "segments").iterdir())
    assert b"x" in segs[-1].read_bytes()  # written (no fsync), so a killed process loses nothing
    os.close(store._lock_fd)  # the process "dies": no close(), no flush; only the flock goes
    store._lock_fd = -1
    net = new_net(SegmentStore(tmp_path))
    c = connected(net)
    subscribe(c, "/queue/o", "s")
    net.run_until_idle()
    assert [m.body for m in split(c.events())[0]] == [b"x"]


def test_enospc_refuses_publishers_keeps_consumers(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path)
    net = new_net(store)
    p = connected(net)
    c = connected(net)
    subscribe(c, "/queue/e", "s", ack="client-individual")
    send(p, "/queue/e", b"before", persistent="true", receipt="r0")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in split(p.events())[1]] == ["r0"]
    (before,), _, _ = split(c.events())
    store.fail_writes = -1  # the disk is full from now on
    send(p, "/queue/e", b"lost?", persistent="true", receipt="r1")
    net.run_until_idle()
    _, rcpts, errs = split(p.events())
    assert not rcpts and errs and "store" in errs[0].headers["message"]
    # the consumer still gets served: the message is delivered, its ack accepted
    c.send(Ack({"id": before.headers["ack"]}))
    net.run_until_idle()
    assert not split(c.events())[2]
    p2 = connected(net)
    send(p2, "/queue/e", b"refused", persistent="true", receipt="r2")
    net.run_until_idle()
    _, rcpts, errs = split(p2.events())
    assert not rcpts and errs and "No space" in errs[0].body.decode()
    store.fail_writes = 0  # space freed: publishing works again
    p3 = connected(net)
    send(p3, "/queue/e", b"after", persistent="true", receipt="r3")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in split(p3.events())[1]] == ["r3"]
    store.close()
    net = new_net(SegmentStore(tmp_path))
    c = connected(net)
    subscribe(c, "/queue/e", "s")
    net.run_until_idle()
    got = [m.body for m in split(c.events())[0]]
    assert b"after" in got and b"before" not in got and b"refused" not in got


def test_fsync_failure_never_confirms(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path)
    net = new_net(store)
    p = connected(net)
    send(p, "/queue/f", b"", receipt="declared")
    net.run_until_idle()
    p.events()
    store.fail_fsyncs = 1
    send(p, "/queue/f", b"x", persistent="true", receipt="r1")
    net.run_until_idle()
    _, rcpts, errs = split(p.events())
    assert not rcpts and errs
    p2 = connected(net)  # the next sync fsyncs the files again and succeeds
    send(p2, "/queue/f", b"y", persistent="true", receipt="r2")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in split(p2.events())[1]] == ["r2"]


def test_recovered_backlog_bodies_stay_on_disk(tmp_path: Path) -> None:
    net = new_net(SegmentStore(tmp_path))
    p = connected(net)
    for i in range(50):
        send(p, "/queue/big", b"%d-" % i + b"z" * 1000, persistent="true", receipt=f"r{i}")
    net.run_until_idle()
    net.broker.store.close()
    store = SegmentStore(tmp_path, memory_bodies=10_000)  # ~10 bodies in memory, the rest lazy
    net = new_net(store)
    q = net.broker.model.vhosts["/"].queues["big"]
    entries = q.ready_entries()
    lazy = [e for e in entries if type(e.msg).__name__ == "_LazyBodyMessage"]
    assert 35 <= len(lazy) <= 41
    c = connected(net)
    subscribe(c, "/queue/big", "s", ack="client-individual")
    net.run_until_idle()
    msgs, _, _ = split(c.events())
    assert [m.body for m in msgs] == [b"%d-" % i + b"z" * 1000 for i in range(50)]
    for m in msgs:
        c.send(Ack({"id": m.headers["ack"], "receipt": "a" + m.headers["ack"]}))
    net.run_until_idle()
    assert len(split(c.events())[1]) == 50
    net.advance(1)
    send(c, "/queue/other", b"", receipt="x")  # another sync: the emptied old segment goes
    net.run_until_idle()
    assert len(list((tmp_path / "segments").iterdir())) == 1


def _amqp_publisher(net: Any) -> Any:
    c = net.connect(protocol="amqp")
    c.amqp_open()
    c.open_channel(1)
    c.call(spec.QueueDeclare(queue="a", durable=True, channel=1))
    c.call(spec.ConfirmSelect(channel=1))
    return c


def _publish(c: Any, body: bytes) -> None:
    c.send(spec.BasicPublish(exchange="", routing_key="a", properties=BasicProperties(delivery_mode=2),
                             body=body, channel=1))
    c.net.run_until_idle()


def test_amqp_confirms_become_nacks_when_the_disk_fails(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path)
    net = new_net(store)
    c = _amqp_publisher(net)
    _publish(c, b"ok")
    assert [(a.delivery_tag, a.multiple) for a in c.of(spec.BasicAck, 1)] == [(1, False)]
    store.fail_writes = -1  # the disk is full: refused at once
    _publish(c, b"refused")
    assert [n.delivery_tag for n in c.of(spec.BasicNack, 1)] == [2]
    store.fail_writes = 0
    store.fail_fsyncs = 1  # written, but the fsync that should cover it fails
    _publish(c, b"unsynced")
    assert [n.delivery_tag for n in c.of(spec.BasicNack, 1)] == [2, 3]
    _publish(c, b"after")  # the next sync succeeds: the channel was never closed
    assert [a.delivery_tag for a in c.of(spec.BasicAck, 1)] == [1, 4]
    assert not c.of(spec.ChannelClose) and not c.of(spec.ConnectionClose)


def test_amqp_publish_without_confirms_on_a_failed_disk_closes_with_541(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path)
    net = new_net(store)
    c = net.connect(protocol="amqp")
    c.amqp_open()
    c.open_channel(1)
    c.call(spec.QueueDeclare(queue="a", durable=True, channel=1))
    store.fail_writes = -1
    _publish(c, b"lost")  # nothing to tell an unconfirmed publisher: its write fails at the sync
    assert c.last(spec.ConnectionClose) is None
    _publish(c, b"refused")  # refused at once now: nobody to nack, so the connection closes
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 541
