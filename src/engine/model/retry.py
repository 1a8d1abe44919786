"""Retry with back-off: the ``x-retry-delays`` queue argument.

A queue with ``x-retry-delays`` takes a rejected message (AMQP basic.reject/basic.nack, STOMP NACK;
``requeue`` either way) out of the queue for the next delay of its list, then puts it back at the
queue's tail with ``x-retry-count`` (retries so far) in its headers and its delivery count raised
(redelivered, ``x-delivery-count``). Once every delay was used, the next rejection dead-letters it
with reason ``rejected`` (to ``x-dead-letter-exchange``, with ``x-death``), or drops it when the
queue has none, as RabbitMQ's ``x-delivery-limit`` does. Messages coming back for other reasons (a
consumer or connection gone, an ack timeout) are requeued at once, as without the argument: only
a consumer's verdict on the message is a failed attempt.

The argument: a string of comma-separated durations (``"1s,5s,30s,5m"``; units ``ms``, ``s``,
``m``, ``h``; a bare number is milliseconds) or an array of integers in milliseconds. Waiting
messages of a durable queue that are persistent are kept in the store with their due time and
attempt count (``holding``): they survive a restart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._message import Entry, Message
from .errors import PreconditionFailed
from .holding import Holder
from .objects import Queue
from .state import ModelState

__all__ = ["Retries", "parse_retry_delays", "RETRY_ARG", "RETRY_COUNT"]

RETRY_ARG = "x-retry-delays"
#: header of a message coming back from a retry: how many retries it had
RETRY_COUNT = "x-retry-count"

_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|h)?\s*")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_retry_delays(value: Any, queue: str = "", vhost: str = "/") -> tuple[int, ...]:
    """The delays (ms) of an ``x-retry-delays`` argument; PreconditionFailed when it is not one."""
    delays: list[int] = []
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        for part in value.split(","):
            m = _DURATION.fullmatch(part)
            if m is None:
                delays = []
                break
            delays.append(int(m.group(1)) * _UNIT_MS[m.group(2)])
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                delays = []
                break
            delays.append(item)
    if not delays:
        raise PreconditionFailed(f"invalid arg '{RETRY_ARG}' for queue '{queue}' in vhost '{vhost}': "
                                 "expected durations like \"1s,5s,30s,5m\" or an array of milliseconds")
    return tuple(delays)


def retry_count(headers: dict[str, Any]) -> int:
    value = headers.get(RETRY_COUNT, 0)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


class Retries:
    __slots__ = ("state", "requeue", "dead", "holders", "delays")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: set by the model (the publish layer): a due message goes back into its queue, and
        #: one with no delay left dies there
        self.requeue: Callable[[Queue, Message, int], Any]
        self.dead: Callable[[Queue, Entry, str], None]
        self.holders: dict[Queue, Holder] = {}
        self.delays: dict[Queue, tuple[int, ...]] = {}

    def attach(self, q: Queue, persist: bool = True) -> None:
        """``q`` was declared (``persist``) or recovered with ``x-retry-delays``."""
        assert q.args is not None
        self.delays[q] = parse_retry_delays(q.args[RETRY_ARG], q.name, q.vhost.name)
        self.holders[q] = Holder(self.state, q.vhost.name, "retry", q.name, q.durable,
                                 lambda msg, count: self.requeue(q, msg, count), persist)

    def detach(self, q: Queue) -> None:
        """``q`` was deleted: the messages waiting to come back go with it."""
        self.delays.pop(q, None)
        holder = self.holders.pop(q, None)
        if holder is not None:
            holder.drop()

    def handles(self, q: Any) -> bool:
        return q in self.delays

    def reject(self, q: Queue, entry: Entry) -> None:
        """A consumer rejected ``entry`` (taken from ``q``): wait for the next delay, or die."""
        delays = self.delays[q]
        attempt = retry_count(entry.msg.headers)
        if attempt >= len(delays):
            self.dead(q, entry, "rejected")
            return
        state = self.state
        state.forget(q, entry)
        headers = dict(entry.msg.headers)
        headers[RETRY_COUNT] = attempt + 1
        self.holders[q].hold(entry.msg, headers, state.now + delays[attempt] / 1000.0, entry.count + 1)
