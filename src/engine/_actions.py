"""What ``Broker.drain()`` hands back to a server: the driver contract's actions.

A server executes them in order and nothing else; it holds no protocol logic.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Action", "Write", "Close", "PauseReading", "ResumeReading", "Sync"]


class Action:
    __slots__ = ()


@dataclass(slots=True)
class Write(Action):
    """Send ``data`` on the connection (the server may coalesce writes)."""

    conn_id: int
    data: bytes


@dataclass(slots=True)
class Close(Action):
    """Flush what was written to the connection, then close it."""

    conn_id: int


@dataclass(slots=True)
class PauseReading(Action):
    """Stop reading from the connection (the broker is applying back-pressure)."""

    conn_id: int


@dataclass(slots=True)
class ResumeReading(Action):
    conn_id: int


@dataclass(slots=True)
class Sync(Action):
    """Run ``store.sync()`` off the event loop, then call ``broker.synced(token, now)``."""

    token: int
