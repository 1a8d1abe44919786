"""A model message's AMQP basic properties: the decoded form for basic.get-ok and basic.return,
and the encoded bytes a delivery carries (constants for the common plain messages)."""

from __future__ import annotations

from amqpproto import BasicProperties
from amqpproto.spec import encode_properties

from .._message import Message
from .._props import headers_to_props

__all__ = ["message_props", "props_bytes"]


def message_props(msg: Message) -> BasicProperties:
    return headers_to_props(msg.headers, msg.persistent, msg.priority)


_PLAIN_PROPS = encode_properties(headers_to_props({}, False, 0))
_PERSISTENT_PROPS = encode_properties(headers_to_props({}, True, 0))


def props_bytes(msg: Message) -> bytes:
    """The encoded AMQP properties of ``msg``: constants for a message whose headers are empty or
    only the ``persistent`` marker (the common case: ``headers_to_props`` then only looks at
    ``msg.persistent``), else encoded."""
    headers = msg.headers
    if not headers or (len(headers) == 1 and "persistent" in headers):
        return _PERSISTENT_PROPS if msg.persistent else _PLAIN_PROPS
    return encode_properties(headers_to_props(msg.headers, msg.persistent, msg.priority))

