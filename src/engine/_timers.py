"""One sorted timer structure for the whole broker, keyed ``(deadline, seq)``.

Heart-beats, message expiry, ack timeouts and queue expiry all live here, so ``get_timer()`` is the
head of one ``SortedDict`` instead of a scan over sessions or messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sortedcontainers import SortedDict

__all__ = ["TimerQueue", "TimerKey"]

TimerKey = tuple[float, int]


class TimerQueue:
    __slots__ = ("_timers", "_seq")

    def __init__(self) -> None:
        self._timers: SortedDict = SortedDict()
        self._seq = 0

    def __len__(self) -> int:
        return len(self._timers)

    def add(self, deadline: float, fn: Callable[[Any, float], None], arg: Any) -> TimerKey:
        """Call ``fn(arg, now)`` once ``now >= deadline``. Returns the key to cancel it with."""
        self._seq += 1
        key = (deadline, self._seq)
        self._timers[key] = (fn, arg)
        return key

    def cancel(self, key: TimerKey | None) -> None:
        if key is not None:
            self._timers.pop(key, None)

    def next_deadline(self) -> float | None:
        if not self._timers:
            return None
        return self._timers.peekitem(0)[0][0]

    def pop_due(self, now: float) -> tuple[Callable[[Any, float], None], Any] | None:
        """Remove and return the earliest timer due at ``now``, or None."""
        if not self._timers:
            return None
        key, value = self._timers.peekitem(0)
        if key[0] > now:
            return None
        del self._timers[key]
        return value
