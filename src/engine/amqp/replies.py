"""RabbitMQ's reply texts and the argument checks that produce them, shared by the channel's
handlers (the texts are what clients and RabbitMQ's own tests match on); a redeclare's
``inequivalent`` text, which STOMP's declares give too, is the model's (``model.objects``)."""

from __future__ import annotations

from amqpproto import spec

from .errors import ChannelError

__all__ = ["not_default", "expiration_ms"]


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
