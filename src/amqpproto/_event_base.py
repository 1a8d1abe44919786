"""The base class of every event (h11's shape, as in stompproto and wsframe); its own module so that
the generated ``spec`` can derive its methods from it without importing ``_events``."""

from __future__ import annotations

__all__ = ["Event"]


class Event:
    """Base of everything ``next_event`` returns and ``send`` accepts: the methods in ``spec`` and
    the frame and timer events (``ProtocolHeader``, ``Heartbeat``, ``HeartbeatDue``, ...)."""

    __slots__ = ()
