"""Failover: a leader killed (kill -9) or stalled past its lease (SIGSTOP) loses its queues to a
live node, which recovers them from the database; a stalled leader that resumes is fenced; a
restarted node rejoins. Nothing confirmed is lost."""

from __future__ import annotations

import threading
import time

import pika
from clusterkit import LEASE, Nodes, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _new_leader(nodes: Nodes, queue: str, old: str) -> tuple[str, int]:
    return wait_for(lambda: (lead := nodes.leader(queue)) and lead[0] != old and lead, timeout=LEASE * 5,
                    what=f"a new leader of {queue}")


def test_kill_9_of_a_leader_mid_stream_loses_nothing_confirmed(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    ch = a.publisher("stream-q")
    confirmed: list[int] = []
    # unacked deliveries on a when it dies come back redelivered on the new leader
    consumer = a.pika()
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=5)
    cch.basic_consume("stream-q", lambda *args: None, auto_ack=False)
    died = threading.Event()

    def publish() -> None:
        for i in range(100_000):
            try:
                ch.basic_publish("", "stream-q", str(i).encode(), PERSISTENT)
            except pika.exceptions.AMQPError:
                died.set()
                return
            confirmed.append(i)

    pub = threading.Thread(target=publish)
    pub.start()
    wait_for(lambda: len(confirmed) >= 200, what="200 confirms")
    a.kill()
    pub.join(30)
    assert died.is_set()
    leader, epoch = _new_leader(nodes, "stream-q", "a")
    assert epoch == 2
    got = nodes[leader].drain("stream-q")
    bodies = {int(body) for body, _ in got}
    assert set(confirmed) <= bodies, sorted(set(confirmed) - bodies)[:10]
    assert all(redelivered for _, redelivered in got)  # it may have been delivered by a
    assert "took over queue 'stream-q'" in nodes[leader].log()


def test_a_stalled_leader_is_fenced_when_it_resumes_and_steps_down(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    ch = a.publisher("fenced-q")
    ch.basic_publish("", "fenced-q", b"before", PERSISTENT)
    a.pause()
    outcome: list[bool] = []

    def publish_after() -> None:  # sent while a is stopped: a reads it first thing on resuming
        try:
            ch.basic_publish("", "fenced-q", b"after", PERSISTENT)
            outcome.append(False)
        except (pika.exceptions.NackError, pika.exceptions.AMQPError):
            outcome.append(True)

    try:
        leader, epoch = _new_leader(nodes, "fenced-q", "a")
        sender = threading.Thread(target=publish_after)
        sender.start()
        time.sleep(0.3)  # the publish is in a's socket buffer
    finally:
        a.resume()
    sender.join(LEASE * 5)
    assert epoch == 2 and outcome
    wait_for(lambda: "stepped down from queue 'fenced-q'" in a.log(), what="a steps down")
    expected = [(b"before", True)]
    if not outcome[0]:
        # a's membership round won the race: it stepped down first and forwarded the publish to the
        # new leader, which confirmed it after its own commit: there, once, and a never wrote it
        expected.append((b"after", False))
    # else the usual case: a wrote before it heard of the new leader, and its commit was fenced off (a
    # nack); the store's own tests force that interleaving (test_cluster_races, test_cluster_store)
    assert nodes[leader].drain("fenced-q") == expected
    assert nodes.leader("fenced-q") == (leader, 2)  # a never took it back


def test_a_restarted_node_rejoins_and_leads_again(nodes: Nodes) -> None:
    a, b, _ = nodes.start("a", "b", "c")
    a.kill()
    wait_for(lambda: not next(n for n in nodes.status()["nodes"] if n["name"] == "a")["running"],
             timeout=LEASE * 4, what="a shown down")
    nodes.start("a")
    status = nodes.status()
    assert [n["name"] for n in status["nodes"] if n["running"]] == ["a", "b", "c"]
    assert [n["number"] for n in status["nodes"]] == [1, 2, 3]  # the same node, not a new one
    ch = a.pika().channel()
    ch.queue_declare("after-rejoin", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "after-rejoin", b"x", PERSISTENT)
    assert nodes.leader("after-rejoin") == ("a", 1)
    # the definition made on a after it rejoined reaches b
    wait_for(lambda: any(q["name"] == "after-rejoin" for q in b.api("queues")), timeout=5, what="queue on b")


def test_a_queue_keeps_its_order_through_leaders_of_any_id_space(nodes: Nodes) -> None:
    """Each node numbers messages in its own id space; a queue that moved b -> a -> b is still read
    back in enqueue order (a's later messages have lower ids than b's earlier ones)."""
    a, b = nodes.start("a", "b")
    ch = b.publisher("ordered")
    for i in range(3):
        ch.basic_publish("", "ordered", b"%d" % i, PERSISTENT)
    b.kill()
    assert _new_leader(nodes, "ordered", "b")[0] == "a"
    ch = a.pika().channel()
    ch.confirm_delivery()
    for i in range(3, 6):
        ch.basic_publish("", "ordered", b"%d" % i, PERSISTENT)
    nodes.start("b")
    wait_for(lambda: sum(n["running"] for n in nodes.status()["nodes"]) == 2, what="b back")
    a.kill()
    assert _new_leader(nodes, "ordered", "a")[0] == "b"
    assert [body for body, _ in b.drain("ordered")] == [b"%d" % i for i in range(6)]


def test_a_node_shut_down_gracefully_hands_its_queues_over_at_once(nodes: Nodes) -> None:
    a, b, _ = nodes.start("a", "b", "c")
    ch = a.publisher("handed")
    ch.basic_publish("", "handed", b"kept", PERSISTENT)
    a.stop()  # SIGTERM: commits, then gives its leases up rather than letting them run out
    status = nodes.status()
    assert not next(n for n in status["nodes"] if n["name"] == "a")["running"]
    lease = next(lease for lease in status["leases"] if lease["queue"] == "handed")
    assert lease["leader"] != "a" or lease["expires_in"] <= 0
    leader, epoch = _new_leader(nodes, "handed", "a")
    assert epoch == 2
    assert nodes[leader].drain("handed") == [(b"kept", True)]
