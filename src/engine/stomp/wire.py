"""MESSAGE frames encoded once and shared: a subscription's own header lines (``Wire``) and the
tails of the messages being dispatched (``TailCache``, one per broker), so a message fanned out to N
subscribers is encoded once per header escaping rather than N times."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from .._message import Message
from .._props import stomp_value

__all__ = ["Wire", "TailCache", "tail_cache", "message_headers"]

#: MESSAGE headers only the broker sets
_RESERVED_MESSAGE_HEADERS = frozenset(
    ("subscription", "destination", "message-id", "ack", "redelivered", "x-delivery-count", "content-length")
)
#: tails bigger than this are not kept (encoding them again costs little next to copying them)
_TAIL_MAX = 64 * 1024
#: at most this many tails per escaping, and this many bytes in all, are kept per broker
_TAILS_MAX = 1024
_TAIL_BYTES = 8 * 1024 * 1024


class TailCache:
    """The encoded tails (``Connection.message_tail``: destination, the message's own headers,
    content-length, body, NUL) of the messages delivered last, one dict per header escaping, shared
    by a broker's STOMP sessions: a message fanned out to N subscribers is encoded once per escaping
    rather than N times. Only the per-delivery lines (subscription, message-id, ack, redelivered)
    are written per subscriber. A tail is only useful while its message is being dispatched, so the
    oldest go first once a bound is passed."""

    __slots__ = ("by_escape", "size")

    def __init__(self) -> None:
        # OrderedDict: popping the oldest is O(1) (a dict's first live slot moves right as it empties)
        self.by_escape: dict[str | None, OrderedDict[Message, bytes]] = {
            None: OrderedDict(), "1.1": OrderedDict(), "1.2": OrderedDict(),
        }
        self.size = 0

    def put(self, tails: OrderedDict[Message, bytes], msg: Message, tail: bytes) -> None:
        if len(tail) > _TAIL_MAX:
            return
        tails[msg] = tail
        self.size += len(tail)
        while len(tails) > _TAILS_MAX or self.size > _TAIL_BYTES:
            self.size -= len(tails.popitem(last=False)[1])
            if not tails:  # the other escapings' tails hold the bytes: start afresh
                for other in self.by_escape.values():
                    other.clear()
                self.size = 0


#: one cache per broker (the engine may run several brokers in one process, e.g. in tests)
_TAIL_CACHES: weakref.WeakKeyDictionary[Any, TailCache] = weakref.WeakKeyDictionary()


def tail_cache(host: Any) -> TailCache:
    """The tail cache of the broker ``host``, made at its first STOMP session."""
    cache = _TAIL_CACHES.get(host)
    if cache is None:
        cache = _TAIL_CACHES[host] = TailCache()
    return cache


class Wire:
    """A subscription's MESSAGE lines, encoded once under its connection's escaping:
    ``pre`` = ``MESSAGE``, ``subscription`` and ``message-id`` up to the tag; ``ack`` = the ``ack``
    line up to the tag (None when the frame has none); ``destination`` = the subscription's own
    destination (temp-queue replies) or None when it is the message's; ``tails`` = the shared tail
    cache of that escaping."""

    __slots__ = ("pre", "ack", "destination", "tails")

    def __init__(self, pre: bytes, ack: bytes | None, destination: str | None,
                 tails: OrderedDict[Message, bytes]) -> None:
        self.pre = pre
        self.ack = ack
        self.destination = destination
        self.tails = tails


def message_headers(msg: Message, destination: str) -> dict[str, str]:
    """The headers of a MESSAGE frame for ``msg`` after the per-delivery ones (subscription,
    message-id, ack, redelivered, x-delivery-count) and before ``content-length``: ``destination``,
    then the message's own headers as STOMP text (broker-set names and AMQP tables left out)."""
    headers = {"destination": destination}
    for name, value in msg.headers.items():
        if name not in _RESERVED_MESSAGE_HEADERS:
            if type(value) is not str:  # from an AMQP headers table
                value = stomp_value(value)
                if value is None:
                    continue
            headers[name] = value
    return headers
