"""WebSocket sessions: the carrier of STOMP or AMQP over RFC 6455."""

from .session import WsSession

__all__ = ["WsSession"]
