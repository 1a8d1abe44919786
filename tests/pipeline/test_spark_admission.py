"""Admission control as Spark's Kafka source: ``minOffsetsPerTrigger`` holds a micro-batch back
until that many records are new or ``maxTriggerDelay`` has passed since the last batch."""

from __future__ import annotations

from datetime import datetime

import pytest
from e2ekit import wait_until
from pipelinekit import Broker


def _seconds(progress: dict) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def test_min_offsets_per_trigger_waits_for_enough_records_or_the_delay(spark, broker: Broker) -> None:
    stream = broker.stream("pipe-admit")
    broker.publish(stream, [b"a"] * 30)
    name = stream.replace("-", "_")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
         .option("minOffsetsPerTrigger", "50").option("maxTriggerDelay", "6s").option("maxOffsetsPerTrigger", "500")
         .option("idleWaitMs", "300").load().writeStream.format("memory").queryName(name).start())

    def rows() -> int:
        return spark.sql(f"select count(*) c from {name}").first().c

    try:
        wait_until(lambda: rows() == 30 or q.exception(), 120, "the first batch (never held back)")
        broker.publish(stream, [b"b"] * 20)  # fewer than 50: held until 6 s after the first batch
        wait_until(lambda: rows() == 50 or q.exception(), 120, "the held batch, after maxTriggerDelay")
        broker.publish(stream, [b"c"] * 60)  # enough: at once
        wait_until(lambda: rows() == 110 or q.exception(), 120, "the full batch")
        assert q.exception() is None, q.exception()
        batches = [p for p in q.recentProgress if p["numInputRows"]]
        assert [p["numInputRows"] for p in batches] == [30, 20, 60]
        assert _seconds(batches[1]) - _seconds(batches[0]) >= 5.5  # the 20 waited for the delay
    finally:
        q.stop()


def test_a_minimum_above_the_maximum_is_refused(spark, broker: Broker) -> None:
    stream = broker.stream("pipe-admit-bad")
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", stream)
         .option("minOffsetsPerTrigger", "50").option("maxOffsetsPerTrigger", "10").load()
         .writeStream.format("noop").start())
    with pytest.raises(Exception, match=r"minOffsetsPerTrigger \(50\) is above maxOffsetsPerTrigger \(10\)"):
        q.awaitTermination(120)
        raise AssertionError(q.exception())
