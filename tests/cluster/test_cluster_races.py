"""Races of leadership on a real ClusterStore (PostgreSQL), one node's broker driven in-process so
the interleaving is forced: the heartbeat thread's findings are applied on the "loop" only when the
test says so, with publishes and syncs in between, exactly as the threads of a node could run them.

The race found by the chaos run's analysis: a node that lost a queue's lease (paused past it, or
fenced) and takes the same queue over again in a later heartbeat still holds the queue's stale state
in memory until the loop applies that heartbeat. If the new epoch counted as this node's before the
loop had dropped the stale state and loaded the queue, (1) a publish into the stale queue committed
under the new epoch after the takeover had read the queue back, was confirmed, and was then forgotten
by the step-down and missing from what the takeover loaded; (2) the step-down's forgetting of the
stale entries deleted their rows from the database (the node led the queue again, so its removes
passed the fence): confirmed messages lost for good.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from engine import Config
from engine._broker import Broker
from engine._message import Message
from engine.storage.postgres.cluster import ClusterStore
from engine.store import StoreError
from servers._run import make_broker
from servers.cluster.node import ClusterNode, attach_cluster

Q = ("/", "q")


@pytest.fixture
def node_a(pg_dsn: str) -> Iterator[tuple[Broker, ClusterStore]]:
    store = ClusterStore(pg_dsn, "a", lease=60.0)
    broker = make_broker(Config(), store=store)
    attach_cluster(broker, store)
    model = broker.model
    model.declare_queue(model.vhosts["/"], "q", durable=True)
    store.sync(0)
    try:
        yield broker, store
    finally:
        store.close()


def _publish(broker: Broker, body: bytes) -> bool:
    """A persistent message into q, then the sync its confirm waits for: True = confirmed."""
    model = broker.model
    q = model.vhosts["/"].queues["q"]
    msg = Message(model.next_message_id(), "", "q", {}, body, persistent=True)
    try:
        model.publisher.enqueue(q, msg)
        broker.store.sync(0)
    except StoreError:
        return False
    return True


def _moved_to_b_and_expired(dsn: str) -> None:
    """Node b took q over (epoch + 1) and its lease ran out (b was killed): q is free to take."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE sansmq.leases SET leader = 'b', epoch = epoch + 1,"
                     " expires = now() - interval '1 second'")


def _stored(dsn: str) -> list[bytes]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT m.payload FROM sansmq.queue_messages qm JOIN sansmq.messages m"
                            " ON m.id = qm.msg_id ORDER BY qm.seq").fetchall()
    return [bytes(r[0]) for r in rows]


def _leader(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT leader FROM sansmq.leases").fetchone()
    return "" if row is None else str(row[0])


def _in_memory(broker: Broker) -> list[bytes]:
    q = broker.model.vhosts["/"].queues["q"]
    out = []
    while (entry := q.pop()) is not None:
        out.append(entry.msg.body)
    return out


def test_taking_a_queue_back_never_deletes_its_stored_messages(node_a, pg_dsn: str) -> None:
    broker, store = node_a
    assert _publish(broker, b"m1") and _publish(broker, b"m2")
    _moved_to_b_and_expired(pg_dsn)
    hb = store.heartbeat()  # the upkeep thread: q lost at our epoch, taken again at a new one
    assert Q in hb.lost and [m.message.body for m in hb.acquired[Q]] == [b"m1", b"m2"]
    broker.run_command(lambda b: ClusterNode._apply_heartbeat(b, hb), 0.0)  # the loop, later
    store.sync(0)
    assert _in_memory(broker) == [b"m1", b"m2"]
    assert sum(body.endswith(b"m1") or body.endswith(b"m2") for body in _stored(pg_dsn)) == 2


def test_a_publish_into_the_stale_queue_before_the_takeover_applies_is_never_confirmed_and_lost(
        node_a, pg_dsn: str) -> None:
    broker, store = node_a
    assert _publish(broker, b"m1")
    _moved_to_b_and_expired(pg_dsn)
    hb = store.heartbeat()
    confirmed = _publish(broker, b"m2")  # the loop, before it hears of the heartbeat
    broker.run_command(lambda b: ClusterNode._apply_heartbeat(b, hb), 0.0)
    store.sync(0)
    expected = [b"m1", b"m2"] if confirmed else [b"m1"]
    assert _in_memory(broker) == expected  # whatever was confirmed is in the queue
    assert sum(any(body.endswith(e) for e in expected) for body in _stored(pg_dsn)) == len(expected)


def test_a_node_stalled_inside_a_transaction_does_not_keep_its_queues_from_the_others(pg_dsn: str) -> None:
    """A node paused (SIGSTOP, a VM pause) in the middle of its heartbeat's transaction holds its
    lease rows locked: the others' takeover skips locked rows, so without a bound on an idle
    transaction its queues would get no new leader until it resumed."""
    import time

    a = ClusterStore(pg_dsn, "a", lease=1.0)
    broker = make_broker(Config(), store=a)
    attach_cluster(broker, a)
    broker.model.declare_queue(broker.model.vhosts["/"], "q", durable=True)
    a.sync(0)
    stalled = a._upkeep_conn()
    stalled.execute("BEGIN")
    stalled.execute(a._csql["lease_renew"], {"me": "a", "lease": 1.0})  # ...and the node stops here
    b = ClusterStore(pg_dsn, "b", lease=1.0)  # a joining node takes expired leases as it starts
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            b.heartbeat()  # ...or in a later membership round
            if _leader(pg_dsn) == "b" and b.led:
                break
            time.sleep(0.2)
        else:
            pytest.fail("node b never took over the queue of the stalled node a")
    finally:
        b.close()
        a.close()
