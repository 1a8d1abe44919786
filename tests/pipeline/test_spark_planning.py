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


def test_more_streams_than_tasks_worth_are_read_by_as_many_tasks_as_one_stream(spark, broker: Broker,
                                                                              tmp_path) -> None:
    """Six streams of 1,000 rows: one task (a stream of 6,000 rows would be one), reading each stream's
    range in turn; every row once, in a batch read and in a streaming one. With minPartitions or
    maxRecordsPerPartition the tasks are as Kafka's rules say (a stream's range or more each)."""
    names = [broker.stream(f"pipe-plan-part{i}") for i in range(6)]
    for i, s in enumerate(names):
        broker.publish(s, [b"%d-%d" % (i, j) for j in range(1000)])
    want = sorted(b"%d-%d" % (i, j) for i in range(6) for j in range(1000))

    def reader(**options: str):
        r = spark.read.format("sansmq").option("url", broker.url).option("stream", ",".join(names))
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    df = reader()
    assert df.rdd.getNumPartitions() == 1
    assert sorted(bytes(r.body) for r in df.select("body").collect()) == want
    assert reader(minPartitions="6").rdd.getNumPartitions() == 6
    assert reader(maxRecordsPerPartition="1000").rdd.getNumPartitions() == 6
    q = (spark.readStream.format("sansmq").option("url", broker.url).option("stream", ",".join(names)).load()
         .select("body").writeStream.format("memory").queryName("plan_parts")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    assert sorted(bytes(r.body) for r in spark.sql("select body from plan_parts").collect()) == want
