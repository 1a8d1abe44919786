"""Riding out a broker that goes away for a while (a restart, a node failing over).

Connecting, probing offsets, reading a range and publishing are retried with a doubling pause
while the failure is the network's (``client.retriable``), until ``retryDeadlineMs`` has passed
since the outage began; an answer from the broker (a refused log-in, a missing stream) is final at
once. The deadline counts from the first failure, so a long read that was going well gets the whole
deadline again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from .driver import retriable

__all__ = ["Outage", "with_retries"]

FIRST_PAUSE = 0.2
MAX_PAUSE = 5.0

log = logging.getLogger("pipeline.retry")
T = TypeVar("T")


class Outage:
    """One outage: ``wait(exc)`` sleeps before the next attempt, or raises ``exc`` when it is no
    network failure or the deadline would pass."""

    def __init__(self, deadline_s: float, what: str) -> None:
        self.give_up = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.what = what
        self.pause = FIRST_PAUSE

    def wait(self, exc: BaseException) -> None:
        if not retriable(exc):
            raise exc
        if time.monotonic() + self.pause > self.give_up:
            exc.add_note(f"{self.what}: gave up after retrying for {self.deadline_s:g}s (option retryDeadlineMs)")
            raise exc
        log.warning("%s: %s; retrying in %.1fs", self.what, exc, self.pause)
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, MAX_PAUSE)


def with_retries(work: Callable[[], T], deadline_s: float, what: str) -> T:
    """``work()``, called again after network failures (it must be safe to repeat)."""
    outage: Outage | None = None
    while True:
        try:
            return work()
        except Exception as exc:
            outage = outage or Outage(deadline_s, what)
            outage.wait(exc)
