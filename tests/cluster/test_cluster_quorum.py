"""Quorum queues across nodes (real node processes, pika): a queue declared on one node, published
to through a second and consumed through a third counts the returns made there towards its
delivery limit on its leader, dead-letters at least once into a queue led by yet another node, and
keeps its delivery counts through a kill -9 of its leader."""

from __future__ import annotations

from typing import Any

import psycopg
from clusterkit import LEASE, Node, Nodes, wait_for

QUORUM = {"x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": "dlx",
          "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def _stored_counts(nodes: Nodes, queue: str) -> list[int]:
    """The delivery counts of ``queue``'s messages as its leader committed them."""
    with psycopg.connect(nodes.dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT qm.delivery_count FROM sansmq.queue_messages qm"
                            " JOIN sansmq.queues q ON q.id = qm.queue WHERE q.name = %s ORDER BY qm.seq",
                            (queue,)).fetchall()
    return [r[0] for r in rows]


def _declare(a: Node, b: Node) -> None:
    """``work`` (quorum) led by a; its dead letters go to ``dead``, led by b."""
    ch = b.pika().channel()
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("dead", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("dead", "dlx")
    a.pika().channel().queue_declare("work", durable=True, arguments=QUORUM)


def _visible(node: Node, queue: str) -> bool:
    return node.has_queue(queue)


def _next(it: Any) -> tuple[Any, Any, bytes]:
    method, props, body = next(it)
    assert method is not None, "no delivery in time"
    return method, props, body


def test_returns_made_through_a_non_leader_count_on_the_leader_and_survive_its_kill_9(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    _declare(a, b)
    for node in (b, c):
        wait_for(lambda node=node: _visible(node, "work") and _visible(node, "dead"), what="declares everywhere")
    assert nodes.leader("work")[0] == "a" and nodes.leader("dead")[0] == "b"  # type: ignore[index]
    pub = b.pika().channel()
    pub.confirm_delivery()
    pub.basic_publish("", "work", b"m1")  # transient: a quorum queue keeps it all the same
    consumer = c.pika()
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=1)
    deliveries = cch.consume("work", inactivity_timeout=15)

    # m1: returned through c until the leader's limit (2) dead-letters it into b's queue
    seen = []
    for _ in range(3):
        method, props, body = _next(deliveries)
        assert body == b"m1"
        seen.append(((props.headers or {}).get("x-delivery-count"), method.redelivered))
        cch.basic_nack(method.delivery_tag, requeue=True)
        if len(seen) == 1:  # the leader counted it and stored the count, not c
            wait_for(lambda: _stored_counts(nodes, "work") == [1], what="count 1 stored by the leader")
    assert seen == [(None, False), (1, True), (2, True)]
    got = wait_for(lambda: _get_one(c, "dead"), what="m1 dead-lettered")
    assert got[0] == b"m1"
    death = got[1]["x-death"][0]
    assert (death["reason"], death["queue"]) == ("delivery_limit", "work")
    # at least once: the dead letter is stored on b before m1's removal commits on a
    wait_for(lambda: _stored_counts(nodes, "work") == [], what="m1 removed from work")

    # m2: returned twice, then the leader dies while c holds its third delivery
    pub.basic_publish("", "work", b"m2")
    for expected in (None, 1):
        method, props, body = _next(deliveries)
        assert (body, (props.headers or {}).get("x-delivery-count")) == (b"m2", expected)
        cch.basic_nack(method.delivery_tag, requeue=True)
    held, props, body = _next(deliveries)
    assert (body, props.headers["x-delivery-count"]) == (b"m2", 2)
    wait_for(lambda: _stored_counts(nodes, "work") == [2], what="count 2 stored")
    a.kill()
    leader = wait_for(lambda: (lead := nodes.leader("work")) and lead[0] != "a" and lead[0], timeout=LEASE * 5,
                      what="a new leader of work")
    assert nodes.leader("work")[1] == 2  # type: ignore[index]
    cch.basic_nack(held.delivery_tag, requeue=True)  # its leader is gone: settles nothing now
    # the new leader has the count (2): not reset, so the next return is the one over the limit
    method, props, body = _next(deliveries)
    assert (body, method.redelivered, props.headers["x-delivery-count"]) == (b"m2", True, 2)
    cch.basic_nack(method.delivery_tag, requeue=True)
    got = wait_for(lambda: _get_one(c, "dead"), what="m2 dead-lettered by the new leader")
    assert got[0] == b"m2" and got[1]["x-death"][0]["reason"] == "delivery_limit"
    cch.cancel()
    consumer.close()
    # no second copy of m2 anywhere (c's orphaned delivery was not requeued by c)
    assert _get_one(c, "work") is None and _get_one(c, "dead") is None
    wait_for(lambda: _stored_counts(nodes, "work") == [], what="m2 removed from work")
    assert "took over queue 'work'" in nodes[leader].log()


def _get_one(node: Node, queue: str) -> tuple[bytes, dict[str, Any]] | None:
    """One message of ``queue`` consumed (and acked) through ``node``, or None within a second."""
    conn = node.pika()
    try:
        ch = conn.channel()
        for method, props, body in ch.consume(queue, inactivity_timeout=1.0):
            if method is None:
                return None
            ch.basic_ack(method.delivery_tag)
            return body, dict(props.headers or {})
        return None
    finally:
        conn.close()


def test_a_dead_letter_for_a_killed_leader_reaches_the_next_one(nodes: Nodes) -> None:
    """At least once across nodes: the dead-letter queue's leader is killed (kill -9) just before a
    message dies; the dead letter the leader of the dying message could not send is kept and sent
    to the dead-letter queue's next leader, with no new publish to carry it (then, only then, the
    dead message's removal commits). A longer lease: a loaded machine must not stall a past it."""
    lease = LEASE * 2
    a, b, c = nodes.start("a", "b", "c", lease=lease)
    _declare(a, b)
    wait_for(lambda: _visible(c, "work") and _visible(c, "dead"), what="declares on c")
    pub = c.pika().channel()
    pub.confirm_delivery()
    pub.basic_publish("", "work", b"poison")
    conn = a.pika()  # on the leader of work
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    deliveries = ch.consume("work", inactivity_timeout=15)
    for _ in range(2):
        method, _, _ = _next(deliveries)
        ch.basic_nack(method.delivery_tag, requeue=True)
    last, _, body = _next(deliveries)
    assert body == b"poison"
    b.kill()
    ch.basic_nack(last.delivery_tag, requeue=True)  # over the limit: dead, while b is gone
    wait_for(lambda: "forwarding to cluster node b" in a.log(), what="the failed send to b")
    got = wait_for(lambda: _get_one(c, "dead"), timeout=lease * 10, what="the dead letter at dead's next leader")
    assert got[0] == b"poison" and got[1]["x-death"][0]["reason"] == "delivery_limit"
    assert nodes.leader("dead")[0] != "b"  # type: ignore[index]
    # (had a stalled past its lease, work's next leader would have the poison back: at least once)
    assert nodes.leader("work") == ("a", 1)
    wait_for(lambda: _stored_counts(nodes, "work") == [], what="poison removed from work")
    conn.close()
