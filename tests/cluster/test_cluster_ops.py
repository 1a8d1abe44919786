"""Operations on a running cluster: ``sansmq cluster drain`` / ``revive`` / ``rebalance`` (real node
processes, pika clients publishing with confirms and consuming through other nodes meanwhile)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
from clusterkit import LEASE, Node, Nodes, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)


class Traffic:
    """A confirmed publisher on ``pub`` and an acking consumer on ``sub`` over ``queues``, running
    until ``stop()``: what was confirmed and what was delivered (body, redelivered)."""

    def __init__(self, pub: Node, sub: Node, queues: list[str]) -> None:
        self.pub, self.sub, self.queues = pub, sub, queues
        self.confirmed: set[bytes] = set()
        self.delivered: list[tuple[bytes, bool]] = []
        self.cancelled = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._publish), threading.Thread(target=self._consume)]
        for t in self._threads:
            t.start()

    def _publish(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                ch = self.pub.pika().channel()
                ch.confirm_delivery()
                while not self._stop.is_set():
                    body = b"%d" % n
                    n += 1
                    try:
                        ch.basic_publish("", self.queues[n % len(self.queues)], body, PERSISTENT)
                    except pika.exceptions.NackError:
                        continue  # not confirmed: the publisher would send it again
                    self.confirmed.add(body)
                    time.sleep(0.002)
            except pika.exceptions.AMQPError:
                time.sleep(0.1)

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                conn = self.sub.pika()
                ch = conn.channel()
                ch.basic_qos(prefetch_count=20)

                def on_message(chan: Any, method: Any, _props: Any, body: bytes) -> None:
                    self.delivered.append((body, method.redelivered))
                    chan.basic_ack(method.delivery_tag)

                for q in self.queues:
                    ch.basic_consume(q, on_message)
                while not self._stop.is_set():
                    conn.process_data_events(0.05)
                conn.close()
            except pika.exceptions.AMQPError:  # a consumer cancelled (its leader moved here): again
                self.cancelled += 1
                time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def check(self, nodes: Nodes) -> set[bytes]:
        """Every confirmed message delivered (here or left in its queue); a message delivered twice
        came back flagged redelivered (its first delivery's ack raced a leader move). Returns every
        body seen."""
        leaders = nodes.leaders()
        left = [m for q in self.queues for m in nodes[leaders[q]].drain(q)]
        seen: set[bytes] = set()
        for body, redelivered in self.delivered + left:
            assert body not in seen or redelivered, f"{body!r} delivered twice, the second not redelivered"
            seen.add(body)
        missing = self.confirmed - seen
        assert not missing, f"{len(missing)} confirmed messages lost: {sorted(missing)[:10]}"
        return seen


def _declared_with_messages(leader: Node, queues: list[str], messages: int, seen_by: Node) -> list[str]:
    """``queues`` declared on (so led by) ``leader`` with ``messages`` confirmed there, round robin
    ("before-N"), once ``seen_by`` knows them."""
    conn = leader.pika()
    ch = conn.channel()
    for q in queues:
        ch.queue_declare(q, durable=True)
    ch.confirm_delivery()
    for i in range(messages):
        ch.basic_publish("", queues[i % len(queues)], b"before-%d" % i, PERSISTENT)
    conn.close()
    wait_for(lambda: all(seen_by.has_queue(q) for q in queues), timeout=5, what="the queues on another node")
    return queues


def test_drain_hands_every_queue_over_and_takes_none_until_revived(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    queues = _declared_with_messages(a, [f"d{i}" for i in range(4)], 40, seen_by=c)
    assert set(nodes.leaders().values()) == {"a"}
    traffic = Traffic(b, c, queues)  # publishing through b, consuming on c: both relayed by a now
    wait_for(lambda: len(traffic.confirmed) > 50 and len(traffic.delivered) > 50, what="traffic before")
    out = nodes.cli("drain", "a")
    assert out.returncode == 0, out.stderr
    assert "node a drained" in out.stdout and "4 queues moved in" in out.stdout, out.stdout
    leaders = nodes.leaders()
    assert set(leaders.values()) <= {"b", "c"} and sorted(leaders.values()).count("b") == 2, leaders
    status = {n["name"]: n for n in nodes.status()["nodes"]}
    assert status["a"]["drained"] and not status["b"]["drained"]
    assert next(n for n in b.api("nodes") if n["name"] == "sansmq@a")["being_drained"] is True
    wait_for(lambda: "stepped down from queue 'd0'" in a.log(), timeout=LEASE * 3, what="a steps down")
    # consumers on c and publishers on b keep going with the new leaders
    got = len(traffic.delivered)
    confirmed = len(traffic.confirmed)
    wait_for(lambda: len(traffic.delivered) > got + 50 and len(traffic.confirmed) > confirmed + 50,
             what="traffic after the drain")
    # a drained node leads nothing new: client-local or balanced declares go elsewhere
    conn = a.pika()
    ch = conn.channel()
    ch.queue_declare("new-local", durable=True)
    ch.queue_declare("new-balanced", durable=True, arguments={"x-queue-leader-locator": "balanced"})
    conn.close()
    leaders = nodes.leaders()
    assert leaders["new-local"] != "a" and leaders["new-balanced"] != "a", leaders
    # ... nor in a failover: c's queues go to b
    traffic.stop()
    assert {b"before-%d" % i for i in range(40)} <= traffic.check(nodes)
    c.kill()
    wait_for(lambda: set(nodes.leaders().values()) == {"b"}, timeout=LEASE * 6, what="c's queues on b, not a")
    out = nodes.cli("revive", "a")
    assert out.returncode == 0 and "revived" in out.stdout, out.stderr
    assert not {n["name"]: n for n in nodes.status()["nodes"]}["a"]["drained"]
    # a learns it may lead again in its next membership round (a third of the lease): from then on,
    # a queue declared on it is led by it (client-local)
    tries = iter(range(1000))

    def declared_on_a_is_led_by_a() -> bool:
        name = f"after-revive-{next(tries)}"
        conn = a.pika()
        conn.channel().queue_declare(name, durable=True)
        conn.close()
        return nodes.leaders()[name] == "a"

    wait_for(declared_on_a_is_led_by_a, timeout=LEASE * 3, what="a queue declared on the revived a led by a")


def test_drain_is_refused_when_no_other_node_could_lead_else_shown_in_status(nodes: Nodes) -> None:
    (a,) = nodes.start("a")
    conn = a.pika()
    conn.channel().queue_declare("only", durable=True)
    conn.close()
    out = nodes.cli("drain", "a")
    assert out.returncode == 1 and "no other node is running" in out.stderr, out
    assert nodes.cli("drain", "nosuch").returncode == 1
    assert not nodes.status()["nodes"][0]["drained"]
    (b,) = nodes.start("b")
    out = nodes.cli("drain", "a", "--timeout", "0")  # written, not waited for
    assert out.returncode == 0 and "1 queues to move" in out.stdout, out
    text = nodes.cli("status").stdout  # the human-readable status names drained nodes and pending moves
    assert "running, drained" in text and ("(moving to b)" in text or nodes.leaders()["only"] == "b"), text


def test_rebalance_spreads_six_queues_led_by_one_node_two_per_node(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    _declared_with_messages(a, ["other"], 0, seen_by=c)  # not matched by --queues: stays on a
    queues = _declared_with_messages(a, [f"r{i}" for i in range(6)], 60, seen_by=c)
    traffic = Traffic(b, c, queues)
    wait_for(lambda: len(traffic.confirmed) > 50 and len(traffic.delivered) > 50, what="traffic before")
    out = nodes.cli("rebalance", "--vhost", "/", "--queues", "^r")
    assert out.returncode == 0, out.stderr
    assert "4 queues moved in" in out.stdout and out.stdout.count(" a -> ") == 4, out.stdout
    leaders = nodes.leaders()
    assert sorted(leaders[q] for q in queues) == ["a", "a", "b", "b", "c", "c"], leaders
    assert leaders["other"] == "a"
    got, confirmed = len(traffic.delivered), len(traffic.confirmed)
    wait_for(lambda: len(traffic.delivered) > got + 100 and len(traffic.confirmed) > confirmed + 100,
             what="traffic after the rebalance")
    # balanced already: nothing more to move
    out = nodes.cli("rebalance", "--queues", "^r")
    assert out.returncode == 0 and "0 queues moved" in out.stdout, out.stdout
    traffic.stop()
    assert {b"before-%d" % i for i in range(60)} <= traffic.check(nodes)


def test_rebalance_plan_levels_the_nodes_and_moves_queues_off_nodes_that_may_not_lead() -> None:
    from engine.storage.postgres.cluster_ops import plan_balance

    def leases(spec: dict[str, int]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for node, n in spec.items():
            for i in range(n):
                out.append({"vhost": "/", "queue": f"{node}{i}", "id": len(out) + 1, "leader": node})
        return out

    def after(ls: list[dict[str, Any]], nodes_: list[str]) -> dict[str, int]:
        moved = {m.qid: m.target for m in plan_balance(ls, nodes_)}
        counts = dict.fromkeys(nodes_, 0)
        for lease in ls:
            counts[moved.get(lease["id"], lease["leader"])] += 1
        return counts

    assert after(leases({"a": 6}), ["a", "b", "c"]) == {"a": 2, "b": 2, "c": 2}
    assert after(leases({"a": 7, "b": 1}), ["a", "b", "c"]) == {"a": 3, "b": 3, "c": 2}
    assert after(leases({"a": 2, "d": 3}), ["a", "b", "c"]) == {"a": 2, "b": 2, "c": 1}  # d is down
    assert plan_balance(leases({"a": 2, "b": 1, "c": 2}), ["a", "b", "c"]) == []
    assert plan_balance(leases({"a": 3}), []) == []
    # a drain spreads one node's queues over what the others lead already
    moves = plan_balance(leases({"a": 3}), ["b", "c"], counted=leases({"b": 2}))
    assert sorted(m.target for m in moves) == ["b", "c", "c"]
