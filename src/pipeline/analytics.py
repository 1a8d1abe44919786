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
}
TOP_KEYS = 20


def trace_events(df: Any) -> Any:
    """One row per trace record: kind, name, ts, size, key (the traced message's identity),
    routing_key, redelivered, dead_letter_queue."""
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
    dlv = timed.where(F.col("kind") == "deliver").select("key", F.col("name").alias("queue"), "ts")
    lat_ms = (F.unix_micros("ts") - F.unix_micros("published")) / 1000.0
    joined = dlv.join(pub, "key").select("queue", lat_ms.alias("ms")).where(F.col("ms") >= 0)
    latency = (joined.groupBy("queue").agg(
        F.count("*").alias("deliveries"),
        F.percentile_approx("ms", 0.5).alias("p50"), F.percentile_approx("ms", 0.9).alias("p90"),
        F.percentile_approx("ms", 0.99).alias("p99"), F.max("ms").alias("max"))
        .orderBy("queue"))
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
    return {"rates": rates, "sizes": sizes, "latency": latency, "redeliveries": redeliveries,
            "routing_keys": routing_keys}
