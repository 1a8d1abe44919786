"""SegmentStore on its own: records, torn tails, segment deletion, compaction, locking."""

from __future__ import annotations

import os
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from storagetest_helpers import FaultyStore, apply_op, msg

import engine.storage.segment._compaction as compaction_mod
import engine.storage.segment.store as seg_mod
from engine._message import Message
from engine.segment_store import SegmentStore
from engine.storage.segment._records import JRN_MAGIC
from engine.store import BindingDef, ExchangeDef, QueueDef, StoreError


def reopen(store: SegmentStore, path: Path, **kw) -> SegmentStore:
    store.close()
    return SegmentStore(path, **kw)


def queue_bodies(store: SegmentStore, vhost: str = "/", name: str = "q") -> list[bytes]:
    return [sm.message.body for sm in store.recover().messages.get((vhost, name), [])]


def segments(path: Path) -> list[str]:
    return sorted(os.listdir(path / "segments"))


def test_torn_journal_tail_is_dropped(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 4):
        s.enqueue("/", "q", msg(i))
    s.sync(1)
    s.close()
    journal = tmp_path / "journal"
    good = journal.read_bytes()
    # a later record half written (as after a crash during the write): cut into the last one
    s = SegmentStore(tmp_path)
    s.recover()
    s.enqueue("/", "q", msg(4))
    s.remove("/", "q", 1)
    s.sync(2)
    s.close()
    data = journal.read_bytes()
    journal.write_bytes(data[:-5])
    s = SegmentStore(tmp_path)
    assert queue_bodies(s) == [b"body-1", b"body-2", b"body-3", b"body-4"]  # the remove was torn
    # garbage (bad CRC) after valid records is dropped as well
    s.close()
    journal.write_bytes(good + b"\x10\x00\x00\x00\xde\xad\xbe\xef" + b"x" * 16)
    # (message 4 is back although this journal predates it: its enqueue marker beside it in the
    # synced segment is durable on its own; the lost remove of 1 only means a redelivery)
    assert queue_bodies(SegmentStore(tmp_path)) == [b"body-1", b"body-2", b"body-3", b"body-4"]


def test_torn_or_missing_segment_record_is_dropped(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 4):
        s.enqueue("/", "q", msg(i, b"x" * 100))
    s.sync(1)
    s.close()
    seg = tmp_path / "segments" / segments(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    data[data.rindex(b"x" * 100) + 50] ^= 0xFF  # the last message's body no longer matches its CRC
    seg.write_bytes(bytes(data))
    s = SegmentStore(tmp_path)
    rec = s.recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [1, 2]
    assert s.dropped_on_recovery == 1


def test_segments_rotate_and_are_deleted_when_unreferenced(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path, segment_size=4096)
    s.add_queue(QueueDef("/", "q"))
    s.add_queue(QueueDef("/", "r"))
    for i in range(1, 41):
        s.enqueue("/", "q", msg(i, b"y" * 400))
    s.enqueue("/", "r", msg(41, b"z" * 10))
    s.sync(1)
    assert len(segments(tmp_path)) >= 5
    for i in range(1, 41):
        s.remove("/", "q", i)
    s.sync(2)
    assert len(segments(tmp_path)) == 1  # only the current one, which also holds message 41
    rec = reopen(s, tmp_path, segment_size=4096).recover()
    assert [sm.message.body for sm in rec.messages[("/", "r")]] == [b"z" * 10]
    assert ("/", "q") not in rec.messages
    assert len(segments(tmp_path)) == 2  # 41's segment + the fresh one


def test_fully_acked_current_segment_is_dropped_at_rotation(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path, segment_size=600)
    s.add_queue(QueueDef("/", "q"))
    first = segments(tmp_path)
    s.enqueue("/", "q", msg(1, b"a" * 500))
    s.remove("/", "q", 1)  # the current segment is now unreferenced, but still appended to
    assert segments(tmp_path) == first
    for i in range(2, 8):
        s.enqueue("/", "q", msg(i, b"b" * 500))
    s.sync(1)
    assert first[0] not in segments(tmp_path)
    rec = reopen(s, tmp_path, segment_size=600).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == list(range(2, 8))


def test_journal_is_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compaction_mod, "COMPACT_MIN", 16 << 10)
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 5001):
        s.enqueue("/", "q", msg(i, b"."))
        if i > 3:
            s.remove("/", "q", i - 3)
    s.sync(1)
    assert os.path.getsize(tmp_path / "journal") < 64 << 10  # 5000 enqueues + removes would be ~175 kB
    assert queue_bodies(reopen(s, tmp_path)) == [b".", b".", b"."]


def test_index_stays_compact() -> None:
    qi = seg_mod._QIndex(1, QueueDef("/", "q"))
    assert qi.blocks is None  # idle queue: no arrays
    for i in range(1, 1001):
        qi.add(i, (1 << 32) | (8 + i))
    for i in range(1, 990):
        assert qi.pop(i) == (1 << 32) | (8 + i)
    assert qi.live == 11 and qi.blocks is not None and len(qi.blocks[0].ids) < 100  # tombstones compacted away
    assert [m for m, _ in qi.entries()] == list(range(990, 1001))
    assert 5 not in qi and qi.pop(5) == 0


@given(st.lists(st.tuples(st.sampled_from("erc"), st.integers(1, 30), st.integers(0, 5)), max_size=60),
       st.integers(0, 400))
def test_replay_matches_model_and_any_truncation_recovers_a_prefix(tmp_path_factory, ops, cut) -> None:
    """Random enqueue/remove/count sequences, synced after each op: the reopened store equals a
    dict model; the journal cut anywhere still opens, giving the state after some prefix of ops
    plus every message enqueued after it (their enqueues are durable with their segment, beside
    them; the removals and counts lost with the journal's tail are redeliveries, never losses)."""
    path = tmp_path_factory.mktemp("replay")
    s = SegmentStore(path)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    model: dict[int, int] = {}
    states = [dict(model)]
    next_id = 0
    for op, k, count in ops:
        next_id = apply_op(s, model, op, k, count, next_id)
        s.sync(1)
        states.append(dict(model))
    s.close()
    journal = path / "journal"
    data = journal.read_bytes()
    s = SegmentStore(path)
    got = {sm.message.id: sm.delivery_count for sm in s.recover().messages.get(("/", "q"), [])}
    assert got == model
    s.close()
    # (re-opening compacted the journal; cut the pre-compaction bytes instead)
    journal.write_bytes(data[: len(JRN_MAGIC) + cut])
    s = SegmentStore(path)
    got = {sm.message.id: sm.delivery_count for sm in s.recover().messages.get(("/", "q"), [])}
    s.close()
    # ({}: the cut took the queue's definition itself, so its messages have nowhere to go)
    assert got in [{}] + [prefix_plus_later_enqueues(states, k) for k in range(len(states))]


def prefix_plus_later_enqueues(states: list[dict[int, int]], k: int) -> dict[int, int]:
    """The state after ``k`` ops with every message enqueued later (delivery count 0) added."""
    later = {i for state in states[k + 1 :] for i in state} - states[k].keys()
    return {**dict.fromkeys(later, 0), **states[k]}


def test_short_write_then_enospc_is_retried_at_the_same_offsets(tmp_path: Path) -> None:
    s = FaultyStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    for i in range(1, 11):
        s.enqueue("/", "q", msg(i, b"w" * 300))
    s.fail_writes, s.short_write = 1, True  # half a buffer reaches the disk, then ENOSPC
    with pytest.raises(StoreError, match="ENOSPC"):
        s.sync(1)
    with pytest.raises(StoreError, match="cannot write"):
        s.fail_writes = 1
        s.enqueue("/", "q", msg(11))  # refused while the disk is full
    s.remove("/", "q", 1)  # acks still accepted (buffered)
    s.sync(2)  # space again: the rest is written where it belongs
    s.enqueue("/", "q", msg(12))
    s.sync(3)
    rec = reopen(s, tmp_path).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [*range(2, 11), 12]
    assert all(sm.message.body == b"w" * 300 for sm in rec.messages[("/", "q")][:-1])


def test_fsync_error_is_reported_and_retried(tmp_path: Path) -> None:
    s = FaultyStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))
    s.fail_fsyncs = 1
    with pytest.raises(StoreError, match="cannot sync"):
        s.sync(1)
    calls = []
    s._fsync = lambda fd: calls.append(fd)  # type: ignore[method-assign]
    s.sync(2)
    assert len(calls) >= 2  # segment + journal fsynced again, though nothing new was written


class _FsyncLog(FaultyStore):
    """Records which files each sync fsynced (by path, so closed descriptors cannot alias)."""

    def __init__(self, *args, **kw) -> None:
        self.fsynced: list[str] = []
        self.visited: list[str] = []  # files a write-out looked at
        super().__init__(*args, **kw)

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        self.fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))

    def _write_file(self, f) -> None:
        self.visited.append(os.path.basename(f.path))
        super()._write_file(f)


def test_a_sync_fsyncs_rotated_segments_once_and_never_visits_the_backlog(tmp_path: Path) -> None:
    """A large backlog is many segments: a sync fsyncs the current one and those rotated since
    the last sync (again after a failed fsync), and leaves the old ones alone (no scan of them)."""
    s = _FsyncLog(tmp_path, segment_size=4096)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 61):  # ~6 segments of backlog, all referenced
        s.enqueue("/", "q", msg(i, b"y" * 600))
    s.sync(1)
    backlog = set(segments(tmp_path))
    assert len(backlog) >= 6
    s.fsynced.clear()
    s.visited.clear()
    s.enqueue("/", "q", msg(61, b"y" * 10))
    s.sync(2)
    synced = {os.path.basename(p) for p in s.fsynced if "segments" in p}
    assert max(segments(tmp_path)) in synced  # the current segment
    old = set(sorted(backlog)[:-1])  # the backlog's full segments: neither written nor fsynced
    assert not synced & old and not set(s.visited) & old, s.visited
    backlog = set(segments(tmp_path))
    for i in range(62, 72):  # rotates once or twice
        s.enqueue("/", "q", msg(i, b"y" * 600))
    rotated = sorted(set(segments(tmp_path)) - backlog) + [max(backlog)]
    s.fail_fsyncs = 1
    with pytest.raises(StoreError, match="cannot sync"):
        s.sync(3)
    s.fsynced.clear()
    s.sync(4)  # the failed sync's files again: the rotated ones included
    synced = sorted(os.path.basename(p) for p in s.fsynced if "segments" in p)
    assert synced == sorted(rotated)
    s.fsynced.clear()
    s.sync(5)
    assert [p for p in s.fsynced if "segments" in p] == []  # nothing new: nothing to fsync
    rec = reopen(s, tmp_path, segment_size=4096).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == list(range(1, 72))


def test_store_format_is_explicit_and_versioned(tmp_path: Path) -> None:
    """Headers and arguments round-trip through AMQP field tables (no pickle); a header key too long
    for a field table falls back to a key/value array; another format version is refused clearly."""
    from datetime import datetime
    from decimal import Decimal

    s = SegmentStore(tmp_path)
    args = {"x-max-length": 3, "x-dead-letter-exchange": "dlx", "nested": {"a": [1, 2.5, None, True]}}
    s.add_queue(QueueDef("/", "q", args=args))
    s.add_exchange(ExchangeDef("/", "x", "headers", durable=True, auto_delete=True, internal=True, args={}))
    s.add_binding(BindingDef("/", "x", "q", False, "k", {"x-match": "all", "n": 7}))
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    headers = {"s": "é", "i": -5, "big": 1 << 40, "f": 0.25, "b": False, "raw": b"\x00\xff", "t": when,
               "d": Decimal("1.25"), "x-death": [{"count": 2, "reason": "expired", "routing-keys": ["a"]}]}
    s.enqueue("/", "q", Message(1, "x", "k", headers, b"one", persistent=True))
    long_key = {"k" * 300: "v", "short": 1}
    s.enqueue("/", "q", Message(2, "x", "k", long_key, b"two", persistent=True))
    s.sync(1)
    assert b"pickle" not in (tmp_path / "journal").read_bytes()
    s = reopen(s, tmp_path)
    rec = s.recover()
    assert [(q.name, q.args) for q in rec.queues] == [("q", args)]
    (x,) = [x for x in rec.exchanges if x.name == "x"]
    assert (x.type, x.durable, x.auto_delete, x.internal, x.args) == ("headers", True, True, True, {})
    assert [(b.key, b.args) for b in rec.bindings] == [("k", {"x-match": "all", "n": 7})]
    m1, m2 = (sm.message for sm in rec.messages[("/", "q")])
    assert m1.headers == headers and m2.headers == long_key
    s.close()


def test_other_format_version_is_refused(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.close()
    journal = tmp_path / "journal"
    journal.write_bytes(b"SMQJRN1\n" + journal.read_bytes()[8:])
    with pytest.raises(StoreError, match="format version"):
        SegmentStore(tmp_path)


@given(st.lists(st.one_of(st.tuples(st.just("s"), st.integers(0, 2)), st.tuples(st.just("t"), st.integers(1, 9)),
                          st.tuples(st.just("take"), st.integers(1, 7))), max_size=80))
def test_page_runs_match_a_plain_list(ops) -> None:
    """Consecutive stored ids share one run slot; taking any number of messages at a time (also
    part of a run) yields exactly the order they were added in."""
    from engine.storage.segment._index import TRANSIENT, _Page

    page, ref, got, next_id = _Page(), [], [], 1
    for kind, k in ops:
        if kind == "s":
            next_id += k  # k = 0 repeats nothing: ids only grow; 1 continues a run; 2 breaks it
            next_id = max(next_id, 1)
            page.add_stored(next_id)
            ref.append(next_id)
            next_id += 1
        elif kind == "t":
            page.add_transient(k << 32 | 8)
            ref.append(TRANSIENT | k << 32 | 8)
        else:
            got.extend(e for _, e in page.items(k, True))
    assert [e for _, e in page.items(1 << 30, False)] == ref[len(got):]
    got.extend(e for _, e in page.items(1 << 30, True))
    assert got == ref and len(page) == 0


def test_a_consecutive_backlog_costs_one_page_slot() -> None:
    from engine.storage.segment._index import _Page

    page = _Page()
    for mid in range(1, 100_001):
        page.add_stored(mid)
    assert len(page.ent) == 1
    assert [e for _, e in page.items(3, True)] == [1, 2, 3]
    assert [e for _, e in page.items(2, True)] == [4, 5] and len(page) == 1


def test_paged_records_are_read_back_in_order_and_torn_ones_dropped(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 7):  # persistent, in the index: their page slots are just ids (one run)
        m = msg(i, b"p" * 50)
        s.enqueue("/", "q", m)
        s.page_out("/", "q", m, 0, None, True)
    t = Message(7, "", "q", {}, b"transient", expires_at=5.0)
    s.page_out("/", "q", t, 2, 9.0, False)  # transient, with its own count and queue expiry
    s.sync(1)  # records reach the file (page-in reads from the file and from unwritten buffers)
    seg = tmp_path / "segments" / segments(tmp_path)[-1]
    data = bytearray(seg.read_bytes())
    at = data.index(b"p" * 50, data.index(b"p" * 50) + 1)  # message 2's body
    data[at] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert [m.id for m, _, _ in s.paged("/", "q")] == [1, 3, 4, 5, 6, 7]
    got, consumed = s.page_in("/", "q", 3)
    assert [m.id for m, _, _ in got] == [1, 3] and consumed == 3 and s.dropped_paged == 1
    got, consumed = s.page_in("/", "q", 10)
    assert [(m.id, c, e) for m, c, e in got] == [(4, 0, None), (5, 0, None), (6, 0, None), (7, 2, 9.0)]
    assert got[-1][0].body == b"transient" and consumed == 4
    assert s.page_in("/", "q", 10) == ([], 0)
    s.sync(2)
    rec = reopen(s, tmp_path).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [1, 3, 4, 5, 6]  # 2 dropped for good


def test_recovered_backlog_starts_paged_without_reading_it(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 31):
        s.enqueue("/", "q", msg(i))
    s.sync(1)
    size = (tmp_path / "journal").stat().st_size
    s = reopen(s, tmp_path, recover_window=4)
    rec = s.recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [1, 2, 3, 4]
    assert rec.paged == {("/", "q"): 26} and rec.max_message_id == 30
    assert len(s._pages[("/", "q")].ent) == 1  # one run slot for the 26 consecutive ids
    assert (tmp_path / "journal").stat().st_size == size  # compact already: appended to, not rewritten
    got, consumed = s.page_in("/", "q", 100)
    assert [m.id for m, _, _ in got] == list(range(5, 31)) and consumed == 26
    s.remove("/", "q", 7)
    s.sync(2)
    rec = reopen(s, tmp_path, recover_window=100).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [i for i in range(1, 31) if i != 7]


_scalar = st.one_of(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                    st.binary(max_size=8), st.floats(allow_nan=False))
_headers = st.dictionaries(st.text(min_size=1, max_size=8), _scalar | st.lists(_scalar, max_size=2), max_size=4)


@given(st.lists(_headers, min_size=1, max_size=6))
def test_decoded_headers_are_the_encoded_ones_and_each_message_owns_its_own(tables) -> None:
    """Records repeat a few header tables, which a read decodes once (a cache): each decoded
    message still gets exactly what was encoded, in a dict that no other message shares."""
    from amqpproto import write_table
    from engine.records import _decode_message, _encode_message

    persistent_only = Message(1, "", "q", {"persistent": "true"}, b"b", persistent=True)
    assert write_table({"persistent": "true"}) in _encode_message(persistent_only)  # the shared constant
    for headers in [*tables, {"persistent": "true"}] * 2:  # the second pass reads them from the cache
        payload = _encode_message(Message(1, "x", "k", headers, b"b", persistent=True))
        first, second = _decode_message(memoryview(payload)), _decode_message(memoryview(payload))
        assert first.headers == headers and second.headers == headers
        first.headers["added"] = 1
        for v in first.headers.values():
            if isinstance(v, list):
                v.append("changed")
        assert second.headers == headers
        assert _decode_message(memoryview(payload)).headers == headers
