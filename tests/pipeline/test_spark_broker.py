"""Reaching the broker: amqps:// with a client certificate and a cluster's several hosts in the URL
(tried in order), and a query that outlives a broker restart."""

from __future__ import annotations

from pathlib import Path

from e2ekit import start_server
from tlskit import make_pki, start_tls_server

from sansmq_client import sync
from servers.management import OPS_EPHEMERAL


def test_amqps_with_a_client_certificate_and_several_hosts(spark, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    srv = start_tls_server("threads", pki, tmp_path)
    try:
        port = srv.port("amqps")
        # the first host refuses (nothing listens on port 1): the next one is tried
        url = (f"amqps://guest:guest@127.0.0.1:1,localhost:{port}/%2F?cacertfile={pki.ca}"
               f"&certfile={pki.client_cert}&keyfile={pki.client_key}")
        with sync.connect(url) as c:
            c.declare_queue("pipe-tls", durable=True, arguments={"x-queue-type": "stream"})
        rows = spark.createDataFrame([(f"secret {i}",) for i in range(200)], "body string").repartition(2)
        rows.write.format("sansmq").option("url", url).option("stream", "pipe-tls").mode("append").save()
        got = spark.read.format("sansmq").option("url", url).option("stream", "pipe-tls").load()
        assert sorted(r.body for r in got.collect()) == sorted(f"secret {i}".encode() for i in range(200))
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streaming_query_survives_a_10_second_broker_restart(spark, tmp_path: Path) -> None:
    """A broker on the segment store stops for 10 s while a query copies one stream into another;
    the query's probes, reads and publishes wait for it, and the copy is exact: every row once, in
    order (the sink's repeats after the reconnect are dropped by producer deduplication)."""
    import time

    from e2ekit import ServerProcess, wait_until
    from pipelinekit import Broker

    config = tmp_path / "sansmq.toml"
    config.write_text("")
    port, data = _free_port(), tmp_path / "data"

    def serve() -> ServerProcess:
        import sys

        return ServerProcess([sys.executable, "-m", "servers", "serve", "--server", "threads", "--amqp",
                              f"127.0.0.1:{port}", "--stomp", "127.0.0.1:0", "--ws", "127.0.0.1:0", *OPS_EPHEMERAL,
                              "--data", str(data), "--config", str(config)], "threads")

    srv = serve()
    broker = Broker(f"amqp://guest:guest@127.0.0.1:{port}/%2F", dedup=True, name="sansmq")
    src, dst = broker.stream("pipe-restart-src"), broker.stream("pipe-restart-dst")
    broker.publish(src, [b"%06d" % i for i in range(3000)])
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", src)
         .option("maxRecordsPerTrigger", "300").option("idleWaitMs", "500").option("timeoutMs", "5000").load()
         .select("body").writeStream.format("sansmq").option("url", broker.url).option("stream", dst)
         .option("timeoutMs", "5000").option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        wait_until(lambda: broker.end(dst) >= 600 or q.exception(), 120, "the copy under way")
        assert srv.terminate() == 0
        time.sleep(10)
        srv = serve()
        broker.finish_copy(q, src, dst, 3000, 1000, wait_until, "the copy after the restart")
    finally:
        q.stop()
        srv.terminate()


def test_executors_reuse_one_connection_across_tasks_and_batches(spark, tmp_path: Path) -> None:
    """16 range reads (4 micro-batches of 4 partitions) on local[2]: the broker's event exchange
    counts the AMQP connections opened meanwhile. Each task used to open its own (17 with the
    driver's); now each executor Python worker keeps one."""
    from pipelinekit import Broker

    config = tmp_path / "sansmq.toml"
    config.write_text("")
    srv = start_server("threads", config, "--events", "/")
    try:
        broker = Broker(f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/%2F", dedup=True, name="sansmq")
        stream = broker.stream("pipe-reuse")
        broker.publish(stream, [b"%04d" % i for i in range(4000)])
        with sync.connect(broker.url) as events:
            events.declare_queue("connections-opened")
            events.bind_queue("connections-opened", "amq.rabbitmq.event", "connection.created")
            q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
                 .option("maxRecordsPerTrigger", "1000").option("maxRecordsPerPartition", "250").load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
            q.awaitTermination(300)
            assert q.exception() is None, q.exception()
            assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [1000] * 4
            sub = events.subscribe("connections-opened", prefetch=100)
            opened = 0
            while (d := sub.get(2.0)) is not None:
                events.ack(d)
                opened += 1
        assert 1 <= opened <= 5, opened  # the driver's, one per Python worker (2 slots), a spare
    finally:
        srv.terminate()
