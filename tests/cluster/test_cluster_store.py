"""``ClusterStore`` on a real PostgreSQL, without node processes: two nodes declaring the same
durable queue before either heard of the other's declare (Celery workers starting together)."""

from __future__ import annotations

import psycopg
import pytest

from engine._message import Message
from engine.storage.postgres.cluster import ClusterStore
from engine.store import QueueDef, StoreError


def test_a_queue_declared_on_two_nodes_at_once_is_the_first_ones(pg_dsn: str) -> None:
    a, b = ClusterStore(pg_dsn, "a", lease=30), ClusterStore(pg_dsn, "b", lease=30)
    fenced: list[list[tuple[str, str]]] = []
    b.on_fenced = fenced.append
    try:
        a.recover()
        b.recover()
        for store in (a, b):
            store.add_queue(QueueDef("/", "tasks", args={"x-queue-type": "quorum"}))
        b.enqueue("/", "tasks", Message(b.first_message_id + 1, "", "tasks", {}, b"lost", persistent=True))
        a.sync(0)
        # b's declare lost the race: its queue, lease, change log entry and message are dropped,
        # its sync fails (the publisher is nacked, not confirmed) and it steps down from the queue
        with pytest.raises(StoreError, match="declared by another node first"):
            b.sync(0)
        assert fenced == [[("/", "tasks")]]
        b.sync(0)  # the rest of the batch commits: b's store is not wedged (it was, for good)
        b.add_queue(QueueDef("/", "other"))
        b.sync(0)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            queues = conn.execute("SELECT name, id >> 32 FROM sansmq.queues ORDER BY name").fetchall()
            leases = conn.execute("SELECT q.name, l.leader FROM sansmq.leases l JOIN sansmq.queues q"
                                  " ON q.id = l.queue ORDER BY q.name").fetchall()
            orphans = conn.execute("SELECT count(*) FROM sansmq.leases l WHERE NOT EXISTS"
                                   " (SELECT 1 FROM sansmq.queues q WHERE q.id = l.queue)").fetchone()
            adds = conn.execute("SELECT node, params::json->>'name' FROM sansmq.changes WHERE op = 'queue.add'"
                                " ORDER BY serial").fetchall()
            messages = conn.execute("SELECT count(*) FROM sansmq.queue_messages").fetchone()
        assert queues == [("other", b.number), ("tasks", a.number)]
        assert leases == [("other", "b"), ("tasks", "a")] and orphans == (0,)
        assert adds == [("a", "tasks"), ("b", "other")] and messages == (0,)
    finally:
        a.close()
        b.close()


def _stored(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM sansmq.queue_messages").fetchone()[0]  # type: ignore[index]


def test_a_dead_letter_for_another_leader_is_stored_there_before_its_removal_commits_here(pg_dsn: str) -> None:
    """At-least-once dead-lettering across nodes: the dead message's removal commits only once the
    dead letter's leader confirmed it; a failed send keeps both (the dead letter for the next sync,
    the removal until then), while a publisher's message of that sync is given up (nacked). The
    sync itself never waits for a leader: it hands the forwards over and commits."""
    a = ClusterStore(pg_dsn, "a", lease=30)
    try:
        a.recover()
        a.add_queue(QueueDef("/", "work", args={"x-queue-type": "quorum"}))
        for n in (1, 2):
            a.enqueue("/", "work", Message(a.first_message_id + n, "", "work", {}, b"poison", persistent=True))
        a.sync(0)
        handed: list[tuple[str, str, list]] = []
        a.dispatch = lambda leader, vhost, items: handed.append((leader, vhost, items))
        dead = Message(a.first_message_id + 3, "dlx", "", {"x-death": [{"reason": "delivery_limit"}]}, b"poison")
        a.forward(1, "b", "/", "dead", dead)  # as the model does: the dead letter, then the removal
        a.remove("/", "work", a.first_message_id + 1)
        a.sync(1)  # returns with the forward still unconfirmed: the removal waits, token 1 too
        assert [(leader, [i.msg for i in items]) for leader, _, items in handed] == [("b", [dead])]
        assert _stored(pg_dsn) == 2 and a.local_through == 1 and a.confirmed_through(1) == 0
        assert a.forwarded(handed.pop()[2], None).sync_needed  # the leader confirmed it
        assert a.confirmed_through(1) == 1
        a.sync(1)
        assert _stored(pg_dsn) == 1  # the removal committed once the dead letter was at its leader

        plain = Message(a.first_message_id + 4, "", "other", {}, b"published")
        a.forward(2, "b", "/", "other", plain)
        a.forward(2, "b", "/", "dead", dead)
        a.remove("/", "work", a.first_message_id + 2)
        a.forward(3, "b", "/", "other", plain)  # a later token's, taken early
        a.sync(2)
        assert a.confirmed_through(5) == 1
        outcome = a.forwarded(handed.pop()[2], StoreError("forwarding to cluster node b: connection refused"))
        assert outcome.failed_token == 3 and not outcome.sync_needed  # their publishers get a nack
        assert [item.msg for item in a._outbox] == [dead] and a.forwards_failed == 2
        assert a.confirmed_through(5) == 5
        a.sync(4)
        assert _stored(pg_dsn) == 1  # not removed: its dead letter is nowhere yet (a crash keeps it)
        assert a.confirmed_through(5) == 5  # the kept dead letter holds no publisher back
        a.forwarded(handed.pop()[2], None)  # the leader is back (or replaced): the kept dead letter went
        a.sync(5)
        assert not a._outbox and not handed and _stored(pg_dsn) == 0
    finally:
        a.close()
