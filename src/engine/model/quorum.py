"""Quorum queues (``x-queue-type: quorum``) as a queue type of the model, on one node: what a
declare may ask for, and the settings that make a quorum queue behave as RabbitMQ's.

- Declare: durable only, never exclusive, never auto-delete, never server-named, and only the
  arguments RabbitMQ 3.10's quorum queues take (``QUORUM_ONLY_ARGS`` are refused on other queue
  types, ``NOT_QUORUM_ARGS`` on quorum queues, with RabbitMQ's 406 texts).
- Every message is kept in the store, whatever its delivery mode (``Queue.stores``).
- A delivery limit (``x-delivery-limit`` or the policy's ``delivery-limit``, else 20 as in RabbitMQ
  4; a negative one means none): each return of a delivery to the queue counts, and a message
  returned more often than the limit dies (``delivery_limit``: dead-lettered, or dropped without a
  dead-letter exchange). Deliveries carry the count in ``x-delivery-count`` (``DELIVERY_COUNT``).
- ``x-overflow: reject-publish-dlx`` is taken and behaves as drop-head (RabbitMQ logs it as an
  invalid overflow for quorum queues and uses its default).
- ``x-dead-letter-strategy: at-least-once`` holds only with ``x-overflow: reject-publish`` (else it
  falls back to at-most-once, as RabbitMQ does): then a dead-lettered copy is written to its target
  queues before its removal from this one (a crash between them keeps both, never neither).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import PreconditionFailed
from .objects import Queue, queue_type_of
from .queue_types import check_durable_only, wrong_type_arg

__all__ = ["check_quorum_declare", "check_server_named", "delivery_limit", "at_least_once", "overflow",
           "DEFAULT_DELIVERY_LIMIT", "DELIVERY_COUNT", "QUORUM_ONLY_ARGS", "NOT_QUORUM_ARGS"]

#: RabbitMQ 4's default x-delivery-limit of a quorum queue
DEFAULT_DELIVERY_LIMIT = 20
#: the header a quorum queue's deliveries carry: how often the message was returned to the queue
DELIVERY_COUNT = "x-delivery-count"
#: arguments only quorum queues take (RabbitMQ: 406 "... of queue type rabbit_classic_queue")
QUORUM_ONLY_ARGS = ("x-dead-letter-strategy", "x-quorum-initial-group-size")
#: arguments of classic queues and streams that a quorum queue refuses (RabbitMQ 3.10's list)
NOT_QUORUM_ARGS = ("x-max-priority", "x-queue-mode", "x-queue-version", "x-queue-master-locator",
                   "x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size")


def is_quorum_args(args: Mapping[str, Any] | None) -> bool:
    return bool(args) and queue_type_of(args) == "quorum"


def check_quorum_declare(name: str, vhost: str, durable: bool, exclusive: bool, auto_delete: bool,
                         args: Mapping[str, Any] | None) -> None:
    """Refuse (406) what RabbitMQ refuses when declaring a quorum queue, and a quorum queue's own
    arguments on a classic one (streams check theirs in ``streams``)."""
    qtype = queue_type_of(args)
    if qtype != "quorum":
        if qtype == "classic" and args:
            for arg in QUORUM_ONLY_ARGS:
                if arg in args:
                    raise wrong_type_arg(arg, name, vhost, "classic")
        return
    check_durable_only(name, vhost, durable, exclusive, auto_delete)
    assert args is not None
    for arg in NOT_QUORUM_ARGS:
        if arg in args:
            raise wrong_type_arg(arg, name, vhost, "quorum")


def check_server_named(args: Mapping[str, Any] | None) -> None:
    """A queue.declare with no name gets a server-made one: not for a quorum queue (RabbitMQ's 406)."""
    if is_quorum_args(args):
        raise PreconditionFailed("Cannot declare a server-named queue for type rabbit_quorum_queue")


def delivery_limit(q: Queue) -> int | None:
    """How often a message of ``q`` may be returned before it dies, or None for no limit: the
    effective ``x-delivery-limit`` (declared or the policy's; a classic queue takes it too, a sansmq
    extension), else 20 for a quorum queue. Negative: none."""
    args = q.args
    limit = args.get("x-delivery-limit") if args else None
    if limit is None:
        return DEFAULT_DELIVERY_LIMIT if q.quorum else None
    return None if limit < 0 else limit


def overflow(q: Queue, args: Mapping[str, Any]) -> str:
    """The overflow behaviour in force (``args`` has ``x-overflow``): a quorum queue treats
    reject-publish-dlx as its default, drop-head."""
    value = str(args["x-overflow"])
    return "drop-head" if value == "reject-publish-dlx" and q.quorum else value


def at_least_once(q: Queue) -> bool:
    """Whether ``q`` dead-letters at least once: a quorum queue with ``x-dead-letter-strategy:
    at-least-once`` and ``x-overflow: reject-publish`` (RabbitMQ falls back to at-most-once under
    any other overflow)."""
    args = q.args
    return bool(q.quorum and args and args.get("x-dead-letter-strategy") == "at-least-once"
                and args.get("x-overflow") == "reject-publish" and "x-dead-letter-exchange" in args)
