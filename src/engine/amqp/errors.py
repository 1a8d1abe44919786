"""The two ways an AMQP method fails: a channel error (channel.close; the connection lives on) or
a connection error (connection.close; the whole connection goes)."""

from __future__ import annotations

from typing import Any

__all__ = ["ChannelError", "AmqpConnectionError"]


class ChannelError(Exception):
    """A soft error: channel.close with ``code``; the connection lives on."""

    def __init__(self, code: int, text: str, method: Any = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.method = method



class AmqpConnectionError(Exception):
    """A hard error: connection.close with ``code``; the whole connection goes."""

    def __init__(self, code: int, text: str, method: Any = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.method = method

