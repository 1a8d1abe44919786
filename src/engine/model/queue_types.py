"""What RabbitMQ's queue types share at declare time: the durable-only rule of quorum queues and
streams (one 406 text per property, in RabbitMQ's order), the 406 for an argument of another type,
and the 406 for a redeclare asking for another type. The types' own rules live in ``quorum`` and
``streams``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import PreconditionFailed
from .objects import Queue, inequivalent, queue_type_of

__all__ = ["queue_type", "check_durable_only", "wrong_type_arg", "check_same_queue_type"]


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


def check_same_queue_type(q: Queue, args: Mapping[str, Any] | None) -> None:
    """A redeclare of ``q`` whose arguments ask for another queue type is refused (406) with
    RabbitMQ's text."""
    if queue_type(q) != queue_type_of(args):
        ours = (q.declared_args or {}).get("x-queue-type")
        raise PreconditionFailed(inequivalent("x-queue-type", "queue", q.name, q.vhost.name,
                                              (args or {}).get("x-queue-type"), ours))
