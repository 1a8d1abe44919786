"""``StreamWork``, the stream changes of one PostgreSQL batch: what a cluster node fenced off a
stream drops (the leader's writes) and keeps (consumers' offsets, other streams)."""

from __future__ import annotations

from engine._message import Message
from engine.streams._pglog import CONSUMER, PRODUCER, StreamWork


def test_a_fenced_streams_leader_writes_are_dropped_and_its_consumer_offsets_kept() -> None:
    work = StreamWork({})
    msg = Message(1, "", "s", {}, b"x", 0, None, True)
    for sid in (1, 2):
        work.records.append((sid, 0, 10, msg))
        work.segments[(sid, 0)] = (1, 20, 10)
        work.chunks[sid] = 0
        work.drops[sid] = 0
        work.tracking[(sid, PRODUCER, "p")] = 5
        work.tracking[(sid, CONSUMER, "c")] = 1
        work.led[sid] = ("/", f"s{sid}")
    work.without({1})
    assert [r[0] for r in work.records] == [2]
    assert list(work.segments) == [(2, 0)] and list(work.chunks) == [2] and list(work.drops) == [2]
    assert work.tracking == {(1, CONSUMER, "c"): 1, (2, PRODUCER, "p"): 5, (2, CONSUMER, "c"): 1}
    assert work.led == {2: ("/", "s2")}
    work.forget(2)  # deleted: nothing of it is written, its id is deleted
    assert not work.records and work.deleted == [2] and work.tracking == {(1, CONSUMER, "c"): 1}
