"""Format "sansmq" on a real SparkSession (local[2]) against a real broker over AMQP 0-9-1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pipelinekit import Broker

from pipeline.identity import split

N = 100_000


def _stream_query(spark, broker: Broker, stream: str, **options: str):
    reader = spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _run_available_now(df, out: Path, checkpoint: Path) -> list[dict]:
    q = (df.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    return [p for p in q.recentProgress if p["numInputRows"] > 0]


def test_available_now_reads_100k_then_resumes_from_the_checkpoint(spark, broker: Broker, tmp_path: Path) -> None:
    stream = broker.stream("pipe-100k")
    broker.publish(stream, [b"%06d" % i for i in range(N)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    df = _stream_query(spark, broker, stream, maxRecordsPerTrigger="40000", maxRecordsPerPartition="20000")

    progress = _run_available_now(df, out, ck)
    assert [p["numInputRows"] for p in progress] == [40_000, 40_000, 20_000]  # admission control
    end, stamps = split(json.loads(progress[-1]["sources"][0]["endOffset"]))
    assert end == {stream: N} and (stamps.keys() == {stream}) == broker.dedup  # RabbitMQ: no append times
    rows = spark.read.parquet(str(out))
    agg = rows.selectExpr("count(*) n", "count(distinct offset) d", "min(offset) lo", "max(offset) hi",
                          "sum(cast(cast(body as string) as int) - offset) drift").first()
    assert (agg.n, agg.d, agg.lo, agg.hi, agg.drift) == (N, N, 0, N - 1, 0)
    first = rows.where("offset = 7").first()
    assert first.stream == stream and first.routing_key == stream and first.content_type == "text/plain"
    assert first.headers["x-stream-offset"] == "7"

    # more data, same checkpoint: a new query resumes at N and reads only the new messages
    broker.publish(stream, [b"%06d" % i for i in range(N, N + 1000)])
    progress = _run_available_now(_stream_query(spark, broker, stream), out, ck)
    assert sum(p["numInputRows"] for p in progress) == 1000
    assert split(json.loads(progress[0]["sources"][0]["startOffset"]))[0] == {stream: N}
    agg = spark.read.parquet(str(out)).selectExpr("count(*) n", "count(distinct offset) d").first()
    assert (agg.n, agg.d) == (N + 1000, N + 1000)


def test_transform_writes_into_another_stream(spark, broker: Broker, tmp_path: Path) -> None:
    src, dst = broker.stream("pipe-src"), broker.stream("pipe-dst")
    broker.publish(src, [b"before the start"] * 100)
    broker.publish(src, [f"event {i}".encode() for i in range(3000)], headers={"kind": "demo"})
    df = _stream_query(spark, broker, src, maxRecordsPerTrigger="1000", startingOffsets=json.dumps({src: 100}))
    q = (df.selectExpr("upper(cast(body as string)) as body", "headers", "'text/upper' as content_type")
         .writeStream.format("sansmq").option("url", broker.url).option("stream", dst)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    got = broker.read_all(dst, 3000)
    assert [b for _, b, _ in got] == [f"EVENT {i}".encode() for i in range(3000)]
    assert [o for o, _, _ in got] == list(range(3000))
    h = got[5][2]
    assert h["kind"] == "demo" and h["x-producer"] == f"spark-{q.id}-0"  # query id, Spark partition
    # (batch id + 1) << 32 | row + 1: three micro-batches of 1000 rows, one partition each
    assert [got[i][2]["x-publishing-id"] for i in (0, 5, 1005, 2999)] == [
        (1 << 32) | 1, (1 << 32) | 6, (2 << 32) | 6, (3 << 32) | 1000]
    assert h["x-stream-offset"] == 5  # the output stream's own offset, not a copy of the input's
    assert broker.end(dst) == 3000


def test_batch_write_then_batch_read_of_a_range(spark, broker: Broker) -> None:
    dst = broker.stream("pipe-batch")
    # an empty range plans no partition; Spark still runs one task, which must read nothing
    assert spark.read.format("sansmq").option("url", broker.url).option("stream", dst).load().count() == 0
    rows = [(f"row {i}", "k", {"n": str(i)}) for i in range(500)]
    df = spark.createDataFrame(rows, "body string, routing_key string, headers map<string,string>").repartition(2)
    df.write.format("sansmq").option("url", broker.url).option("stream", dst).mode("append").save()
    assert broker.end(dst) == 500

    whole = spark.read.format("sansmq").option("url", broker.url).option("stream", dst).load()
    assert sorted(r.body.decode() for r in whole.collect()) == sorted(r[0] for r in rows)
    part = (spark.read.format("sansmq").option("url", broker.url).option("stream", dst)
            .option("startingOffsets", json.dumps({dst: 100})).option("endingOffsets", json.dumps({dst: 250}))
            .option("maxRecordsPerPartition", "40").load())
    assert part.rdd.getNumPartitions() == 4
    offsets = sorted(r.offset for r in part.select("offset").collect())
    assert offsets == list(range(100, 250))


def test_several_streams_in_one_query(spark, broker: Broker) -> None:
    a, b = broker.stream("pipe-a"), broker.stream("pipe-b")
    broker.publish(a, [b"a"] * 30)
    broker.publish(b, [b"b"] * 70)
    df = spark.read.format("sansmq").option("url", broker.url).option("stream", f"{a},{b}").load()
    counts = {r.stream: r["count"] for r in df.groupBy("stream").count().collect()}
    assert counts == {a: 30, b: 70}


def _error_text(excinfo: pytest.ExceptionInfo) -> str:
    return str(excinfo.value)


def _cause(excinfo: pytest.ExceptionInfo) -> str:
    """The one line naming the cause, inside Spark's wrapping (its traceback of the Python worker):
    the exception raised by the pipeline package, and nothing raised after it masking it."""
    lines = str(excinfo.value).splitlines()
    ours = [line for line in lines if line.startswith(("pipeline.", "sansmq_client."))]
    assert len(ours) == 1, lines
    assert "During handling of the above exception" not in str(excinfo.value), lines
    return ours[0]


def _run(df, checkpoint: Path) -> None:
    """Count a batch DataFrame; run a streaming one into the console sink."""
    if not df.isStreaming:
        df.count()
        return
    q = df.writeStream.format("console").option("checkpointLocation", str(checkpoint)).start()
    try:
        q.awaitTermination(120)
    finally:
        q.stop()


def test_clear_errors(spark, broker: Broker, tmp_path: Path) -> None:
    nowhere = "amqp://guest:guest@127.0.0.1:1/%2F"
    refused = "sansmq_client._errors.ConnectionLost: could not connect to any of [('127.0.0.1', 1)]: "
    # a refused connection is retried for retryDeadlineMs (60 s by default, three minutes over the
    # three cases here); 1 s gives the same error (test_pipeline_units covers the retrying)
    gave_up = "gave up after retrying for 1s (option retryDeadlineMs)"
    missing = "pipeline.driver.StreamNotFound: 404 NOT_FOUND - no queue 'pipe-no-such-stream' in vhost '/'"
    for reader in (lambda: spark.read, lambda: spark.readStream):  # batch: in load(); stream: when it starts
        with pytest.raises(Exception) as e:
            _run(reader().format("sansmq").option("url", nowhere).option("stream", "x")
                 .option("retryDeadlineMs", "1000").load(), tmp_path / "ck1")
        assert _cause(e).startswith(refused) and gave_up in str(e.value)
        with pytest.raises(Exception) as e:
            _run(reader().format("sansmq").option("url", broker.url).option("stream", "pipe-no-such-stream").load(),
                   tmp_path / "ck2")
        assert _cause(e).startswith(missing)
        # bad option values fail in load(), batch or stream, before anything connects
        with pytest.raises(Exception) as e:
            reader().format("sansmq").option("url", nowhere).option("stream", "s").option(
                "startingOffsets", "yesterday").load()
        assert _cause(e) == ('pipeline.options.OptionError: option startingOffsets must be "earliest", "latest" '
                             """or JSON such as {"s": 42}, got 'yesterday'""")
        with pytest.raises(Exception) as e:
            reader().format("sansmq").option("url", nowhere).option("stream", "s").option(
                "maxRecordsPerTrigger", "-1").load()
        assert _cause(e) == "pipeline.options.OptionError: option maxRecordsPerTrigger must be >= 1, got -1"
        with pytest.raises(Exception) as e:
            reader().format("sansmq").option("stream", "s").option("prefetch", "many").load()
        assert _cause(e) == "pipeline.options.OptionError: option prefetch must be an integer, got 'many'"
        with pytest.raises(Exception) as e:
            reader().format("sansmq").load()
        assert 'option "stream" is required' in _cause(e)
        with pytest.raises(Exception) as e:
            reader().format("sansmq").option("url", "http://x").option("stream", "s").load()
        assert "url must start with amqp://" in _cause(e)

    dst = broker.stream("pipe-err")
    no_body = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception) as e:
        no_body.write.format("sansmq").option("url", broker.url).option("stream", dst).mode("append").save()
    assert _cause(e).startswith('pipeline.options.OptionError: the sansmq sink needs a "body" column')
    src = broker.stream("pipe-err-src")
    with pytest.raises(Exception) as e:
        (spark.readStream.format("sansmq").option("url", broker.url).option("stream", src).load()
         .selectExpr("body as payload").writeStream.format("sansmq").option("url", broker.url)
         .option("stream", dst).option("checkpointLocation", str(tmp_path / "ck3")).start().awaitTermination(120))
    assert _cause(e).startswith('pipeline.options.OptionError: the sansmq sink needs a "body" column')
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("x",)], "body string").write.format("sansmq").option(
            "url", broker.url).option("stream", "pipe-no-such-stream").mode("append").save()
    assert _cause(e).startswith(missing)
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("x",)], "body string").write.format("sansmq").option(
            "url", nowhere).option("stream", dst).option("retryDeadlineMs", "1000").mode("append").save()
    # the sink connects through sansmq_client
    assert _cause(e).startswith("sansmq_client._errors.ConnectionLost: could not connect to any of "
                                "[('127.0.0.1', 1)]: ") and gave_up in str(e.value)
    assert broker.end(dst) == 0


def test_options_are_strict_as_kafkas(spark, broker: Broker, tmp_path: Path) -> None:
    """A misspelt option fails in load() (it used to be ignored); Kafka's names work; endingOffsets on
    a streaming read and startingOffsets=latest on a batch read are refused, as Kafka does."""
    stream = broker.stream("pipe-opts")
    broker.publish(stream, [b"x"] * 10)
    for reader in (lambda: spark.read, lambda: spark.readStream):
        with pytest.raises(Exception) as e:
            reader().format("sansmq").option("url", broker.url).option("stream", stream).option(
                "failOnDataLos", "false").load()
        assert _cause(e).startswith("pipeline.options.OptionError: unknown option 'failondatalos' for the "
                                    "sansmq source; known options: url, stream, ")
    assert spark.read.format("sansmq").option("url", broker.url).option("subscribe", stream).load().count() == 10
    with pytest.raises(Exception) as e:
        spark.read.format("sansmq").option("url", broker.url).option("stream", stream).option(
            "startingOffsets", "latest").load().count()
    assert _cause(e).startswith("pipeline.options.OptionError: option startingOffsets cannot be latest (-1) for a "
                                "batch read")
    with pytest.raises(Exception) as e:
        _run(spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream).option(
            "endingOffsets", "latest").load(), tmp_path / "ck")
    assert _cause(e).startswith("pipeline.options.OptionError: option endingOffsets is for batch reads")
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("x",)], "body string").write.format("sansmq").option("url", broker.url).option(
            "stream", stream).option("confirmWindw", "10").mode("append").save()
    assert _cause(e).startswith("pipeline.options.OptionError: unknown option 'confirmwindw' for the sansmq sink")


def test_an_idle_reader_waits_for_the_broker_instead_of_polling(broker: Broker) -> None:
    """latestOffset with nothing new parks a consumer at the end of each stream: it returns at once
    when a message arrives (pushed by the broker) and only after the whole wait when none does."""
    import threading
    import time

    from pipeline.driver import Driver
    from pipeline.offsets import stream_end, wait_for_new

    quiet, busy = broker.stream("pipe-idle-a"), broker.stream("pipe-idle-b")
    broker.publish(busy, [b"old"] * 5)
    with Driver(broker.url, 30.0) as c:
        t0 = time.monotonic()
        assert wait_for_new(c, {quiet: 0, busy: 5}, 1.5) is False  # the 5 old ones do not count
        assert time.monotonic() - t0 >= 1.4
        later = threading.Timer(0.5, broker.publish, (busy, [b"new"]))
        later.start()
        t0 = time.monotonic()
        assert wait_for_new(c, {quiet: 0, busy: 5}, 20.0) is True
        assert time.monotonic() - t0 < 10.0
        later.join()
        assert stream_end(c, busy, 300) == 6  # the same connection goes on working after the wait


@pytest.mark.parametrize("interval", [None, "1 second"])
def test_a_running_query_picks_up_messages_as_they_arrive(spark, broker: Broker, interval: str | None) -> None:
    """Default trigger (next batch as soon as the last ends) and a processing-time trigger: the
    source waits on the broker between batches and every message published while the query runs
    arrives, once."""
    import time

    from e2ekit import wait_until

    stream = broker.stream("pipe-live")
    name = stream.replace("-", "_")
    writer = (_stream_query(spark, broker, stream, startingOffsets="latest", idleWaitMs="500")
              .writeStream.format("memory").queryName(name))
    q = (writer if interval is None else writer.trigger(processingTime=interval)).start()
    try:
        wait_until(lambda: q.lastProgress is not None or q.exception() is not None, 120, "the first batch")
        for i in range(3):
            broker.publish(stream, [b"%d-%d" % (i, j) for j in range(50)])
            time.sleep(0.5)
        wait_until(lambda: spark.sql(f"select count(*) c from {name}").first().c >= 150 or q.exception(), 120,
                   "150 rows in the memory sink")
        assert q.exception() is None, q.exception()
        rows = spark.sql(f"select offset from {name}").collect()
        assert sorted(r.offset for r in rows) == list(range(150))
    finally:
        q.stop()


def test_the_end_probe_returns_while_producers_keep_appending(broker: Broker) -> None:
    import threading
    import time

    from pipeline.driver import Driver
    from pipeline.offsets import PROBE_SPAN, stream_end

    stream = broker.stream("pipe-busy")
    broker.publish(stream, [b"before"] * 100)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            broker.publish(stream, [b"during"] * 20)  # never a pause of 100 ms between deliveries

    t = threading.Thread(target=produce)
    t.start()
    try:
        with Driver(broker.url, 30.0) as c:
            t0 = time.monotonic()
            end = stream_end(c, stream, 100)
            took = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    assert took < PROBE_SPAN * 0.1 + 5.0
    assert 100 <= end <= broker.end(stream)


def test_a_partitioned_stream_is_read_as_its_partitions(spark, broker: Broker) -> None:
    """NAME-0..N-1 bound to a direct exchange NAME (what a partitioned stream is): option stream NAME
    reads every partition; offsets JSON names the partitions."""
    from amqpproto import spec
    from sansmq_client import sync
    from sansmq_client.bulk import publish_batch

    base = broker.stream("pipe-super")  # a plain stream to get a unique name; the partitions hang off it
    name = f"{base}-p"
    with sync.connect(broker.url) as c:
        c.declare_exchange(name, "direct", durable=True)
        for i in range(3):
            c.declare_queue(f"{name}-{i}", durable=True, arguments={"x-queue-type": "stream"})
            c.bind_queue(f"{name}-{i}", name, str(i))
        publish_batch(c, name, [(str(j % 3), spec.encode_properties(spec.BasicProperties()), b"%d" % j)
                                for j in range(90)])
    df = spark.read.format("sansmq").option("url", broker.url).option("stream", name).load()
    counts = {r.stream: r["count"] for r in df.groupBy("stream").count().collect()}
    assert counts == {f"{name}-{i}": 30 for i in range(3)}
    part = (spark.read.format("sansmq").option("url", broker.url).option("stream", name)
            .option("startingOffsets", json.dumps({f"{name}-1": 25})).load())
    assert part.count() == 30 + 5 + 30
    with pytest.raises(Exception) as e:
        spark.read.format("sansmq").option("url", broker.url).option("stream", name).option(
            "startingOffsets", json.dumps({name: 1})).load().count()
    assert "option startingOffsets names streams that are not read" in _error_text(e)

    # the sink publishes to the partitioned stream's exchange, each row by its routing_key column
    rows = spark.createDataFrame([(f"w{j}", str(j % 3)) for j in range(30)], "body string, routing_key string")
    rows.write.format("sansmq").option("url", broker.url).option("exchange", name).mode("append").save()
    assert [broker.end(f"{name}-{i}") for i in range(3)] == [40, 40, 40]


def _make_session_example(page: str) -> str:
    import re

    text = (Path(__file__).resolve().parents[2] / page).read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "make_session" in b]
    return code


def test_the_readme_example_runs(spark, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    """The front page's block: a batch write of 1000 rows to a fresh stream, read back and counted."""
    events = broker.stream("pipe-front-page")
    code = (_make_session_example("README.md")
            .replace('"amqp://guest:guest@127.0.0.1:5672/%2F"', repr(broker.url)).replace('"events"', repr(events)))
    exec(compile(code, "README.md", "exec"), {})  # getOrCreate: the suite's session
    assert capsys.readouterr().out.splitlines()[-1] == "1000"
    assert broker.end(events) == 1000
    assert {b for _, b, _ in broker.read_all(events, 1000)} == {f"event {i}".encode() for i in range(1000)}


def test_the_pipeline_page_example_runs(spark, broker: Broker, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from sansmq_client import sync

    code = _make_session_example("docs/pipeline.md")
    events = broker.stream("pipe-readme")
    upper = f"{events}-upper"
    with sync.connect(broker.url) as c:
        c.declare_queue(upper, durable=True, arguments={"x-queue-type": "stream"})
    code = (code.replace('"amqp://guest:guest@127.0.0.1:5672/%2F"', repr(broker.url))
            .replace('"events-upper"', repr(upper)).replace('"events"', repr(events))
            .replace('"/tmp/ck-upper"', repr(str(tmp_path / "ck"))))
    scope: dict = {}
    exec(compile(code, "docs/pipeline.md", "exec"), scope)  # getOrCreate: the suite's session
    assert capsys.readouterr().out.splitlines()[-1] == "1000"
    assert broker.end(events) == 1000 and broker.end(upper) == 1000
    # the batch write's partitions publish side by side, so the order varies: compare as sets
    copied = {b for _, b, _ in broker.read_all(upper, 1000)}
    assert copied == {f"EVENT {i}".encode() for i in range(1000)}


def test_bad_credentials_or_vhost_are_a_clear_error(broker: Broker) -> None:
    from pipeline.driver import Driver
    from sansmq_client import BrokerClosedConnection

    base = broker.url.split("@", 1)[1].rsplit("/", 1)[0]
    with pytest.raises(BrokerClosedConnection, match=r"403"):
        Driver(f"amqp://guest:wrong@{base}/%2F", 10.0)
    with pytest.raises(BrokerClosedConnection, match=r"530 .*connection.open"):
        Driver(f"amqp://guest:guest@{base}/no-such-vhost", 10.0)
