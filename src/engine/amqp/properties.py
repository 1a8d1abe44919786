"""A model message's AMQP basic properties: the decoded form for basic.get-ok and basic.return,
and the encoded bytes a delivery carries (constants for the common plain messages; a
``SharedMessage``, a stream record that many consumers read, is encoded once and keeps the bytes)."""

from __future__ import annotations

from amqpproto import BasicProperties
from amqpproto.spec import encode_properties

from .._message import Message, SharedMessage
from .._props import headers_to_props

__all__ = ["message_props", "props_bytes"]


def message_props(msg: Message) -> BasicProperties:
    return headers_to_props(msg.headers, msg.persistent, msg.priority)


_PLAIN_PROPS = encode_properties(headers_to_props({}, False, 0))
_PERSISTENT_PROPS = encode_properties(headers_to_props({}, True, 0))


def props_bytes(msg: Message) -> bytes:
    """The encoded AMQP properties of ``msg``: constants for a message whose headers are empty or
    only the ``persistent`` marker (the common case: ``headers_to_props`` then only looks at
    ``msg.persistent``), else encoded; a ``SharedMessage``'s encoding is kept with it."""
    if type(msg) is SharedMessage:
        props = msg.amqp_props
        if props is not None:
            return props
        props = msg.amqp_props = _encode(msg)
        return props
    return _encode(msg)


def _encode(msg: Message) -> bytes:
    headers = msg.headers
    if not headers or (len(headers) == 1 and "persistent" in headers):
        return _PERSISTENT_PROPS if msg.persistent else _PLAIN_PROPS
    return encode_properties(headers_to_props(msg.headers, msg.persistent, msg.priority))

