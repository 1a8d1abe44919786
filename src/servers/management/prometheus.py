"""Prometheus metrics with RabbitMQ's names (its rabbitmq_prometheus plugin), from the snapshot.

``/metrics`` aggregates queue figures over all queues; ``/metrics/per-object`` labels them with
``vhost`` and ``queue``. A custom collector builds the metric families from one snapshot per
scrape; nothing is counted per message here.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["RabbitCollector", "prometheus_app"]

#: (metric suffix after rabbitmq_global_messages_, snapshot counter, help)
_GLOBAL = (("received", "publish", "Total number of messages received from publishers"),
           ("delivered", "deliver_get", "Total number of messages delivered to consumers"),
           ("redelivered", "redeliver", "Total number of messages redelivered to consumers"),
           ("acknowledged", "ack", "Total number of messages acknowledged by consumers"),
           ("confirmed", "confirm", "Total number of messages confirmed to publishers"))
#: per-queue gauges: metric name -> (snapshot key, help)
_QUEUE = (("rabbitmq_queue_messages_ready", "messages_ready", "Messages ready to be delivered to consumers"),
          ("rabbitmq_queue_messages_unacked", "messages_unacknowledged",
           "Messages delivered to consumers but not yet acknowledged"),
          ("rabbitmq_queue_messages", "messages", "Sum of ready and unacknowledged messages"),
          ("rabbitmq_queue_consumers", "consumers", "Consumers on a queue"),
          ("rabbitmq_queue_messages_bytes", "message_bytes_ready", "Size in bytes of ready messages"))


def resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RabbitCollector:
    def __init__(self, snap: Callable[..., dict[str, Any]], per_object: bool, node: str = "sansmq@localhost",
                 cluster: str = "sansmq@localhost") -> None:
        self.snap = snap
        self.per_object = per_object
        self.node = node
        self.cluster = cluster

    def collect(self) -> Iterable[Metric]:
        # RabbitMQ's identity: dashboards join every metric of a scrape target on it to get the node
        identity = GaugeMetricFamily("rabbitmq_identity_info", "RabbitMQ node & cluster identity info",
                                     labels=["rabbitmq_node", "rabbitmq_cluster"])
        identity.add_metric([self.node, self.cluster], 1)
        yield identity
        snap = self.snap("queues") if self.per_object else self.snap()
        conns = snap["connections"]
        counts = snap["counts"].values()
        yield from (
            GaugeMetricFamily("rabbitmq_queues", "Queues available", value=sum(c["queues"] for c in counts)),
            GaugeMetricFamily("rabbitmq_connections", "Connections currently open", value=len(conns)),
            GaugeMetricFamily("rabbitmq_channels", "Channels currently open",
                              value=sum(c["channels"] for c in conns)),
            GaugeMetricFamily("rabbitmq_consumers", "Consumers currently connected",
                              value=sum(c["consumers"] for c in counts)),
            GaugeMetricFamily("rabbitmq_process_resident_memory_bytes", "Memory used in bytes",
                              value=resident_bytes()),
            GaugeMetricFamily("rabbitmq_alarms_memory_used_watermark",
                              "is 1 if VM memory watermark alarm is in effect", value=int(snap["alarms"]["memory"])),
            GaugeMetricFamily("rabbitmq_alarms_free_disk_space_watermark",
                              "is 1 if free disk space watermark alarm is in effect", value=0),
            GaugeMetricFamily("rabbitmq_alarms_file_descriptor_limit",
                              "is 1 if file descriptor limit alarm is in effect", value=0),
        )
        for suffix, key, text in _GLOBAL:
            family = CounterMetricFamily(f"rabbitmq_global_messages_{suffix}", text, labels=["protocol"])
            family.add_metric(["amqp091"], snap["totals"][key])
            yield family
        for name, key, text in _QUEUE:
            if self.per_object:
                gauge = GaugeMetricFamily(name, text, labels=["vhost", "queue"])
                for q in snap["queues"]:
                    gauge.add_metric([q["vhost"], q["name"]], q[key])
            else:
                gauge = GaugeMetricFamily(name, text, value=sum(c[key] for c in counts))
            yield gauge


def prometheus_app(snap: Callable[..., dict[str, Any]], node: str = "sansmq@localhost",
                   cluster: str = "sansmq@localhost") -> Callable[..., Iterable[bytes]]:
    """WSGI app: GET /metrics (aggregated) and /metrics/per-object; 404 elsewhere. ``node`` and
    ``cluster`` name this node in ``rabbitmq_identity_info``."""
    apps = {}
    for path, per_object in (("/metrics", False), ("/metrics/per-object", True)):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RabbitCollector(snap, per_object, node, cluster))  # type: ignore[arg-type]
        apps[path] = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        handler = apps.get(environ.get("PATH_INFO", "").rstrip("/") or "/")
        if handler is None:
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
            return [b"Not Found"]
        return handler(environ, start_response)

    return app
