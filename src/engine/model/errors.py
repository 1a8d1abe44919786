"""Refused model operations. ``code`` follows AMQP reply codes so every protocol can map it."""

from __future__ import annotations

__all__ = ["ModelError", "NotFound", "AccessRefused", "ResourceLocked", "PreconditionFailed", "Unsupported"]


class ModelError(Exception):
    """A refused operation; ``code`` follows AMQP reply codes so every protocol can map it."""

    code = 541

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class NotFound(ModelError):
    code = 404


class AccessRefused(ModelError):
    code = 403


class ResourceLocked(ModelError):
    code = 405


class PreconditionFailed(ModelError):
    code = 406


class Unsupported(ModelError):
    """An operation this kind of queue does not support (RabbitMQ: 540 NOT_IMPLEMENTED, a hard error)."""

    code = 540
