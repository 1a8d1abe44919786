"""The connection state machine as one table, shared by both roles.

Keys are ``(sender, state, event type)``: the sender is the role that emits the event
(CLIENT or SERVER), so the same table checks what we send (LocalProtocolError when
missing) and what the peer sends (RemoteProtocolError when missing).
"""
from __future__ import annotations

import enum
from enum import Enum

from ._events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

__all__ = ["CLIENT", "SERVER", "ConnectionState", "Role", "TRANSITIONS", "next_state"]


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


class ConnectionState(Enum):
    IDLE = "idle"  # nothing exchanged yet
    HANDSHAKE = "handshake"  # the client's request is out; awaiting the server's answer
    OPEN = "open"
    CLIENT_CLOSING = "client-closing"  # the client sent Close; the server may still send
    SERVER_CLOSING = "server-closing"  # the server sent Close; the client may still send
    HANDSHAKE_FAILED = "handshake-failed"  # a bad opening handshake; the server may send its rejection
    FAILED = "failed"  # a RemoteProtocolError once open; only the Close hint may be sent
    CLOSED = "closed"

    __hash__ = object.__hash__


S = ConnectionState
_DATA = (TextMessage, BytesMessage, Ping, Pong)

TRANSITIONS: dict[tuple[Role, ConnectionState, type[Event]], ConnectionState] = {
    # opening handshake
    (CLIENT, S.IDLE, Request): S.HANDSHAKE,
    (SERVER, S.HANDSHAKE, AcceptConnection): S.OPEN,
    (SERVER, S.HANDSHAKE, RejectConnection): S.CLOSED,
    # data and control frames: whoever has not sent Close may still send
    **{(r, S.OPEN, t): S.OPEN for r in Role for t in _DATA},
    **{(SERVER, S.CLIENT_CLOSING, t): S.CLIENT_CLOSING for t in _DATA},
    **{(CLIENT, S.SERVER_CLOSING, t): S.SERVER_CLOSING for t in _DATA},
    # closing handshake
    (CLIENT, S.OPEN, CloseConnection): S.CLIENT_CLOSING,
    (SERVER, S.OPEN, CloseConnection): S.SERVER_CLOSING,
    (SERVER, S.CLIENT_CLOSING, CloseConnection): S.CLOSED,
    (CLIENT, S.SERVER_CLOSING, CloseConnection): S.CLOSED,
    # after the peer broke the protocol we may still send the error's hint
    (SERVER, S.HANDSHAKE_FAILED, RejectConnection): S.CLOSED,
    (CLIENT, S.FAILED, CloseConnection): S.CLOSED,
    (SERVER, S.FAILED, CloseConnection): S.CLOSED,
}


def next_state(sender: Role, state: ConnectionState, event_type: type[Event]) -> ConnectionState | None:
    """The state after ``sender`` emits an event of ``event_type``; None if not allowed."""
    return TRANSITIONS.get((sender, state, event_type))
