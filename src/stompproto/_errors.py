"""The two errors that say whose fault a problem is (h11's idiom)."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from ._events import Error

__all__ = ["ProtocolError", "LocalProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """Base class. ``hint`` is the ERROR frame to send to the peer before closing, if any."""

    def __init__(self, msg: str, hint: Error | None = None) -> None:
        super().__init__(msg)
        self.hint = hint

    def detached(self) -> Self:
        """A copy without traceback, cause or context, for a connection to keep and raise again:
        a kept traceback's frames would hold the connection, its caller (the broker's session) and
        their receive buffers in a reference cycle that only the cyclic GC frees. Rebuilt from its
        fields, not copy.copy: a compiled (mypyc) exception keeps them where copy does not look."""
        return type(self)(self.args[0], self.hint)


class LocalProtocolError(ProtocolError):
    """The caller tried to send something the protocol or the connection's state forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bad data. The only exception ``next_event`` may raise."""


#: Exceptions that mean a bug of ours while parsing the peer's bytes: ``next_event`` re-types them
#: as a ``RemoteProtocolError`` whose ``hint`` is the codec's "internal error" close, chained to the
#: original (``__cause__``), so only RemoteProtocolError ever escapes ``next_event``.
INTERNAL_ERRORS: tuple[type[Exception], ...] = (
    struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError, AttributeError,
)
