"""What the stream append's fast path needs of a publish's properties, read once per property shape.

A publish whose properties the codec kept as received (``amqpproto.RawProperties``) is appended to
a stream with those bytes (``engine._raw_message.RawMessage``) when nothing about its properties
needs the general path: no expiration (TTL), priority, user-id (checked against the login),
reply-to (the direct reply-to pseudo queue rewrites it), ``CC``/``BCC`` routing, and a valid
``x-producer`` / ``x-publishing-id`` pair or neither. A shape's ``StreamShape`` says so and keeps
what the append needs: persistence, the producer, its publishing id (constant, or read from each
publish's bytes when the codec found it varying) and the filter value. Publishes of any other
shape take the general path, which decodes them and reports their errors as always.
"""

from __future__ import annotations

from amqpproto import PropertyShape

from ..model.errors import ModelError
from ..model.streams import PUBLISHING_ID_HEADER, producer_of
from ..streams.filtering import header_filter_value

__all__ = ["StreamShape", "stream_shape", "VARYING_HEADER"]

#: the header the codec reads from each publish's bytes: the publishing id, the one that counts up
VARYING_HEADER = PUBLISHING_ID_HEADER


class StreamShape:
    __slots__ = ("persistent", "producer", "publishing_id", "varying", "filter")

    def __init__(self, persistent: bool, producer: str | None, publishing_id: int | None, varying: bool,
                 filter: str | None) -> None:
        self.persistent = persistent
        #: the dedup producer (None: not deduplicated)
        self.producer = producer
        #: the publishing id when the same in every publish of the shape
        self.publishing_id = publishing_id
        #: the publishing id is read from each publish's bytes (``RawProperties.varying``)
        self.varying = varying
        self.filter = filter


def stream_shape(shape: PropertyShape) -> StreamShape | None:
    """``shape``'s reading for the fast path; None when its publishes take the general path."""
    props = shape.props
    if props.priority is not None or props.expiration is not None or props.user_id is not None \
            or props.reply_to is not None:
        return None
    headers = props.headers or {}
    if "CC" in headers or "BCC" in headers:
        return None
    varying = shape.at >= 0
    try:  # a varying id is checked per publish (>= 0); the rest of the pair once, here
        producer, pid = producer_of({**headers, PUBLISHING_ID_HEADER: 0} if varying else headers)
    except ModelError:
        return None  # the general path refuses it (406)
    return StreamShape(props.delivery_mode == 2, producer, None if varying else pid, varying and producer is not None,
                       header_filter_value(headers))
