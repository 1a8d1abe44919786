"""RabbitMQ's reply texts and the argument checks that produce them, shared by the channel's
handlers (the texts are what clients and RabbitMQ's own tests match on)."""

from __future__ import annotations

from typing import Any

from amqpproto import spec

from ..model.objects import amqp_type_name
from .errors import ChannelError

__all__ = ["not_default", "expiration_ms", "inequivalent", "term"]


def not_default(exchange: str, method: type) -> None:
    """RabbitMQ refuses every declare, delete and (un)bind naming the default exchange."""
    if exchange == "":
        raise ChannelError(spec.ACCESS_REFUSED, "operation not permitted on the default exchange", method)


def expiration_ms(text: str, method: type) -> int:
    """The expiration property in milliseconds; refused with RabbitMQ's reasons."""
    digits = text.lstrip("+-")
    sign_len = len(text) - len(digits)
    n = 0
    while n < len(digits) and digits[n].isdigit():
        n += 1
    if not n or sign_len > 1:
        reason = "no_integer"
    elif n < len(digits):
        reason = f'{{leftover_string,"{digits[n:]}"}}'
    else:
        ms = int(text)
        if ms >= 0:
            return ms
        reason = f"{{value_negative,{ms}}}"
    raise ChannelError(spec.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}", method)


def inequivalent(key: str, kind: str, name: str, vhost: str, theirs: Any, ours: Any) -> str:
    """RabbitMQ's text for a redeclare whose argument ``key`` differs."""
    def val(v: Any) -> str:
        return "none" if v is None else f"the value '{term(v)}' of type '{amqp_type_name(v)}'"

    head = f"inequivalent arg '{key}' for {kind} '{name}' in vhost '{vhost}': received "
    if theirs is None or ours is None:
        return f"{head}{val(theirs)} but current is {val(ours)}"
    return f"{head}'{term(theirs)}' but current is '{term(ours)}'"


def term(value: Any) -> str:
    """A value as RabbitMQ prints it in a reply text (booleans as Erlang atoms)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)

