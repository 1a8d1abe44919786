"""The NEED_DATA sentinel, the non-method events (methods live in ``spec``) and the event types."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from .spec import Method


class NeedData(enum.Enum):
    """The type of NEED_DATA: ``next_event()`` has nothing more until ``receive_data()``."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData.NEED_DATA


@dataclass(slots=True)
class ProtocolHeader:
    """The 8-byte ``AMQP\\x00\\x00\\x09\\x01`` greeting a client opens with."""

    major: int = 0
    minor: int = 9
    revision: int = 1


@dataclass(slots=True)
class Heartbeat:
    """A heartbeat frame (always channel 0)."""


@dataclass(slots=True)
class HeartbeatDue:
    """Timer event: nothing was sent for one heartbeat interval; send a ``Heartbeat()``."""


@dataclass(slots=True)
class PeerTimedOut:
    """Timer event: nothing was received for two heartbeat intervals; drop the connection."""


@dataclass(slots=True)
class ConnectionClosed:
    """The transport reached EOF (``receive_data(b"")``) between frames."""


#: What ``Connection.next_event()`` returns (besides NEED_DATA): a method (``spec.Method``) or one
#: of the events above.
Event: TypeAlias = Method | ProtocolHeader | Heartbeat | HeartbeatDue | PeerTimedOut | ConnectionClosed
#: What ``Connection.send()`` accepts.
OutgoingEvent: TypeAlias = Method | ProtocolHeader | Heartbeat
