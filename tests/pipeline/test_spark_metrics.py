"""The stream source's lag in a query's progress: ``latestOffset`` is each stream's real end (and the
offsets skipped with failOnDataLoss=false), so ``pipeline.metrics.source_metrics`` gives Kafka's
avg/max/minOffsetsBehindLatest for every trigger."""

from __future__ import annotations

import json

from e2ekit import wait_until
from pipelinekit import Broker

from pipeline.metrics import source_metrics

#: small segments with a byte limit: retention removes old segments as the stream grows
RETAINED = {"x-stream-max-segment-size-bytes": 4000, "x-max-length-bytes": 20000}


def _run_until(spark, broker: Broker, name: str, options: dict[str, str], rows: int, then=None):
    reader = spark.readStream.format("sansmq").option("url", broker.url).option("idleWaitMs", "300")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = reader.load().writeStream.format("memory").queryName(name).start()
    try:
        want: int | None = rows
        while want is not None:
            wait_until(lambda w=want: spark.sql(f"select count(*) c from {name}").first().c == w or q.exception(),
                       180, f"{want} rows")
            assert q.exception() is None, q.exception()
            final, (want, then) = want, ((then(), None) if then is not None else (None, None))
        # the sink shows a batch's rows before Spark posts its progress: wait for the progress of every row
        wait_until(lambda: sum(p["numInputRows"] for p in q.recentProgress) == final, 60, f"progress of {final} rows")
        return [p for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()


def test_every_trigger_reports_the_latest_offsets_and_how_far_behind_it_is(spark, broker: Broker) -> None:
    a, b = broker.stream("pipe-lag-a"), broker.stream("pipe-lag-b")
    broker.publish(a, [b"a"] * 90)
    broker.publish(b, [b"b"] * 30)
    progress = _run_until(spark, broker, a.replace("-", "_"), {"stream": f"{a},{b}", "maxRecordsPerTrigger": "40"},
                          120)
    figures = [source_metrics(p["sources"][0]) for p in progress]
    assert [f["latestOffset"] for f in figures] == [{a: 90, b: 30}] * 3
    # 40 rows a trigger, shared 3:1 by backlog: ends (30, 10), (60, 20), (90, 30)
    assert [f["offsetsBehindLatest"] for f in figures] == [{a: 60, b: 20}, {a: 30, b: 10}, {a: 0, b: 0}]
    assert [(f["maxOffsetsBehindLatest"], f["minOffsetsBehindLatest"], f["avgOffsetsBehindLatest"])
            for f in figures] == [(60, 20, 40.0), (30, 10, 20.0), (0, 0, 0.0)]
    assert all(f["skippedOffsets"] == 0 for f in figures)


def test_offsets_skipped_with_fail_on_data_loss_false_are_counted_in_the_progress(spark, broker: Broker) -> None:
    stream = broker.stream("pipe-lag-skip", **RETAINED)
    broker.publish(stream, [b"%099d" % i for i in range(1000)])
    first = broker.first(stream)
    assert first > 0
    progress = _run_until(spark, broker, stream.replace("-", "_"),
                          {"stream": stream, "startingOffsets": json.dumps({stream: 0}), "failOnDataLoss": "false"},
                          1000 - first, then=lambda: broker.publish(stream, [b"x" * 99] * 10) or 1010 - first)
    latest = source_metrics(progress[-1]["sources"][0])
    assert latest["skippedOffsets"] == first and latest["latestOffset"] == {stream: 1010}
