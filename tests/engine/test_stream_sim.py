"""Stream logs on the simulation stores (engine.testing.FakeStore, MemoryStore): injected write and
sync failures, crash keeping only what was synced, and a model-based property test of offsets,
retention, tracking and dedup on a fake clock."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine._message import Message
from engine.segment_store import SegmentStore
from engine.store import MemoryStore, StoreError
from engine.streams import StreamSettings
from engine.streams._log import retained_from
from engine.testing import FakeStore

T0 = 1_700_000_000.0


def m(i: int) -> Message:
    return Message(i, "", "k", {}, b"b%d" % i, persistent=True)


def test_injected_write_failures_refuse_appends_and_tracking() -> None:
    s = FakeStore()
    log = s.stream("/", "s")
    s.fail_next_write(2)
    with pytest.raises(StoreError, match="injected"):
        log.append(m(0), T0)
    with pytest.raises(StoreError, match="injected"):
        log.store_offset("c", 0, T0)
    assert (log.tail, log.stored_offset("c")) == (0, None)
    assert log.append(m(0), T0) == 0
    log.store_offset("c", 0, T0)
    assert log.stored_offset("c") == 0


def test_a_failed_sync_commits_nothing_and_a_crash_keeps_only_synced_state() -> None:
    s = FakeStore()
    log = s.stream("/", "s")
    log.append(m(0), T0, producer="p", publishing_id=1)
    s.sync(1)
    log.append(m(1), T0, producer="p", publishing_id=2)
    log.store_offset("c", 1, T0)
    s.fail_next_sync()
    with pytest.raises(StoreError):
        s.sync(2)
    assert (log.committed, log.tail) == (1, 2)
    log2 = s.crash().stream("/", "s")
    assert (log2.tail, log2.committed, log2.stored_offset("c"), log2.last_publishing_id("p")) == (1, 1, None, 1)
    assert [r.message.body for r in log2.read(0)] == [b"b0"]
    assert log2.append(m(1), T0) == 1


def test_a_store_without_sync_commits_every_append() -> None:
    for s in (MemoryStore(), FakeStore(needs_sync=False)):
        log = s.stream("/", "s")
        log.append(m(0), T0)
        assert log.committed == 1


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 400), st.sampled_from([None, "p", "q"]), st.integers(0, 30)),
    st.tuples(st.just("track"), st.sampled_from(["a", "b"]), st.integers(0, 50)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("advance"), st.integers(0, 120)),
    st.tuples(st.just("crash")),
), max_size=60)


class SegmentStores:
    """A SegmentStore in a fresh directory whose "crash" is a close and reopen (everything synced)."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.store = SegmentStore(self.dir.name)

    def crash(self) -> SegmentStores:
        self.store.close()
        self.store = SegmentStore(self.dir.name)
        return self

    def __getattr__(self, name: str):
        return getattr(self.store, name)


@pytest.mark.parametrize("kind", ["fake", "segment"])
@settings(max_examples=60, deadline=None)
@given(ops=ops, max_bytes=st.sampled_from([None, 1500, 4000]), max_age=st.sampled_from([None, 30_000]))
def test_stream_log_against_a_model(kind, ops, max_bytes, max_age) -> None:
    """Any sequence of appends (some duplicates), offset stores, syncs, clock moves with retention
    and crashes: the log holds exactly the model's records from its first offset on, with their
    timestamps, tracking and dedup state; retention only moves ``first`` up and as far as it may."""
    settings_ = StreamSettings(max_bytes=max_bytes, max_age_ms=max_age, segment_bytes=700)
    store = FakeStore() if kind == "fake" else SegmentStores()
    log = store.stream("/", "s", settings_)
    now = T0
    # the model: every record ever appended (offset -> body, ts), tracking, dedup; durable copies
    bodies: list[tuple[bytes, int]] = []
    consumers: dict[str, int] = {}
    producers: dict[str, int] = {}
    durable = (0, {}, {})
    first = 0
    for op in ops:
        if op[0] == "append":
            _, size, producer, pid = op
            msg = Message(len(bodies), "", "k", {}, b"x" * size, persistent=True)
            dup = producer is not None and producers.get(producer, -1) >= pid
            got = log.append(msg, now, producer, pid if producer else None)
            assert got == (None if dup else len(bodies))
            if not dup:
                bodies.append((msg.body, max(int(now * 1000), bodies[-1][1] if bodies else 0)))
                if producer:
                    producers[producer] = pid
        elif op[0] == "track":
            consumers[op[1]] = op[2]
            log.store_offset(op[1], op[2], now)
        elif op[0] == "sync":
            store.sync(0)
            durable = (len(bodies), dict(consumers), dict(producers))
        elif op[0] == "advance":
            now += op[1]
            log.apply_retention(now)
            assert retained_from(log._segment_stats(), settings_, int(now * 1000)) == 0  # went as far as it may
        else:
            if kind == "segment":  # a clean restart: everything was synced by close()
                durable = (len(bodies), dict(consumers), dict(producers))
            store = store.crash()
            log = store.stream("/", "s", settings_)
            del bodies[durable[0]:]
            consumers, producers = dict(durable[1]), dict(durable[2])
        assert log.tail == len(bodies)
        assert first <= log.first <= max(first, log.tail)
        first = log.first
        got = log.read(0, max_count=10**6, max_bytes=10**9)
        assert [(r.offset, r.message.body, r.timestamp) for r in got] == [
            (i, *bodies[i]) for i in range(first, len(bodies))]
        assert log.consumers() == consumers and log.producers() == producers
    if kind == "segment":
        store.close()
        store.dir.cleanup()
