"""STOMP events: one slotted class per frame command, shared by both roles and directions.

Headers are a ``dict[str, str]`` in wire order; when the peer repeats a header the first
occurrence wins (STOMP 1.2 section "Repeated Header Entries"). Header values are already
unescaped. ``body`` is raw bytes. The ``content-length`` header is kept as received; on
send the codec writes one when the body is non-empty and the caller did not set it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

__all__ = [
    "Event",
    "Frame",
    "Connect",
    "Connected",
    "Send",
    "Subscribe",
    "Unsubscribe",
    "Ack",
    "Nack",
    "Begin",
    "Commit",
    "Abort",
    "Disconnect",
    "Message",
    "Receipt",
    "Error",
    "Heartbeat",
    "HeartbeatDue",
    "PeerTimedOut",
    "ConnectionClosed",
    "COMMAND_TO_EVENT",
]


class Event:
    """Base of everything ``next_event`` returns and ``send`` accepts."""

    __slots__ = ()
    #: a frame's command (COMMAND_TO_EVENT sets it on each frame class); "" on the other events.
    #: Declared here, not in a dataclass: mypyc would make a class constant there a field.
    command: ClassVar[str] = ""


class NeedData(enum.Enum):
    """The type of NEED_DATA: ``next_event()`` has nothing more until ``receive_data()``."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData.NEED_DATA


@dataclass(slots=True)
class Frame(Event):
    """A STOMP frame; the subclass names the command."""

    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(slots=True)
class Connect(Frame):
    """CONNECT, or STOMP when ``use_stomp_command`` is true (1.1+ clients may send either)."""

    use_stomp_command: bool = False


@dataclass(slots=True)
class Connected(Frame):
    """CONNECTED."""


@dataclass(slots=True)
class Send(Frame):
    """SEND."""


@dataclass(slots=True)
class Subscribe(Frame):
    """SUBSCRIBE."""


@dataclass(slots=True)
class Unsubscribe(Frame):
    """UNSUBSCRIBE."""


@dataclass(slots=True)
class Ack(Frame):
    """ACK."""


@dataclass(slots=True)
class Nack(Frame):
    """NACK."""


@dataclass(slots=True)
class Begin(Frame):
    """BEGIN."""


@dataclass(slots=True)
class Commit(Frame):
    """COMMIT."""


@dataclass(slots=True)
class Abort(Frame):
    """ABORT."""


@dataclass(slots=True)
class Disconnect(Frame):
    """DISCONNECT."""


@dataclass(slots=True)
class Message(Frame):
    """MESSAGE."""


@dataclass(slots=True)
class Receipt(Frame):
    """RECEIPT."""


@dataclass(slots=True)
class Error(Frame):
    """ERROR."""


@dataclass(slots=True)
class Heartbeat(Event):
    """An EOL heart-beat: received from the peer, or passed to ``send`` to emit one."""


@dataclass(slots=True)
class HeartbeatDue(Event):
    """Our outgoing heart-beat deadline passed: the caller should ``send(Heartbeat(), now)``."""


@dataclass(slots=True)
class PeerTimedOut(Event):
    """Nothing arrived from the peer within its negotiated heart-beat period times the grace factor."""


@dataclass(slots=True)
class ConnectionClosed(Event):
    """The peer closed its side (``receive_data(b"")``) at a frame boundary."""


#: Each frame class by its command; the classes' ``command`` is set from here.
COMMAND_TO_EVENT: dict[str, type[Frame]] = {
    "CONNECT": Connect, "CONNECTED": Connected, "SEND": Send, "SUBSCRIBE": Subscribe,
    "UNSUBSCRIBE": Unsubscribe, "ACK": Ack, "NACK": Nack, "BEGIN": Begin, "COMMIT": Commit,
    "ABORT": Abort, "DISCONNECT": Disconnect, "MESSAGE": Message, "RECEIPT": Receipt, "ERROR": Error,
}
for _command, _frame in COMMAND_TO_EVENT.items():
    _frame.command = _command
COMMAND_TO_EVENT["STOMP"] = Connect
