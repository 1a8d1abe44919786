"""Expiry and dead-lettering: when a message in a queue expires, and what a message that dies in a
queue (expired, rejected, over a length limit or a delivery limit) becomes on its dead-letter
exchange. Pure functions over the objects and routing: the publish layer enqueues the result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._message import Entry, Message
from .light import LightConsumer
from .objects import Queue
from .routing import cc_keys, route

__all__ = ["queue_expiry", "dead_letter", "x_death"]


def queue_expiry(args: dict[str, Any], msg: Message, now: float) -> float | None:
    """When ``msg`` expires in a queue with ``args``: its own expiry or the queue's
    ``x-message-ttl``, whichever comes first."""
    expires = msg.expires_at
    ttl = args.get("x-message-ttl")
    if ttl is not None:
        qexp = now + ttl / 1000.0
        expires = qexp if expires is None else min(expires, qexp)
    return expires


def dead_letter(q: Queue, entry: Entry, reason: str, new_id: Callable[[], int],
                now: float) -> tuple[Message, list[Queue | LightConsumer]] | None:
    """The dead-lettered copy of ``entry`` (a new message id from ``new_id``) and the queues it
    goes to, or None when ``q`` has no (existing) dead-letter exchange."""
    args = q.args
    if not args or "x-dead-letter-exchange" not in args:
        return None
    vhost = q.vhost
    dlx = vhost.exchanges.get(str(args["x-dead-letter-exchange"]))
    if dlx is None:
        return None
    msg = entry.msg
    headers = dict(msg.headers)
    if "x-first-death-reason" not in headers:
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = q.name
        headers["x-first-death-exchange"] = msg.exchange
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = q.name
    headers["x-last-death-exchange"] = msg.exchange
    key = str(args.get("x-dead-letter-routing-key", msg.routing_key))
    # per-message expiry does not survive dead-lettering (RabbitMQ removes the expiration)
    expiration = headers.pop("expiration", None)
    headers["x-death"] = x_death(headers.get("x-death"), q.name, reason, msg, expiration, now)
    dead = Message(new_id(), dlx.name, key, headers, msg.body, msg.priority, None, msg.persistent,
                   msg.ack_timeout)
    targets = route(vhost, dlx, key, headers)
    if reason == "expired" and q in targets:
        targets.remove(q)  # a cycle that would expire the message forever
    return dead, targets


def x_death(previous: Any, queue: str, reason: str, msg: Message, expiration: Any,
            now: float) -> list[dict[str, Any]]:
    """The ``x-death`` header as RabbitMQ writes it: one table per (queue, reason), most recent
    first, each with a count of how often the message died that way."""
    deaths = [d for d in previous if isinstance(d, dict)] if isinstance(previous, list) else []
    count = 1
    for i, d in enumerate(deaths):
        if d.get("queue") == queue and d.get("reason") == reason:
            count = int(d.get("count", 0)) + 1
            del deaths[i]
            break
    keys = [msg.routing_key, *cc_keys(msg.headers.get("CC"))]
    death: dict[str, Any] = {"count": count, "reason": reason, "queue": queue,
                             "time": int(now),  # seconds; AMQP sessions send it as a timestamp
                             "exchange": msg.exchange, "routing-keys": keys}
    if expiration is not None:
        death["original-expiration"] = expiration
    return [death, *deaths]
