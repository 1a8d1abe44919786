"""Offsets a query was to read are gone: it fails naming the stream and the offsets
(``failOnDataLoss``, default true, as Spark's Kafka source), or with ``failOnDataLoss=false`` skips
them and reads on. Each case used to lose data without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pipelinekit import Broker

from sansmq_client import sync

#: small segments with a byte limit: retention removes old segments as the stream grows
RETAINED = {"x-stream-max-segment-size-bytes": 4000, "x-max-length-bytes": 20000}


def _cause(excinfo: pytest.ExceptionInfo) -> str:
    """The line naming the pipeline's exception inside Spark's wrapping."""
    ours = [line for line in str(excinfo.value).splitlines() if line.startswith("pipeline.")]
    assert ours, str(excinfo.value)
    return ours[0]


def _copy(spark, broker: Broker, stream: str, out: Path, ck: Path, **options: str) -> list[int]:
    """An availableNow query from ``stream`` into parquet at ``out``; the offsets it wrote this run."""
    reader = spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    if q.exception() is not None:
        raise q.exception()
    ends = [json.loads(p["sources"][0]["endOffset"])[stream] for p in q.recentProgress if p["numInputRows"]]
    return ends


def _offsets(spark, out: Path) -> list[int]:
    return sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())


def test_offsets_removed_by_retention_between_batches_fail_the_query(spark, broker: Broker, tmp_path: Path) -> None:
    stream = broker.stream("pipe-loss-ret", **RETAINED)
    broker.publish(stream, [b"%099d" % i for i in range(150)])
    first = broker.first(stream)  # retention already ran: earliest is the first offset kept, not 0
    out, ck = tmp_path / "out", tmp_path / "ck"
    _copy(spark, broker, stream, out, ck)
    assert _offsets(spark, out) == list(range(first, 150))

    broker.publish(stream, [b"%099d" % i for i in range(150, 1000)])  # retention removes 150.. unread
    now_first = broker.first(stream)
    assert now_first > 150
    with pytest.raises(Exception) as e:
        _copy(spark, broker, stream, out, ck)
    assert _cause(e) == (f"pipeline.dataloss.DataLossError: stream {stream!r}: offsets 150..{now_first - 1} "
                         f"({now_first - 150}) were removed (retention) before they were read; the stream's "
                         f"first offset is now {now_first}; the query stops (failOnDataLoss=true; with "
                         f"failOnDataLoss=false they are skipped with a warning)")
    assert _offsets(spark, out) == list(range(first, 150))  # nothing was written past the gap

    _copy(spark, broker, stream, out, ck, failOnDataLoss="false")  # skips the gap, reads on
    assert _offsets(spark, out) == list(range(first, 150)) + list(range(now_first, 1000))


def _recreated(spark, broker: Broker, tmp_path: Path, prefix: str, old: int, new: int) -> tuple[str, str]:
    """A stream copied up to offset ``old`` (a checkpoint), then deleted and recreated with ``new``
    records: the stream and the cause the next copy fails with. With failOnDataLoss=false the copy
    then reads the new stream from its beginning (checked here)."""
    stream = broker.stream(prefix)
    broker.publish(stream, [b"old %d" % i for i in range(old)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    _copy(spark, broker, stream, out, ck)
    with sync.connect(broker.url) as c:
        c.delete_queue(stream)
        c.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"})
    broker.publish(stream, [b"new %d" % i for i in range(new)])
    with pytest.raises(Exception) as e:
        _copy(spark, broker, stream, out, ck)
    assert _offsets(spark, out) == list(range(old))  # nothing of the new stream was taken for the old one's
    _copy(spark, broker, stream, out, ck, failOnDataLoss="false")
    bodies = sorted(r.body for r in spark.read.parquet(str(out)).collect())
    assert bodies == sorted([b"old %d" % i for i in range(old)] + [b"new %d" % i for i in range(new)])
    return stream, _cause(e)


def test_a_checkpoint_past_the_end_of_a_recreated_stream_fails_the_query(spark, broker: Broker,
                                                                         tmp_path: Path) -> None:
    """The README example re-run against a fresh broker printed 0: the checkpoint said 1000, the
    new stream ended at 0, and the query waited for offset 1000 forever without a word."""
    stream, cause = _recreated(spark, broker, tmp_path, "pipe-loss-recreated", 100, 30)
    assert cause.startswith(f"pipeline.dataloss.DataLossError: stream {stream!r}: the query's next offset 100 "
                            f"is past the stream's end 30: the stream was deleted and recreated, or this is "
                            f"another broker than the checkpoint's (offsets 30..99 are not there)")


def test_a_recreated_stream_that_grew_past_the_checkpoint_fails_the_query(spark, broker: Broker,
                                                                          tmp_path: Path) -> None:
    """Deleted and recreated, the stream has meanwhile more records than the checkpoint's offset:
    the offsets alone cannot tell, the append time of the record below the offset does."""
    if not broker.dedup:
        pytest.skip("RabbitMQ shows no append times over AMQP 0-9-1: a recreated stream is not told apart")
    stream, cause = _recreated(spark, broker, tmp_path, "pipe-loss-regrown", 20, 50)
    assert cause.startswith(f"pipeline.dataloss.DataLossError: stream {stream!r}: the record at offset 19 was "
                            f"appended at ")
    assert "the stream was deleted and recreated" in cause


def test_batch_read_offsets_are_checked_on_the_driver(spark, broker: Broker) -> None:
    stream = broker.stream("pipe-loss-batch", **RETAINED)
    broker.publish(stream, [b"%099d" % i for i in range(1000)])
    first = broker.first(stream)
    assert first > 10

    def read(**options: str):
        reader = spark.read.format("sansmq").option("url", broker.url).option("stream", stream)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    assert sorted(r.offset for r in read().select("offset").collect()) == list(range(first, 1000))
    with pytest.raises(Exception) as e:
        read(startingOffsets=json.dumps({stream: 10})).count()
    assert _cause(e).startswith(f"pipeline.dataloss.DataLossError: stream {stream!r}: offsets 10..{first - 1} "
                                f"({first - 10}) were removed (retention) before they were read")
    got = read(startingOffsets=json.dumps({stream: 10}), failOnDataLoss="false").select("offset").collect()
    assert sorted(r.offset for r in got) == list(range(first, 1000))
    with pytest.raises(Exception) as e:
        read(endingOffsets=json.dumps({stream: 1001})).count()
    assert _cause(e) == (f"pipeline.options.OptionError: option endingOffsets: 1001 for stream {stream!r} "
                         f"is past its end 1000")
    with pytest.raises(Exception) as e:
        read(startingOffsets=json.dumps({stream: 990}), endingOffsets=json.dumps({stream: 980})).count()
    assert _cause(e) == (f"pipeline.options.OptionError: option startingOffsets: 990 for stream {stream!r} "
                         f"is after its ending offset 980")


@pytest.mark.parametrize("fail", [True, False])
def test_a_stream_deleted_while_the_query_runs(spark, broker: Broker, fail: bool) -> None:
    from e2ekit import wait_until

    a, b = broker.stream("pipe-loss-del-a"), broker.stream("pipe-loss-del-b")
    broker.publish(a, [b"a"] * 10)
    broker.publish(b, [b"b"] * 10)
    name = a.replace("-", "_")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", f"{a},{b}")
         .option("idleWaitMs", "300").option("failOnDataLoss", str(fail).lower()).load()
         .writeStream.format("memory").queryName(name).start())
    try:
        wait_until(lambda: spark.sql(f"select count(*) c from {name}").first().c == 20 or q.exception(), 120,
                   "the first 20 rows")
        with sync.connect(broker.url) as c:
            c.delete_queue(a)
        if fail:
            wait_until(lambda: q.exception() is not None, 120, "the query to fail")
            assert f"pipeline.dataloss.DataLossError: stream {a!r} no longer exists (404 NOT_FOUND" in str(q.exception())
            return
        broker.publish(b, [b"b"] * 5)  # the other stream is read on
        wait_until(lambda: spark.sql(f"select count(*) c from {name}").first().c == 25 or q.exception(), 120,
                   "b's new rows")
        assert q.exception() is None and q.isActive
    finally:
        q.stop()
