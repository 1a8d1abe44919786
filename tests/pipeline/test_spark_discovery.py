"""Partitions added to a partitioned stream while a streaming query reads it are discovered and
read from their first offset (Spark's Kafka source reads new partitions from earliest)."""

from __future__ import annotations

import os

from e2ekit import wait_until
from pipelinekit import Broker

from sansmq_client import sync


def test_a_partition_added_while_the_query_runs_is_read_from_its_first_offset(spark, broker: Broker) -> None:
    name = f"pipe-parts-{os.getpid()}"
    with sync.connect(broker.url) as c:
        for i in range(2):
            c.declare_queue(f"{name}-{i}", durable=True, arguments={"x-queue-type": "stream"})
    broker.publish(f"{name}-0", [b"p0"] * 5)
    broker.publish(f"{name}-1", [b"p1"] * 7)
    table = name.replace("-", "_")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", name)
         .option("idleWaitMs", "300").load().writeStream.format("memory").queryName(table).start())

    def rows() -> dict[str, int]:
        return {r.stream: r.n for r in spark.sql(f"select stream, count(*) n from {table} group by stream").collect()}

    try:
        wait_until(lambda: rows() == {f"{name}-0": 5, f"{name}-1": 7} or q.exception(), 120, "the two partitions")
        with sync.connect(broker.url) as c:
            c.declare_queue(f"{name}-2", durable=True, arguments={"x-queue-type": "stream"})
        broker.publish(f"{name}-2", [b"p2"] * 4)
        broker.publish(f"{name}-0", [b"p0"] * 1)
        wait_until(lambda: rows() == {f"{name}-0": 6, f"{name}-1": 7, f"{name}-2": 4} or q.exception(), 120,
                   "the new partition's rows")
        assert q.exception() is None, q.exception()
        offsets = sorted(r.offset for r in spark.sql(f"select offset from {table} where stream = '{name}-2'").collect())
        assert offsets == [0, 1, 2, 3]
    finally:
        q.stop()


def test_subscribe_pattern_reads_the_matching_streams_and_those_created_later(spark, tmp_path) -> None:
    """Kafka's subscribePattern: the streams whose whole name matches, listed by the management API
    (AMQP 0-9-1 cannot list queues); a matching stream created while the query runs joins it."""
    from e2ekit import start_server
    from pipelinekit import Broker

    config = tmp_path / "sansmq.toml"
    config.write_text("")
    srv = start_server("threads", config)
    try:
        broker = Broker(f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/%2F", dedup=True, name="sansmq")
        tag = os.getpid()
        with sync.connect(broker.url) as c:
            for name in (f"orders-{tag}-eu", f"orders-{tag}-us", f"audit-{tag}", f"orders-{tag}-eu-x"):
                c.declare_queue(name, durable=True, arguments={"x-queue-type": "stream"})
            c.declare_queue(f"orders-{tag}-classic", durable=True)  # matches, but no stream
        for name in (f"orders-{tag}-eu", f"orders-{tag}-us", f"audit-{tag}", f"orders-{tag}-eu-x"):
            broker.publish(name, [name.encode()] * 3)
        table = f"pattern_{tag}"
        q = (spark.readStream.format("sansmq").option("url", broker.url)
             .option("subscribePattern", rf"orders-{tag}-[a-z]+")
             .option("managementUrl", f"http://127.0.0.1:{srv.port('http')}").option("idleWaitMs", "300").load()
             .writeStream.format("memory").queryName(table).start())

        def rows() -> dict[str, int]:
            return {r.stream: r.n for r in spark.sql(f"select stream, count(*) n from {table} group by stream").collect()}

        try:
            want = {f"orders-{tag}-eu": 3, f"orders-{tag}-us": 3}
            wait_until(lambda: rows() == want or q.exception(), 120, "the matching streams")
            with sync.connect(broker.url) as c:
                c.declare_queue(f"orders-{tag}-asia", durable=True, arguments={"x-queue-type": "stream"})
            broker.publish(f"orders-{tag}-asia", [b"asia"] * 2)
            wait_until(lambda: rows() == {**want, f"orders-{tag}-asia": 2} or q.exception(), 120, "the new stream")
            assert q.exception() is None, q.exception()
        finally:
            q.stop()
    finally:
        srv.terminate()
