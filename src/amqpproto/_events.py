"""Roles, the NEED_DATA sentinel and the non-method events (methods live in ``spec``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


CLIENT = Role.CLIENT
SERVER = Role.SERVER


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")


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
