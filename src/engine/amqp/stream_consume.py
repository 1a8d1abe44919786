"""What a channel checks when a client reads a stream queue, as RabbitMQ's stream queues over
AMQP 0-9-1 do: a consumer needs manual acks and a per-consumer prefetch and says where it starts
(``x-stream-offset``, ``x-stream-consumer-name``); basic.get is refused."""

from __future__ import annotations

from amqpproto import spec

from ..model import Queue
from ..model.streams import ConsumerArgs, parse_consumer_args
from .base import ChannelBase
from .errors import AmqpConnectionError, ChannelError

__all__ = ["stream_start", "refuse_get"]


def stream_start(chan: ChannelBase, q: Queue, m: spec.BasicConsume) -> ConsumerArgs:
    """Where a consumer of stream ``q`` starts, its tracking name, whether it wants append times; refused
    without manual acks (540, a hard error) or a per-consumer prefetch (406)."""
    where = f"queue '{q.name}' in vhost '{chan.vhost.name}'"
    if m.no_ack:
        raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "automatic acknowledgement not supported by stream "
                                  f"queues {where}", type(m))
    if not chan.prefetch or chan.global_prefetch:
        raise ChannelError(spec.PRECONDITION_FAILED, f"consumer prefetch count is not set for '{where}'",
                           type(m))
    return parse_consumer_args(m.arguments)


def refuse_get(chan: ChannelBase, q: Queue, m: spec.BasicGet) -> None:
    """basic.get on a stream: RabbitMQ's 540, a hard error."""
    raise AmqpConnectionError(spec.NOT_IMPLEMENTED, f"basic.get not supported by stream queues queue "
                              f"'{q.name}' in vhost '{chan.vhost.name}'", type(m))
