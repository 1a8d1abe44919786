"""The permissions RabbitMQ's STOMP adapter needs for what it does on the client's behalf (it
declares, binds and reads queues for SEND and SUBSCRIBE); a refusal is an ERROR frame
(access_refused, RabbitMQ's text) and the connection closes."""

from __future__ import annotations

from typing import Any

from ..model.security import Access, TopicAccess, UserAccess, topic_refusal
from .errors import StompError

__all__ = ["permit", "permit_declare", "permit_publish", "permit_subscription_queue", "permit_light_subscription",
           "permit_temp_queue", "permit_topic"]


def permit(access: UserAccess, what: Access, kind: str, name: str) -> None:
    """An ERROR (access_refused) unless the user may do ``what`` on ``kind`` ``name``."""
    text = access.refusal(what, kind, name)
    if text is not None:
        raise StompError("access_refused", f"ACCESS_REFUSED - {text}")


def permit_declare(access: UserAccess, name: str) -> None:
    """RabbitMQ's adapter declares the queue on every SEND and SUBSCRIBE to ``/queue/name``."""
    if not access.allows("configure", name):  # the common case: one lookup
        permit(access, "configure", "queue", name)


def permit_publish(access: UserAccess, exchange: str) -> None:
    """A SEND writes to its exchange (the default exchange is ``amq.default``)."""
    if not access.allows("write", exchange or "amq.default"):  # the common case: one lookup
        permit(access, "write", "exchange", exchange)


def permit_subscription_queue(access: UserAccess, queue: str, exchange: str) -> None:
    """A topic or exchange subscription declares its queue (configure) and binds it (write on it,
    read on the exchange)."""
    permit(access, "configure", "queue", queue)
    permit(access, "write", "queue", queue)
    permit(access, "read", "exchange", exchange)


def permit_light_subscription(access: UserAccess, sub_id: str, exchange: str) -> None:
    """A subscription without a queue of its own needs what RabbitMQ's adapter would need for the
    subscription queue it declares, binds and reads."""
    what: Access
    for what in ("configure", "write", "read"):
        permit(access, what, "queue", "stomp-subscription-" + sub_id)
    permit(access, "read", "exchange", exchange)


def permit_temp_queue(access: UserAccess, name: str) -> None:
    """A ``/temp-queue/`` declares its queue and reads it."""
    permit(access, "configure", "queue", name)
    permit(access, "read", "queue", name)


def permit_topic(access: UserAccess, exchange: Any, routing_key: str, want: TopicAccess) -> None:
    """Topic authorisation (engine.model.security): a SEND to a topic exchange writes its routing
    key, a subscription binds (reads) its key."""
    text = topic_refusal(access, exchange, routing_key, want)
    if text is not None:
        raise StompError("access_refused", f"ACCESS_REFUSED - {text}")
