"""The two error kinds: whose fault it is decides which one is raised."""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from ._events import CloseConnection, RejectConnection

__all__ = ["INTERNAL_ERRORS", "LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """Base class; ``hint`` is the event to send before closing (None: just drop TCP)."""

    def __init__(self, msg: str, hint: CloseConnection | RejectConnection | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.hint = hint

    def detached(self) -> Self:
        """A copy without traceback, cause or context, for a connection to keep and raise again:
        a kept traceback's frames would hold the connection, its caller (the broker's session) and
        their receive buffers in a reference cycle that only the cyclic GC frees. Rebuilt from its
        fields, not copy.copy: a compiled (mypyc) exception keeps them where copy does not look."""
        return type(self)(self.msg, self.hint)


class LocalProtocolError(ProtocolError):
    """The caller misused the API (wrong state, invalid event); nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bad data.

    ``hint`` is a ``CloseConnection`` (1002, 1007, 1009) once the connection is
    open, a ``RejectConnection`` (400, 403, 426) for a bad opening request on the
    server, and None on the client during the handshake (drop the connection).
    """


#: Exceptions that mean a bug of ours while parsing the peer's bytes: ``next_event`` re-types them
#: as a ``RemoteProtocolError`` whose ``hint`` is the codec's "internal error" close, chained to the
#: original (``__cause__``), so only RemoteProtocolError ever escapes ``next_event``.
INTERNAL_ERRORS: tuple[type[Exception], ...] = (
    struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError, AttributeError,
)
