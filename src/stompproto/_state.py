"""The STOMP session state machine and per-version header rules, as tables.

One state per connection, shared by both ends: the same table checks the frames we
send (sender = our role) and the frames the peer sends (sender = the peer's role), so a
client and a server codec fed the same byte streams always agree on the state.

    AWAIT_CONNECT --CONNECT/STOMP--> CONNECTING --CONNECTED--> CONNECTED
    CONNECTED --DISCONNECT--> DISCONNECTED        (server may still send RECEIPT/MESSAGE)
    any state --ERROR (server)--> CLOSED           (nothing may be sent after an ERROR)
    any state --peer EOF--> CLOSED                 (handled by the connection, not the table)

MESSAGE is accepted in DISCONNECTED because frames the server sent before it saw the
client's DISCONNECT may still arrive at the client after it sent it.
EOL heart-beats may flow in every state except CLOSED and never change the state.
"""

from __future__ import annotations

import enum

from ._events import (
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Error,
    Frame,
    Message,
    Nack,
    Receipt,
    Send,
    Subscribe,
    Unsubscribe,
)

__all__ = [
    "Role", "CLIENT", "SERVER", "State", "TRANSITIONS", "ALLOWED", "transition", "REQUIRED_HEADERS",
    "BODY_ALLOWED", "VERSION_MIN",
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


class State(enum.Enum):
    AWAIT_CONNECT = "AWAIT_CONNECT"  # nothing has passed yet
    CONNECTING = "CONNECTING"        # CONNECT passed, CONNECTED not yet
    CONNECTED = "CONNECTED"
    DISCONNECTED = "DISCONNECTED"    # the client's DISCONNECT passed
    CLOSED = "CLOSED"                # ERROR passed, or the peer closed the stream


AWAIT_CONNECT, CONNECTING, CONNECTED, DISCONNECTED, CLOSED = (
    State.AWAIT_CONNECT, State.CONNECTING, State.CONNECTED, State.DISCONNECTED, State.CLOSED,
)
_CLIENT_OPS = (Send, Subscribe, Unsubscribe, Ack, Nack, Begin, Commit, Abort)

# (sender, state, frame type) -> new state.  Anything absent is forbidden.
TRANSITIONS: dict[tuple[Role, State, type[Frame]], State] = {
    # sender  state          frame             new state
    (CLIENT, AWAIT_CONNECT, Connect): CONNECTING,
    (SERVER, AWAIT_CONNECT, Error): CLOSED,  # garbage before CONNECT
    (SERVER, CONNECTING, Connected): CONNECTED,
    (SERVER, CONNECTING, Error): CLOSED,  # rejected (version, auth, ...)
    **{(CLIENT, CONNECTED, op): CONNECTED for op in _CLIENT_OPS},
    (CLIENT, CONNECTED, Disconnect): DISCONNECTED,
    (SERVER, CONNECTED, Message): CONNECTED,
    (SERVER, CONNECTED, Receipt): CONNECTED,
    (SERVER, CONNECTED, Error): CLOSED,
    (SERVER, DISCONNECTED, Message): DISCONNECTED,  # in flight when DISCONNECT crossed
    (SERVER, DISCONNECTED, Receipt): DISCONNECTED,  # the DISCONNECT's receipt
    (SERVER, DISCONNECTED, Error): CLOSED,
}


def transition(sender: Role, state: State, frame_type: type[Frame]) -> State | None:
    """The state after ``sender`` passes a frame of ``frame_type`` in ``state``, or None."""
    return TRANSITIONS.get((sender, state, frame_type))


# The same table sliced per (sender, state): the connection keeps the two slices for its
# current state, so the per-frame check is one dict lookup keyed by the frame class.
ALLOWED: dict[tuple[Role, State], dict[type[Frame], State]] = {
    (sender, state): {
        cls: new for (r, s, cls), new in TRANSITIONS.items() if r is sender and s is state
    }
    for sender in Role
    for state in State
}


# Frames added in a later version: the lowest version they exist in.
VERSION_MIN: dict[type[Frame], str] = {Nack: "1.1"}

# Frames that may carry a body (all others must have an empty one on send).
BODY_ALLOWED: frozenset[type[Frame]] = frozenset({Send, Message, Error})

# (frame type, version) -> headers that must be present.  UNSUBSCRIBE in 1.0 (id OR
# destination) is the one rule a tuple cannot say; the connection special-cases it.
# CONNECT's host is required by 1.1/1.2 but, like RabbitMQ, we accept it missing.
# CONNECTED's version is checked by the connection (it must equal the negotiated one).
_R: dict[type[Frame], tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    #               1.0                              1.1                                 1.2
    Send:        (("destination",),              ("destination",),                  ("destination",)),
    Subscribe:   (("destination",),              ("destination", "id"),             ("destination", "id")),
    Unsubscribe: ((),                            ("id",),                           ("id",)),
    Ack:         (("message-id",),               ("message-id", "subscription"),    ("id",)),
    Nack:        ((),                            ("message-id", "subscription"),    ("id",)),
    Begin:       (("transaction",),              ("transaction",),                  ("transaction",)),
    Commit:      (("transaction",),              ("transaction",),                  ("transaction",)),
    Abort:       (("transaction",),              ("transaction",),                  ("transaction",)),
    Disconnect:  ((),                            (),                                ()),
    Message:     (("destination", "message-id"), ("destination", "message-id", "subscription"),
                  ("destination", "message-id", "subscription")),
    Receipt:     (("receipt-id",),               ("receipt-id",),                   ("receipt-id",)),
    Error:       ((),                            (),                                ()),
    Connect:     ((),                            (),                                ()),
    Connected:   ((),                            (),                                ()),
}
REQUIRED_HEADERS: dict[tuple[type[Frame], str], tuple[str, ...]] = {
    (cls, version): names[i]
    for cls, names in _R.items()
    for i, version in enumerate(("1.0", "1.1", "1.2"))
}
