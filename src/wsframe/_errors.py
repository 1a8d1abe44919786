"""The two error kinds: whose fault it is decides which one is raised."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._events import CloseConnection, RejectConnection

__all__ = ["LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """Base class; ``hint`` is the event to send before closing (None: just drop TCP)."""

    def __init__(self, msg: str, hint: CloseConnection | RejectConnection | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.hint = hint


class LocalProtocolError(ProtocolError):
    """The caller misused the API (wrong state, invalid event); nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bad data.

    ``hint`` is a ``CloseConnection`` (1002, 1007, 1009) once the connection is
    open, a ``RejectConnection`` (400, 403, 426) for a bad opening request on the
    server, and None on the client during the handshake (drop the connection).
    """
