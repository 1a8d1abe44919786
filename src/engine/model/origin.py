"""Who a connection is, as the firehose's trace headers and the event exchange name it: the user it
logged in as and the client's address (``host:port``). Duck-typed on the session (``user``,
``peer``) so the model needs no protocol module."""

from __future__ import annotations

from typing import Any

__all__ = ["connection_name", "user_name", "peer_fields", "session_origin", "STOMP_CHANNEL"]

#: the channel number a STOMP connection's work is traced with (RabbitMQ's STOMP adapter runs each
#: connection on one AMQP channel, number 1)
STOMP_CHANNEL = 1


def _peer(session: Any) -> tuple[Any, ...]:
    return tuple(getattr(session, "peer", None) or ())


def connection_name(session: Any) -> str:
    peer = _peer(session)
    return f"{peer[0]}:{peer[1]}" if len(peer) >= 2 else str(peer) if peer else ""


def peer_fields(session: Any) -> dict[str, Any]:
    """``peer_host`` and ``peer_port`` as RabbitMQ's connection and login events have them."""
    peer = _peer(session)
    return {"peer_host": str(peer[0]) if peer else "", "peer_port": int(peer[1]) if len(peer) >= 2 else 0}


def user_name(session: Any) -> str:
    user = getattr(session, "user", None)
    return user.name if user is not None else ""


def session_origin(session: Any, channel: int = STOMP_CHANNEL) -> tuple[str, str, int]:
    """(user, connection, channel) of a publish or delivery made through ``session``."""
    return (user_name(session), connection_name(session), channel)
