"""SegmentStore's idle plain queues: no qid and no index until their first message, across restarts,
journal compaction, redeclares and deletes; and what an idle durable queue costs in the store."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import engine.storage.segment.store as seg_mod
from engine._message import Message
from engine.segment_store import SegmentStore
from engine.store import QueueDef, Recovered


def msg(i: int) -> Message:
    return Message(i, "", "q", {}, b"body-%d" % i, persistent=True)


def reopen(store: SegmentStore, path: Path) -> SegmentStore:
    store.close()
    return SegmentStore(path)


def bodies(rec: Recovered, name: str, vhost: str = "/") -> list[bytes]:
    return [sm.message.body for sm in rec.messages.get((vhost, name), [])]


def test_idle_queue_gets_a_qid_at_its_first_message_and_keeps_its_messages(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "idle"))
    s.add_queue(QueueDef("/", "busy"))
    s.add_queue(QueueDef("/", "args", args={"x-max-length": 5}))
    assert s._qs["/"]["idle"] is seg_mod._IDLE and s._qs["/"]["busy"] is seg_mod._IDLE
    assert isinstance(s._qs["/"]["args"], seg_mod._QIndex)  # a non-plain queue keeps its definition
    s.enqueue("/", "busy", msg(1))
    s.enqueue("/", "busy", msg(2))
    assert isinstance(s._qs["/"]["busy"], seg_mod._QIndex)
    s.sync(1)
    s = reopen(s, tmp_path)
    rec = s.recover()
    assert sorted((q.name, q.args) for q in rec.queues) == [("args", {"x-max-length": 5}), ("busy", None), ("idle", None)]
    assert [sm.message.body for sm in rec.messages[("/", "busy")]] == [b"body-1", b"body-2"]
    assert s._qs["/"]["idle"] is seg_mod._IDLE
    # a loaded idle queue gets a new qid for its first message; both queues keep theirs apart
    s.enqueue("/", "idle", msg(3))
    s.enqueue("/", "busy", msg(4))
    s.remove("/", "busy", 1)
    s.sync(2)
    rec = reopen(s, tmp_path).recover()
    assert bodies(rec, "idle") == [b"body-3"]
    assert bodies(rec, "busy") == [b"body-2", b"body-4"]


def test_emptied_queue_is_idle_after_restart_and_compaction_keeps_everything(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    for i in range(50):
        s.add_queue(QueueDef("v", f"q{i}"))
    s.enqueue("v", "q7", msg(1))
    s.remove("v", "q7", 1)
    s.enqueue("v", "q8", msg(2))
    s.sync(1)
    s = reopen(s, tmp_path)
    assert s._qs["v"]["q7"] is seg_mod._IDLE  # emptied: idle again once loaded
    with s._lock:
        s._compact()  # idle queues are written without a qid
    s.enqueue("v", "q9", msg(3))
    s.sync(2)
    s = reopen(s, tmp_path)
    rec = s.recover()
    assert len(rec.queues) == 50
    assert bodies(rec, "q8", "v") == [b"body-2"] and bodies(rec, "q9", "v") == [b"body-3"]
    assert bodies(rec, "q7", "v") == []


def test_redeclared_and_deleted_idle_queues(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "a"))
    s.enqueue("/", "a", msg(1))
    s.add_queue(QueueDef("/", "a"))  # redeclared from scratch (the store's contract): old messages go
    s.add_queue(QueueDef("/", "b"))
    s.delete_queue("/", "b")
    s.add_queue(QueueDef("/", "c"))
    s.enqueue("/", "c", msg(2))
    s.delete_queue("/", "c")
    s.add_queue(QueueDef("/", "c", auto_delete=True))
    s.sync(1)
    s = reopen(s, tmp_path)
    rec = s.recover()
    assert sorted((q.name, q.auto_delete) for q in rec.queues) == [("a", False), ("c", True)]
    assert rec.messages == {}
    s.enqueue("/", "a", msg(3))
    s.sync(2)
    assert bodies(reopen(s, tmp_path).recover(), "a") == [b"body-3"]


def test_an_idle_durable_queue_costs_little_in_the_store(tmp_path: Path) -> None:
    """Pins the per-queue size loosely (measured ~21 B: a dict slot; the name is the caller's)."""
    s = SegmentStore(tmp_path, sync=False)
    n = 20_000
    defs = [QueueDef("/", f"queue-{i}") for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for d in defs:
            s.add_queue(d)
        s.sync(1)  # the journal buffer is written out and dropped
        gc.collect()
        per = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
        s.close()
    assert per < 60, per
