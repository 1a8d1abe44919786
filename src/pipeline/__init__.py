"""pipeline: format "sansmq" for Apache Spark (PySpark's Python Data Source API) over AMQP 0-9-1.

    from pipeline import register
    register(spark)
    spark.readStream.format("sansmq").option("stream", "events").load()

Talks to the broker through the project's clients (tasks on ``sansmq_client``, the driver's probes on
``pipeline.client``, amqpproto's client role); it never imports the
broker (``engine``), so the same job reads sansmq's or RabbitMQ's streams, on ``local[*]`` or on a
cluster. Needs the ``spark`` extra: ``pip install 'sansmq[spark]'``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register format "sansmq" with ``spark`` (a SparkSession)."""
    from .datasource import SansmqDataSource

    spark.dataSource.register(SansmqDataSource)
