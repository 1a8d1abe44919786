"""Streams in a cluster: a stream declared on one node is appended to and read from every node; its
leader's death loses nothing confirmed and consumers elsewhere read on; partitions' leaders spread."""

from __future__ import annotations

import datetime
import subprocess
import sys
import threading
import time
from typing import Any

import pika
from clusterkit import LEASE, Node, Nodes, wait_for

STREAM = {"x-queue-type": "stream"}


def _declare_stream(node: Node, name: str, **args: Any) -> None:
    conn = node.pika()
    conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **args})
    conn.close()


def _publisher(node: Node) -> Any:
    ch = node.pika().channel()
    ch.confirm_delivery()
    return ch


def _publish(ch: Any, stream: str, bodies: list[bytes], producer: str | None = None, first_id: int = 0) -> None:
    for i, body in enumerate(bodies):
        headers = None if producer is None else {"x-producer": producer, "x-publishing-id": first_id + i}
        ch.basic_publish("", stream, body, pika.BasicProperties(delivery_mode=2, headers=headers))


def _publish_until_confirmed(ch: Any, stream: str, body: bytes) -> None:
    """Publish as a real publisher does after a failover: a nack (this node still sent it to the old
    leader, which no longer leads it, until its membership round named the new one) is resent."""
    deadline = time.monotonic() + LEASE * 5
    while True:
        try:
            _publish(ch, stream, [body])
            return
        except pika.exceptions.NackError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class StreamReader:
    """A pika stream consumer on ``node`` in a thread of its own: (offset, body) as they arrive."""

    def __init__(self, node: Node, stream: str, offset: Any = "first", name: str | None = None,
                 **extra: Any) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        args: dict[str, Any] = {"x-stream-offset": offset, **extra}
        if name is not None:
            args["x-stream-consumer-name"] = name
        self._conn = node.pika()
        ch = self._conn.channel()
        ch.basic_qos(prefetch_count=50)

        def on(ch: Any, method: Any, props: Any, body: bytes) -> None:
            self.got.append((props.headers["x-stream-offset"], body))
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume(stream, on, arguments=args)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._conn.process_data_events(time_limit=0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def wait(self, n: int, timeout: float = 15.0) -> list[tuple[int, bytes]]:
        wait_for(lambda: len(self.got) >= n or self.error, timeout=timeout, what=f"{n} stream deliveries")
        return list(self.got)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self._conn.close()
        except pika.exceptions.AMQPError:
            pass


def _wait_defined(name: str, *nodes: Node) -> None:
    for node in nodes:
        wait_for(lambda node=node: node.has_queue(name), timeout=10, what=f"{name} on {node.name}")


def _three_nodes_and_stream(nodes: Nodes, name: str) -> list[Node]:
    """Nodes a, b, c and the stream ``name`` declared on a (led by a), known on b and c."""
    a, b, c = nodes.start("a", "b", "c")
    _declare_stream(a, name)
    _wait_defined(name, b, c)
    return [a, b, c]


def test_a_stream_is_appended_to_and_read_from_every_node(nodes: Nodes) -> None:
    a, b, c = _three_nodes_and_stream(nodes, "events")
    assert nodes.leader("events") == ("a", 1)
    _publish(_publisher(a), "events", [b"a%d" % i for i in range(5)])
    # appended through b (forwarded to a; confirmed after a's commit), deduplicated by a
    pb = _publisher(b)
    _publish(pb, "events", [b"b%d" % i for i in range(5)], producer="p", first_id=1)
    _publish(pb, "events", [b"dup%d" % i for i in range(5)], producer="p", first_id=1)  # resent: not appended
    _publish(_publisher(c), "events", [b"c%d" % i for i in range(5)])
    want = [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)] + [b"c%d" % i for i in range(5)]
    on_a, on_c = StreamReader(a, "events"), StreamReader(c, "events")
    try:
        assert [body for _, body in on_a.wait(15)] == want
        assert on_c.wait(15) == on_a.got[:15]
        assert [o for o, _ in on_c.got] == list(range(15))
        # new appends reach the consumer on c (woken by the leader's feed, not by polling)
        _publish(pb, "events", [b"late%d" % i for i in range(3)], producer="p", first_id=6)
        assert [body for _, body in on_c.wait(18)[15:]] == [b"late0", b"late1", b"late2"]
        assert on_c.got == on_a.wait(18)
        assert on_c.error is None and on_a.error is None
    finally:
        on_a.close()
        on_c.close()


def test_every_offset_spec_reads_the_same_records_on_a_node_that_does_not_lead(nodes: Nodes) -> None:
    a, b, c = _three_nodes_and_stream(nodes, "specs")
    pa = _publisher(a)
    _publish(pa, "specs", [b"old%d" % i for i in range(4)])
    time.sleep(1.2)  # a timestamp between two chunks (AMQP timestamps are whole seconds)
    since = int(time.time())
    time.sleep(1.1)
    _publish(pa, "specs", [b"new%d" % i for i in range(3)])
    for spec in ("first", "last", 2, datetime.datetime.fromtimestamp(since)):
        readers = [StreamReader(node, "specs", spec) for node in (a, c)]
        try:
            wait_for(lambda readers=readers: readers[0].got and len(readers[1].got) >= len(readers[0].got),
                     what=f"reads from {spec!r}")
            time.sleep(0.3)
            assert readers[1].got == readers[0].got, spec
        finally:
            for r in readers:
                r.close()
    nxt = StreamReader(c, "specs", "next")
    try:
        time.sleep(0.5)
        assert nxt.got == []
        _publish(pa, "specs", [b"next"])
        assert nxt.wait(1) == [(7, b"next")]
    finally:
        nxt.close()


def test_filtered_readers_on_the_leader_and_elsewhere_get_exactly_the_matches(nodes: Nodes) -> None:
    """Stream filtering in a cluster: a node that does not lead the stream reads the chunk filters
    the leader stored (and what they do not cover yet, message by message): the same exact matches."""
    a, b, c = _three_nodes_and_stream(nodes, "regions")
    pa = _publisher(a)

    def regional(values: list[str], tag: str) -> None:
        for i, v in enumerate(values):
            pa.basic_publish("", "regions", b"%s-%s%d" % (v.encode(), tag.encode(), i),
                             pika.BasicProperties(delivery_mode=2, headers={"x-stream-filter-value": v}))

    regional(["eu"] * 40 + ["us"] * 40 + ["eu", "us"] * 5, "old")
    want = [o for o in range(90) if o < 40 or (o >= 80 and o % 2 == 0)]
    readers = [StreamReader(node, "regions", "first", **{"x-stream-filter": "eu"}) for node in (a, c)]
    try:
        for r in readers:
            assert [o for o, _ in r.wait(len(want))] == want
        regional(["us", "eu", "eu"], "new")  # appended after the readers attached: offsets 90..92
        for r in readers:
            assert [o for o, _ in r.wait(len(want) + 2)] == want + [91, 92]
        time.sleep(0.5)
        assert [len(r.got) for r in readers] == [len(want) + 2] * 2 and all(r.error is None for r in readers)
    finally:
        for r in readers:
            r.close()


def test_kill_9_of_a_streams_leader_loses_nothing_confirmed_and_readers_elsewhere_read_on(nodes: Nodes) -> None:
    a, b, c = _three_nodes_and_stream(nodes, "fo")
    total = 300
    on_b, tracked = StreamReader(b, "fo"), StreamReader(c, "fo", name="tracked")
    confirmed: list[int] = []
    nacked = 0

    def publish() -> None:
        """One producer through b: a publish nacked (its leader died) is sent again with the same
        publishing id until confirmed; dedup keeps the one that a committed before it died."""
        nonlocal nacked
        ch = _publisher(b)
        for pid in range(total):
            while True:
                try:
                    _publish(ch, "fo", [b"%d" % pid], producer="p", first_id=pid)
                    break
                except pika.exceptions.NackError:
                    nacked += 1
                    time.sleep(0.1)
            confirmed.append(pid)

    pub = threading.Thread(target=publish, daemon=True)
    pub.start()
    try:
        wait_for(lambda: len(confirmed) >= 100, what="100 confirms")
        a.kill()
        assert len(confirmed) < total  # killed mid-stream
        pub.join(LEASE * 30)
        assert len(confirmed) == total
        leader, epoch = nodes.leader("fo")  # type: ignore[misc]
        assert leader != "a" and epoch == 2
        assert "took over queue 'fo'" in nodes[leader].log()
        want = [(i, b"%d" % i) for i in range(total)]  # every confirmed append once, in order
        assert on_b.wait(total, timeout=30) == want
        assert tracked.wait(total, timeout=30) == want
        assert on_b.error is None and tracked.error is None
        from_leader = StreamReader(nodes[leader], "fo")
        assert from_leader.wait(total) == want
        from_leader.close()
    finally:
        on_b.close()
        tracked.close()
    # the tracked consumer's offset (stored by c through the failover) is where its name resumes, on b
    time.sleep(0.5)
    resumed = StreamReader(b, "fo", offset="first", name="tracked")
    try:
        time.sleep(1.0)
        assert resumed.got == []
        _publish(_publisher(c), "fo", [b"after"], producer="p", first_id=total)
        _publish(_publisher(c), "fo", [b"dup"], producer="p", first_id=total)  # deduplicated by the new leader
        assert resumed.wait(1) == [(total, b"after")]
        time.sleep(0.5)
        assert len(resumed.got) == 1
    finally:
        resumed.close()


def test_a_stalled_streams_leader_is_fenced_its_append_refused_and_its_readers_read_on(nodes: Nodes) -> None:
    a, b, c = _three_nodes_and_stream(nodes, "fenced-s")
    pa = _publisher(a)
    _publish(pa, "fenced-s", [b"before"])
    reader = StreamReader(a, "fenced-s")  # a reader on the old leader stays and reads on
    assert reader.wait(1) == [(0, b"before")]
    a.pause()
    try:
        wait_for(lambda: (lead := nodes.leader("fenced-s")) and lead[0] != "a", timeout=LEASE * 5,
                 what="a new leader")
    finally:
        a.resume()
    # a's append on resuming, before it heard of the new leader, cannot commit: a nack, not in the log;
    # unless a's membership round won the race: then it was forwarded to the new leader, appended once
    try:
        _publish(pa, "fenced-s", [b"fenced"])
        expected = [(0, b"before"), (1, b"fenced"), (2, b"after")]
    except (pika.exceptions.NackError, pika.exceptions.AMQPError):
        expected = [(0, b"before"), (1, b"after")]
    wait_for(lambda: "stepped down from stream 'fenced-s'" in a.log(), what="a steps down")
    _publish_until_confirmed(_publisher(b), "fenced-s", b"after")
    assert reader.wait(len(expected)) == expected
    time.sleep(0.3)
    assert len(reader.got) == len(expected) and reader.error is None
    reader.close()
    from_c = StreamReader(c, "fenced-s")
    assert from_c.wait(len(expected)) == expected
    from_c.close()


def test_a_partitioned_streams_partitions_are_led_by_different_nodes_as_the_api_reports(nodes: Nodes) -> None:
    a, b, c = nodes.start("a", "b", "c")
    wait_for(lambda: sum(n["running"] for n in nodes.status()["nodes"]) == 3, what="three live nodes")
    made = subprocess.run([sys.executable, "-m", "servers", "streams", "create-partitioned", "sup", "--partitions",
                           "3", "--amqp", f"127.0.0.1:{a.amqp}"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    parts = [f"sup-{i}" for i in range(3)]
    leaders = {p: nodes.leader(p)[0] for p in parts}  # type: ignore[index]
    assert sorted(leaders.values()) == ["a", "b", "c"], leaders  # balanced: one each
    _wait_defined("sup-2", b, c)
    for node in (a, b, c):  # every node's API names each partition's leader node, as RabbitMQ's does
        listed = {q["name"]: q for q in node.api("queues") if q["name"] in leaders}
        assert {p: (q["node"], q["leader"]) for p, q in listed.items()} == {
            p: (f"sansmq@{lead}", f"sansmq@{lead}") for p, lead in leaders.items()}
    ch = _publisher(c)
    for i in range(3):
        ch.basic_publish("sup", str(i), b"to %d" % i, pika.BasicProperties(delivery_mode=2))
    for p, lead in leaders.items():
        reader = StreamReader(nodes[lead], p)
        assert reader.wait(1) == [(0, b"to " + p[-1].encode())]
        reader.close()


def test_the_projects_client_and_aio_pika_read_a_stream_through_its_leaders_death(nodes: Nodes) -> None:
    """sansmq_client publishes (deduplicated) through b and consumes on a, the leader, listing every
    node: when a dies it reconnects to b and resumes after its last acked offset; an aio-pika
    consumer on c from an offset reads the same records."""
    import asyncio

    import aio_pika

    import sansmq_client.sync
    from sansmq_client import PublishNacked

    a, b, c = _three_nodes_and_stream(nodes, "own")
    hosts = ",".join(f"127.0.0.1:{n.amqp}" for n in (a, b, c))
    got: list[tuple[int | None, bytes]] = []
    consumer = sansmq_client.sync.connect(f"amqp://guest:guest@{hosts}/")
    publisher = sansmq_client.sync.connect(f"amqp://guest:guest@127.0.0.1:{b.amqp}/")
    try:
        def on(d: Any) -> None:
            got.append((d.offset, d.body))
            consumer.ack(d)

        consumer.subscribe("own", on, prefetch=10, offset="first")
        for i in range(20):
            publisher.publish("own", b"m%d" % i, headers={"x-producer": "own", "x-publishing-id": i})
        wait_for(lambda: len(got) >= 20, what="20 on a")
        a.kill()
        leader = wait_for(lambda: (lead := nodes.leader("own")) and lead[0] != "a" and lead[0], timeout=LEASE * 5,
                          what="a new leader")
        for i in range(20, 40):
            while True:
                try:
                    publisher.publish("own", b"m%d" % i, headers={"x-producer": "own", "x-publishing-id": i})
                    break
                except PublishNacked:  # the leader was away: sent again (deduplicated if it was stored)
                    time.sleep(0.2)
        wait_for(lambda: len(got) >= 40, timeout=30, what=f"40 through {leader}")
        time.sleep(0.3)
        assert got == [(i, b"m%d" % i) for i in range(40)]
    finally:
        consumer.close()
        publisher.close()

    async def aio() -> list[tuple[int, bytes]]:
        conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{c.amqp}/")
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=10)
        q = await ch.get_queue("own")
        out: list[tuple[int, bytes]] = []
        async with q.iterator(arguments={"x-stream-offset": 5}) as it:
            async for message in it:
                out.append((message.headers["x-stream-offset"], message.body))  # type: ignore[arg-type]
                await message.ack()
                if len(out) == 35:
                    break
        await conn.close()
        return out

    assert asyncio.run(asyncio.wait_for(aio(), 30)) == [(i, b"m%d" % i) for i in range(5, 40)]


def test_stomp_appends_and_reads_a_stream_on_nodes_that_do_not_lead_it(nodes: Nodes) -> None:
    import stomp

    a, b, c = _three_nodes_and_stream(nodes, "st")
    _publish(_publisher(a), "st", [b"a0", b"a1", b"a2"])
    frames: list[tuple[str, str]] = []

    class Collect(stomp.ConnectionListener):
        def on_message(self, frame) -> None:  # noqa: ANN001 - stomp.py's frame
            frames.append((frame.headers["x-stream-offset"], frame.body))
            reader.ack(frame.headers["ack"])

    sender = stomp.Connection12([("127.0.0.1", b.stomp)], heartbeats=(0, 0), vhost="/")
    sender.connect("guest", "guest", wait=True)
    reader = stomp.Connection12([("127.0.0.1", c.stomp)], heartbeats=(0, 0), vhost="/")
    reader.set_listener("c", Collect())
    reader.connect("guest", "guest", wait=True)
    try:
        reader.subscribe("/amq/queue/st", "1", ack="client-individual",
                         headers={"x-stream-offset": "offset=1", "prefetch-count": "10"})
        sender.send("/amq/queue/st", "b0", headers={"persistent": "true", "receipt": "r1"})
        wait_for(lambda: len(frames) >= 3, what="three STOMP deliveries on c")
        time.sleep(0.3)
        assert frames == [("1", "a1"), ("2", "a2"), ("3", "b0")]
    finally:
        sender.disconnect()
        reader.disconnect()
