"""What RabbitMQ's queue types share at declare time: the durable-only rule of quorum queues and
streams (one 406 text per property, in RabbitMQ's order), the 406 for an argument of another type,
and the 406 for a redeclare asking for another type. The types' own rules live in ``quorum`` and
``streams``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import PreconditionFailed
from .objects import Queue, inequivalent, queue_type_of

__all__ = ["queue_type", "check_durable_only", "wrong_type_arg", "check_same_queue_type", "comparison_order"]

#: the order in which RabbitMQ 3.10 compares a redeclare's arguments, per queue type (its queue
#: types' ``queue_arguments``): the first that differs is the one its 406 names
_COMPARED = {
    "classic": ("x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-length",
                "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-priority",
                "x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer", "x-queue-type",
                "x-queue-master-locator"),
    "quorum": ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-expires",
               "x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-overflow",
               "x-single-active-consumer", "x-queue-type", "x-quorum-initial-group-size", "x-delivery-limit",
               "x-message-ttl", "x-queue-leader-locator"),
    "stream": ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
               "x-single-active-consumer", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
               "x-stream-filter-size-bytes", "x-initial-cluster-size", "x-queue-leader-locator"),
}


def queue_type(q: Queue) -> str:
    """``q``'s type as RabbitMQ names it (management's ``type``, ``x-queue-type``)."""
    return "stream" if q.stream else "quorum" if q.quorum else "classic"


def check_durable_only(name: str, vhost: str, durable: bool, exclusive: bool, auto_delete: bool) -> None:
    """A quorum queue or a stream is durable, never exclusive, never auto-delete (RabbitMQ's
    rabbit_queue_type_util checks: a declare breaking several rules names auto-delete first)."""
    for prop, bad in (("auto-delete", auto_delete), ("exclusive-owner", exclusive), ("non-durable", not durable)):
        if bad:
            raise PreconditionFailed(f"invalid property '{prop}' for queue '{name}' in vhost '{vhost}'")


def wrong_type_arg(arg: str, name: str, vhost: str, qtype: str) -> PreconditionFailed:
    """RabbitMQ's 406 for an argument the queue's type does not take (``x-max-priority`` on a
    quorum queue, ``x-max-age`` on a classic one)."""
    return PreconditionFailed(f"invalid arg '{arg}' for queue '{name}' in vhost '{vhost}' of queue type "
                              f"rabbit_{qtype}_queue")


def comparison_order(q: Queue, keys: set[str]) -> list[str]:
    """``keys`` in the order RabbitMQ compares them for a redeclare of ``q`` (those it does not
    know after its own, sorted: the same declare always names the same argument)."""
    known = _COMPARED[queue_type(q)]
    return [k for k in known if k in keys] + sorted(keys.difference(known))


def check_same_queue_type(q: Queue, args: Mapping[str, Any] | None) -> None:
    """A redeclare of ``q`` whose arguments ask for another queue type is refused (406) with
    RabbitMQ's text."""
    if queue_type(q) != queue_type_of(args):
        ours = (q.declared_args or {}).get("x-queue-type")
        raise PreconditionFailed(inequivalent("x-queue-type", "queue", q.name, q.vhost.name,
                                              (args or {}).get("x-queue-type"), ours))
