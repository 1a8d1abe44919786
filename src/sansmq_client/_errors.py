"""The client's exceptions: each says what failed, who decided it and what state things are in now."""

from __future__ import annotations

__all__ = ["ClientError", "ConnectionLost", "BrokerClosedConnection", "ChannelClosed", "PublishNacked",
           "BrokerError", "ConsumerCancelled", "NotSupported", "ConnectionClosedByUser", "Unroutable"]


class ClientError(Exception):
    """Base of every error this package raises."""


class NotSupported(ClientError):
    """The protocol of this connection has no such operation (e.g. exchange.declare over STOMP)."""


class ConnectionLost(ClientError):
    """The transport went away (or the broker stopped answering heart-beats) while this operation was in
    flight: its outcome is unknown. A publish that raised this may or may not have reached the broker;
    the client reconnects by itself, so the caller may retry."""


class ConnectionClosedByUser(ClientError):
    """The operation was pending when ``close()`` was called."""


class BrokerClosedConnection(ClientError):
    """The broker closed the whole connection (AMQP connection.close).

    ``reply_code``/``reply_text`` are the broker's, ``method`` names the method that caused it
    (e.g. ``"connection.open"``, ``""`` if the broker named none) and ``channel`` the channel that method
    was sent on (0 for the connection itself, None if unknown)."""

    def __init__(self, reply_code: int, reply_text: str, method: str, channel: int | None) -> None:
        super().__init__(f"broker closed the connection: {reply_code} {reply_text}"
                         + (f" (caused by {method} on channel {channel})" if method else ""))
        self.reply_code, self.reply_text, self.method, self.channel = reply_code, reply_text, method, channel


class ChannelClosed(ClientError):
    """The broker closed one AMQP channel (a soft error); the connection and every other channel stay
    usable. The client reopens the channel on its next use; consumers on that channel are ended."""

    def __init__(self, reply_code: int, reply_text: str, method: str, channel: int) -> None:
        super().__init__(f"broker closed channel {channel}: {reply_code} {reply_text}"
                         + (f" (caused by {method})" if method else ""))
        self.reply_code, self.reply_text, self.method, self.channel = reply_code, reply_text, method, channel


class BrokerError(ClientError):
    """A STOMP ERROR frame: ``message`` (its header), ``body``, and ``command`` the frame that caused it
    (when the broker said which, through receipt-id). STOMP ends the connection after an ERROR."""

    def __init__(self, message: str, body: bytes, command: str) -> None:
        super().__init__(f"broker error: {message}" + (f" (caused by {command})" if command else ""))
        self.message, self.body, self.command = message, body, command


class PublishNacked(ClientError):
    """The broker refused responsibility for a published message (AMQP basic.nack)."""


class Unroutable(ClientError):
    """A mandatory publish no queue took: the broker returned it (AMQP basic.return) instead of storing it."""


class ConsumerCancelled(ClientError):
    """The broker ended a consumer (basic.cancel, e.g. its queue was deleted)."""
