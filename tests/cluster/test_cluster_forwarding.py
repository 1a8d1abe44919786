"""Two nodes forwarding to each other's queues at once (real ``sansmq serve --node`` processes,
pika publishers on loopback): neither node's commit waits on the other's confirm, so every
publish is confirmed promptly, well under the lease (the link's timeout)."""

from __future__ import annotations

import threading
import time

import pika
from clusterkit import Nodes, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)
#: the lease of these nodes: a forward that waited on its peer's forwarding met it as a timeout
LEASE = 5.0
#: far above what a confirm takes on a loaded machine, far below the lease
SLOW = 2.5
PER_PUBLISHER = 40


def test_two_nodes_publishing_into_each_others_queues_at_once_get_prompt_confirms(nodes: Nodes) -> None:
    a, b = nodes.start("a", "b", lease=LEASE)
    a.pika().channel().queue_declare("led-by-a", durable=True)
    b.pika().channel().queue_declare("led-by-b", durable=True)
    wait_for(lambda: a.has_queue("led-by-b") and b.has_queue("led-by-a"), timeout=10, what="both queues on both")
    assert nodes.leaders() == {"led-by-a": "a", "led-by-b": "b"}
    # a node learns its peers' link addresses with its next heartbeat: one publish each way first
    for node, queue in ((a, "led-by-b"), (b, "led-by-a")):
        ch = node.pika().channel()
        ch.confirm_delivery()
        wait_for(lambda ch=ch, queue=queue: _confirmed(ch, queue), timeout=10, what=f"a first forward to {queue}")
        ch.connection.close()
    latencies: list[float] = []
    failures: list[str] = []
    start = threading.Barrier(4)

    def publish(node_name: str, queue: str, tag: str) -> None:
        conn = nodes[node_name].pika()
        ch = conn.channel()
        ch.confirm_delivery()
        start.wait()
        try:
            for i in range(PER_PUBLISHER):
                began = time.monotonic()
                try:
                    ch.basic_publish("", queue, f"{tag}-{i}".encode(), PERSISTENT)
                except pika.exceptions.NackError:
                    failures.append(f"{tag}-{i} nacked after {time.monotonic() - began:.1f}s")
                    return
                took = time.monotonic() - began
                latencies.append(took)
                if took > SLOW:
                    failures.append(f"{tag}-{i} confirmed only after {took:.1f}s")
                    return
        finally:
            conn.close()

    # each node's clients publish into the queue the other node leads (two publishers a node)
    threads = [threading.Thread(target=publish, args=(node, queue, f"{node}{n}"))
               for node, queue in (("a", "led-by-b"), ("b", "led-by-a")) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, (failures, a.log()[-4000:], b.log()[-4000:])
    assert len(latencies) == 4 * PER_PUBLISHER
    # every confirmed message is at its leader, in each publisher's order
    for leader, queue, tags in ((a, "led-by-a", ("b1", "b2")), (b, "led-by-b", ("a1", "a2"))):
        got = [body.decode() for body, _ in leader.drain(queue) if body != b"probe"]
        assert len(got) == 2 * PER_PUBLISHER
        for tag in tags:
            assert [m for m in got if m.startswith(tag + "-")] == [f"{tag}-{i}" for i in range(PER_PUBLISHER)]


def _confirmed(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> bool:
    try:
        ch.basic_publish("", queue, b"probe", PERSISTENT)
        return True
    except pika.exceptions.NackError:
        return False
