"""stompproto: a sans-IO STOMP 1.0/1.1/1.2 codec for the client and server roles::

    conn = Connection(role=SERVER)
    conn.receive_data(data, now)            # b"" = EOF
    while (ev := conn.next_event()) is not NEED_DATA:
        ...                                  # Connect, Send, Heartbeat, ConnectionClosed, ...
    out = conn.send(conn.connected_frame(heart_beat=(10000, 10000)), now)

Wire decisions: LF or CRLF line ends for every version; headers never trimmed (as
RabbitMQ); first repeated header wins; one ``Heartbeat`` event per EOL between frames;
see ``_readers``, ``_state`` and ``_connection`` for the rest.
"""

from . import _connection
from ._connection import (
    SUPPORTED_VERSIONS,
    Connection,
    negotiate_heartbeat,
    negotiate_version,
    parse_heartbeat,
)
from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    ConnectionClosed,
    Disconnect,
    Error,
    Event,
    Frame,
    Heartbeat,
    HeartbeatDue,
    Message,
    Nack,
    NeedData,
    PeerTimedOut,
    Receipt,
    Send,
    Subscribe,
    Unsubscribe,
)
from ._state import CLIENT, SERVER, Role, State

#: True when the per-message modules are the mypyc-compiled build (``pip install .`` with a C
#: compiler), False when they run as pure Python (README: "Compiled codecs").
COMPILED: bool = not _connection.__file__.endswith(".py")

__all__ = [
    "COMPILED",
    "Connection", "CLIENT", "SERVER", "Role", "State", "NEED_DATA", "NeedData", "SUPPORTED_VERSIONS",
    "negotiate_heartbeat", "negotiate_version", "parse_heartbeat",
    "Event", "Frame", "Connect", "Connected", "Send", "Subscribe", "Unsubscribe", "Ack", "Nack",
    "Begin", "Commit", "Abort", "Disconnect", "Message", "Receipt", "Error",
    "Heartbeat", "HeartbeatDue", "PeerTimedOut", "ConnectionClosed",
    "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
]
