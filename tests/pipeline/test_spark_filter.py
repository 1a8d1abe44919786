"""Stream filtering through the Spark source (issue 28): column ``filter`` is each message's
``x-stream-filter-value``; ``where(col("filter") == ...)`` / ``isin`` are pushed down to the broker
(PySpark's pushFilters), which then sends only the matching messages (counted at the broker: its
deliver_get), while Spark still evaluates the predicate; option ``filter`` does the same for a
streaming query."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from e2ekit import start_server, wait_until
from pipelinekit import Broker
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull

from pipeline import PUSHDOWN_CONF
from pipeline.source import pushed_values

GROUPS = [("eu", 200), ("us", 200), (None, 100), ("eu", 100), ("asia", 100)]


def test_pushed_values_take_equality_and_in_on_the_filter_column_only() -> None:
    assert pushed_values([EqualTo(("filter",), "eu")]) == {"eu"}
    assert pushed_values([In(("filter",), ("eu", "us")), EqualTo(("filter",), "us")]) == {"us"}
    assert pushed_values([EqualTo(("stream",), "eu"), GreaterThan(("offset",), 3), IsNull(("filter",))]) is None
    assert pushed_values([In(("filter",), ("eu", None))]) is None  # a null among the values: not pushed


def delivered(http: int, stream: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{http}/api/queues/%2F/{stream}",
            headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})) as r:
        return int(json.load(r).get("message_stats", {}).get("deliver_get", 0))


def test_a_predicate_on_the_filter_column_reads_only_the_matching_messages(spark, tmp_path: Path) -> None:
    from pyspark.sql.functions import col

    config = tmp_path / "sansmq.toml"
    config.write_text("")
    srv = start_server("threads", config)
    try:
        broker = Broker(f"amqp://guest:guest@127.0.0.1:{srv.port('amqp')}/%2F", dedup=True, name="sansmq")
        http = srv.port("http")
        stream = broker.stream("pipe-filter")
        want: dict[str | None, list[int]] = {}
        offset = 0
        for value, n in GROUPS:  # one confirmed batch each: chunks of one value
            headers = None if value is None else {"x-stream-filter-value": value}
            broker.publish(stream, [b"%s-%d" % (str(value).encode(), i) for i in range(n)], headers)
            want.setdefault(value, []).extend(range(offset, offset + n))
            offset += n
        df = spark.read.format("sansmq").option("url", broker.url).option("stream", stream).load()

        def counted(frame) -> tuple[list, int]:  # the rows, and how many the broker delivered for them
            before = delivered(http, stream)
            rows = frame.collect()
            wait_until(lambda: delivered(http, stream) >= before + len(rows), 30, "the broker's delivery count")
            return rows, delivered(http, stream) - before

        rows, sent = counted(df.select("offset"))
        probes = sent - offset  # planning a read probes the stream's first offset (a delivery or so)
        assert len(rows) == offset and 0 <= probes <= 2
        rows, sent = counted(df.where(col("filter") == "eu").select("offset", "filter", "body"))
        assert sorted(r.offset for r in rows) == want["eu"] and {r.filter for r in rows} == {"eu"}
        assert sent == len(want["eu"]) + probes  # the broker sent only the matches: 300 of 700
        rows, sent = counted(df.where(col("filter").isin("us", "asia")).select("offset"))
        assert sorted(r.offset for r in rows) == sorted(want["us"] + want["asia"]) and sent == 300 + probes
        rows, sent = counted(df.where(col("filter").isNull()).select("offset"))  # not pushed: Spark filters
        assert sorted(r.offset for r in rows) == want[None] and sent == offset + probes
        rows, sent = counted(df.where((col("filter") == "eu") & (col("offset") >= 250)).select("offset"))
        assert sorted(r.offset for r in rows) == [o for o in want["eu"] if o >= 250] and sent == 300 + probes

        out = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
               .option("filter", "asia,us").load().writeStream.format("memory").queryName("filtered_28")
               .trigger(availableNow=True).start())
        out.awaitTermination(120)
        assert out.exception() is None, out.exception()
        got = spark.sql("select offset, filter from filtered_28").collect()
        assert sorted(r.offset for r in got) == sorted(want["us"] + want["asia"])

        spark.conf.set(PUSHDOWN_CONF, "false")  # a session without Python pushdown: option filterPushdown=false
        try:
            plain = (spark.read.format("sansmq").option("url", broker.url).option("stream", stream)
                     .option("filterPushdown", "false").load())
            rows, sent = counted(plain.where(col("filter") == "asia").select("offset"))
            assert sorted(r.offset for r in rows) == want["asia"] and sent == offset + probes
        finally:
            spark.conf.set(PUSHDOWN_CONF, "true")
    finally:
        assert srv.terminate() == 0, srv.lines[-20:]
