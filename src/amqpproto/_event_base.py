"""The base class of every event (h11's shape, as in stompproto and wsframe); its own module so that
the generated ``spec`` can derive its methods from it without importing ``_events``."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["Event", "MethodBase", "set_constants"]


class Event:
    """Base of everything ``next_event`` returns and ``send`` accepts: the methods in ``spec`` and
    the frame and timer events (``ProtocolHeader``, ``Heartbeat``, ``HeartbeatDue``, ...)."""

    __slots__ = ()


class MethodBase(Event):
    """What every method class in ``spec`` has: its constants, set by ``set_constants`` after each
    class. Not in the dataclasses' bodies: mypyc (the compiled build) makes a dataclass's class
    constants fields (mypyc/mypyc#1122)."""

    __slots__ = ()
    CLASS_ID: ClassVar[int] = 0
    METHOD_ID: ClassVar[int] = 0
    INDEX: ClassVar[int] = 0
    NAME: ClassVar[str] = ""
    SYNCHRONOUS: ClassVar[bool] = False
    CONTENT: ClassVar[bool] = False
    BY_CLIENT: ClassVar[bool] = False
    BY_SERVER: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()


def set_constants(cls: type[MethodBase], class_id: int, method_id: int, name: str, synchronous: bool,
                  content: bool, by_client: bool, by_server: bool, fields: tuple[tuple[str, str], ...]) -> None:
    cls.CLASS_ID, cls.METHOD_ID, cls.INDEX = class_id, method_id, (class_id << 16) | method_id
    cls.NAME, cls.SYNCHRONOUS, cls.CONTENT = name, synchronous, content
    cls.BY_CLIENT, cls.BY_SERVER, cls.FIELDS = by_client, by_server, fields
