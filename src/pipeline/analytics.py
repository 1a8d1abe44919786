"""Traffic analytics over a firehose trace stream, as Spark DataFrames.

Input rows are the "sansmq" format's rows of a stream bound to ``amq.rabbitmq.trace``: routing key
``publish.<exchange>`` or ``deliver.<queue>``, headers as RabbitMQ's firehose sets them
(``exchange_name``, ``routing_keys``, ``redelivered``, ``properties.*`` flattened by the source)
and the traced message's body. Each record's time is its ``timestamp_in_ms`` header (what
RabbitMQ's event exchange stamps, and sansmq's firehose too), else the row's timestamp.
"""

from __future__ import annotations

from typing import Any

__all__ = ["trace_events", "tables", "TABLES"]

#: table name -> what it holds (the report's captions and the Parquet directory names)
TABLES = {
    "rates": "messages and bytes per second, per exchange (publish) and queue (deliver)",
    "sizes": "message size distribution (power-of-two buckets)",
    "latency": "publish -> deliver latency percentiles per queue (ms)",
    "redeliveries": "redeliveries and dead letters per queue",
    "routing_keys": "top routing keys of published messages",
    "consumers": "publish -> deliver latency percentiles per consumer (connection and channel, ms)",
    "backlog": "messages in each queue over time: routed to it minus first deliveries (peak and end of each second)",
    "unroutable": "publishes that reached no queue, per exchange and routing key",
}
TOP_KEYS = 20
#: rows kept of the unroutable table (the busiest exchange and key pairs)
TOP_UNROUTABLE = 100


def trace_events(df: Any) -> Any:
    """One row per trace record: kind, name, ts, size, key (the traced message's identity),
    routing_key, redelivered, dead_letter_queue, routed (a publish's ``routed_queues``, null when
    the record has none) and consumer (a delivery's connection and channel)."""
    from pyspark.sql import functions as F

    h = F.col("headers")
    ms = h.getItem("timestamp_in_ms").cast("long")
    rk = F.col("routing_key")
    name = F.expr("substring(routing_key, instr(routing_key, '.') + 1)")
    first_key = F.get_json_object(h.getItem("routing_keys"), "$[0]")
    return df.select(
        F.substring_index(rk, ".", 1).alias("kind"),
        F.when(name == "", F.lit("amq.default")).otherwise(name).alias("name"),
        F.coalesce(F.timestamp_millis(ms), F.col("timestamp")).alias("ts"),
        F.length("body").alias("size"),
        F.coalesce(h.getItem("properties.message_id"), F.sha1("body")).alias("key"),
        F.coalesce(first_key, h.getItem("routing_keys")).alias("message_routing_key"),
        F.lower(F.coalesce(h.getItem("redelivered"), F.lit("0"))).isin("1", "true").alias("redelivered"),
        h.getItem("properties.headers.x-first-death-queue").alias("dead_letter_queue"),
        F.from_json(h.getItem("routed_queues"), "array<string>").alias("routed"),
        F.concat_ws(" channel ", h.getItem("connection"), h.getItem("channel")).alias("consumer"),
    ).where(F.col("kind").isin("publish", "deliver"))


def tables(events: Any) -> dict[str, Any]:
    """The report's tables (small DataFrames) from ``trace_events`` rows."""
    from pyspark.sql import functions as F

    timed = events.where(F.col("ts").isNotNull())
    rates = (timed.groupBy(F.window("ts", "1 second").start.alias("second"), "kind", "name")
             .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))
             .orderBy("second", "kind", "name"))
    bucket = F.when(F.col("size") <= 1, F.lit(1)).otherwise(
        F.pow(F.lit(2), F.ceil(F.log2(F.col("size")))).cast("long"))
    sizes = (events.where(F.col("kind") == "publish").groupBy(bucket.alias("bytes_up_to"))
             .agg(F.count("*").alias("messages")).orderBy("bytes_up_to"))
    pub = (timed.where(F.col("kind") == "publish").groupBy("key").agg(F.min("ts").alias("published")))
    dlv = timed.where(F.col("kind") == "deliver").select("key", F.col("name").alias("queue"), "consumer", "ts")
    lat_ms = (F.unix_micros("ts") - F.unix_micros("published")) / 1000.0
    joined = dlv.join(pub, "key").select("queue", "consumer", lat_ms.alias("ms")).where(F.col("ms") >= 0)
    latency = _percentiles(joined.groupBy("queue")).orderBy("queue")
    consumers = _percentiles(joined.groupBy("queue", "consumer")).orderBy(F.desc("p99"), "queue", "consumer")
    deliveries = (events.where(F.col("kind") == "deliver").groupBy(F.col("name").alias("queue"))
                  .agg(F.count("*").alias("deliveries"),
                       F.sum(F.col("redelivered").cast("int")).alias("redeliveries")))
    # a dead letter is a message carrying x-first-death-queue: counted once whether the trace has
    # its republication (a recorder) or only its deliveries (RabbitMQ's firehose traces no dead-lettering)
    dead = (events.where(F.col("dead_letter_queue").isNotNull())
            .groupBy(F.col("dead_letter_queue").alias("queue")).agg(F.countDistinct("key").alias("dead_letters")))
    redeliveries = (deliveries.join(dead, "queue", "full_outer")
                    .select("queue", F.coalesce("deliveries", F.lit(0)).alias("deliveries"),
                            F.coalesce("redeliveries", F.lit(0)).alias("redeliveries"),
                            F.coalesce("dead_letters", F.lit(0)).alias("dead_letters"))
                    .orderBy("queue"))
    routing_keys = (events.where(F.col("kind") == "publish").groupBy(
        F.col("message_routing_key").alias("routing_key")).agg(F.count("*").alias("messages"))
        .orderBy(F.desc("messages"), "routing_key").limit(TOP_KEYS))
    unroutable = (events.where((F.col("kind") == "publish") & (F.size("routed") == 0))
                  .groupBy(F.col("name").alias("exchange"), F.col("message_routing_key").alias("routing_key"))
                  .agg(F.count("*").alias("messages"))
                  .orderBy(F.desc("messages"), "exchange", "routing_key").limit(TOP_UNROUTABLE))
    return {"rates": rates, "sizes": sizes, "latency": latency, "redeliveries": redeliveries,
            "routing_keys": routing_keys, "consumers": consumers, "backlog": backlog(timed),
            "unroutable": unroutable}


def _percentiles(grouped: Any) -> Any:
    from pyspark.sql import functions as F

    return grouped.agg(
        F.count("*").alias("deliveries"),
        F.percentile_approx("ms", 0.5).alias("p50"), F.percentile_approx("ms", 0.9).alias("p90"),
        F.percentile_approx("ms", 0.99).alias("p99"), F.max("ms").alias("max"))


def backlog(timed: Any) -> Any:
    """Per queue and second, the messages in the queue: +1 per queue a publish was routed to, -1 per
    first delivery, summed in trace order (a publish before a delivery of the same millisecond);
    ``peak`` is the second's highest count, ``end`` its last. A message dead-lettered into a queue
    enters without a traced publish (the firehose traces client publishes), so its delivery is left
    out too, as are the deliveries of queues no traced publish names (a trace without
    ``routed_queues``). A stream's reads remove nothing: its line is appended minus read."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    enq = (timed.where((F.col("kind") == "publish") & F.col("routed").isNotNull())
           .select("ts", F.explode("routed").alias("queue"), F.lit(1).alias("delta")))
    deq = (timed.where((F.col("kind") == "deliver") & ~F.col("redelivered") & F.col("dead_letter_queue").isNull())
           .select("ts", F.col("name").alias("queue"), F.lit(-1).alias("delta"))
           # only queues some publish names: a trace without routed_queues gives no backlog, not a negative one
           .join(enq.select("queue").distinct(), "queue", "left_semi"))
    order = Window.partitionBy("queue").orderBy("ts", F.desc("delta"))
    counted = (enq.unionByName(deq)
               .withColumn("seq", F.row_number().over(order))
               .withColumn("messages", F.sum("delta").over(order.rowsBetween(Window.unboundedPreceding, 0))))
    return (counted.groupBy(F.window("ts", "1 second").start.alias("second"), "queue")
            .agg(F.max("messages").alias("peak"), F.max_by("messages", "seq").alias("end"))
            .orderBy("queue", "second"))
