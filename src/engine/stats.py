"""Statistics for the management API and Prometheus: sampled rates and a plain-data snapshot.

Nothing here runs per message. The model keeps a few integer counters (publishes, deliveries,
redeliveries, acks, confirms); once management is on, a broker timer samples them every
``interval`` seconds of the server's clock into a bounded ring, from which rates (per second, over
the last few samples) and chart histories are computed. ``snapshot`` copies the broker's state into
plain dicts and lists on the broker's thread, so readers on other threads never touch live objects.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .model import Exchange, Queue
from .model.queue_types import queue_type

__all__ = ["COUNTERS", "QUEUE_COUNTERS", "QUEUE_DEPTHS", "SECTIONS", "Sampler", "snapshot"]

#: counter name (RabbitMQ's message_stats key) -> ModelState attribute
COUNTERS = (("publish", "publishes"), ("deliver_get", "delivered"), ("redeliver", "redelivered"),
            ("ack", "acked"), ("confirm", "confirmed"))
#: samples kept: ten minutes at one a second, enough for the admin page's charts
RING = 600
#: rates are averaged over this many sampling intervals (RabbitMQ smooths over a few seconds too)
RATE_SPAN = 5


#: per-queue counter (RabbitMQ's queue message_stats key) -> the queue's counter (model.objects)
QUEUE_COUNTERS = (("publish", "published"), ("deliver_get", "delivered"), ("redeliver", "redelivered"),
                  ("ack", "acked"))
#: per-queue depths whose rates RabbitMQ shows beside them (``messages_details``...)
QUEUE_DEPTHS = ("messages", "messages_ready", "messages_unacknowledged")
#: one queue's sample: time, then its QUEUE_COUNTERS, then its QUEUE_DEPTHS
QueueSample = tuple[float, int, int, int, int, int, int, int]


@dataclass(slots=True)
class Sampler:
    """A ring of (time, counters, ready, unacked) samples taken on a broker timer, and for each
    queue that has seen traffic the last ``RATE_SPAN`` + 1 samples of its own counters and depths
    (the per-queue rates: kept only that long, so their memory follows the busy queues, not time)."""

    interval: float = 1.0
    ring: deque[tuple[float, tuple[int, ...], int, int]] = field(default_factory=lambda: deque(maxlen=RING))
    queues: dict[Queue, deque[QueueSample]] = field(default_factory=dict)

    def sample(self, now: float, model: Any) -> None:
        ready = unacked = 0
        old, queues = self.queues, {}
        before = self.ring[-1][0] if self.ring else None
        for vhost in model.vhosts.values():  # one pass over the queues per interval, not per request
            for q in vhost.queues.values():
                ready += q.count
                q_unacked = q.unacked_count() if q.consumers else 0
                unacked += q_unacked
                x = q._x
                if x is not None and (x.published or x.delivered or x.acked):
                    samples = old.get(q)
                    if samples is None:
                        samples = deque(maxlen=RATE_SPAN + 1)
                        if before is not None:  # its traffic began since the last sample: from zero
                            samples.append((before, 0, 0, 0, 0, q.count + q_unacked, q.count, q_unacked))
                    samples.append((now, x.published, x.delivered, x.redelivered, x.acked,
                                    q.count + q_unacked, q.count, q_unacked))
                    queues[q] = samples
        self.queues = queues  # deleted queues drop out here
        self.ring.append((now, tuple(getattr(model, attr) for _, attr in COUNTERS), ready, unacked))

    def queue_rates(self, q: Queue) -> dict[str, float]:
        """``q``'s rates per second over the last samples: its QUEUE_COUNTERS, then its QUEUE_DEPTHS
        (empty for a queue that has seen no traffic)."""
        samples = self.queues.get(q)
        if not samples:
            return {}
        first, last = samples[0], samples[-1]
        span = last[0] - first[0]
        names = [name for name, _ in QUEUE_COUNTERS] + list(QUEUE_DEPTHS)
        if span <= 0:
            return dict.fromkeys(names, 0.0)
        return {name: round((last[i] - first[i]) / span, 1) for i, name in enumerate(names, 1)}

    def rates(self) -> dict[str, float]:
        ring = self.ring
        if len(ring) < 2:
            return {name: 0.0 for name, _ in COUNTERS}
        t1, c1, _, _ = ring[-1]
        t0, c0, _, _ = ring[max(0, len(ring) - 1 - RATE_SPAN)]
        span = max(t1 - t0, 1e-9)
        return {name: round((c1[i] - c0[i]) / span, 1) for i, (name, _) in enumerate(COUNTERS)}

    def history(self, seconds: float) -> list[dict[str, Any]]:
        """Per-sample rates and depths over the last ``seconds`` (the admin page's charts)."""
        ring = list(self.ring)
        if not ring:
            return []
        start = ring[-1][0] - seconds
        out = []
        for (t0, c0, _, _), (t1, c1, ready, unacked) in zip(ring, ring[1:], strict=False):
            if t1 < start:
                continue
            span = max(t1 - t0, 1e-9)
            out.append({"t": t1, "ready": ready, "unacked": unacked,
                        **{name: round((c1[i] - c0[i]) / span, 1) for i, (name, _) in enumerate(COUNTERS)}})
        return out


def _depths(q: Queue, streams: Any) -> tuple[int, int, int]:
    """(ready, unacknowledged, ready bytes) of a queue."""
    if q.stream:  # as RabbitMQ lists a stream: what it holds (reading removes nothing)
        log = streams.log(q)
        return max(0, streams.visible_end(q) - log.first), 0, log.size_bytes
    return q.count, q.unacked_count(), q.bytes + q.paged_bytes


def _queue(q: Queue, sampler: Sampler | None, streams: Any, at_least_once: Any) -> dict[str, Any]:
    owner = q.exclusive_owner
    x = q._x
    ready, unacked, nbytes = _depths(q, streams)
    # a quorum queue's dead messages kept until their dead letters are taken (at-least-once)
    dlx = at_least_once.held(q) if q.quorum else 0
    return {"counters": {name: getattr(x, attr) if x is not None else 0 for name, attr in QUEUE_COUNTERS},
            "rates": sampler.queue_rates(q) if sampler is not None else {},
            "vhost": q.vhost.name, "name": q.name, "durable": q.durable, "auto_delete": q.auto_delete,
            "exclusive": owner is not None, "arguments": dict(q.declared_args or {}), "policy": q.policy,
            "type": queue_type(q), "leader_node": q.leader,  # a cluster node's name; None: this node leads it
            "effective_arguments": dict(q.args or {}), "messages_ready": ready,
            "messages_unacknowledged": unacked, "messages": ready + unacked + dlx, "consumers": q.consumer_count(),
            "message_bytes_ready": nbytes, **({"messages_dlx": dlx} if q.quorum else {})}


def _exchange(x: Exchange) -> dict[str, Any]:
    return {"vhost": x.vhost.name, "name": x.name, "type": x.type, "durable": x.durable,
            "auto_delete": x.auto_delete, "internal": x.internal, "arguments": dict(x.args or {}),
            "policy": x.policy}


def default_binding(q: Queue) -> dict[str, Any]:
    """The default exchange's implicit binding of ``q``, as RabbitMQ lists it (only names: safe to
    build from a queue reference on any thread)."""
    return {"source": "", "vhost": q.vhost.name, "destination": q.name, "destination_type": "queue",
            "routing_key": q.name, "arguments": {}}


def explicit_bindings(vhost: Any) -> list[dict[str, Any]]:
    """The bindings declared in ``vhost`` (every exchange's but the default one's)."""
    out = []
    for x in vhost.exchanges.values():
        if x.name == "":
            continue
        for dest, key, args in x.router.bindings():
            if isinstance(dest, (Queue, Exchange)):
                out.append({"source": x.name, "vhost": vhost.name, "destination": dest.name,
                            "destination_type": "queue" if isinstance(dest, Queue) else "exchange",
                            "routing_key": key, "arguments": dict(args or {})})
    return out


def _bindings(vhost: Any) -> list[dict[str, Any]]:
    return [*map(default_binding, vhost.queues.values()), *explicit_bindings(vhost)]


# -- queue listings in parts: each call is one short turn of the broker's loop ---------------------
def queue_refs(broker: Any, vhosts: Any = None) -> list[Queue]:
    """The queues of ``vhosts`` (all when None), in the model's order: references only (cheap to copy),
    whose immutable vhost and name a caller may read on any thread; their figures come from
    :func:`queue_infos` or :func:`queue_gauges` in later turns."""
    model = broker.model
    names = model.vhosts if vhosts is None else [v for v in vhosts if v in model.vhosts]
    return [q for name in names for q in model.vhosts[name].queues.values()]


def _alive(q: Queue) -> bool:
    return q.vhost.queues.get(q.name) is q  # not deleted (nor replaced) since its reference was taken


def queue_infos(broker: Any, queues: list[Queue]) -> list[dict[str, Any]]:
    """The snapshot's queue entries of ``queues`` still declared (run on the broker's thread)."""
    model = broker.model
    return [_queue(q, broker.sampler, model.streams, model.publisher.at_least_once) for q in queues if _alive(q)]


#: the figures of one queue Prometheus exports per object, in this order (``queue_gauges``)
GAUGE_FIELDS = ("messages_ready", "messages_unacknowledged", "messages", "consumers", "message_bytes_ready")


def queue_gauges(broker: Any, queues: list[Queue]) -> list[tuple[Any, ...]]:
    """(vhost, name, *GAUGE_FIELDS) per queue still declared: compact rows for a large scrape."""
    streams = broker.model.streams
    out = []
    for q in queues:
        if _alive(q):
            ready, unacked, nbytes = _depths(q, streams)
            out.append((q.vhost.name, q.name, ready, unacked, ready + unacked, q.consumer_count(), nbytes))
    return out


#: the parts of a snapshot that list objects (costly with many queues: built only when asked)
SECTIONS = ("queues", "exchanges", "bindings", "consumers")


def _vhost_counts(vhost: Any) -> dict[str, int]:
    queues = ready = unacked = consumers = nbytes = 0
    for q in vhost.queues.values():
        queues += 1
        ready += q.count
        nbytes += q.bytes + q.paged_bytes
        if q.consumers:
            consumers += len(q.consumers)
            unacked += q.unacked_count()
    return {"queues": queues, "exchanges": len(vhost.exchanges), "consumers": consumers,
            "messages_ready": ready, "messages_unacknowledged": unacked, "messages": ready + unacked,
            "message_bytes_ready": nbytes}


def snapshot(broker: Any, sections: tuple[str, ...] = ()) -> dict[str, Any]:
    """The broker's state as plain data (run on the broker's thread): counts per vhost, rates,
    connections, users, permissions and policies always; the object lists named in ``sections``
    (``SECTIONS``) only when asked, since they cost in proportion to the objects."""
    model = broker.model
    sampler: Sampler | None = broker.sampler
    connections = []
    for conn_id, session in broker.sessions.items():
        if session.closed:
            continue
        info = session.describe()
        info["conn_id"] = conn_id
        connections.append(info)
    out: dict[str, Any] = {
        "now": broker.now,
        "vhosts": list(model.vhosts),
        "counts": {name: _vhost_counts(v) for name, v in model.vhosts.items()},
        "connections": connections,
        "totals": {name: getattr(model, attr) for name, attr in COUNTERS},
        "rates": sampler.rates() if sampler else {name: 0.0 for name, _ in COUNTERS},
        "alarms": {"memory": broker.mem_alarm, "disk": broker.disk_alarm},
        "queued_bytes": model.queued_bytes,
        "memory_high_watermark": broker.config.limits.memory_high_watermark,
        "disk_free": broker.disk_free,
        "disk_free_limit": broker.disk_free_limit,
        # users, permissions and policies are replaced, never changed in place: shared, not copied
        "users": dict(model.security.users),
        "loopback_users": frozenset(model.security.loopback_users),
        "permissions": list(model.security.permissions.values()),
        "topic_permissions": list(model.security.topic_permissions.values()),
        "policies": [p.to_json() for p in model.policies.in_vhost()],
        "user_limits": {name: dict(v) for name, v in model.limits.limits["user"].items()},
    }
    vhosts = model.vhosts.values()
    if "queues" in sections:
        kept = model.publisher.at_least_once
        out["queues"] = [_queue(q, sampler, model.streams, kept) for v in vhosts for q in v.queues.values()]
    if "exchanges" in sections:
        out["exchanges"] = [_exchange(x) for v in vhosts for x in v.exchanges.values()]
    if "bindings" in sections:
        out["bindings"] = [b for v in vhosts for b in _bindings(v)]
    if "consumers" in sections:
        out["consumers"] = [_consumer(q, c) for v in vhosts for q in v.queues.values() for c in q.consumers or ()]
    return out


def _consumer(q: Queue, c: Any) -> dict[str, Any]:
    owner = getattr(c.owner, "session", c.owner)  # an AMQP channel's connection
    return {"queue": {"name": q.name, "vhost": q.vhost.name},
            "consumer_tag": str(getattr(c, "tag", getattr(c, "id", ""))), "ack_required": not c.auto_ack,
            "prefetch_count": c.prefetch, "conn_id": getattr(owner, "conn_id", None)}
