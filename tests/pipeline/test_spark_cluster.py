"""The Spark source on a three-node cluster: each partition of a partitioned stream is read on the
node that leads it (the driver asks one node which node leads which partition), and from any other
node when its leader is down."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from clusterkit import Node, Nodes, wait_for  # noqa: E402
from pgtest import fresh_db, throwaway_server  # noqa: E402
from pipelinekit import Broker  # noqa: E402

from pipeline.leaders import leader_urls  # noqa: E402

PARTS = [f"spk-{i}" for i in range(3)]


@pytest.fixture
def cluster() -> Iterator[Nodes]:
    with throwaway_server() as server, fresh_db(server) as dsn:
        nodes = Nodes(dsn)
        try:
            yield nodes
        finally:
            nodes.kill_all()


def _delivered(node: Node, queue: str) -> int:
    """Deliveries of ``queue`` made by ``node`` (its consumers there)."""
    stats = node.api(f"queues/%2F/{queue}").get("message_stats") or {}
    return int(stats.get("deliver_get", 0))


def _read(spark: Any, url: str) -> dict[str, list[tuple[int, bytes]]]:
    rows = spark.read.format("sansmq").option("url", url).option("stream", "spk").load().collect()
    out: dict[str, list[tuple[int, bytes]]] = {}
    for row in sorted(rows, key=lambda r: (r.stream, r.offset)):
        out.setdefault(row.stream, []).append((row.offset, bytes(row.body)))
    return out


def test_the_spark_source_reads_each_partition_on_the_node_leading_it(spark: Any, cluster: Nodes) -> None:
    a, b, c = cluster.start("a", "b", "c")
    wait_for(lambda: sum(n["running"] for n in cluster.status()["nodes"]) == 3, what="three live nodes")
    made = subprocess.run([sys.executable, "-m", "servers", "streams", "create-partitioned", "spk", "--partitions",
                           "3", "--amqp", f"127.0.0.1:{a.amqp}"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    leaders = {p: cluster[cluster.leader(p)[0]] for p in PARTS}  # type: ignore[index]
    assert len({n.name for n in leaders.values()}) == 3
    wait_for(lambda: all(n.has_queue("spk-2") for n in (b, c)), what="partitions on every node")
    ch = c.pika().channel()
    ch.confirm_delivery()
    for i in range(3):
        for j in range(10):
            ch.basic_publish("spk", str(i), b"p%d-%d" % (i, j), pika.BasicProperties(delivery_mode=2))
    want = {p: [(j, b"p%d-%d" % (i, j)) for j in range(10)] for i, p in enumerate(PARTS)}
    url = f"amqp://guest:guest@127.0.0.1:{a.amqp},127.0.0.1:{b.amqp},127.0.0.1:{c.amqp}/%2F"
    # the driver's answer: each partition's URL names its leader's host first
    urls = leader_urls(url, tuple(PARTS), 10.0)
    assert {p: u.split("@", 1)[1].split(",")[0] for p, u in urls.items()} == {
        p: f"127.0.0.1:{n.amqp}" for p, n in leaders.items()}
    assert _read(spark, url) == want
    for p, leader in leaders.items():  # every partition's tasks read it on its leader
        assert _delivered(leader, p) >= 10, p
        # elsewhere at most the driver's probes of the first and end offsets (through the first host)
        assert all(_delivered(n, p) < 10 for n in (a, b, c) if n is not leader), p
        assert all(_delivered(n, p) == 0 for n in (b, c) if n is not leader), p
    # its leader down (its lease not even run out yet): that partition is read on another node
    gone = leaders["spk-0"]
    gone.kill()
    assert _read(spark, url) == want


def test_a_streaming_copy_survives_the_failover_of_its_streams_leader(spark: Any, cluster: Nodes,
                                                                       tmp_path: Path) -> None:
    """A query copies one stream of a three-node cluster into another; the node leading both is
    killed mid-query. Its leases run out, the other nodes take the streams over (their records are in
    PostgreSQL), and the query's probes, reads and publishes carry on through the URL's other hosts:
    every row once, in order (the sink's repeats after the failover dropped by producer deduplication,
    whose state the new leader reads from PostgreSQL)."""
    nodes = cluster.start("a", "b", "c")
    wait_for(lambda: sum(n["running"] for n in cluster.status()["nodes"]) == 3, what="three live nodes")
    url = "amqp://guest:guest@" + ",".join(f"127.0.0.1:{n.amqp}" for n in nodes) + "/%2F"
    broker = Broker(url, dedup=True, name="sansmq cluster")
    src, dst = broker.stream("pipe-fo-src"), broker.stream("pipe-fo-dst")
    broker.publish(src, [b"%06d" % i for i in range(2000)])
    led = {q: cluster.leader(q) for q in (src, dst)}
    assert all(led.values()), led
    gone = cluster[led[src][0]]  # type: ignore[index]
    q = (spark.readStream.format("sansmq").option("url", url).option("stream", src)
         .option("maxRecordsPerTrigger", "200").option("idleWaitMs", "500").option("timeoutMs", "5000").load()
         .select("body").writeStream.format("sansmq").option("url", url).option("stream", dst)
         .option("timeoutMs", "5000").option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        wait_for(lambda: broker.end(dst) >= 400 or q.exception(), 120, "the copy under way")
        assert q.exception() is None, q.exception()
        gone.kill()
        wait_for(lambda: all(cluster.leader(s) and cluster.leader(s)[0] != gone.name for s in (src, dst)),  # type: ignore[index]
                 60, "the streams' leases taken over")
        broker.finish_copy(q, src, dst, 2000, 1000, wait_for, "the copy after the failover")
    finally:
        q.stop()
