"""The recovery log line: what the store gave back on start, how long it took, what was dropped.

Measured here, in the server, because the engine never reads a clock."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["log_recovery"]

log = logging.getLogger("sansmq.store")


def log_recovery(broker: Any, store: Any, seconds: float) -> None:
    """One line after the broker was built over ``store`` (which recovers on open)."""
    vhosts = broker.model.vhosts.values()
    queues = [q for v in vhosts for q in v.queues.values()]
    durable = [q for q in queues if q.durable]
    messages = sum(q.count for q in queues)
    exchanges = sum(1 for v in vhosts for x in v.exchanges.values() if x.durable and not x.name.startswith("amq.")
                    and x.name)
    dropped = getattr(store, "dropped_on_recovery", 0)
    fields = {"event": "store.recovered", "store": type(store).__name__, "vhosts": len(broker.model.vhosts),
              "durable_queues": len(durable), "exchanges": exchanges, "messages": messages,
              "dropped_records": dropped, "duration_s": round(seconds, 3)}
    log.log(logging.WARNING if dropped else logging.INFO,
            "recovered %d vhost(s), %d durable queue(s), %d exchange(s), %d message(s) in %.3fs; "
            "%d torn or missing record(s) dropped", len(broker.model.vhosts), len(durable), exchanges,
            messages, seconds, dropped, extra=fields)
