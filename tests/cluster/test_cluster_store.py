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
