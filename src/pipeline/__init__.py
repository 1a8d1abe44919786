"""pipeline: format "sansmq" for Apache Spark (PySpark's Python Data Source API) over AMQP 0-9-1.

    from pipeline import register
    register(spark)
    spark.readStream.format("sansmq").option("stream", "events").load()

Talks to the broker through the project's client, ``sansmq_client`` (tasks: ``sansmq_client.bulk``; the
driver's probes: ``pipeline.driver`` on ``sansmq_client.sync``); it never imports the broker (``engine``),
so the same job reads sansmq's or RabbitMQ's streams, on ``local[*]`` or on a
cluster. Needs the ``spark`` extra: ``pip install 'sansmq[spark]'``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


#: PySpark refuses a reader that implements pushFilters unless this is on (it is off by default)
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register format "sansmq" with ``spark`` (a SparkSession), and turn on PySpark's filter
    pushdown for Python data sources: the batch reader pushes predicates on its ``filter`` column
    down to the broker (a session that keeps it off reads with option ``filterPushdown=false``).
    Reads without option minPartitions are planned for the session's cores (``defaultParallelism``)."""
    from .datasource import SansmqDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(SansmqDataSource.for_session(spark.sparkContext.defaultParallelism))
