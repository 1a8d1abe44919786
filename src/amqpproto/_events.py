"""The NEED_DATA sentinel, the ``Event`` base class, the non-method events (methods live in
``spec``) and the event types."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from ._event_base import Event
from .spec import Method

__all__ = ["NEED_DATA", "AnyEvent", "ConnectionClosed", "Event", "Heartbeat", "HeartbeatDue", "NeedData",
           "OutgoingEvent", "PeerTimedOut", "ProtocolHeader"]


class NeedData(enum.Enum):
    """The type of NEED_DATA: ``next_event()`` has nothing more until ``receive_data()``."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData.NEED_DATA


@dataclass(slots=True)
class ProtocolHeader(Event):
    """The 8-byte ``AMQP\\x00\\x00\\x09\\x01`` greeting a client opens with."""

    major: int = 0
    minor: int = 9
    revision: int = 1


@dataclass(slots=True)
class Heartbeat(Event):
    """A heartbeat frame (always channel 0)."""


@dataclass(slots=True)
class HeartbeatDue(Event):
    """Timer event: nothing was sent for one heartbeat interval; send a ``Heartbeat()``."""


@dataclass(slots=True)
class PeerTimedOut(Event):
    """Timer event: nothing was received for two heartbeat intervals; drop the connection."""


@dataclass(slots=True)
class ConnectionClosed(Event):
    """The transport reached EOF (``receive_data(b"")``) between frames."""


#: Every event ``Connection.next_event()`` can return (besides NEED_DATA), as one union: a method
#: (``spec.Method``) or one of the events above. (``Event``, their common base class, was this union
#: before the codecs agreed on one shape.)
AnyEvent: TypeAlias = Method | ProtocolHeader | Heartbeat | HeartbeatDue | PeerTimedOut | ConnectionClosed
#: What ``Connection.send()`` accepts.
OutgoingEvent: TypeAlias = Method | ProtocolHeader | Heartbeat
