"""The NEED_DATA sentinel, the ``Event`` base class, the non-method events (methods live in
``spec``) and the event types."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from ._event_base import Event
from .spec import BasicPublish, Method

__all__ = ["NEED_DATA", "AnyEvent", "ConnectionClosed", "Event", "Heartbeat", "HeartbeatDue", "NeedData",
           "OutgoingEvent", "PeerTimedOut", "ProtocolHeader", "PublishRun"]


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


class _AsBasicPublish(Event):
    """basic.publish's constants, for an event that stands for publishes (not in the dataclass's body:
    mypyc makes a dataclass's class constants fields, as ``MethodBase`` says)."""

    __slots__ = ()
    CLASS_ID: ClassVar[int] = 60
    METHOD_ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "basic.publish"


@dataclass(slots=True)
class PublishRun(_AsBasicPublish):
    """Publishes that arrived one after another on ``channel`` with the same basic.publish method
    (exchange, routing key, flags), each with its properties and body: what a server that asked for
    runs (``Connection(publish_runs=True)``, with ``raw_properties``) gets instead of two or more
    ``BasicPublish`` events in a row (``publishes()`` gives those). Its ``CLASS_ID``, ``METHOD_ID``
    and ``NAME`` are basic.publish's, for the errors a receiver answers it with."""

    channel: int = 0
    ticket: int = 0
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False
    properties: list[Any] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    def publishes(self) -> list[BasicPublish]:
        """The run as the ``BasicPublish`` events it stands for."""
        return [BasicPublish(self.ticket, self.exchange, self.routing_key, self.mandatory, self.immediate, p, b,
                             self.channel) for p, b in zip(self.properties, self.bodies, strict=True)]


#: Every event ``Connection.next_event()`` can return (besides NEED_DATA), as one union: a method
#: (``spec.Method``) or one of the events above. (``Event``, their common base class, was this union
#: before the codecs agreed on one shape.)
AnyEvent: TypeAlias = Method | ProtocolHeader | Heartbeat | HeartbeatDue | PeerTimedOut | ConnectionClosed | PublishRun
#: What ``Connection.send()`` accepts.
OutgoingEvent: TypeAlias = Method | ProtocolHeader | Heartbeat
