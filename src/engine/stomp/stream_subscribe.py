"""A STOMP subscription to a stream queue, as RabbitMQ's STOMP plugin takes it: acks (client or
client-individual) and a prefetch are required; ``x-stream-offset`` says where it starts."""

from __future__ import annotations

from ..model import Model, Queue
from ..model.streams import END_OFFSET_ARG, parse_consumer_args
from .errors import StompError
from .subscriptions import StompSubscription

__all__ = ["consume_stream"]


def consume_stream(model: Model, q: Queue, sub: StompSubscription, headers: dict[str, str]) -> None:
    """Start ``sub`` on stream ``q`` where its headers say; an ERROR without acks or a prefetch."""
    where = f"queue '{q.name}' in vhost '{q.vhost.name}'"  # RabbitMQ's texts, then what to send instead
    if sub.ack_mode == "auto":
        raise StompError("precondition_failed", f"automatic acknowledgement not supported by stream queues {where}:"
                         " SUBSCRIBE with ack:client or ack:client-individual")
    if not sub.prefetch:
        raise StompError("precondition_failed", f"consumer prefetch count is not set for '{where}': SUBSCRIBE "
                         "with a prefetch-count header")
    if END_OFFSET_ARG in headers:  # its end is a basic.cancel, which STOMP has no frame for
        raise StompError("precondition_failed", f"invalid arg '{END_OFFSET_ARG}': an AMQP 0-9-1 consumer "
                         "argument only (the broker ends such a consumer with basic.cancel)")
    model.consume_stream(q, sub, parse_consumer_args(headers, stomp=True))
