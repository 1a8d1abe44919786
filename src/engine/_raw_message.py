"""A message published over AMQP whose properties stay the bytes the publisher sent.

The stream append's fast path (``engine.amqp.publish``) makes a ``RawMessage`` from a publish whose
properties the codec kept as received (``amqpproto.RawProperties``): the stream logs store the
property list as it is (``records``: flag ``_AMQP_PROPS``) instead of decoding it into the model's
headers and encoding those as a table again. What the append needs from the headers (the producer
and its publishing id, the filter value) was read once per property shape and is kept apart.

Its ``headers`` are decoded on first access, to what the general path would have made of the same
properties (``props_to_headers``), so anything that reads them sees the same message. This module is
interpreted (setup.py): ``headers`` is a property over ``Message``'s slot, which compiled callers
would read past; the stores turn a ``RawMessage`` into bytes or a plain ``Message`` before any
compiled code reads it.
"""

from __future__ import annotations

from typing import Any

from amqpproto import spec

from ._message import Message
from ._props import props_to_headers

__all__ = ["RawMessage", "headers_of"]

#: the slot descriptor, reached past the property below
_HEADERS_SLOT: Any = Message.__dict__["headers"]


def headers_of(props: bytes | memoryview) -> dict[str, Any]:
    """The model headers of an encoded property list (flag word on), as the general path makes them."""
    return props_to_headers(spec.decode_properties(bytes(props), 0, len(props)))


class RawMessage(Message):
    """A message with its AMQP property list ``props`` as published (no expiry, priority or ack
    timeout: those publishes take the general path); ``producer``/``publishing_id`` (None when not
    deduplicated) and ``filter`` (its ``x-stream-filter-value``, None when unfiltered) as its
    headers say."""

    __slots__ = ("props", "producer", "publishing_id", "filter")

    def __init__(self, id: int, exchange: str, routing_key: str, props: bytes, body: bytes, persistent: bool,
                 producer: str | None, publishing_id: int | None, filter: str | None) -> None:
        self.id = id
        self.exchange = exchange
        self.routing_key = routing_key
        _HEADERS_SLOT.__set__(self, None)
        self.body = body
        self.priority = 0
        self.expires_at = None
        self.persistent = persistent
        self.ack_timeout = None
        self.props = props
        self.producer = producer
        self.publishing_id = publishing_id
        self.filter = filter

    @property  # type: ignore[override]
    def headers(self) -> dict[str, Any]:
        headers = _HEADERS_SLOT.__get__(self, Message)
        if headers is None:
            headers = headers_of(self.props)
            _HEADERS_SLOT.__set__(self, headers)
        return headers  # type: ignore[no-any-return]

    @headers.setter
    def headers(self, value: dict[str, Any]) -> None:
        raise AttributeError("a RawMessage's headers are its stored properties: change a plain Message")

    def plain(self) -> Message:
        """The same message as a plain ``Message`` (what a log kept in memory holds)."""
        return Message(self.id, self.exchange, self.routing_key, self.headers, self.body, 0, None, self.persistent)
