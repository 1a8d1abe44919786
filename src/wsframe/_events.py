"""Events: the same classes travel in both directions and serve both roles."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "AcceptConnection",
    "BytesMessage",
    "CloseConnection",
    "CloseReason",
    "Event",
    "Headers",
    "NEED_DATA",
    "Ping",
    "Pong",
    "RejectConnection",
    "Request",
    "TextMessage",
    "is_wire_close_code",
]

Headers = list[tuple[bytes, bytes]]


class Event:
    """Base class of every wsframe event."""

    __slots__ = ()


@dataclass(slots=True)
class Request(Event):
    """The opening handshake request (client -> server).

    Received (server role): ``headers`` holds every request header (names lower-cased),
    ``subprotocols`` and ``extensions`` what the client offered, in its order
    (each extension item is one raw offer such as ``"permessage-deflate; client_max_window_bits"``).
    Sent (client role): ``headers`` are extra headers; the permessage-deflate offer
    comes from the connection's ``permessage_deflate`` setting, so ``extensions`` must be empty.
    """

    host: str
    path: str = "/"
    subprotocols: list[str] = field(default_factory=list)
    extensions: list[str] = field(default_factory=list)
    headers: Headers = field(default_factory=list)
    origin: str | None = None


@dataclass(slots=True)
class AcceptConnection(Event):
    """101 Switching Protocols (server -> client).

    Sent: ``extensions=None`` accepts what the connection negotiated from the offer,
    ``[]`` declines every extension. Received: the server's extension response items.
    """

    subprotocol: str | None = None
    extensions: list[str] | None = None
    headers: Headers = field(default_factory=list)


@dataclass(slots=True)
class RejectConnection(Event):
    """A non-101 HTTP response ending the handshake (server -> client), body included."""

    status: int = 400
    headers: Headers = field(default_factory=list)
    body: bytes = b""


@dataclass(slots=True)
class TextMessage(Event):
    """A text message, or one fragment of it when ``message_finished`` is False."""

    data: str
    message_finished: bool = True


@dataclass(slots=True)
class BytesMessage(Event):
    """A binary message, or one fragment of it when ``message_finished`` is False."""

    data: bytes
    message_finished: bool = True


@dataclass(slots=True)
class Ping(Event):
    payload: bytes = b""

    def response(self) -> Pong:
        """The Pong that answers this Ping (RFC 6455 5.5.3: same payload)."""
        return Pong(self.payload)


@dataclass(slots=True)
class Pong(Event):
    payload: bytes = b""


@dataclass(slots=True)
class CloseConnection(Event):
    """A Close frame. Received without a status code it reads ``code=1005``;
    ``code=1006`` marks a transport EOF without a Close frame (never on the wire; the
    connection is then CLOSED and nothing more can be sent).
    Sending ``code=None`` or 1005 sends a Close frame with an empty payload."""

    code: int | None = 1000
    reason: str = ""

    def response(self) -> CloseConnection:
        """The Close that completes the closing handshake (echoes the code)."""
        return CloseConnection(self.code, "")


class CloseReason:
    """RFC 6455 7.4.1 status codes (plus IANA's 1012-1014)."""

    NORMAL_CLOSURE: Final = 1000
    GOING_AWAY: Final = 1001
    PROTOCOL_ERROR: Final = 1002
    UNSUPPORTED_DATA: Final = 1003
    NO_STATUS_RCVD: Final = 1005
    ABNORMAL_CLOSURE: Final = 1006
    INVALID_FRAME_PAYLOAD_DATA: Final = 1007
    POLICY_VIOLATION: Final = 1008
    MESSAGE_TOO_BIG: Final = 1009
    MANDATORY_EXT: Final = 1010
    INTERNAL_ERROR: Final = 1011
    SERVICE_RESTART: Final = 1012
    TRY_AGAIN_LATER: Final = 1013
    BAD_GATEWAY: Final = 1014


def is_wire_close_code(code: int) -> bool:
    """May ``code`` appear in a Close frame? (1004-1006, 1015 and unassigned 1xxx/2xxx may not.)"""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


class NeedData(enum.Enum):
    """The type of NEED_DATA: ``next_event()`` has nothing more until ``receive_data()``."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData.NEED_DATA
