"""The sink never drops or mangles rows silently: dedup producers are per query/job even under a
user's producerId, column types and the target are checked on the driver, only Append is taken,
and a row no queue takes fails the task."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipelinekit import Broker


def _cause(excinfo: pytest.ExceptionInfo) -> str:
    ours = [line for line in str(excinfo.value).splitlines() if line.startswith("pipeline.")]
    assert ours, str(excinfo.value)
    return ours[0]


def _write(df, broker: Broker, **options: str) -> None:
    w = df.write.format("sansmq").option("url", broker.url)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_one_producer_id_for_two_batch_jobs_loses_nothing(spark, broker: Broker) -> None:
    """Reusing producerId made the second job's rows (publishing ids 1..100 again) repeats that
    the broker's deduplication confirmed and dropped: 100 of 100 lost."""
    dst = broker.stream("pipe-sink-pid")
    df = spark.createDataFrame([(f"row {i}",) for i in range(100)], "body string").coalesce(1)
    _write(df, broker, stream=dst, producerId="nightly")
    _write(df, broker, stream=dst, producerId="nightly")
    got = broker.read_all(dst, 200)
    assert len(got) == 200 and broker.end(dst) == 200
    producers = {h["x-producer"] for _, _, h in got}
    assert len(producers) == 2 and all(p.startswith("nightly-") and p.endswith("-0") for p in producers)


def test_one_producer_id_for_two_streaming_queries_loses_nothing(spark, broker: Broker, tmp_path: Path) -> None:
    src, dst = broker.stream("pipe-sink-qsrc"), broker.stream("pipe-sink-qdst")
    broker.publish(src, [b"%d" % i for i in range(200)])
    ids = []
    for run in ("a", "b"):  # two queries (two checkpoints) copying the same rows under one producerId
        q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", src).load()
             .select("body").writeStream.format("sansmq").option("url", broker.url).option("stream", dst)
             .option("producerId", "copier").option("checkpointLocation", str(tmp_path / run))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        ids.append(q.id)
    got = broker.read_all(dst, 400)
    assert broker.end(dst) == 400
    assert {h["x-producer"] for _, _, h in got} == {f"copier-{i}-0" for i in ids}


def test_sink_schema_target_and_mode_are_checked_on_the_driver(spark, broker: Broker) -> None:
    dst = broker.stream("pipe-sink-check")
    with pytest.raises(Exception) as e:  # it used to publish bytes(7): seven zero bytes
        _write(spark.createDataFrame([(7,)], "body int"), broker, stream=dst)
    assert _cause(e) == ('pipeline.options.OptionError: the sansmq sink\'s column "body" must be binary or '
                         'string, not int (cast it, e.g. cast(body as string))')
    with pytest.raises(Exception) as e:
        _write(spark.createDataFrame([("x", {"n": 1})], "body string, headers map<string,int>"), broker, stream=dst)
    assert 'column "headers" must be map<string,string>, not map<string,int>' in _cause(e)
    with pytest.raises(Exception) as e:
        _write(spark.createDataFrame([("x",)], "body string"), broker, exchange="pipe-no-such-exchange",
               routingKey="k")
    assert _cause(e) == ("pipeline.options.OptionError: option exchange: 404 NOT_FOUND - no exchange "
                         "'pipe-no-such-exchange' in vhost '/'")
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("x",)], "body string").write.format("sansmq").option("url", broker.url).option(
            "stream", dst).mode("overwrite").save()
    assert _cause(e) == 'pipeline.options.OptionError: the sansmq sink only appends: use mode("append"), not "overwrite"'
    assert broker.end(dst) == 0


def test_an_unroutable_row_fails_the_task(spark, broker: Broker) -> None:
    """Publishes are mandatory: a row whose routing key no queue is bound for comes back
    (basic.return) and fails the write instead of vanishing."""
    dst = broker.stream("pipe-sink-route")
    from sansmq_client import sync

    with sync.connect(broker.url) as c:
        c.bind_queue(dst, "amq.direct", dst)
    rows = spark.createDataFrame([("ok", dst), ("lost", "pipe-nobody-listens")], "body string, routing_key string")
    with pytest.raises(Exception) as e:
        _write(rows.coalesce(1), broker, exchange="amq.direct")
    assert "sansmq_client._errors.Unroutable: a publish up to #" in str(e.value)
    assert "was returned: 312 NO_ROUTE (exchange 'amq.direct', routing key 'pipe-nobody-listens')" in str(e.value)


def test_a_streaming_commit_or_abort_never_needs_the_broker(spark_available: None) -> None:
    """Spark builds the stream writer again (streamWriter()) for every batch's commit and abort:
    with the broker down, the abort of a failed batch used to fail too, trying to connect."""
    import time

    from pyspark.sql.types import StringType, StructField, StructType

    from pipeline.datasource import SansmqDataSource

    source = SansmqDataSource({"url": "amqp://guest:guest@127.0.0.1:1/%2F", "stream": "s",
                               "checkpointLocation": "/tmp/ck"})
    t0 = time.monotonic()
    writer = source.streamWriter(StructType([StructField("body", StringType())]), False)
    writer.abort([None], 3)
    writer.commit([None], 3)
    assert time.monotonic() - t0 < 1.0


def test_the_sink_publishes_its_unconfirmed_rows_again_after_the_connection_breaks(
        spark_available: None, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection breaks with rows published but not confirmed: a new connection publishes
    them again with the same publishing ids, and the broker's deduplication keeps each row once."""
    import socket

    import pipeline.sink
    from amqpproto import spec
    from pipeline.options import WriteOptions
    from pipeline.sink import _publish, publishing_id
    from sansmq_client import ConnectionLost

    dst = broker.stream("pipe-sink-break")
    opts = WriteOptions.parse({"url": broker.url, "stream": dst, "confirmWindow": "100"}, {"body": "binary"})

    def headers(row: int) -> dict[str, object]:
        return {"x-producer": f"break-{dst}", "x-publishing-id": publishing_id(0, row)}

    real = pipeline.sink.publish_batch
    calls: list[int] = []

    def breaking(conn, exchange, messages, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(messages))
        if len(calls) > 1:
            return real(conn, exchange, messages, **kw)
        real(conn, exchange, messages[:290], **kw)
        for row in range(290, 400):  # appended by the broker, their confirms never read
            conn.publish(dst, b"%d" % row, confirm=False,
                         properties=spec.BasicProperties(delivery_mode=2, headers=headers(row)))
        conn._sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the publisher
        lost = ConnectionLost("broken by the test")
        lost.confirmed = 290  # type: ignore[attr-defined]
        raise lost

    monkeypatch.setattr(pipeline.sink, "publish_batch", breaking)
    rows = [(dst, spec.encode_properties(spec.BasicProperties(delivery_mode=2, headers=headers(row))), b"%d" % row)
            for row in range(600)]
    _publish(opts, rows, [])
    assert calls == [600, 310]  # the unconfirmed rest again, on a new connection
    if broker.dedup:
        assert [b for _, b, _ in broker.read_all(dst, 600)] == [b"%d" % i for i in range(600)]
        assert broker.end(dst) == 600
