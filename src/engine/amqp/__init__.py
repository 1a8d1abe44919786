"""AMQP 0-9-1 sessions: the connection (``session``) and its channels (``channel``)."""

from .session import AmqpSession

__all__ = ["AmqpSession"]
