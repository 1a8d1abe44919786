"""The low-overhead mode of the clients: bursts of publishes confirmed through one callback, and deliveries
handed over once per socket read. No ``Pending`` per message and no ``Delivery`` object: what a load
generator or a bulk mover needs, where the per-message API's futures would cost more than the codec.

Publishes of a burst are numbered by the client (1, 2, ... over the connection's whole life, across
reconnects), and confirmations arrive as ``on_confirm(number, multiple, error)`` with basic.ack's
meaning: ``multiple`` covers every publish up to ``number`` not confirmed yet; ``error`` is None (the
broker took them), ``PublishNacked`` (it refused them) or why they will never be confirmed (the
connection was lost, the channel closed). A STOMP burst asks for one RECEIPT, on its last SEND: the broker
handles a connection's frames in order, so it covers the whole burst."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OnConfirm", "Batch", "BatchSink", "BurstConfirms"]

#: ``on_confirm(number, multiple, error)``: see the module's doc
OnConfirm = Callable[[int, bool, "BaseException | None"], None]


class BurstConfirms:
    """One AMQP session's bursts awaiting confirms: ranges of its delivery tags, each with what to add to a
    tag to get the client's number, and the burst's callback. Tags only grow, so the ranges stay sorted."""

    __slots__ = ("ranges",)

    def __init__(self) -> None:
        self.ranges: deque[list[Any]] = deque()  # [first tag not confirmed, last tag, number - tag, callback]

    def add(self, first_tag: int, last_tag: int, number_offset: int, on_confirm: OnConfirm) -> None:
        self.ranges.append([first_tag, last_tag, number_offset, on_confirm])

    def settle(self, tag: int, multiple: bool, error: BaseException | None) -> None:
        """The broker's basic.ack/nack for ``tag``: each burst it touches hears of its own part."""
        ranges = self.ranges
        if multiple:
            while ranges and ranges[0][0] <= tag:
                r = ranges[0]
                top = min(tag, r[1])
                if top == r[1]:
                    ranges.popleft()
                else:
                    r[0] = tag + 1
                r[3](top + r[2], True, error)
            return
        for i, r in enumerate(ranges):
            if r[0] <= tag <= r[1]:
                if tag == r[0]:  # the oldest: the range shrinks (one in the middle just leaves a hole)
                    r[0] += 1
                    if r[0] > r[1]:
                        del ranges[i]
                r[3](tag + r[2], False, error)
                return
            if r[0] > tag:
                return

    def fail_all(self, error: BaseException) -> None:
        ranges, self.ranges = self.ranges, deque()
        for r in ranges:
            r[3](r[1] + r[2], True, error)


@dataclass(slots=True, eq=False)
class BatchSink:
    """What a batch subscription asked for; kept on its ``ConsumerRecord`` across reconnects."""

    on_batch: Callable[[Batch], None]
    wake: Callable[[], None]  # the front end's: write what settling queued, soon
    cumulative: bool = False  # STOMP: subscribe with ack:client, so one ACK settles every earlier delivery
    events: bool = False  # keep the codec's events in ``Batch.events``


@dataclass(slots=True, eq=False)
class Batch:
    """The deliveries of one subscription that arrived in one socket read, in order.

    ``bodies[i]`` and ``ack_ids[i]`` belong to the same message (AMQP delivery tag, STOMP ack header);
    ``events`` (for a subscription made with ``events=True``, else empty) are the codec's own events
    (``amqpproto.spec.BasicDeliver`` / ``stompproto.Message``) for whatever else a message carries
    (properties, headers, redelivered); ``last_offset`` is a stream's offset of the last delivery.
    Settle with ``ack``/``nack`` (``multiple``: every unsettled delivery up to that one, AMQP's
    basic.ack multiple; over STOMP only for a ``cumulative`` subscription). A batch of a connection
    that is gone settles nothing: the broker requeued its messages when the connection died."""

    bodies: list[bytes] = field(default_factory=list)
    ack_ids: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    session: Any = field(default=None, repr=False)  # the session it arrived on
    route: Any = field(default=None, repr=False)    # its consumer's channel (AMQP) or subscription (STOMP)
    sink: Any = field(default=None, repr=False)
    last_offset: int | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    def ack(self, ack_id: Any, multiple: bool = False) -> None:
        self._settle(ack_id, "ack", multiple, False)

    def nack(self, ack_id: Any, multiple: bool = False, requeue: bool = True) -> None:
        self._settle(ack_id, "nack", multiple, requeue)

    def ack_each(self) -> None:
        """Ack every delivery of this batch with an ack of its own (as a consumer acking one by one does)."""
        session = self.session
        if session.error is None and self.ack_ids:
            session.ack_each(self.route, self.ack_ids)
            self.sink.wake()

    def ack_all(self) -> None:
        """Ack every delivery of this batch (one frame where the protocol allows it)."""
        if not self.ack_ids:
            return
        if self.session is not None and self.session.cumulative_settle(self.sink):
            self._settle(self.ack_ids[-1], "ack", True, False)
        else:
            self.ack_each()

    def _settle(self, ack_id: Any, how: str, multiple: bool, requeue: bool) -> None:
        session = self.session
        if session.error is None:  # else the broker requeued it with the connection
            session.settle_raw(self.route, self.sink, ack_id, how, multiple, requeue)
            self.sink.wake()
