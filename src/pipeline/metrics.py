"""The stream source's lag, as Spark's Kafka source reports it (``avgOffsetsBehindLatest``,
``maxOffsetsBehindLatest``, ``minOffsetsBehindLatest``).

PySpark's Python sources cannot add custom metrics to a query's progress (no ``metrics()`` hook
in pyspark 4.3's ``DataSourceStreamReader``), so the source reports what Spark does show: every
trigger's ``latestOffset`` (``reportLatestOffset``) is each stream's real end, with the offsets the
driver skipped so far under ``failOnDataLoss=false`` in it (key ``@skippedOffsets``), next to the
batch's ``endOffset``. ``source_metrics`` turns a progress's source entry into Kafka's figures; the
source also logs them on logger ``pipeline.metrics`` every trigger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["SKIPPED_KEY", "lag", "source_metrics", "log_lag"]

#: the key of the reported latest offset holding ``{stream: offsets skipped so far}``
SKIPPED_KEY = "@skippedOffsets"

log = logging.getLogger("pipeline.metrics")


def lag(end: Mapping[str, int], latest: Mapping[str, int]) -> dict[str, Any]:
    """Per stream, how far ``end`` (a batch's end offsets) is behind ``latest``, and Kafka's
    three figures over the streams (avg as a float; None without streams)."""
    behind = {s: max(0, latest[s] - end.get(s, 0)) for s in latest if not s.startswith("@")}
    values = list(behind.values())
    return {
        "offsetsBehindLatest": behind,
        "avgOffsetsBehindLatest": sum(values) / len(values) if values else None,
        "maxOffsetsBehindLatest": max(values, default=None),
        "minOffsetsBehindLatest": min(values, default=None),
    }


def source_metrics(source: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's lag figures, the latest offsets and the skipped count from one entry of a query
    progress's ``sources`` (``query.lastProgress["sources"][0]``)."""
    def offsets(key: str) -> dict[str, Any]:
        raw = source.get(key)
        value = json.loads(raw) if isinstance(raw, str) else raw
        return dict(value or {})
    latest = offsets("latestOffset")
    end = {s: o for s, o in offsets("endOffset").items() if not s.startswith("@")}
    skipped = latest.pop(SKIPPED_KEY, {})
    return {**lag(end, {s: o for s, o in latest.items() if not s.startswith("@")}),
            "latestOffset": {s: o for s, o in latest.items() if not s.startswith("@")},
            "skippedOffsets": sum(skipped.values())}


def log_lag(end: Mapping[str, int], latest: Mapping[str, int], skipped: Mapping[str, int]) -> None:
    figures = lag(end, latest)
    log.info("latest %s, batch end %s: offsets behind latest avg %s max %s min %s; skipped (failOnDataLoss=false) %d",
             dict(latest), dict(end), figures["avgOffsetsBehindLatest"], figures["maxOffsetsBehindLatest"],
             figures["minOffsetsBehindLatest"], sum(skipped.values()))
