"""The permissions an AMQP method needs, as RabbitMQ checks them: configure/write/read on the
resources it names; a refusal is 403 ACCESS_REFUSED on the channel with RabbitMQ's text."""

from __future__ import annotations

from typing import Any

from amqpproto import spec

from ..model.security import Access, UserAccess
from .errors import ChannelError

__all__ = ["permit", "permit_bind", "permit_queue_declare", "permit_publish"]


def permit(access: UserAccess, what: Access, kind: str, name: str, method: type) -> None:
    """403 ACCESS_REFUSED with RabbitMQ's text unless the user may do ``what`` on ``kind`` ``name``."""
    text = access.refusal(what, kind, name)
    if text is not None:
        raise ChannelError(spec.ACCESS_REFUSED, text, method)


def permit_bind(access: UserAccess, kind: str, destination: str, source: str, method: type) -> None:
    """A binding (or unbinding) writes to its destination (a queue or an exchange) and reads its
    source exchange."""
    permit(access, "write", kind, destination, method)
    permit(access, "read", "exchange", source, method)


def permit_queue_declare(access: UserAccess, name: str, args: dict[str, Any] | None, method: type) -> None:
    """Declaring configures the queue (a new one's dead-letter exchange: ``check_target_exchange``)."""
    permit(access, "configure", "queue", name, method)


def permit_publish(access: UserAccess, exchange: str, method: type) -> None:
    """Publishing writes to the exchange (the default exchange is ``amq.default``)."""
    if not access.allows("write", exchange or "amq.default"):  # the common case: one lookup
        permit(access, "write", "exchange", exchange, method)
