"""Where a message goes: the queues (and light subscriptions) that bindings give for a routing key,
following exchange-to-exchange bindings, plus sender-selected distribution (``CC``/``BCC``)."""

from __future__ import annotations

from typing import Any

from .._message import Message
from .light import LightConsumer
from .objects import Exchange, Queue, VHost

__all__ = ["route", "route_cc", "cc_keys"]


def route(vhost: VHost, exchange: Exchange, key: str, headers: dict[str, Any] | None) -> list[Queue | LightConsumer]:
    """Queues (and light subscriptions) a message published to ``exchange`` with ``key``
    reaches (exchange-to-exchange bindings followed, each exchange visited once so binding
    cycles terminate)."""
    if exchange.name == "":
        q = vhost.queues.get(key)
        return [q] if q is not None else []
    found: dict[Any, None] = {}
    exchange.router.route(key, headers, found)
    for dest in found:
        if type(dest) is Exchange:
            break
    else:  # no exchange-to-exchange binding reached (the common case): nothing to follow
        return list(found)
    queues: dict[Queue | LightConsumer, None] = {}
    visited = {exchange.name}
    pending = list(found)
    while pending:
        dest = pending.pop(0)
        if type(dest) is not Exchange:  # a queue, a light subscription, a delayed exchange's holder
            queues[dest] = None
        elif dest.name not in visited:
            visited.add(dest.name)
            more: dict[Any, None] = {}
            dest.router.route(key, headers, more)
            pending.extend(more)
    return list(queues)


def cc_keys(value: Any) -> list[str]:
    """The routing keys of a ``CC``/``BCC`` header: a list (AMQP), or a comma-separated string
    from protocols whose header values are strings (STOMP)."""
    if isinstance(value, list):
        return [str(k) for k in value]
    if isinstance(value, str):
        return [k for k in value.split(",") if k]
    return []


def route_cc(vhost: VHost, exchange: Exchange, msg: Message) -> list[Queue | LightConsumer]:
    """Routes for the routing key and every key of the ``CC`` and ``BCC`` headers; ``BCC`` is
    removed from the message (RabbitMQ never delivers it)."""
    headers = msg.headers
    keys = [msg.routing_key, *cc_keys(headers.get("CC")), *cc_keys(headers.pop("BCC", None))]
    targets: dict[Queue | LightConsumer, None] = {}
    for key in keys:
        for q in route(vhost, exchange, key, headers):
            targets[q] = None
    return list(targets)
