"""The two error types: whose fault it is, and what to send before closing."""

from __future__ import annotations

import struct
from typing import Any, Self


class ProtocolError(Exception):
    """Base class. ``reply_code`` is the AMQP reply code; ``hint`` the event to send, if any."""

    def __init__(self, msg: str, reply_code: int = 0, hint: Any = None, *,
                 fatal: bool = False) -> None:
        super().__init__(msg)
        self.msg = msg
        self.reply_code = reply_code
        self.hint = hint
        self.fatal = fatal

    def detached(self) -> Self:
        """A copy without traceback, cause or context, for a connection to keep and raise again:
        a kept traceback's frames would hold the connection, its caller (the broker's session) and
        their receive buffers in a reference cycle that only the cyclic GC frees. Rebuilt from its
        fields, not copy.copy: a compiled (mypyc) exception keeps them where copy does not look."""
        return type(self)(self.msg, self.reply_code, self.hint, fatal=self.fatal)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.msg!r}, reply_code={self.reply_code})"


class LocalProtocolError(ProtocolError):
    """The caller tried to send something the protocol or the current state forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bad data. ``hint`` is the Close event to send (ConnectionClose for hard
    errors, ChannelClose for soft ones, ProtocolHeader for a wrong protocol header), or None
    when the right reaction is to drop the socket.

    ``fatal`` is True when the byte stream cannot be parsed any further (framing errors, a
    wrong protocol header): send the hint and close the socket. Otherwise (a hard error in a
    well-formed frame) the connection keeps parsing, discarding everything but the close
    handshake, so ``hint`` can be sent and the peer's close-ok awaited; after a soft error only
    that channel is affected.
    """


#: Exceptions that mean a bug of ours while parsing the peer's bytes: ``next_event`` re-types them
#: as a ``RemoteProtocolError`` whose ``hint`` is the codec's "internal error" close, chained to the
#: original (``__cause__``), so only RemoteProtocolError ever escapes ``next_event``.
INTERNAL_ERRORS: tuple[type[Exception], ...] = (
    struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError, AttributeError,
)
