"""Time on format "sansmq": ``timestamp`` is the broker's append time of every record (sansmq stamps
deliveries when the reader asks, capability stream_timestamp), and ``startingTimestamp`` /
``startingOffsetsByTimestamp`` start at the first record appended at or after a time."""

from __future__ import annotations

import json
import time

import pytest
from pipelinekit import Broker

from pipeline.driver import Driver
from pipeline.offsets import record_time


def _read(spark, broker: Broker, stream: str, **options: str):
    reader = spark.read.format("sansmq").option("url", broker.url).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_timestamp_is_the_append_time_and_a_starting_time_starts_there(spark, broker: Broker) -> None:
    if not broker.dedup:
        pytest.skip("RabbitMQ does not stamp stream deliveries over AMQP 0-9-1")
    stream = broker.stream("pipe-time")
    before = int(time.time() * 1000)
    broker.publish(stream, [b"early-%d" % i for i in range(3)])  # the publisher sets no timestamp property
    time.sleep(1.2)
    middle = int(time.time() * 1000)
    broker.publish(stream, [b"late-%d" % i for i in range(4)])
    after = int(time.time() * 1000)
    with Driver(broker.url, 30.0) as c:
        appended = [record_time(c, stream, i) for i in range(7)]
    assert all(t is not None for t in appended)

    rows = _read(spark, broker, stream).orderBy("offset").collect()
    stamps = [int(r.timestamp.timestamp() * 1000) for r in rows]
    assert stamps == appended  # the broker's append times, to the millisecond
    assert before <= stamps[0] <= stamps[2] < middle <= stamps[3] <= stamps[6] <= after
    assert all("x-stream-timestamp" not in r.headers for r in rows)  # in the column, not the headers

    late = _read(spark, broker, stream, startingTimestamp=str(stamps[3])).orderBy("offset").collect()
    assert [r.offset for r in late] == [3, 4, 5, 6]
    by_stream = _read(spark, broker, stream, startingOffsetsByTimestamp=json.dumps({stream: middle}))
    assert [r.offset for r in by_stream.orderBy("offset").collect()] == [3, 4, 5, 6]  # in the second between
    with pytest.raises(Exception, match="has no record appended at or after"):
        _read(spark, broker, stream, startingTimestamp=str(after + 60_000)).collect()


def test_a_streaming_query_starts_at_its_starting_time(spark, broker: Broker, tmp_path) -> None:
    if not broker.dedup:
        pytest.skip("RabbitMQ does not stamp stream deliveries over AMQP 0-9-1")
    stream = broker.stream("pipe-time-stream")
    broker.publish(stream, [b"old"] * 5)
    time.sleep(1.1)
    cut = int(time.time() * 1000)
    broker.publish(stream, [b"new"] * 3)
    df = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
          .option("startingTimestamp", str(cut)).load())
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    got = spark.read.parquet(str(tmp_path / "out")).orderBy("offset").collect()
    assert [(r.offset, r.body) for r in got] == [(5, b"new"), (6, b"new"), (7, b"new")]
