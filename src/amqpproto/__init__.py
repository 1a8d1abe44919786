"""amqpproto: a sans-IO AMQP 0-9-1 codec (with RabbitMQ's extensions), both roles.

    conn = Connection(CLIENT, frame_max=131072, channel_max=2047, heartbeat=60)
    sock.send(conn.send(ProtocolHeader(), now=t))
    conn.receive_data(data, now=t)            # b"" = EOF
    ev = conn.next_event()                    # one event, or NEED_DATA
    sock.send(conn.send(BasicPublish(routing_key="q", body=b"hi", channel=1), now=t))

Events. Methods are the generated slotted dataclasses in ``amqpproto.spec`` (re-exported here),
one per method, whose last field is ``channel`` -- no wrapper object, so the hot path allocates
one event per message. basic.publish/deliver/return/get-ok also carry ``properties``
(``BasicProperties``, 14 optional fields; pre-encoded bytes are accepted on send) and ``body``:
a whole message is one event both ways; frames are assembled on receive and split at the
negotiated frame_max on send. Other events: ProtocolHeader, Heartbeat, HeartbeatDue,
PeerTimedOut, ConnectionClosed.

Log-in. ``conn.start_ok(start, user, password, product)`` (client) answers connection.start with
PLAIN (AMQPLAIN if that is all the server offers) and the usual client capabilities.
Tuning. ``conn.tune()`` (server) proposes our limits, ``conn.tune_ok(tune)`` (client) negotiates;
the negotiated ``frame_max``/``channel_max``/``heartbeat`` apply once tune-ok has passed.

Timers. ``get_timer()`` is the next absolute deadline, ``handle_timer(now)`` queues HeartbeatDue
(send ``Heartbeat()``) or PeerTimedOut. Deadlines move only with the ``now`` given to
``receive_data``/``send``; the codec never reads a clock.

Errors. LocalProtocolError: we tried to send something invalid (state unchanged).
RemoteProtocolError(msg, reply_code, hint): the peer did; ``hint`` is the ConnectionClose (hard
error), ChannelClose (soft error, the channel alone is affected) or ProtocolHeader (wrong
protocol header) to send; ``fatal`` says the stream cannot be parsed further.

State. ``conn.state`` is a ``ConnectionState`` (a StrEnum, its members also exported as
``AWAIT_HEADER``, ``AWAIT_START``, ... ``OPEN``, ``CLOSING_BY_CLIENT``, ``CLOSING_BY_SERVER``,
``CLOSED``); ``conn.channel_state(n)`` a ``ChannelState``. The tables behind them are keyed
``(sender role, state, event type)`` like stompproto's and wsframe's.
Types. ``next_event()`` returns ``Event | NeedData``: ``Event`` is the slotted base class of every
``spec.Method`` and of the events above (as in stompproto and wsframe); ``AnyEvent`` is their union,
for exhaustive type checks; ``send()`` takes an ``OutgoingEvent``. Stream deliveries in bulk,
straight into columns: ``amqpproto.bulk``.
Timestamps. ``from_timestamp(seconds)`` gives the aware UTC datetime a decoded ``T`` field holds;
``to_timestamp(datetime | int)`` the seconds one encodes to.
"""

from . import _connection, spec
from ._connection import Connection
from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    AnyEvent,
    ConnectionClosed,
    Event,
    Heartbeat,
    HeartbeatDue,
    NeedData,
    OutgoingEvent,
    PeerTimedOut,
    ProtocolHeader,
    PublishRun,
)
from ._rawprops import PropertyShape, RawProperties
from ._readers import from_timestamp, read_array, read_table, read_value
from ._sasl import amqplain_response, parse_sasl_response, plain_response
from ._state import (
    AWAIT_HEADER,
    AWAIT_OPEN,
    AWAIT_OPEN_OK,
    AWAIT_SECURE_OK,
    AWAIT_SECURE_OR_TUNE,
    AWAIT_START,
    AWAIT_START_OK,
    AWAIT_TUNE_OK,
    CLIENT,
    CLOSED,
    CLOSING_BY_CLIENT,
    CLOSING_BY_SERVER,
    OPEN,
    SERVER,
    ChannelState,
    ConnectionState,
    Role,
)
from ._writers import to_timestamp, write_array, write_table, write_value
from .spec import *  # noqa: F401,F403  (method classes, BasicProperties, reply codes)

#: True when the per-message modules are the mypyc-compiled build (``pip install .`` with a C
#: compiler), False when they run as pure Python (README: "Compiled codecs").
COMPILED: bool = not _connection.__file__.endswith(".py")

__all__ = [
    "COMPILED",
    "Connection", "Role", "CLIENT", "SERVER", "NEED_DATA", "NeedData", "Event", "AnyEvent", "OutgoingEvent",
    "ConnectionState", "ChannelState",
    "ProtocolHeader", "PublishRun", "Heartbeat", "HeartbeatDue", "PeerTimedOut", "ConnectionClosed",
    "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
    "read_table", "read_array", "read_value", "write_table", "write_array", "write_value",
    "from_timestamp", "to_timestamp", "RawProperties", "PropertyShape",
    "AWAIT_HEADER", "AWAIT_START", "AWAIT_START_OK", "AWAIT_SECURE_OR_TUNE", "AWAIT_SECURE_OK",
    "AWAIT_TUNE_OK", "AWAIT_OPEN", "AWAIT_OPEN_OK", "OPEN", "CLOSING_BY_CLIENT", "CLOSING_BY_SERVER",
    "CLOSED",
    "plain_response", "amqplain_response", "parse_sasl_response", "spec",
    *spec.__all__,
]
