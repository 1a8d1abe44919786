"""``Pending``: the outcome of one operation, filled in by the I/O side, awaited by a front end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Pending"]


class Pending(Generic[T]):
    """A result or an exception, set once. Front ends attach one callback that wakes their waiter
    (an asyncio future, a trio event, a threading event); it runs on the I/O side."""

    __slots__ = ("done", "value", "error", "_callbacks")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[Pending[T]], object]] = []

    @classmethod
    def resolved(cls, value: T) -> Pending[T]:
        p: Pending[T] = cls()
        p.resolve(value)
        return p

    def resolve(self, value: T) -> None:
        if not self.done:
            self.done, self.value = True, value
            self._fire()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done, self.error = True, error
            self._fire()

    def result(self) -> T:
        assert self.done
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[no-any-return]

    def add_done_callback(self, fn: Callable[[Pending[T]], object]) -> None:
        if self.done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)
