"""Delayed delivery: the ``x-delayed-message`` exchange type with the ``x-delay`` header, as
RabbitMQ's rabbitmq_delayed_message_exchange plugin has it.

The exchange routes like the type its ``x-delayed-type`` argument names (direct, fanout, topic,
headers). A message published to it with a positive ``x-delay`` (milliseconds; a STOMP header's
string too) is held in the exchange's ``Holder`` and routed when the delay is over, against the
bindings as they are then; its ``x-delay`` header becomes the negative delay (as the plugin does),
so passing another delayed exchange later does not delay it again. No ``x-delay``, zero, negative
or not a number: routed at once, like any publish. A held message counts as routed at publish
time: a mandatory publisher gets nothing back (nothing is known to be unroutable yet), and one
that finds no queue when due is dropped (or goes to the alternate exchange). A durable delayed
exchange keeps its held persistent messages in the store with their due time: they survive a
restart and are released at that time (at once when it passed while the broker was down).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._message import Message
from .errors import PreconditionFailed
from .holding import Holder
from .objects import Exchange
from .routers import DELAYED_TYPE, ROUTER_TYPES
from .state import ModelState

__all__ = ["DelayedExchanges", "DELAYED_TYPE", "check_delayed_args", "delay_ms"]

#: what a released message is published with: the exchange it was held by, and the message
Publish = Callable[[Exchange, Message], Any]


def check_delayed_args(args: dict[str, Any] | None) -> None:
    """A delayed exchange needs ``x-delayed-type`` naming a routing type (the plugin's check)."""
    inner = (args or {}).get("x-delayed-type")
    if not isinstance(inner, str) or inner not in ROUTER_TYPES:
        raise PreconditionFailed("Invalid argument, 'x-delayed-type' must be an existing exchange type")


def delay_ms(headers: dict[str, Any]) -> int:
    """The ``x-delay`` of a message in milliseconds; 0 when absent or not an integer."""
    value = headers.get("x-delay")
    if value is None or isinstance(value, bool):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class DelayedExchanges:
    __slots__ = ("state", "publish")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: set by the model: routes a released message from its exchange (the publish layer)
        self.publish: Publish

    def attach(self, x: Exchange, persist: bool = True) -> None:
        """``x`` was declared (``persist``) or recovered: give it its holder."""
        x.delayed = Holder(self.state, x.vhost.name, "delayed", x.name, x.durable,
                           lambda msg, _count: self.publish(x, msg), persist)

    def detach(self, x: Exchange) -> None:
        """``x`` was deleted: the messages it held are dropped (the plugin's behaviour)."""
        if x.delayed is not None:
            x.delayed.drop()
            x.delayed = None

    def hold(self, x: Exchange, msg: Message, delay: int) -> bool:
        """Hold ``msg`` (published to ``x`` with a positive ``delay`` in ms) until it is due.
        True when the store was written."""
        assert x.delayed is not None
        headers = dict(msg.headers)
        headers["x-delay"] = -delay
        return x.delayed.hold(msg, headers, self.state.now + delay / 1000.0)
