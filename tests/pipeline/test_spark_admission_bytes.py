"""Admission control by bytes: option ``maxBytesPerTrigger`` (PySpark's ``ReadMaxBytes``), each
micro-batch cut where the broker says a stream's records stop fitting the budget (capability
``stream_range_bytes``), shared among several streams, together with ``maxRecordsPerTrigger``
(the smaller wins), under availableNow (everything, in several batches), and refused at query start
by a broker that cannot measure (a stand-in without the capability; RabbitMQ when the suite runs
against it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipelinekit import Broker
from stream_standin import FakeStreamBroker

from amqpproto import spec

pytestmark = pytest.mark.usefixtures("spark_available")  # pyspark's data source API

BODY = 1000
#: the byte budget of the Spark tests: 8 to 10 records of BODY bytes, whatever the store's framing
BUDGET = 10_500


def _options(**given: str):
    from pipeline.options import ReadOptions

    return ReadOptions.parse({"stream": "s", **given})


# -- without Spark ------------------------------------------------------------------------------------
def test_the_option_is_a_positive_integer() -> None:
    from pipeline.options import OptionError

    assert _options(maxBytesPerTrigger="1048576").max_bytes_per_trigger == 1 << 20
    assert _options(maxbytespertrigger="10").max_bytes_per_trigger == 10  # Spark lower-cases option names
    assert _options().max_bytes_per_trigger is None
    for bad, why in (("0", "must be >= 1, got 0"), ("-3", "must be >= 1"), ("1g", "must be an integer, got '1g'")):
        with pytest.raises(OptionError, match=f"option maxBytesPerTrigger {why}"):
            _options(maxBytesPerTrigger=bad)


def test_the_default_read_limit_is_the_bytes_maximum_when_given() -> None:
    from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows

    from pipeline.source import StreamReader

    def limit(**given: str):
        reader = StreamReader(_options(**given))
        reader._resolved = reader._given  # no broker: the options as given
        return reader.getDefaultReadLimit()

    assert limit(maxBytesPerTrigger="5000") == ReadMaxBytes(5000)
    assert limit(maxBytesPerTrigger="5000", maxRecordsPerTrigger="10") == ReadMaxBytes(5000)  # both applied
    assert limit(maxRecordsPerTrigger="10") == ReadMaxRows(10)


def test_byte_shares_follow_the_new_records_and_always_progress() -> None:
    from pipeline.admission import byte_shares

    assert byte_shares({"a": 0, "b": 10}, {"a": 30, "b": 20}, 4000) == {"a": 3000, "b": 1000}
    assert byte_shares({"a": 5, "b": 0}, {"a": 5, "b": 20}, 4000) == {"b": 4000}  # a has nothing new
    assert byte_shares({}, {"a": 0}, 4000) == {}
    # a budget too small to share: the stream with the most new records takes it all
    assert byte_shares({}, {"a": 10, "b": 30, "c": 30}, 2) == {"b": 2}
    shares = byte_shares({}, {"a": 7, "b": 11, "c": 13}, 1000)
    assert sum(shares.values()) <= 1000 and set(shares) == {"a", "b", "c"}


def test_cap_bytes_asks_the_broker_per_stream(broker: Broker) -> None:
    if broker.name == "rabbitmq":
        pytest.skip("RabbitMQ cannot bound a range by bytes (refusal: test_a_broker_without_the_capability...)")
    from pipeline.admission import cap_bytes
    from pipeline.driver import Driver

    a, b = broker.stream("pipe-bytes-unit-a"), broker.stream("pipe-bytes-unit-b")
    broker.publish(a, [b"x" * BODY] * 30)
    broker.publish(b, [b"y" * BODY] * 30)
    with Driver(broker.url, 30.0) as client:
        alone = cap_bytes(client, {}, {a: 30}, BUDGET)[a]
        assert 8 <= alone <= 10
        assert cap_bytes(client, {a: 25}, {a: 30}, BUDGET) == {a: 30}  # never past the given end
        assert cap_bytes(client, {a: 3}, {a: 30}, 1) == {a: 4}  # one record at least
        both = cap_bytes(client, {a: 0, b: 20}, {a: 30, b: 30}, 4 * BUDGET)  # 3/4 of the budget for a
        assert both[a] == cap_bytes(client, {}, {a: 30}, 3 * BUDGET)[a]
        assert both[b] == 20 + cap_bytes(client, {}, {a: 30}, BUDGET)[a]
        assert cap_bytes(client, {a: 30}, {a: 30}, BUDGET) == {a: 30}  # nothing new: no question asked


# -- on Spark -------------------------------------------------------------------------------------------
def _available_now(spark, broker: Broker, streams: str, tmp_path: Path, **options: str) -> tuple[list[int], list]:
    reader = spark.readStream.format("sansmq").option("url", broker.url).option("stream", streams)
    for k, v in options.items():
        reader = reader.option(k, v)
    out = tmp_path / "out"
    q = (reader.load().writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    rows = spark.read.parquet(str(out)).select("stream", "offset").collect()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0], rows


def _one_batch(broker: Broker, stream: str, budget: int) -> int:
    """Records of the uniform stream ``stream`` a budget admits from its start (the broker's answer)."""
    from pipeline.admission import cap_bytes
    from pipeline.driver import Driver

    with Driver(broker.url, 30.0) as client:
        return cap_bytes(client, {}, {stream: 10**6}, budget)[stream]


@pytest.mark.parametrize("rows_limit", [None, "5", "50"])
def test_a_byte_limit_cuts_available_now_into_batches_exactly_once(spark, broker: Broker, tmp_path: Path,
                                                                    rows_limit: str | None) -> None:
    if broker.name == "rabbitmq":
        pytest.skip("RabbitMQ cannot bound a range by bytes (refusal: test_a_broker_without_the_capability...)")
    n = 47
    stream = broker.stream("pipe-bytes")
    broker.publish(stream, [b"%0*d" % (BODY, i) for i in range(n)])
    per_batch = _one_batch(broker, stream, BUDGET)
    assert 8 <= per_batch <= 10  # 1000-byte bodies and some framing each
    if rows_limit is not None:
        per_batch = min(per_batch, int(rows_limit))  # the smaller limit wins
    extra = {} if rows_limit is None else {"maxRecordsPerTrigger": rows_limit}
    sizes, rows = _available_now(spark, broker, stream, tmp_path, maxBytesPerTrigger=str(BUDGET),
                                 maxRecordsPerPartition="3", **extra)
    assert sizes == [per_batch] * (n // per_batch) + ([n % per_batch] if n % per_batch else [])
    assert sorted(r.offset for r in rows) == list(range(n))  # every record once


def test_a_running_query_takes_new_records_in_batches_under_the_limit(spark, broker: Broker) -> None:
    if broker.name == "rabbitmq":
        pytest.skip("RabbitMQ cannot bound a range by bytes (refusal: test_a_broker_without_the_capability...)")
    from e2ekit import wait_until

    stream = broker.stream("pipe-bytes-live")
    broker.publish(stream, [b"l" * BODY] * 25)
    per_batch = _one_batch(broker, stream, BUDGET)
    name = stream.replace("-", "_")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
         .option("maxBytesPerTrigger", str(BUDGET)).option("idleWaitMs", "300").load()
         .writeStream.format("memory").queryName(name).start())

    def offsets() -> list[int]:
        return [r.offset for r in spark.sql(f"select offset from {name}").collect()]

    try:
        wait_until(lambda: len(offsets()) >= 25 or q.exception(), 120, "the backlog")
        broker.publish(stream, [b"m" * BODY] * 15)  # new records while the query runs
        wait_until(lambda: len(offsets()) >= 40 or q.exception(), 120, "the new records")
        assert q.exception() is None, q.exception()
        assert sorted(offsets()) == list(range(40))  # each once
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        backlog = [per_batch] * (25 // per_batch) + ([25 % per_batch] if 25 % per_batch else [])
        assert sizes[:len(backlog)] == backlog, sizes  # the backlog under the limit, before the new records
        assert all(n <= per_batch for n in sizes) and sum(sizes) == 40, sizes
    finally:
        q.stop()


def test_several_streams_share_the_byte_limit(spark, broker: Broker, tmp_path: Path) -> None:
    if broker.name == "rabbitmq":
        pytest.skip("RabbitMQ cannot bound a range by bytes (refusal: test_a_broker_without_the_capability...)")
    a, b = broker.stream("pipe-bytes-a"), broker.stream("pipe-bytes-b")
    broker.publish(a, [b"a" * BODY] * 40)
    broker.publish(b, [b"b" * BODY] * 20)
    per_batch = _one_batch(broker, a, BUDGET)
    sizes, rows = _available_now(spark, broker, f"{a},{b}", tmp_path, maxBytesPerTrigger=str(BUDGET),
                                 minPartitions="2")
    # each batch within the budget, but for the one record a stream always gets
    assert all(s <= per_batch + 1 for s in sizes) and len(sizes) >= 60 // (per_batch + 1), sizes
    assert sum(sizes) == 60
    assert sorted((r.stream, r.offset) for r in rows) == sorted([(a, i) for i in range(40)] +
                                                                [(b, i) for i in range(20)])


def test_a_broker_without_the_capability_fails_the_query_naming_the_option(spark, tmp_path: Path) -> None:
    standin = FakeStreamBroker([("k", spec.BasicProperties(), b"m")] * 3).start()  # advertises nothing
    try:
        q = (spark.readStream.format("sansmq").option("url", standin.url).option("stream", "s")
             .option("maxBytesPerTrigger", "1000").option("retryDeadlineMs", "0").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start())
        with pytest.raises(Exception, match=r"option maxBytesPerTrigger needs a broker that measures .* fake "
                                            r"does not advertise it"):
            q.awaitTermination(120)
            raise AssertionError(q.exception())
    finally:
        standin.close()


def test_rabbitmq_refuses_the_byte_limit(spark, broker: Broker, tmp_path: Path) -> None:
    if broker.name != "rabbitmq":
        pytest.skip("the suite runs against sansmq (the stand-in test covers a broker without the capability)")
    stream = broker.stream("pipe-bytes-rmq")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
         .option("maxBytesPerTrigger", "1000").load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start())
    with pytest.raises(Exception, match="option maxBytesPerTrigger needs a broker"):
        q.awaitTermination(120)
        raise AssertionError(q.exception())
