"""State machines as tables, role-agnostic: ``(state, sender role, event type) -> new state``.

The same tables validate what we send (sender = our role) and what we receive (sender = the
peer's role). Anything absent from a table is a protocol violation: LocalProtocolError when we
send it, RemoteProtocolError (503 COMMAND_INVALID / 504 CHANNEL_ERROR / 505 UNEXPECTED_FRAME)
when the peer does.
"""

from __future__ import annotations

from . import spec
from ._events import CLIENT, SERVER, ProtocolHeader

# ---- connection --------------------------------------------------------------------------
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

_HANDSHAKE = (AWAIT_START_OK, AWAIT_SECURE_OR_TUNE, AWAIT_SECURE_OK, AWAIT_TUNE_OK, AWAIT_OPEN,
              AWAIT_OPEN_OK)

CONNECTION_TABLE: dict[tuple[str, object, type], str] = {
    (AWAIT_HEADER, CLIENT, ProtocolHeader): AWAIT_START,
    (AWAIT_START, SERVER, spec.ConnectionStart): AWAIT_START_OK,
    (AWAIT_START_OK, CLIENT, spec.ConnectionStartOk): AWAIT_SECURE_OR_TUNE,
    (AWAIT_SECURE_OR_TUNE, SERVER, spec.ConnectionSecure): AWAIT_SECURE_OK,
    (AWAIT_SECURE_OK, CLIENT, spec.ConnectionSecureOk): AWAIT_SECURE_OR_TUNE,
    (AWAIT_SECURE_OR_TUNE, SERVER, spec.ConnectionTune): AWAIT_TUNE_OK,
    (AWAIT_TUNE_OK, CLIENT, spec.ConnectionTuneOk): AWAIT_OPEN,
    (AWAIT_OPEN, CLIENT, spec.ConnectionOpen): AWAIT_OPEN_OK,
    (AWAIT_OPEN_OK, SERVER, spec.ConnectionOpenOk): OPEN,
    # RabbitMQ extensions, only on an open connection.
    (OPEN, SERVER, spec.ConnectionBlocked): OPEN,
    (OPEN, SERVER, spec.ConnectionUnblocked): OPEN,
    (OPEN, CLIENT, spec.ConnectionBlocked): OPEN,  # the XML lets both chassis send them
    (OPEN, CLIENT, spec.ConnectionUnblocked): OPEN,
    (OPEN, CLIENT, spec.ConnectionUpdateSecret): OPEN,
    (OPEN, SERVER, spec.ConnectionUpdateSecretOk): OPEN,
    # Close handshake. Either side may start it once the server has spoken; a simultaneous
    # close is answered with close-ok by both.
    **{(s, CLIENT, spec.ConnectionClose): CLOSING_BY_CLIENT for s in (*_HANDSHAKE, OPEN)},
    **{(s, SERVER, spec.ConnectionClose): CLOSING_BY_SERVER for s in (*_HANDSHAKE, OPEN)},
    (CLOSING_BY_CLIENT, SERVER, spec.ConnectionCloseOk): CLOSED,
    (CLOSING_BY_CLIENT, SERVER, spec.ConnectionClose): CLOSING_BY_CLIENT,
    (CLOSING_BY_CLIENT, CLIENT, spec.ConnectionCloseOk): CLOSING_BY_CLIENT,
    (CLOSING_BY_SERVER, CLIENT, spec.ConnectionCloseOk): CLOSED,
    (CLOSING_BY_SERVER, CLIENT, spec.ConnectionClose): CLOSING_BY_SERVER,
    (CLOSING_BY_SERVER, SERVER, spec.ConnectionCloseOk): CLOSING_BY_SERVER,
    (ERROR, CLIENT, spec.ConnectionClose): CLOSING_BY_CLIENT,
    (ERROR, SERVER, spec.ConnectionClose): CLOSING_BY_SERVER,
}

# Channel traffic (methods on channels >= 1, content) flows only in OPEN.
# States where the closer discards whatever the peer still sends, except close/close-ok.
CLOSING_BY = {CLOSING_BY_CLIENT: CLIENT, CLOSING_BY_SERVER: SERVER}
# A client may receive the server's protocol header (a version refusal) only this early.
BEFORE_START = frozenset({AWAIT_HEADER, AWAIT_START})
# Heartbeat frames are legal once tuning started (RabbitMQ sends them right after tune-ok).
NO_HEARTBEAT = frozenset({AWAIT_HEADER, AWAIT_START, AWAIT_START_OK})

# ---- channel -----------------------------------------------------------------------------
CH_CLOSED = "CH_CLOSED"  # never opened, or close handshake completed
CH_OPENING = "CH_OPENING"
CH_OPEN = "CH_OPEN"
CH_CLOSING_BY_CLIENT = "CH_CLOSING_BY_CLIENT"
CH_CLOSING_BY_SERVER = "CH_CLOSING_BY_SERVER"
CH_ERROR = "CH_ERROR"  # we raised a soft error; only our channel.close may follow

# Any other method of a channel class is allowed in CH_OPEN if its sender may send it
# (the spec's chassis, see spec.X.BY_CLIENT / BY_SERVER) and leaves the state unchanged.
ANY_METHOD = object()

CHANNEL_TABLE: dict[tuple[str, object, object], str] = {
    (CH_CLOSED, CLIENT, spec.ChannelOpen): CH_OPENING,
    (CH_OPENING, SERVER, spec.ChannelOpenOk): CH_OPEN,
    (CH_OPENING, SERVER, spec.ChannelClose): CH_CLOSING_BY_SERVER,  # open refused
    (CH_OPEN, CLIENT, ANY_METHOD): CH_OPEN,
    (CH_OPEN, SERVER, ANY_METHOD): CH_OPEN,
    (CH_OPEN, CLIENT, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (CH_OPEN, SERVER, spec.ChannelClose): CH_CLOSING_BY_SERVER,
    (CH_CLOSING_BY_CLIENT, SERVER, spec.ChannelCloseOk): CH_CLOSED,
    (CH_CLOSING_BY_CLIENT, SERVER, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (CH_CLOSING_BY_CLIENT, CLIENT, spec.ChannelCloseOk): CH_CLOSING_BY_CLIENT,
    (CH_CLOSING_BY_SERVER, CLIENT, spec.ChannelCloseOk): CH_CLOSED,
    (CH_CLOSING_BY_SERVER, CLIENT, spec.ChannelClose): CH_CLOSING_BY_SERVER,
    (CH_CLOSING_BY_SERVER, SERVER, spec.ChannelCloseOk): CH_CLOSING_BY_SERVER,
    (CH_ERROR, CLIENT, spec.ChannelClose): CH_CLOSING_BY_CLIENT,
    (CH_ERROR, SERVER, spec.ChannelClose): CH_CLOSING_BY_SERVER,
}
# While we are closing a channel (or owe a close after a soft error) the peer's in-flight
# traffic on it is dropped, except the close handshake itself.
CH_DISCARDING = {CH_CLOSING_BY_CLIENT: CLIENT, CH_CLOSING_BY_SERVER: SERVER}

# ---- content assembly (per channel, receive side) ----------------------------------------
C_IDLE = "C_IDLE"  # next frame on the channel must be a method
C_HEADER = "C_HEADER"  # a content method arrived; a content header must follow
C_BODY = "C_BODY"  # header arrived; body frames until body_size bytes are in

METHOD, HEADER, BODY = spec.FRAME_METHOD, spec.FRAME_HEADER, spec.FRAME_BODY
CONTENT_TABLE: dict[tuple[str, int], str] = {
    (C_IDLE, METHOD): C_IDLE,  # C_HEADER instead when the method carries content
    (C_HEADER, HEADER): C_BODY,  # C_IDLE instead when body_size == 0
    (C_BODY, BODY): C_BODY,  # C_IDLE once body_size bytes arrived
}
