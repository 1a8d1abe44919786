"""The overview, the node and the current user."""

from __future__ import annotations

from typing import Any

from .base import ApiBase
from .request import Request
from .shapes import message_stats

VERSION = "3.10.8"  # the RabbitMQ management API version whose shapes this follows


class OverviewRoutes(ApiBase):
    """The overview, the node and the current user."""

    def overview(self, req: Request) -> Any:
        snap = self.snap()
        counts = [c for v, c in snap["counts"].items() if req.principal.sees_vhost(v)]

        def total(key: str) -> int:
            return sum(c[key] for c in counts)

        return {
            "management_version": VERSION, "rabbitmq_version": VERSION, "product_name": "sansmq",
            "product_version": "0.1.0", "cluster_name": self.cluster_name, "node": self.node,
            "erlang_version": "n/a", "rates_mode": "basic", "statistics_db_event_queue": 0,
            "exchange_types": [{"name": t, "description": "", "enabled": True}
                               for t in ("direct", "fanout", "headers", "topic")],
            "object_totals": {"connections": len(snap["connections"]),
                              "channels": sum(c["channels"] for c in snap["connections"]),
                              "exchanges": total("exchanges"), "queues": total("queues"),
                              "consumers": total("consumers")},
            "queue_totals": {"messages": total("messages"), "messages_ready": total("messages_ready"),
                             "messages_unacknowledged": total("messages_unacknowledged")},
            "message_stats": message_stats(snap),
            "listeners": [{"node": self.node, "protocol": p, "ip_address": h, "port": port}
                          for p, h, port in self.listeners()],
            "contexts": [],
        }

    def history(self, req: Request) -> Any:
        seconds = float((req.query.get("seconds") or ["300"])[0])
        return self.call(lambda b: b.sampler.history(seconds) if b.sampler else [])

    def whoami(self, req: Request) -> Any:
        return {"name": req.principal.name, "tags": list(req.principal.tags)}

