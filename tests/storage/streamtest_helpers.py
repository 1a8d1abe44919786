"""Stream tests' helpers: a store of each kind that can be reopened (or crashed), and messages."""

from __future__ import annotations

from typing import Any

from engine._message import Message
from engine.streams import StreamSettings
from engine.testing import FakeStore

STREAM_KINDS = ("memory", "segment", "postgres")


def smsg(i: int, body: bytes | None = None, **headers: Any) -> Message:
    return Message(i, "", "s", {"i": i, **headers}, body if body is not None else b"m%d" % i, persistent=True)


class StreamStores:
    """Opens the store of one kind, and reopens it as a restarted broker would find it (memory: a
    FakeStore's ``crash()``, which keeps what was synced)."""

    def __init__(self, kind: str, where: str) -> None:
        self.kind = kind
        self.where = where

    def open(self) -> Any:
        if self.kind == "memory":
            return FakeStore()
        if self.kind == "segment":
            from engine.segment_store import SegmentStore

            return SegmentStore(self.where)
        from engine.postgres_store import PostgresStore

        return PostgresStore(self.where)

    def reopen(self, store: Any, sync: bool = True) -> Any:
        if sync:
            store.sync(0)
        if self.kind == "memory":
            return store.crash()
        store.close()
        return self.open()

    def log(self, store: Any, settings: StreamSettings | None = None, name: str = "s") -> Any:
        return store.stream("/", name, settings)
