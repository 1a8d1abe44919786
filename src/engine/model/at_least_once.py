"""At-least-once dead-lettering: a quorum queue with ``x-dead-letter-strategy: at-least-once`` and
``x-overflow: reject-publish`` (``quorum.at_least_once``) lets a dead message go only once every
queue its dead letter routes to took it, as RabbitMQ's dead-letter worker does.

A dead message leaves its queue's memory at once (consumers never see it again) but stays in the
store until then. Its dead letter is written to the target queues before the removal, so a crash
between them leaves both, never neither. One that reaches no queue (the dead-letter exchange is
missing or routes nowhere) or that a full queue refuses is kept and routed again every
``RETRY_SECONDS`` (only to the queues that did not take it yet) until it is taken. A kept one is not
lost in a restart: it is back in its queue, ready, as the store still holds it there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._message import Entry, Message
from .._timers import TimerKey
from .expiry import dead_letter
from .objects import Queue
from .state import ModelState

__all__ = ["AtLeastOnce", "RETRY_SECONDS"]

#: how often a kept dead letter is routed again (RabbitMQ 3.10's worker: 180 s; a kept message costs
#: one routing per retry here, so sooner is cheap)
RETRY_SECONDS = 10.0


class _Kept:
    """A dead message waiting for its dead letter to be taken: why it died, and which queues
    already took the dead letter."""

    __slots__ = ("entry", "reason", "took")

    def __init__(self, entry: Entry, reason: str) -> None:
        self.entry = entry
        self.reason = reason
        self.took: set[Any] = set()


class AtLeastOnce:
    __slots__ = ("state", "enqueue", "kept", "timers")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: set by the publish layer: enqueue a dead letter in a target (False: it refused it)
        self.enqueue: Callable[[Any, Message], bool]
        #: queue -> its dead messages whose dead letters were not all taken yet, oldest first
        self.kept: dict[Queue, list[_Kept]] = {}
        self.timers: dict[Queue, TimerKey] = {}

    def dead(self, q: Queue, entry: Entry, reason: str) -> None:
        """``entry`` dies in ``q`` for ``reason``."""
        self.state.forget(q, entry, keep_stored=True)
        kept = _Kept(entry, reason)
        if self._route(q, kept):
            return
        self.kept.setdefault(q, []).append(kept)
        if q not in self.timers:
            self.timers[q] = self.state.timers.add(self.state.now + RETRY_SECONDS, self._retry, q)

    def held(self, q: Queue) -> int:
        """Dead messages of ``q`` still waiting for their dead letters to be taken."""
        return len(self.kept.get(q, ()))

    def _route(self, q: Queue, kept: _Kept) -> bool:
        """Dead-letter ``kept`` to the queues that did not take it yet; True (and the message gone
        from ``q``'s store) once all took it."""
        state = self.state
        dead = dead_letter(q, kept.entry, kept.reason, state.next_message_id, state.now)
        if dead is None or not dead[1]:
            return False
        msg, targets = dead
        taken = True
        for target in targets:
            if target in kept.took:
                continue
            if self.enqueue(target, msg):
                kept.took.add(target)
            else:
                taken = False
        if taken:
            state.unstore(q, kept.entry.msg)
        return taken

    def _retry(self, q: Queue, now: float) -> None:
        del self.timers[q]
        kept = self.kept.pop(q, [])
        if q.vhost.queues.get(q.name) is not q:
            return  # deleted with its queue (the store forgot them there)
        left = [k for k in kept if not self._route(q, k)]
        if left:
            self.kept[q] = left
            self.timers[q] = self.state.timers.add(now + RETRY_SECONDS, self._retry, q)
