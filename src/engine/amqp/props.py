"""The encoded AMQP content properties of a delivery.

Most messages need no encoding at all (no headers: one of two constants); a ``SharedMessage`` (a
stream record that many consumers read) is encoded once and keeps the bytes.
"""

from __future__ import annotations

from amqpproto.spec import encode_properties

from .._message import Message, SharedMessage
from .._props import headers_to_props

__all__ = ["delivery_props"]

_PLAIN_PROPS = encode_properties(headers_to_props({}, False, 0))
_PERSISTENT_PROPS = encode_properties(headers_to_props({}, True, 0))


def delivery_props(msg: Message) -> bytes:
    """``msg``'s AMQP properties, encoded: constants when its headers are empty or only the
    ``persistent`` marker (``headers_to_props`` then only looks at ``msg.persistent``)."""
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
    return encode_properties(headers_to_props(headers, msg.persistent, msg.priority))
