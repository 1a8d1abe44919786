"""Prometheus metrics with RabbitMQ's names (its rabbitmq_prometheus plugin), from the snapshot.

``/metrics`` aggregates queue figures over all queues; ``/metrics/per-object`` labels them with
``vhost`` and ``queue``. A custom collector builds the metric families from one snapshot per
scrape; nothing is counted per message here.
"""

from __future__ import annotations

import itertools
import resource
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.stats import GAUGE_FIELDS, queue_gauges, queue_refs

from .._fds import fd_alarm, fd_limit, open_fds
from .listing import CHUNK, chunked

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
        snap = self.snap()
        conns = snap["connections"]
        counts = snap["counts"].values()
        fds, max_fds = open_fds(), fd_limit()
        disk_free = snap["disk_free"]
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
            GaugeMetricFamily("rabbitmq_resident_memory_limit_bytes",
                              "Memory high watermark in bytes", value=snap["memory_high_watermark"]),
            GaugeMetricFamily("rabbitmq_alarms_free_disk_space_watermark",
                              "is 1 if free disk space watermark alarm is in effect",
                              value=int(snap["alarms"]["disk"])),
            GaugeMetricFamily("rabbitmq_alarms_file_descriptor_limit",
                              "is 1 if file descriptor limit alarm is in effect", value=int(fd_alarm(fds, max_fds))),
            GaugeMetricFamily("rabbitmq_process_open_fds", "Open file descriptors", value=fds),
            GaugeMetricFamily("rabbitmq_process_max_fds", "Open file descriptors limit", value=max_fds),
            GaugeMetricFamily("rabbitmq_process_open_tcp_sockets", "Open TCP sockets", value=len(conns)),
            GaugeMetricFamily("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", value=max_fds),
        )
        if disk_free is not None:  # sampled only with the embedded store's directory
            yield GaugeMetricFamily("rabbitmq_disk_space_available_bytes", "Disk space available in bytes",
                                    value=disk_free)
        yield GaugeMetricFamily("rabbitmq_disk_space_available_limit_bytes",
                                "Free disk space low watermark in bytes", value=snap["disk_free_limit"])
        for suffix, key, text in _GLOBAL:
            family = CounterMetricFamily(f"rabbitmq_global_messages_{suffix}", text, labels=["protocol"])
            family.add_metric(["amqp091"], snap["totals"][key])
            yield family
        if not self.per_object:  # per object: streamed by per_queue_metrics instead
            for name, key, text in _QUEUE:
                yield GaugeMetricFamily(name, text, value=sum(c[key] for c in counts))


def _label(value: str) -> str:
    """A label value in the text format (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def per_queue_metrics(rows: list[tuple[Any, ...]]) -> Iterator[bytes]:
    """The per-queue families of /metrics/per-object in the text format, a chunk of lines at a time,
    from ``engine.stats.queue_gauges`` rows (which hold only the figures exported)."""
    labels = [f'{{vhost="{_label(row[0])}",queue="{_label(row[1])}"}} ' for row in rows]
    for name, key, text in _QUEUE:
        column = 2 + GAUGE_FIELDS.index(key)
        yield f"# HELP {name} {text}\n# TYPE {name} gauge\n".encode()
        for start in range(0, len(rows), CHUNK):
            yield "".join(f"{name}{labels[i]}{rows[i][column]}\n"
                          for i in range(start, min(len(rows), start + CHUNK))).encode()


def prometheus_app(snap: Callable[..., dict[str, Any]], call: Callable[[Callable[[Any], Any]], Any],
                   node: str = "sansmq@localhost", cluster: str = "sansmq@localhost") -> Callable[..., Iterable[bytes]]:
    """WSGI app: GET /metrics (aggregated) and /metrics/per-object; 404 elsewhere. ``call`` runs a
    function on the broker's thread (the per-queue figures are fetched a chunk per call); ``node``
    and ``cluster`` name this node in ``rabbitmq_identity_info``."""
    registries = {}
    for path, per_object in (("/metrics", False), ("/metrics/per-object", True)):
        registries[path] = CollectorRegistry(auto_describe=False)
        registries[path].register(RabbitCollector(snap, per_object, node, cluster))  # type: ignore[arg-type]

    def per_object_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refs = call(queue_refs)
        rows = [row for part in chunked(call, queue_gauges, refs) for row in part]
        del refs
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return itertools.chain([generate_latest(registries["/metrics/per-object"])], per_queue_metrics(rows))

    apps: dict[str, Callable[..., Iterable[bytes]]] = {"/metrics": make_wsgi_app(registries["/metrics"]),
                                                        "/metrics/per-object": per_object_app}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        handler = apps.get(environ.get("PATH_INFO", "").rstrip("/") or "/")
        if handler is None:
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
            return [b"Not Found"]
        return handler(environ, start_response)

    return app
