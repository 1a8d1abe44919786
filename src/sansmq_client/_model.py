"""What outlives a connection: consumers (with their last processed stream offset) and the deliveries
handed to user code. Sessions (one per socket) read and update these; front ends wrap them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Delivery", "ConsumerRecord", "QueueStatus"]


@dataclass(slots=True, eq=False)
class ConsumerRecord:
    """One subscription as the user asked for it; restored on every new connection until cancelled.

    ``last_offset`` is the stream offset of the last delivery the user acked (auto_ack: received), so a
    restored stream consumer resumes right after it instead of at its original ``offset``."""

    tag: str
    source: str                    # AMQP queue name, or STOMP destination
    prefetch: int
    auto_ack: bool
    offset: int | str | None       # x-stream-offset asked for at first subscribe
    arguments: dict[str, Any]
    on_delivery: Callable[[Delivery], None]
    on_end: Callable[[BaseException | None], None]
    last_offset: int | None = None
    ended: bool = False
    batch: Any = None  # a ``_bulk.BatchSink``: deliveries go to it once per read instead of ``on_delivery``

    def resume_offset(self) -> int | str | None:
        return self.offset if self.last_offset is None else self.last_offset + 1

    def end(self, error: BaseException | None) -> None:
        if not self.ended:
            self.ended = True
            self.on_end(error)


@dataclass(slots=True, eq=False)
class Delivery:
    """One message handed to a consumer. ``headers`` are the STOMP headers or the AMQP message's
    ``properties.headers``; ``properties`` the AMQP ``BasicProperties`` (None over STOMP)."""

    body: bytes
    headers: dict[str, Any]
    consumer: ConsumerRecord
    redelivered: bool = False
    routing_key: str = ""          # AMQP routing key; STOMP: the destination
    exchange: str = ""
    properties: Any = None
    offset: int | None = None      # stream offset (x-stream-offset), None outside streams
    ack_id: Any = field(default=None, repr=False)   # delivery tag (AMQP) or ack header (STOMP)
    generation: int = field(default=0, repr=False)  # the connection it arrived on


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """A passive queue.declare's answer: the queue exists and holds ``message_count`` messages (a stream
    on sansmq: its end offset, the offset the next message will get) for ``consumer_count`` consumers."""

    queue: str
    message_count: int
    consumer_count: int
