"""The AMQP state machines as tables, shared by both roles: ``(sender, state, event type) -> new
state``, the key order of every codec here (see stompproto's ``_state``).

The sender is the role that emits the event, so the same tables validate what we send (sender =
our role) and what we receive (sender = the peer's role). Anything absent from a table is a
protocol violation: LocalProtocolError when we send it, RemoteProtocolError (503 COMMAND_INVALID
/ 504 CHANNEL_ERROR / 505 UNEXPECTED_FRAME) when the peer does.

    AWAIT_HEADER --header--> AWAIT_START --start--> AWAIT_START_OK --start-ok--> AWAIT_SECURE_OR_TUNE
    AWAIT_SECURE_OR_TUNE --secure--> AWAIT_SECURE_OK --secure-ok--> AWAIT_SECURE_OR_TUNE
    AWAIT_SECURE_OR_TUNE --tune--> AWAIT_TUNE_OK --tune-ok--> AWAIT_OPEN --open--> AWAIT_OPEN_OK
    AWAIT_OPEN_OK --open-ok--> OPEN --close--> CLOSING_BY_<sender> --close-ok--> CLOSED
"""

from __future__ import annotations

import enum

from . import spec
from ._events import ProtocolHeader

__all__ = [
    "Role", "CLIENT", "SERVER", "ConnectionState", "ChannelState", "ContentState",
    "CONNECTION_TABLE", "CHANNEL_TABLE", "CONTENT_TABLE", "ANY_METHOD",
]


class Role(enum.Enum):
    """Which end of the connection: the same tables check what each role may send."""

    CLIENT = "client"
    SERVER = "server"

    __hash__ = object.__hash__  # members are singletons; Enum's own __hash__ is slow Python

    @property
    def peer(self) -> Role:
        return Role.SERVER if self is Role.CLIENT else Role.CLIENT


CLIENT = Role.CLIENT
SERVER = Role.SERVER


class _State(enum.StrEnum):
    """States are StrEnums: each equals its name as a string ("OPEN", "CH_CLOSED"), as the plain
    string constants they replace did, and shows as that name in messages."""


# ---- connection --------------------------------------------------------------------------
class ConnectionState(_State):
    AWAIT_HEADER = "AWAIT_HEADER"  # client has not sent the protocol header yet
    AWAIT_START = "AWAIT_START"
    AWAIT_START_OK = "AWAIT_START_OK"
    AWAIT_SECURE_OR_TUNE = "AWAIT_SECURE_OR_TUNE"
    AWAIT_SECURE_OK = "AWAIT_SECURE_OK"
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    AWAIT_OPEN = "AWAIT_OPEN"
    AWAIT_OPEN_OK = "AWAIT_OPEN_OK"
    OPEN = "OPEN"
    CLOSING_BY_CLIENT = "CLOSING_BY_CLIENT"  # client sent connection.close, awaiting close-ok
    CLOSING_BY_SERVER = "CLOSING_BY_SERVER"
    CLOSED = "CLOSED"
    ERROR = "ERROR"  # we detected a hard error; only our connection.close may follow


(AWAIT_HEADER, AWAIT_START, AWAIT_START_OK, AWAIT_SECURE_OR_TUNE, AWAIT_SECURE_OK, AWAIT_TUNE_OK,
 AWAIT_OPEN, AWAIT_OPEN_OK, OPEN, CLOSING_BY_CLIENT, CLOSING_BY_SERVER, CLOSED, ERROR) = ConnectionState

_HANDSHAKE = (AWAIT_START_OK, AWAIT_SECURE_OR_TUNE, AWAIT_SECURE_OK, AWAIT_TUNE_OK, AWAIT_OPEN,
              AWAIT_OPEN_OK)

CONNECTION_TABLE: dict[tuple[Role, ConnectionState, type], ConnectionState] = {
    # sender  state                 event                            new state
    (CLIENT, AWAIT_HEADER, ProtocolHeader): AWAIT_START,
    (SERVER, AWAIT_START, spec.ConnectionStart): AWAIT_START_OK,
    (CLIENT, AWAIT_START_OK, spec.ConnectionStartOk): AWAIT_SECURE_OR_TUNE,
    (SERVER, AWAIT_SECURE_OR_TUNE, spec.ConnectionSecure): AWAIT_SECURE_OK,
    (CLIENT, AWAIT_SECURE_OK, spec.ConnectionSecureOk): AWAIT_SECURE_OR_TUNE,
    (SERVER, AWAIT_SECURE_OR_TUNE, spec.ConnectionTune): AWAIT_TUNE_OK,
    (CLIENT, AWAIT_TUNE_OK, spec.ConnectionTuneOk): AWAIT_OPEN,
    (CLIENT, AWAIT_OPEN, spec.ConnectionOpen): AWAIT_OPEN_OK,
    (SERVER, AWAIT_OPEN_OK, spec.ConnectionOpenOk): OPEN,
    # RabbitMQ extensions, only on an open connection.
    (SERVER, OPEN, spec.ConnectionBlocked): OPEN,
    (SERVER, OPEN, spec.ConnectionUnblocked): OPEN,
    (CLIENT, OPEN, spec.ConnectionBlocked): OPEN,  # the XML lets both chassis send them
    (CLIENT, OPEN, spec.ConnectionUnblocked): OPEN,
    (CLIENT, OPEN, spec.ConnectionUpdateSecret): OPEN,
    (SERVER, OPEN, spec.ConnectionUpdateSecretOk): OPEN,
    # Close handshake. Either side may start it once the server has spoken; a simultaneous
    # close is answered with close-ok by both.
    **{(CLIENT, s, spec.ConnectionClose): CLOSING_BY_CLIENT for s in (*_HANDSHAKE, OPEN)},
    **{(SERVER, s, spec.ConnectionClose): CLOSING_BY_SERVER for s in (*_HANDSHAKE, OPEN)},
    (SERVER, CLOSING_BY_CLIENT, spec.ConnectionCloseOk): CLOSED,
    (SERVER, CLOSING_BY_CLIENT, spec.ConnectionClose): CLOSING_BY_CLIENT,
    (CLIENT, CLOSING_BY_CLIENT, spec.ConnectionCloseOk): CLOSING_BY_CLIENT,
    (CLIENT, CLOSING_BY_SERVER, spec.ConnectionCloseOk): CLOSED,
    (CLIENT, CLOSING_BY_SERVER, spec.ConnectionClose): CLOSING_BY_SERVER,
    (SERVER, CLOSING_BY_SERVER, spec.ConnectionCloseOk): CLOSING_BY_SERVER,
    (CLIENT, ERROR, spec.ConnectionClose): CLOSING_BY_CLIENT,
    (SERVER, ERROR, spec.ConnectionClose): CLOSING_BY_SERVER,
}

# Channel traffic (methods on channels >= 1, content) flows only in OPEN.
# States where the closer discards whatever the peer still sends, except close/close-ok.
CLOSING_BY: dict[ConnectionState, Role] = {CLOSING_BY_CLIENT: CLIENT, CLOSING_BY_SERVER: SERVER}
# A client may receive the server's protocol header (a version refusal) only this early.
BEFORE_START = frozenset({AWAIT_HEADER, AWAIT_START})
# Heartbeat frames are legal once tuning started (RabbitMQ sends them right after tune-ok).
NO_HEARTBEAT = frozenset({AWAIT_HEADER, AWAIT_START, AWAIT_START_OK})


# ---- channel -----------------------------------------------------------------------------
class ChannelState(_State):
    CH_CLOSED = "CH_CLOSED"  # never opened, or close handshake completed
    CH_OPENING = "CH_OPENING"
    CH_OPEN = "CH_OPEN"
    CH_CLOSING_BY_CLIENT = "CH_CLOSING_BY_CLIENT"
    CH_CLOSING_BY_SERVER = "CH_CLOSING_BY_SERVER"
    CH_ERROR = "CH_ERROR"  # we raised a soft error; only our channel.close may follow


(CH_CLOSED, CH_OPENING, CH_OPEN, CH_CLOSING_BY_CLIENT, CH_CLOSING_BY_SERVER,
 CH_ERROR) = ChannelState


class _AnyMethod:
    """Stands for every other method of a channel class in CHANNEL_TABLE's keys."""


# Any other method of a channel class is allowed in CH_OPEN if its sender may send it
# (the spec's chassis, see spec.X.BY_CLIENT / BY_SERVER) and leaves the state unchanged.
ANY_METHOD = _AnyMethod

CHANNEL_TABLE: dict[tuple[Role, ChannelState, type], ChannelState] = {
    # sender  state                 event                   new state
    (CLIENT, CH_CLOSED, spec.ChannelOpen): CH_OPENING,
    (SERVER, CH_OPENING, spec.ChannelOpenOk): CH_OPEN,
    (SERVER, CH_OPENING, spec.ChannelClose): CH_CLOSING_BY_SERVER,  # open refused
    (CLIENT, CH_OPEN, ANY_METHOD): CH_OPEN,
    (SERVER, CH_OPEN, ANY_METHOD): CH_OPEN,
    (CLIENT, CH_OPEN, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (SERVER, CH_OPEN, spec.ChannelClose): CH_CLOSING_BY_SERVER,
    (SERVER, CH_CLOSING_BY_CLIENT, spec.ChannelCloseOk): CH_CLOSED,
    (SERVER, CH_CLOSING_BY_CLIENT, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (CLIENT, CH_CLOSING_BY_CLIENT, spec.ChannelCloseOk): CH_CLOSING_BY_CLIENT,
    (CLIENT, CH_CLOSING_BY_SERVER, spec.ChannelCloseOk): CH_CLOSED,
    (CLIENT, CH_CLOSING_BY_SERVER, spec.ChannelClose): CH_CLOSING_BY_SERVER,
    (SERVER, CH_CLOSING_BY_SERVER, spec.ChannelCloseOk): CH_CLOSING_BY_SERVER,
    (CLIENT, CH_ERROR, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (SERVER, CH_ERROR, spec.ChannelClose): CH_CLOSING_BY_SERVER,
}
# While we are closing a channel (or owe a close after a soft error) the peer's in-flight
# traffic on it is dropped, except the close handshake itself.
CH_DISCARDING: dict[ChannelState, Role] = {CH_CLOSING_BY_CLIENT: CLIENT,
                                           CH_CLOSING_BY_SERVER: SERVER}


# ---- content assembly (per channel, receive side) ----------------------------------------
class ContentState(_State):
    C_IDLE = "C_IDLE"  # next frame on the channel must be a method
    C_HEADER = "C_HEADER"  # a content method arrived; a content header must follow
    C_BODY = "C_BODY"  # header arrived; body frames until body_size bytes are in


C_IDLE, C_HEADER, C_BODY = ContentState

METHOD, HEADER, BODY = spec.FRAME_METHOD, spec.FRAME_HEADER, spec.FRAME_BODY
# (state, frame type) -> new state: content frames have no sender rule, only an order.
CONTENT_TABLE: dict[tuple[ContentState, int], ContentState] = {
    (C_IDLE, METHOD): C_IDLE,  # C_HEADER instead when the method carries content
    (C_HEADER, HEADER): C_BODY,  # C_IDLE instead when body_size == 0
    (C_BODY, BODY): C_BODY,  # C_IDLE once body_size bytes arrived
}
