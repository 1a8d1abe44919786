"""How many tasks a read is planned as (issue 28, "several partitions never slower than one"): one
per stream's range, cut for the session's cores (``register`` passes Spark's default parallelism)
only where each piece is worth a task (``MIN_ROWS_PER_TASK``), or as minPartitions and
maxRecordsPerPartition ask (Spark's Kafka source's rules)."""

from __future__ import annotations

from pipelinekit import Broker

from pipeline.offsets import MIN_ROWS_PER_TASK


def test_a_read_is_cut_for_the_sessions_cores_only_where_a_task_is_worth_it(spark, broker: Broker) -> None:
    small, big = broker.stream("pipe-plan-small"), broker.stream("pipe-plan-big")
    broker.publish(small, [b"s"] * 1000)
    broker.publish(big, [b""] * (2 * MIN_ROWS_PER_TASK))

    def tasks(stream: str, **options: str) -> int:
        reader = spark.read.format("sansmq").option("url", broker.url).option("stream", stream)
        for k, v in options.items():
            reader = reader.option(k, v)
        return int(reader.load().rdd.getNumPartitions())

    assert spark.sparkContext.defaultParallelism == 2  # the suite's local[2]
    assert tasks(small) == 1  # 1000 rows: not worth a second task
    assert tasks(big) == 2  # two cores, 100,000 rows or more each
    assert tasks(small, minPartitions="3") == 3  # as asked (Kafka's minPartitions)
    assert tasks(small, maxRecordsPerPartition="300") == 4
    assert tasks(f"{small},{big}") == 2  # a task per stream is already as many as the cores
