"""The byte-bounded range of a stream, asked on a passive queue.declare (a sansmq extension,
capability ``stream_range_bytes``).

With arguments ``x-stream-range-start`` (an offset >= 0) and ``x-stream-range-bytes`` (a budget >= 1)
a passive declare of a stream answers, in queue.declare-ok's message_count, the end offset of a read
from that start whose records fit the budget (``StreamLog.end_within_bytes``: at least one record,
never past the committed end) instead of the stream's end. A passive declare is already a
synchronous question with a numeric answer (``stream_end_offset``) that leaves nothing behind: no
consumer to cancel, no deliveries to drain. RabbitMQ ignores a passive declare's arguments, so a
client must see the capability before it reads message_count this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amqpproto import spec

from ..model import Queue
from .base import ChannelBase
from .errors import ChannelError
from .permissions import permit

__all__ = ["RANGE_START_ARG", "RANGE_BYTES_ARG", "range_end"]

RANGE_START_ARG = "x-stream-range-start"
RANGE_BYTES_ARG = "x-stream-range-bytes"


def range_end(chan: ChannelBase, q: Queue, arguments: Mapping[str, Any] | None, end: int,
              method: type) -> int | None:
    """The end offset a passive declare's range arguments ask for (``end``: the stream's visible
    end), None when it asks none. 406 for half a request, a bad value or a queue that is not a
    stream; reading sizes needs the read permission a consumer needs."""
    args = arguments or {}
    if RANGE_START_ARG not in args and RANGE_BYTES_ARG not in args:
        return None
    start, budget = (_integer(args, name, least, method) for name, least in ((RANGE_START_ARG, 0),
                                                                             (RANGE_BYTES_ARG, 1)))
    if not q.stream:
        raise ChannelError(spec.PRECONDITION_FAILED, f"invalid arg '{RANGE_BYTES_ARG}': queue '{q.name}' in "
                           f"vhost '{chan.vhost.name}' is not a stream", method)
    permit(chan.session.access, "read", "queue", q.name, method)
    return chan.session.model.streams.log(q).end_within_bytes(start, budget, upto=end)


def _integer(args: Mapping[str, Any], name: str, least: int, method: type) -> int:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        other = RANGE_BYTES_ARG if name == RANGE_START_ARG else RANGE_START_ARG
        raise ChannelError(spec.PRECONDITION_FAILED, f"invalid arg '{name}': expected an integer >= {least} "
                           f"(with '{other}'), got {value!r}", method)
    return value
