"""The two errors that say whose fault a problem is (h11's idiom)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._events import Error

__all__ = ["ProtocolError", "LocalProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """Base class. ``hint`` is the ERROR frame to send to the peer before closing, if any."""

    def __init__(self, msg: str, hint: Error | None = None) -> None:
        super().__init__(msg)
        self.hint = hint


class LocalProtocolError(ProtocolError):
    """The caller tried to send something the protocol or the connection's state forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bad data. The only exception ``next_event`` may raise."""
