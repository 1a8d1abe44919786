"""Delayed delivery: the ``x-delayed-message`` exchange type with the ``x-delay`` header, as
RabbitMQ's rabbitmq_delayed_message_exchange plugin has it.

The exchange routes like the type its ``x-delayed-type`` argument names (direct, fanout, topic,
headers): its router is that type's, except that a message with a positive ``x-delay``
(milliseconds; a STOMP header's string too) routes to the exchange's ``DelayedTarget`` instead,
whatever way it came (a publish, an exchange-to-exchange binding, dead-lettering). The publish path
enqueues on it like on any queue; it holds the message in a ``Holder`` until the delay is over, then
publishes it from the exchange again, routed against the bindings as they are then. Its ``x-delay``
header becomes the negative delay (as the plugin does), so it is not delayed a second time. No
``x-delay``, zero, negative or not a number: routed at once, like any publish.

A held message counts as routed at publish time: a mandatory publisher gets nothing back (nothing
is known to be unroutable yet), and one that finds no queue when due is dropped (or goes to the
exchange's alternate exchange then). A durable delayed exchange keeps its held persistent messages
in the store with their due time: they survive a restart and are released at that time (at once
when it passed while the broker was down). Publishing to a delayed exchange costs ordinary
exchanges nothing: the check lives in its router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._message import Message
from .errors import PreconditionFailed
from .holding import Holder
from .objects import MAX_PRIORITY, Exchange
from .routers import DELAYED_TYPE, ROUTER_TYPES, Router
from .state import ModelState

__all__ = ["DelayedExchanges", "DelayedTarget", "DELAYED_TYPE", "check_delayed_args", "delay_ms"]

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


class DelayedTarget:
    """Where a delayed exchange's router sends a message that must wait: the exchange's holder."""

    __slots__ = ("holder",)

    #: the publish path hands a destination with ``x-max-priority`` the message as published, so
    #: the held copy keeps its priority; each queue applies its own rule when it is released
    args = {"x-max-priority": MAX_PRIORITY}

    def __init__(self, holder: Holder) -> None:
        self.holder = holder

    def hold(self, msg: Message) -> None:
        delay = delay_ms(msg.headers)
        headers = dict(msg.headers)
        headers["x-delay"] = -delay
        self.holder.hold(msg, headers, self.holder.state.now + delay / 1000.0)


class _HoldsDelayed(Router):
    """The routing of a delayed exchange: its inner type's (the next class in the MRO), except for
    a message with a positive ``x-delay``."""

    __slots__ = ()
    target: DelayedTarget

    def route(self, key: str, headers: dict[str, Any] | None, out: dict[Any, None]) -> None:
        if headers and "x-delay" in headers and delay_ms(headers) > 0:
            out[self.target] = None
        else:
            super().route(key, headers, out)


#: inner type -> the router class of a delayed exchange of that type
DELAYED_ROUTERS: dict[str, type[_HoldsDelayed]] = {
    name: type(f"Delayed{cls.__name__}", (_HoldsDelayed, cls), {"__slots__": ("target",)})
    for name, cls in ROUTER_TYPES.items()
}


class DelayedExchanges:
    __slots__ = ("state", "publish", "targets")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: set by the model: routes a released message from its exchange (the publish layer)
        self.publish: Publish
        self.targets: dict[Exchange, DelayedTarget] = {}

    def attach(self, x: Exchange, persist: bool = True) -> None:
        """``x`` was declared (``persist``) or recovered: give it its holder and router."""
        holder = Holder(self.state, x.vhost.name, "delayed", x.name, x.durable,
                        lambda msg, _count: self.publish(x, msg), persist)
        target = self.targets[x] = DelayedTarget(holder)
        router = DELAYED_ROUTERS[str((x.args or {})["x-delayed-type"])]()
        router.target = target  # type: ignore[misc]  # the slot is the concrete class's (DELAYED_ROUTERS)
        for dest, key, args in x.router.bindings():
            router.add(dest, key, args)
        x.router = router

    def detach(self, x: Exchange) -> None:
        """``x`` was deleted: the messages it held are dropped (the plugin's behaviour)."""
        target = self.targets.pop(x, None)
        if target is not None:
            target.holder.drop()
